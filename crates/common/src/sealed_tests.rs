//! Sealing and opening: round trips, every way a value fails to open
//! (another place, an altered byte, a key not in the ring, not a sealed
//! value at all), rotation, the ring's parsing errors, and that no key or
//! plaintext is ever shown.

use proptest::prelude::*;

use super::*;

const AAD: &str = "source:acme-razorpay:signing:1";

/// A ring entry whose key is 32 times `byte`.
fn line(kid: &str, byte: u8) -> String {
    format!("{kid}:{}", STANDARD.encode([byte; KEY_LEN]))
}

fn ring(text: &str) -> KeyRing {
    text.parse().expect("a valid ring")
}

/// The payload of a sealed value, decoded.
fn payload(sealed: &str) -> Vec<u8> {
    let encoded = sealed.rsplit('.').next().expect("a payload");
    URL_SAFE_NO_PAD.decode(encoded).expect("base64url")
}

#[test]
fn a_sealed_value_opens_where_it_was_sealed() {
    let ring = ring(&line("k1", 7));
    for plaintext in [&b"whsec_abc123"[..], b"", &[0u8, 255, 10, 13][..]] {
        let sealed = ring.seal(plaintext, AAD);
        assert!(sealed.starts_with("v1.k1."), "{sealed}");
        assert_eq!(
            payload(&sealed).len(),
            NONCE_LEN + plaintext.len() + TAG_LEN
        );
        let opened = ring.open(&sealed, AAD).expect("opens");
        assert_eq!(opened.expose(), plaintext);
    }
    let opened = ring
        .open(&ring.seal(b"whsec_abc123", AAD), AAD)
        .expect("opens");
    assert_eq!(opened.expose_str(), Some("whsec_abc123"));
}

#[test]
fn every_seal_has_a_fresh_nonce() {
    let ring = ring(&line("k1", 7));
    let (a, b) = (ring.seal(b"same", AAD), ring.seal(b"same", AAD));
    assert_ne!(a, b);
    assert_ne!(payload(&a)[..NONCE_LEN], payload(&b)[..NONCE_LEN]);
}

#[test]
fn a_value_sealed_for_another_place_does_not_open() {
    let ring = ring(&line("k1", 7));
    let sealed = ring.seal(b"whsec_abc123", AAD);
    for other in [
        "source:acme-razorpay:signing:2",
        "",
        "source:other:signing:1",
    ] {
        assert_eq!(ring.open(&sealed, other).unwrap_err(), SealError::Tampered);
    }
}

#[test]
fn any_flipped_byte_is_tampering() {
    let ring = ring(&line("k1", 7));
    let sealed = ring.seal(b"whsec_abc123", AAD);
    let data = payload(&sealed);
    for at in 0..data.len() {
        let mut altered = data.clone();
        altered[at] ^= 0x01;
        let text = format!("v1.k1.{}", URL_SAFE_NO_PAD.encode(&altered));
        assert_eq!(
            ring.open(&text, AAD).unwrap_err(),
            SealError::Tampered,
            "{at}"
        );
    }
    let mut truncated = data;
    truncated.pop();
    let text = format!("v1.k1.{}", URL_SAFE_NO_PAD.encode(&truncated));
    assert_eq!(ring.open(&text, AAD).unwrap_err(), SealError::Tampered);
}

#[test]
fn another_key_under_the_same_kid_or_the_same_key_under_another_kid_does_not_open() {
    let sealed = ring(&line("k1", 7)).seal(b"whsec_abc123", AAD);
    let imposter = ring(&line("k1", 8));
    assert_eq!(
        imposter.open(&sealed, AAD).unwrap_err(),
        SealError::Tampered
    );
    // The kid is authenticated too, even where two kids hold one key.
    let twins = ring(&format!("{},{}", line("a", 7), line("b", 7)));
    let relabelled = twins.seal(b"whsec", AAD).replacen("v1.a.", "v1.b.", 1);
    assert_eq!(
        twins.open(&relabelled, AAD).unwrap_err(),
        SealError::Tampered
    );
}

