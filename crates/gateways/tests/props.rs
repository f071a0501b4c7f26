//! Property tests: no input makes `verify`, `parse`, `build` or the amount
//! parser panic; no single-byte change to a signed sample verifies; amounts
//! and samples round-trip.

mod common;

use common::*;
use oncehook_gateways::sample::{self, PAYU_HASHED_FIELDS, SAMPLE_PAYU_KEY, SampleSpec};
use oncehook_gateways::{
    Gateway, Headers, format_decimal_minor, parse, parse_decimal_minor, verify,
};
use proptest::prelude::*;

fn gateway() -> impl Strategy<Value = Gateway> {
    prop::sample::select(Gateway::ALL.to_vec())
}

/// Every header any scheme reads, lower case.
const HEADER_NAMES: &[&str] = &[
    "x-razorpay-signature",
    "x-razorpay-event-id",
    "x-webhook-signature",
    "x-webhook-timestamp",
    "x-idempotency-key",
    "stripe-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "content-type",
];

/// Header values: arbitrary text, or text shaped like the real thing.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9]{0,20}",
        "[0-9a-f]{0,130}",
        "(t=[0-9]{0,12},)?(v[01]=[0-9a-f]{0,66},?){0,3}",
        "(v1,[A-Za-z0-9+/=]{0,46} ?){0,3}",
    ]
}

fn headers() -> impl Strategy<Value = Headers> {
    prop::collection::vec((prop::sample::select(HEADER_NAMES), header_value()), 0..8)
        .prop_map(|pairs| pairs.into_iter().collect())
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..600),
        "[a-z0-9_%+=&.]{0,300}".prop_map(String::into_bytes),
        // Mostly-valid payloads with one byte changed.
        (gateway(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|(g, i, b)| {
            let mut body = vector_body(g).to_vec();
            let at = i.index(body.len());
            body[at] = b;
            body
        }),
    ]
}

fn secrets() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            any::<String>(),
            Just(SAMPLE_SECRET.to_owned()),
            "whsec_[A-Za-z0-9+/=]{0,40}"
        ],
        0..3,
    )
}

fn sample_spec() -> impl Strategy<Value = SampleSpec> {
    (
        "\\PC{1,24}",
        "\\PC{1,24}",
        "[A-Za-z0-9_.:-]{1,30}",
        0i64..=1_000_000_000_000_000,
        prop::sample::select(vec!["INR", "USD", "JPY", "KWD", "eur"]),
        "\\PC{1,30}",
        0i64..=4_102_444_800,
    )
        .prop_map(
            |(order_ref, payment_id, event_id, amount_minor, currency, email, timestamp)| {
                SampleSpec {
                    order_ref: order_ref.trim().to_owned() + "x",
                    payment_id: payment_id.trim().to_owned() + "p",
                    event_id,
                    amount_minor,
                    currency: currency.to_owned(),
                    email: email.trim().to_owned() + "@e",
                    timestamp,
                    merchant_key: None,
                }
            },
        )
}

fn event_name(g: Gateway) -> impl Strategy<Value = &'static str> {
    prop::sample::select(sample::event_names(g).to_vec())
}

fn gateway_and_event() -> impl Strategy<Value = (Gateway, &'static str)> {
    gateway().prop_flat_map(|g| (Just(g), event_name(g)))
}

/// `spec` as a sample of `g` can express it: PayU samples are INR only and
/// hash `|`-separated values, so theirs contain no `|`.
fn spec_for(g: Gateway, spec: &SampleSpec) -> SampleSpec {
    let mut spec = spec.clone();
    if g == Gateway::Payu {
        spec.currency = "INR".into();
        for value in [&mut spec.order_ref, &mut spec.payment_id, &mut spec.email] {
            *value = value.replace('|', "/");
        }
    }
    spec
}

/// A sample for `g` (see [`spec_for`]).
fn build(g: Gateway, event: &str, spec: &SampleSpec) -> sample::SignedDelivery {
    sample::build(g, event, &spec_for(g, spec), SAMPLE_SECRET).unwrap()
}

