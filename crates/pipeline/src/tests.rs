//! Decoding deliveries: the event ingest parsed is the one used.

use oncehook_gateways::Gateway;
use oncehook_gateways::sample::{self, SampleSpec};
use time::OffsetDateTime;

use super::decode;
use oncehook_common::Envelope;

fn spec() -> SampleSpec {
    SampleSpec {
        order_ref: "order_1".into(),
        payment_id: "pay_1".into(),
        event_id: "evt_1".into(),
        amount_minor: 50_000,
        currency: "INR".into(),
        email: "a@example.com".into(),
        timestamp: 1_717_740_003,
        merchant_key: None,
    }
}

/// An envelope as ingest builds it for a Razorpay `captured` sample.
fn envelope(parsed_by_ingest: bool) -> Envelope {
    let razorpay: Gateway = "razorpay".parse().expect("a gateway");
    let d = sample::build(razorpay, "captured", &spec(), "s").expect("sample");
    let env = Envelope::verified(
        "rzp",
        razorpay,
        d.headers,
        &d.body,
        OffsetDateTime::now_utc(),
        None,
    );
    if parsed_by_ingest {
        env
    } else {
        env.with_event(None)
    }
}

#[test]
fn the_event_ingest_parsed_is_the_one_used() {
    let mut env = envelope(true);
    let mut event = env.event.clone().expect("parsed");
    // Were the worker to parse the body again, it would not see this.
    event.order_ref = Some("as ingest read it".into());
    env.event = Some(event.clone());
    let decoded = decode(&env.to_bytes(), "m").expect("decoded");
    assert_eq!(decoded.event, event);
    assert_eq!(decoded.key.event_id, "evt_1");
}

#[test]
fn without_an_event_the_body_is_parsed_or_dead_lettered() {
    let env = envelope(false);
    let decoded = decode(&env.to_bytes(), "m").expect("decoded");
    assert_eq!(decoded.event.event_id, "evt_1");
    assert_eq!(decoded.event.order_ref.as_deref(), Some("order_1"));

    let mut garbled = envelope(false);
    garbled.body_b64 = Envelope::encode_body(b"not json");
    let rejection = decode(&garbled.to_bytes(), "m").expect_err("unparseable");
    assert_eq!(rejection.kind.as_str(), "unparseable");
}

#[test]
fn unknown_gateways_and_mismatched_events_are_dead_lettered() {
    let text = String::from_utf8(envelope(true).to_bytes()).expect("utf-8");
    let unknown = text.replace(r#""gateway":"razorpay""#, r#""gateway":"paypal""#);
    let rejection = decode(unknown.as_bytes(), "m").expect_err("unknown gateway");
    assert_eq!(rejection.kind.as_str(), "unknown_gateway");
    assert!(rejection.message.contains("from source rzp"), "{rejection}");
    assert!(rejection.message.contains("paypal"), "{rejection}");

    let mut mismatched = envelope(true);
    mismatched.gateway = "stripe".parse().expect("a gateway");
    let rejection = decode(&mismatched.to_bytes(), "m").expect_err("mismatch");
    assert_eq!(rejection.kind.as_str(), "bad_envelope");
}

/// A decoded delivery of the Razorpay sample (for the grouper's tests).
pub(crate) fn delivery() -> super::Delivery {
    decode(&envelope(true).to_bytes(), "m").expect("decoded")
}
