//! `sample::build` → `verify` → `parse` round trips for every gateway and
//! every accepted event name, plus `tamper`.

mod common;

use common::*;
use oncehook_gateways::sample::{self, SAMPLE_PAYU_KEY, SampleError, SampleSpec, SignedDelivery};
use oncehook_gateways::{EventKind, Gateway, NormalizedEvent, VerifyError, parse, verify};

/// The kind each accepted name should produce.
fn expected_kind(gateway: Gateway, name: &str) -> EventKind {
    match name {
        "captured"
        | "payment.captured"
        | "order.paid"
        | "PAYMENT_SUCCESS_WEBHOOK"
        | "success"
        | "payment_intent.succeeded"
        | "checkout.session.completed"
        | "payment.succeeded" => EventKind::Captured,
        "failed"
        | "payment.failed"
        | "PAYMENT_FAILED_WEBHOOK"
        | "PAYMENT_USER_DROPPED_WEBHOOK"
        | "failure"
        | "pending"
        | "payment_intent.payment_failed" => EventKind::Failed,
        "authorized" | "payment.authorized" | "payment_intent.amount_capturable_updated" => {
            EventKind::Authorized
        }
        "refunded"
        | "refund.processed"
        | "REFUND_STATUS_WEBHOOK"
        | "refund"
        | "charge.refunded"
        | "payment.refunded" => EventKind::Refunded,
        other => panic!("{gateway}: no expectation for {other}"),
    }
}

fn built(gateway: Gateway, name: &str, spec: &SampleSpec) -> SignedDelivery {
    sample::build(gateway, name, spec, SAMPLE_SECRET)
        .unwrap_or_else(|e| panic!("{gateway} {name}: {e}"))
}

fn check_event(gateway: Gateway, name: &str, spec: &SampleSpec, e: &NormalizedEvent) {
    let kind = expected_kind(gateway, name);
    let ctx = format!("{gateway} {name}");
    assert_eq!(e.provider, gateway, "{ctx}");
    assert_eq!(e.kind, kind, "{ctx}");
    let expected_id = match gateway {
        Gateway::Payu => format!("{}:{}", spec.order_ref, e.event_type),
        _ => spec.event_id.clone(),
    };
    assert_eq!(e.event_id, expected_id, "{ctx}");
    assert_eq!(
        e.payment_id.as_deref(),
        Some(spec.payment_id.as_str()),
        "{ctx}"
    );
    assert_eq!(
        e.order_ref.as_deref(),
        Some(spec.order_ref.as_str()),
        "{ctx}"
    );
    assert_eq!(e.amount_minor, Some(spec.amount_minor), "{ctx}");
    assert_eq!(
        e.currency.as_deref(),
        Some(spec.currency.to_ascii_uppercase().as_str()),
        "{ctx}"
    );
    // Cashfree refund notifications carry no customer details.
    let carries_email = !(gateway == Gateway::Cashfree && kind == EventKind::Refunded);
    if carries_email {
        assert_eq!(e.email.as_deref(), Some(spec.email.as_str()), "{ctx}");
    }
    if kind == EventKind::Refunded {
        assert_eq!(
            e.refund_id.as_deref(),
            Some(spec.refund_id(gateway).as_str()),
            "{ctx}"
        );
    } else {
        assert_eq!(e.refund_id, None, "{ctx}");
    }
}

#[test]
fn every_gateway_and_event_round_trips() {
    let spec = spec();
    for gateway in Gateway::ALL {
        let names = sample::event_names(gateway);
        for alias in ["captured", "failed", "refunded"] {
            assert!(names.contains(&alias), "{gateway} lacks {alias}");
        }
        for name in names {
            let d = built(gateway, name, &spec);
            assert!(d.headers.get("content-type").is_some(), "{gateway} {name}");
            let v = verify(
                gateway,
                &[SAMPLE_SECRET.to_owned()],
                &d.headers,
                &d.body,
                spec.timestamp,
                300,
            )
            .unwrap_or_else(|e| panic!("{gateway} {name}: {e}"));
            assert_eq!(v.secret_index, 0);
            assert_eq!(
                v.signed_at,
                gateway.signs_timestamp().then_some(spec.timestamp),
                "{gateway} {name}"
            );
            let e = parse(gateway, &d.headers, &d.body)
                .unwrap_or_else(|e| panic!("{gateway} {name}: {e}"));
            check_event(gateway, name, &spec, &e);
        }
    }
}