/// A genuine-looking PayU success form: (name, value) pairs.
fn payu_fields() -> Vec<(&'static str, String)> {
    let mut fields: Vec<(&'static str, String)> = vec![
        ("mihpayid", "403993715531077182".into()),
        ("status", "success".into()),
        ("key", SAMPLE_PAYU_KEY.into()),
        ("txnid", "TXN1".into()),
        ("amount", "100.00".into()),
        ("productinfo", "mug".into()),
        ("firstname", "Asha".into()),
        ("email", "a@b.c".into()),
        ("udf1", "order_1".into()),
        ("additional_charges", "2.00".into()),
    ];
    for udf in [
        "udf2", "udf3", "udf4", "udf5", "udf6", "udf7", "udf8", "udf9", "udf10",
    ] {
        fields.push((udf, String::new()));
    }
    fields
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn verify_and_parse_never_panic(
        g in gateway(),
        secrets in secrets(),
        headers in headers(),
        body in body(),
        now in any::<i64>(),
        tolerance in any::<u64>(),
    ) {
        let _ = verify(g, creds(&secrets), &headers, &body, now, tolerance);
        let _ = parse(g, &headers, &body);
    }

    #[test]
    fn a_changed_body_byte_never_verifies(
        (g, event) in gateway_and_event(),
        spec in sample_spec(),
        at in any::<prop::sample::Index>(),
        delta in 1u8..=255,
    ) {
        let d = build(g, event, &spec);
        let mut body = d.body.clone();
        let i = at.index(body.len());
        body[i] = body[i].wrapping_add(delta);
        let r = verify(g, creds(&[SAMPLE_SECRET.to_owned()]), &d.headers, &body, spec.timestamp, 300);
        if g == Gateway::Payu {
            // PayU's hash covers only some fields: a change elsewhere may
            // verify, but must not change what the hash protects.
            if r.is_ok() {
                let before = parse(g, &d.headers, &d.body).unwrap();
                let after = parse(g, &d.headers, &body);
                prop_assert!(after.is_ok(), "verified but does not parse: {:?}", after);
                let after = after.unwrap();
                prop_assert_eq!(before.event_id, after.event_id);
                prop_assert_eq!(before.payment_id, after.payment_id);
                prop_assert_eq!(before.kind, after.kind);
                prop_assert_eq!(before.order_ref, after.order_ref);
                prop_assert_eq!(before.amount_minor, after.amount_minor);
                prop_assert_eq!(before.email, after.email);
            }
        } else {
            prop_assert!(r.is_err(), "{} {} verified with byte {} changed", g, event, i);
        }
    }

    #[test]
    fn a_changed_signature_header_byte_never_verifies(
        (g, event) in gateway_and_event(),
        spec in sample_spec(),
        at in any::<prop::sample::Index>(),
        delta in 1u8..=127,
    ) {
        let d = build(g, event, &spec);
        let names: &[&str] = match g {
            Gateway::Razorpay => &["x-razorpay-signature"],
            Gateway::Cashfree => &["x-webhook-signature", "x-webhook-timestamp"],
            Gateway::Payu => &[],
            Gateway::Stripe => &["stripe-signature"],
            Gateway::Standard => &["webhook-signature", "webhook-timestamp", "webhook-id"],
            other => panic!("add the signature headers of gateway {other} here"),
        };
        for name in names {
            let value = d.headers.get(name).unwrap().as_bytes().to_vec();
            let mut changed = value.clone();
            let i = at.index(changed.len());
            // Stay ASCII; skip case-only changes of hex digits, which decode to the same bytes.
            changed[i] = (changed[i] + delta) % 128;
            let same_hex = changed[i].eq_ignore_ascii_case(&value[i]) && value[i].is_ascii_hexdigit();
            let text = String::from_utf8_lossy(&changed).into_owned();
            // Whitespace at the ends is trimmed like an HTTP server would.
            if same_hex || text.trim() == String::from_utf8_lossy(&value) {
                continue;
            }
            let h = replace_header(&d.headers, name, &text);
            let r = verify(g, creds(&[SAMPLE_SECRET.to_owned()]), &h, &d.body, spec.timestamp, 300);
            prop_assert!(r.is_err(), "{} {}: {} = {:?} verified", g, event, name, text);
        }
    }

    #[test]
    fn a_hashed_payu_field_with_a_separator_never_verifies(
        field in prop::sample::select(
            PAYU_HASHED_FIELDS.iter().copied().chain(["additional_charges"]).collect::<Vec<_>>()
        ),
        before in "[A-Za-z0-9 .@_-]{0,8}",
        after in "[A-Za-z0-9 .@|_-]{0,8}",
        salt in "[A-Za-z0-9]{1,16}",
    ) {
        let mut fields = payu_fields();
        let value = format!("{before}|{after}");
        match fields.iter_mut().find(|(n, _)| *n == field) {
            Some(slot) => slot.1 = value,
            None => fields.push((field, value)),
        }
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        // Correctly hashed under the salt, and still refused (key included:
        // a `|` in the key is refused before the key is compared).
        let body = payu_form(&pairs, &salt);
        let secrets = [salt.clone()];
        let r = verify(Gateway::Payu, creds(&secrets), &Headers::new(), &body, 0, 0);
        prop_assert!(
            matches!(r, Err(oncehook_gateways::VerifyError::Malformed { what, .. }) if what == field),
            "{} = {:?}: {:?}", field, fields, r
        );
    }

    #[test]
    fn samples_round_trip((g, event) in gateway_and_event(), spec in sample_spec()) {
        let spec = spec_for(g, &spec);
        let d = build(g, event, &spec);
        let v = verify(g, creds(&[SAMPLE_SECRET.to_owned()]), &d.headers, &d.body, spec.timestamp, 0);
        prop_assert!(v.is_ok(), "{:?}", v);
        let e = parse(g, &d.headers, &d.body).unwrap();
        prop_assert_eq!(e.amount_minor, Some(spec.amount_minor));
        prop_assert_eq!(e.order_ref.as_deref(), Some(spec.order_ref.as_str()));
        prop_assert_eq!(e.payment_id.as_deref(), Some(spec.payment_id.as_str()));
        let currency = if g == Gateway::Payu { "INR".to_owned() } else { spec.currency.to_ascii_uppercase() };
        prop_assert_eq!(e.currency, Some(currency));
        if g != Gateway::Payu {
            prop_assert_eq!(e.event_id, spec.event_id);
        }
    }

    #[test]
    fn parse_decimal_minor_never_panics(s in any::<String>(), exponent in 0u32..40) {
        let _ = parse_decimal_minor(&s, exponent);
    }

    #[test]
    fn parse_decimal_minor_never_panics_on_numberish(s in "-?[0-9]{0,25}(\\.[0-9]{0,25})?", exponent in 0u32..25) {
        if let Ok(v) = parse_decimal_minor(&s, exponent) {
            prop_assert!(v >= 0);
        }
    }

    #[test]
    fn two_decimal_amounts_round_trip(minor in 0i64..=i64::MAX) {
        let text = format!("{}.{:02}", minor / 100, minor % 100);
        prop_assert_eq!(parse_decimal_minor(&text, 2), Ok(minor));
        prop_assert_eq!(format_decimal_minor(minor, 2), text);
    }

    #[test]
    fn formatted_amounts_round_trip(minor in 0i64..=i64::MAX, exponent in 0u32..=4) {
        let text = format_decimal_minor(minor, exponent);
        prop_assert_eq!(parse_decimal_minor(&text, exponent), Ok(minor));
        let padded = format!("{text}{}", if exponent == 0 { ".000" } else { "000" });
        prop_assert_eq!(parse_decimal_minor(&padded, exponent), Ok(minor));
    }
}