#[test]
fn a_key_not_in_the_ring_is_named_with_what_to_do() {
    let sealed = ring(&line("gone", 7)).seal(b"whsec_abc123", AAD);
    let err = ring(&line("k1", 7)).open(&sealed, AAD).unwrap_err();
    assert_eq!(
        err,
        SealError::UnknownKey {
            kid: "gone".to_owned()
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("\"gone\"") && text.contains("add that key back"),
        "{text}"
    );
}

#[test]
fn rotation_opens_old_values_and_reseals_them_under_the_new_key() {
    let old = ring(&line("old", 1));
    let sealed = old.seal(b"whsec_abc123", AAD);
    let rotated = ring(&format!("{},{}", line("new", 2), line("old", 1)));
    assert_eq!(rotated.active_kid(), "new");
    assert_eq!(rotated.kids().collect::<Vec<_>>(), ["new", "old"]);
    assert_eq!(
        rotated.open(&sealed, AAD).expect("opens").expose(),
        b"whsec_abc123"
    );
    assert!(rotated.needs_reseal(&sealed));
    assert!(!old.needs_reseal(&sealed));
    let resealed = rotated.reseal(&sealed, AAD).expect("reseals");
    assert!(resealed.starts_with("v1.new."), "{resealed}");
    assert!(!rotated.needs_reseal(&resealed));
    let new_alone = ring(&line("new", 2));
    assert_eq!(
        new_alone.open(&resealed, AAD).expect("opens").expose(),
        b"whsec_abc123"
    );
    assert!(matches!(
        new_alone.open(&sealed, AAD),
        Err(SealError::UnknownKey { .. })
    ));
    // Resealing checks the place like opening does.
    assert_eq!(
        rotated.reseal(&sealed, "elsewhere").unwrap_err(),
        SealError::Tampered
    );
}

#[test]
fn what_is_not_a_sealed_value_is_malformed() {
    let ring = ring(&line("k1", 7));
    let valid = ring.seal(b"whsec", AAD);
    let body = valid.strip_prefix("v1.k1.").expect("prefix");
    let short = URL_SAFE_NO_PAD.encode([0u8; NONCE_LEN + TAG_LEN - 1]);
    let mut texts = vec![
        String::new(),
        "v1".to_owned(),
        "v1.k1".to_owned(),
        "v1.k1.".to_owned(),
        format!("v2.k1.{body}"),
        format!("V1.k1.{body}"),
        format!("v1.K1.{body}"),
        format!("v1..{body}"),
        format!("v1.k1.{body}="),
        format!("v1.k1.{body}.x"),
        format!(" {valid}"),
        format!("v1.k1.{short}"),
        "v1.k1.!!!!".to_owned(),
    ];
    // Standard base64 is not base64url.
    let standard = body.replace('-', "+").replace('_', "/");
    if standard != body {
        texts.push(format!("v1.k1.{standard}"));
    }
    for text in texts {
        assert_eq!(
            ring.open(&text, AAD).unwrap_err(),
            SealError::Malformed,
            "{text}"
        );
        assert!(!ring.needs_reseal(&text), "{text}");
    }
}

#[test]
fn a_ring_is_read_with_blanks_around_its_parts() {
    let text = format!(
        " {} , {}:{} ",
        line("new", 2),
        "old",
        STANDARD.encode([1u8; 32])
    );
    let spaced = text.replacen(':', " : ", 1);
    let ring = ring(&spaced);
    assert_eq!(ring.kids().collect::<Vec<_>>(), ["new", "old"]);
    let longest = "a".repeat(32);
    assert_eq!(self::ring(&line(&longest, 1)).active_kid(), longest);
}

#[test]
fn a_malformed_ring_names_the_entry_and_never_a_key() {
    let key = STANDARD.encode([9u8; KEY_LEN]);
    let good = format!("k1:{key}");
    let cases: Vec<(String, RingError)> = vec![
        (String::new(), RingError::Empty),
        (" ".to_owned(), RingError::Empty),
        (format!("{good},"), RingError::EmptyEntry { position: 2 }),
        (key.clone(), RingError::NoKid { position: 1 }),
        (format!("{good},{key}"), RingError::NoKid { position: 2 }),
        (
            format!(":{key}"),
            RingError::BadKid {
                position: 1,
                reason: "is empty",
            },
        ),
        (
            format!("{}:{key}", "a".repeat(33)),
            RingError::BadKid {
                position: 1,
                reason: "is longer than 32 characters",
            },
        ),
        (
            format!("{good},Key2:{key}"),
            RingError::BadKid {
                position: 2,
                reason: "has a character other than a-z 0-9 _ -",
            },
        ),
        (
            format!("k1:{}", &key[..43]),
            RingError::BadKey {
                position: 1,
                kid: "k1".to_owned(),
                reason: "is not standard base64".to_owned(),
            },
        ),
        (
            format!("k1:{}", key.replace('J', "-")),
            RingError::BadKey {
                position: 1,
                kid: "k1".to_owned(),
                reason: "is not standard base64".to_owned(),
            },
        ),
        (
            format!("k1:{}", STANDARD.encode([9u8; 16])),
            RingError::BadKey {
                position: 1,
                kid: "k1".to_owned(),
                reason: "is 16 bytes long, not 32".to_owned(),
            },
        ),
        (
            format!("{good},k2:{key},k1:{key}"),
            RingError::DuplicateKid {
                position: 3,
                kid: "k1".to_owned(),
            },
        ),
    ];
    for (text, expected) in cases {
        let err = text.parse::<KeyRing>().expect_err(&expected.to_string());
        assert_eq!(err, expected);
        let message = err.to_string();
        assert!(!message.contains(&key[..12]), "{message}");
        assert!(!message.contains("Key2"), "{message}");
    }
}

#[test]
fn debug_shows_kids_never_keys_nor_plaintexts() {
    let key = STANDARD.encode([9u8; KEY_LEN]);
    let ring = ring(&format!(
        "new:{key},old:{}",
        STANDARD.encode([3u8; KEY_LEN])
    ));
    let debug = format!("{ring:?}");
    assert!(
        debug.contains("\"new\"") && debug.contains("\"old\""),
        "{debug}"
    );
    assert!(
        !debug.contains(&key[..12]) && !debug.contains("9, 9"),
        "{debug}"
    );
    let opened = ring
        .open(&ring.seal(b"whsec_MARKER", AAD), AAD)
        .expect("opens");
    assert_eq!(format!("{opened:?}"), "[redacted]");
    let err = ring
        .open(&ring.seal(b"whsec_MARKER", AAD), "x")
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains("MARKER"));
}