#[test]
fn aliases_build_the_native_event() {
    let spec = spec();
    let cases: &[(Gateway, &str, &str)] = &[
        (Gateway::Razorpay, "captured", "payment.captured"),
        (Gateway::Razorpay, "failed", "payment.failed"),
        (Gateway::Razorpay, "authorized", "payment.authorized"),
        (Gateway::Razorpay, "refunded", "refund.processed"),
        (Gateway::Cashfree, "captured", "PAYMENT_SUCCESS_WEBHOOK"),
        (Gateway::Cashfree, "failed", "PAYMENT_FAILED_WEBHOOK"),
        (Gateway::Cashfree, "refunded", "REFUND_STATUS_WEBHOOK"),
        (Gateway::Payu, "captured", "success"),
        (Gateway::Payu, "failed", "failure"),
        (Gateway::Payu, "refunded", "refund"),
        (Gateway::Stripe, "captured", "payment_intent.succeeded"),
        (Gateway::Stripe, "failed", "payment_intent.payment_failed"),
        (
            Gateway::Stripe,
            "authorized",
            "payment_intent.amount_capturable_updated",
        ),
        (Gateway::Stripe, "refunded", "charge.refunded"),
        (Gateway::Standard, "captured", "payment.succeeded"),
        (Gateway::Standard, "failed", "payment.failed"),
        (Gateway::Standard, "authorized", "payment.authorized"),
        (Gateway::Standard, "refunded", "payment.refunded"),
    ];
    for &(gateway, alias, native) in cases {
        let a = built(gateway, alias, &spec);
        let n = built(gateway, native, &spec);
        assert_eq!(a.body, n.body, "{gateway} {alias}");
        let upper = built(gateway, &alias.to_ascii_uppercase(), &spec);
        assert_eq!(upper.body, n.body, "{gateway} {alias} (case)");
        assert_eq!(
            parse(gateway, &a.headers, &a.body).unwrap().event_type,
            native
        );
    }
}

