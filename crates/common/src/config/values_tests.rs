use figment::Figment;
use figment::providers::Serialized;

use super::*;

/// Reads `value` as a `T` the way the loader does, or the error's message.
fn read<T: for<'de> Deserialize<'de>>(value: &str) -> Result<T, String> {
    Figment::from(Serialized::default("v", value))
        .extract_inner_lossy::<T>("v")
        .map_err(|e| e.kind.to_string())
}

#[test]
fn bounds_name_what_they_found() {
    assert_eq!(read::<AtLeast<u16, 1>>("3"), Ok(AtLeast(3)));
    assert_eq!(
        read::<AtLeast<u16, 2>>("1"),
        Err("must be at least 2, found 1".to_owned())
    );
    assert_eq!(read::<Within<u32, 1, 10>>("10"), Ok(Within(10)));
    assert_eq!(
        read::<Within<u32, 1, 10>>("11"),
        Err("must be within 1..=10, found 11".to_owned())
    );
}

#[test]
fn durations_addresses_and_text() {
    assert_eq!(
        read::<HumanDuration>("15m"),
        Ok(HumanDuration(Duration::from_secs(900)))
    );
    assert!(read::<HumanDuration>("0s").is_err());
    assert!(read::<HumanDuration>("later").is_err());
    assert_eq!(
        read::<Addr>("127.0.0.1:1"),
        Ok(Addr(SocketAddr::from(([127, 0, 0, 1], 1))))
    );
    assert!(read::<Addr>("localhost:1").is_err());
    assert_eq!(read::<NonEmpty>("x"), Ok(NonEmpty("x".into())));
    assert!(read::<NonEmpty>(" ").is_err());
}

/// The text figment holds for a value once serialized (the defaults layer).
fn written<T: Serialize>(value: &T) -> String {
    match figment::value::Value::serialize(value).expect("serializes") {
        figment::value::Value::String(_, s) => s,
        figment::value::Value::Num(_, n) => n.to_u128().expect("whole").to_string(),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn each_value_serializes_as_it_is_written() {
    assert_eq!(written(&HumanDuration(Duration::from_secs(3_600))), "1h");
    assert_eq!(
        written(&Addr(SocketAddr::from(([127, 0, 0, 1], 8080)))),
        "127.0.0.1:8080"
    );
    assert_eq!(written(&AtLeast::<u16, 1>(16)), "16");
    assert_eq!(written(&SecretText(Secret::new("pw"))), "pw");
    assert_eq!(
        format!("{:?}", SecretText(Secret::new("pw"))),
        "SecretText([redacted])"
    );
}