#[test]
fn a_generated_line_is_a_ring_of_a_fresh_key() {
    let a = KeyRing::generate_key_line("2026-01").expect("a line");
    let b = KeyRing::generate_key_line("2026-01").expect("a line");
    assert_ne!(a, b);
    assert!(a.starts_with("2026-01:"), "{a}");
    let ring = ring(&format!("{a},{b}").replacen("2026-01", "next", 1));
    let sealed = ring.seal(b"whsec", AAD);
    assert_eq!(ring.open(&sealed, AAD).expect("opens").expose(), b"whsec");
    assert_eq!(
        KeyRing::generate_key_line("Bad kid").unwrap_err(),
        RingError::Kid {
            reason: "has a character other than a-z 0-9 _ -"
        }
    );
}

proptest! {
    #[test]
    fn open_never_panics(text in any::<String>(), aad in any::<String>()) {
        let ring = ring(&line("k1", 7));
        prop_assert!(ring.open(&text, &aad).is_err());
        let _ = ring.needs_reseal(&text);
    }

    #[test]
    fn open_never_panics_on_near_misses(
        kid in "[a-z0-9_-]{1,4}",
        body in "[A-Za-z0-9_=+/.-]{0,120}",
    ) {
        let ring = ring(&format!("{},{}", line("k1", 7), line("k2", 8)));
        let text = format!("v1.{kid}.{body}");
        prop_assert!(ring.open(&text, AAD).is_err());
        let _ = ring.needs_reseal(&text);
    }

    #[test]
    fn any_bytes_round_trip_for_any_place(
        plaintext in proptest::collection::vec(any::<u8>(), 0..512),
        aad in any::<String>(),
        other in any::<String>(),
    ) {
        let ring = ring(&line("k1", 7));
        let sealed = ring.seal(&plaintext, &aad);
        let opened = ring.open(&sealed, &aad).expect("opens");
        prop_assert_eq!(opened.expose(), &plaintext[..]);
        if other != aad {
            prop_assert_eq!(ring.open(&sealed, &other).unwrap_err(), SealError::Tampered);
        }
    }
}