#[test]
fn unknown_events_list_the_accepted_names() {
    for gateway in Gateway::ALL {
        let err = sample::build(gateway, "payment.exploded", &spec(), SAMPLE_SECRET).unwrap_err();
        match &err {
            SampleError::UnknownSampleEvent {
                gateway: g,
                event,
                accepted,
            } => {
                assert_eq!(*g, gateway);
                assert_eq!(event, "payment.exploded");
                assert_eq!(*accepted, sample::event_names(gateway));
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        for name in sample::event_names(gateway) {
            assert!(text.contains(name), "{text}");
        }
    }
    for gateway in [Gateway::Cashfree, Gateway::Payu] {
        assert!(sample::build(gateway, "authorized", &spec(), SAMPLE_SECRET).is_err());
    }
}

#[test]
fn samples_have_the_gateway_specific_shape() {
    let spec = spec();
    // Cashfree: two-decimal JSON numbers, millisecond timestamps, idempotency key.
    let cf = built(Gateway::Cashfree, "captured", &spec);
    let text = String::from_utf8(cf.body.clone()).unwrap();
    assert!(text.contains(r#""payment_amount":500.00,"#), "{text}");
    assert!(text.contains(r#""order_amount":500.00,"#), "{text}");
    let ms: i64 = cf
        .headers
        .get("x-webhook-timestamp")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ms / 1000, spec.timestamp);
    assert_ne!(ms % 1000, 0);
    assert_eq!(
        cf.headers.get("x-idempotency-key"),
        Some(spec.event_id.as_str())
    );
    // Without the idempotency key the documented fallback identity is used.
    let without = remove_header(&cf.headers, "x-idempotency-key");
    assert_eq!(
        parse(Gateway::Cashfree, &without, &cf.body)
            .unwrap()
            .event_id,
        format!("PAYMENT_SUCCESS_WEBHOOK:{}:SUCCESS", spec.payment_id)
    );

    // PayU: decimal rupees, the sample key, a form content type.
    let payu = built(Gateway::Payu, "captured", &spec);
    let text = String::from_utf8(payu.body.clone()).unwrap();
    assert!(text.contains("&amount=500.00&"), "{text}");
    assert!(text.contains(&format!("&key={SAMPLE_PAYU_KEY}&")), "{text}");
    assert!(text.contains("email=gaurav.kumar%40example.com"), "{text}");
    assert_eq!(
        payu.headers.get("content-type"),
        Some("application/x-www-form-urlencoded")
    );

    // Razorpay and Stripe carry the spec's event id where the gateway does.
    let rzp = built(Gateway::Razorpay, "captured", &spec);
    assert_eq!(
        rzp.headers.get("x-razorpay-event-id"),
        Some(spec.event_id.as_str())
    );
    let stripe = built(Gateway::Stripe, "captured", &spec);
    let v: serde_json::Value = serde_json::from_slice(&stripe.body).unwrap();
    assert_eq!(v["id"], spec.event_id.as_str());
    assert_eq!(v["data"]["object"]["currency"], "inr");
    let sig = stripe.headers.get("stripe-signature").unwrap();
    assert!(
        sig.starts_with(&format!("t={},v1=", spec.timestamp)),
        "{sig}"
    );
    let std = built(Gateway::Standard, "captured", &spec);
    assert_eq!(std.headers.get("webhook-id"), Some(spec.event_id.as_str()));
    let v: serde_json::Value = serde_json::from_slice(&std.body).unwrap();
    assert_eq!(v["timestamp"], "2025-05-05T06:40:25.000000Z");

    // Every JSON sample is valid JSON.
    for gateway in [
        Gateway::Razorpay,
        Gateway::Cashfree,
        Gateway::Stripe,
        Gateway::Standard,
    ] {
        for name in sample::event_names(gateway) {
            let d = built(gateway, name, &spec);
            assert!(
                serde_json::from_slice::<serde_json::Value>(&d.body).is_ok(),
                "{gateway} {name}"
            );
        }
    }
}

#[test]
fn unusual_specs_round_trip() {
    let specs = [
        SampleSpec {
            order_ref: "ORD \"quoted\" & <odd> ₹ ünïcode".into(),
            payment_id: "pay with spaces+plus".into(),
            event_id: "evt\\backslash".into(),
            amount_minor: 0,
            currency: "usd".into(),
            email: "o'brien+tag@example.com".into(),
            timestamp: 1,
        },
        SampleSpec {
            order_ref: "o".into(),
            payment_id: "12345678901234".into(),
            event_id: "e".into(),
            amount_minor: 7,
            currency: "JPY".into(),
            email: "x@y.z".into(),
            timestamp: 4_102_444_800,
        },
        SampleSpec {
            amount_minor: 92_233_720_368_547_758,
            currency: "KWD".into(),
            ..spec()
        },
    ];
    for spec in &specs {
        for gateway in Gateway::ALL {
            if gateway == Gateway::Payu && spec.currency != "INR" {
                let r = sample::build(gateway, "captured", spec, SAMPLE_SECRET);
                assert!(matches!(r, Err(SampleError::InvalidSpec(_))), "{r:?}");
                continue;
            }
            for name in sample::event_names(gateway) {
                let d = built(gateway, name, spec);
                verify(
                    gateway,
                    &[SAMPLE_SECRET.to_owned()],
                    &d.headers,
                    &d.body,
                    spec.timestamp,
                    0,
                )
                .unwrap_or_else(|e| panic!("{gateway} {name} {spec:?}: {e}"));
                let e = parse(gateway, &d.headers, &d.body)
                    .unwrap_or_else(|e| panic!("{gateway} {name}: {e}"));
                check_event(gateway, name, spec, &e);
            }
        }
    }
}

#[test]
fn samples_are_refused_with_another_secret_or_later() {
    let spec = spec();
    for gateway in Gateway::ALL {
        let d = built(gateway, "captured", &spec);
        let other = "whsec_b3RoZXIgc2VjcmV0".to_owned();
        assert_eq!(
            verify(gateway, &[other], &d.headers, &d.body, spec.timestamp, 300),
            Err(VerifyError::Mismatch),
            "{gateway}"
        );
        let later = verify(
            gateway,
            &[SAMPLE_SECRET.to_owned()],
            &d.headers,
            &d.body,
            spec.timestamp + 301,
            300,
        );
        assert_eq!(later.is_err(), gateway.signs_timestamp(), "{gateway}");
    }
}

#[test]
fn tampered_samples_fail_but_stay_well_formed() {
    let spec = spec();
    for gateway in Gateway::ALL {
        for name in sample::event_names(gateway) {
            let mut d = built(gateway, name, &spec);
            let before = d.body.clone();
            sample::tamper(&mut d);
            assert_eq!(d.body.len(), before.len());
            assert_eq!(
                d.body.iter().zip(&before).filter(|(a, b)| a != b).count(),
                1
            );
            assert_eq!(
                verify(
                    gateway,
                    &[SAMPLE_SECRET.to_owned()],
                    &d.headers,
                    &d.body,
                    spec.timestamp,
                    300
                ),
                Err(VerifyError::Mismatch),
                "{gateway} {name}"
            );
            let e = parse(gateway, &d.headers, &d.body)
                .unwrap_or_else(|e| panic!("{gateway} {name}: {e}"));
            assert_ne!(
                e.amount_minor,
                Some(spec.amount_minor),
                "{gateway} {name}: the amount changed"
            );
        }
    }
}
