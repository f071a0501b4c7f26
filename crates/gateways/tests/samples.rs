//! `sample::build` → `verify` → `parse` round trips for every gateway and
//! every accepted event name, plus `tamper`.

mod common;

use common::*;
use oncehook_gateways::sample::{self, SAMPLE_PAYU_KEY, SampleError, SampleSpec, SignedDelivery};
use oncehook_gateways::{
    Credentials, EventKind, Gateway, NormalizedEvent, VerifyError, parse, verify,
};

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
        | "checkout.session.async_payment_succeeded"
        | "payment.succeeded" => EventKind::Captured,
        "failed"
        | "payment.failed"
        | "PAYMENT_FAILED_WEBHOOK"
        | "PAYMENT_USER_DROPPED_WEBHOOK"
        | "failure"
        | "pending"
        | "payment_intent.payment_failed"
        | "checkout.session.async_payment_failed" => EventKind::Failed,
        "authorized" | "payment.authorized" | "payment_intent.amount_capturable_updated" => {
            EventKind::Authorized
        }
        "refunded"
        | "refund.processed"
        | "REFUND_STATUS_WEBHOOK"
        | "charge.refunded"
        | "refund.created"
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
        Gateway::Payu => format!("{}:{}", spec.payment_id, e.event_type),
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
    // Cashfree refund notifications and Stripe refund objects carry no customer details.
    let carries_email = !(gateway == Gateway::Cashfree && kind == EventKind::Refunded)
        && e.event_type != "refund.created";
    if carries_email {
        assert_eq!(e.email.as_deref(), Some(spec.email.as_str()), "{ctx}");
    }
    let cumulative = e.event_type == "charge.refunded";
    assert_eq!(e.cumulative_refund, cumulative, "{ctx}");
    if cumulative {
        let charge = format!(
            "ch_{}",
            spec.payment_id
                .strip_prefix("pi_")
                .unwrap_or(&spec.payment_id)
        );
        assert_eq!(
            e.refund_id,
            Some(format!("{charge}:refunded:{}", spec.amount_minor)),
            "{ctx}"
        );
    } else if kind == EventKind::Refunded {
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
            // PayU's refunds are not webhooks: no refund sample.
            let expected = !(gateway == Gateway::Payu && alias == "refunded");
            assert_eq!(names.contains(&alias), expected, "{gateway} {alias}");
        }
        for name in names {
            let d = built(gateway, name, &spec);
            assert!(d.headers.get("content-type").is_some(), "{gateway} {name}");
            let v = verify(
                gateway,
                creds(&[SAMPLE_SECRET.to_owned()]),
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
        (Gateway::Stripe, "captured", "payment_intent.succeeded"),
        (Gateway::Stripe, "failed", "payment_intent.payment_failed"),
        (
            Gateway::Stripe,
            "authorized",
            "payment_intent.amount_capturable_updated",
        ),
        (Gateway::Stripe, "refunded", "refund.created"),
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
    for name in ["refund", "refunded"] {
        assert!(sample::build(Gateway::Payu, name, &spec(), SAMPLE_SECRET).is_err());
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

    // PayU: decimal rupees, the sample key, the payment id as txnid and the
    // order in udf1, a form content type.
    let payu = built(Gateway::Payu, "captured", &spec);
    let text = String::from_utf8(payu.body.clone()).unwrap();
    assert!(text.contains("&amount=500.00&"), "{text}");
    assert!(text.contains(&format!("&key={SAMPLE_PAYU_KEY}&")), "{text}");
    assert!(text.contains("&txnid=pay_S4mple1042&"), "{text}");
    assert!(text.contains("&udf1=order_1042&"), "{text}");
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
            merchant_key: None,
        },
        SampleSpec {
            order_ref: "o".into(),
            payment_id: "12345678901234".into(),
            event_id: "e".into(),
            amount_minor: 7,
            currency: "JPY".into(),
            email: "x@y.z".into(),
            timestamp: 4_102_444_800,
            merchant_key: None,
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
                    creds(&[SAMPLE_SECRET.to_owned()]),
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
            verify(
                gateway,
                creds(&[other]),
                &d.headers,
                &d.body,
                spec.timestamp,
                300
            ),
            Err(VerifyError::Mismatch),
            "{gateway}"
        );
        let later = verify(
            gateway,
            creds(&[SAMPLE_SECRET.to_owned()]),
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
                    creds(&[SAMPLE_SECRET.to_owned()]),
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

#[test]
fn payu_samples_carry_the_merchant_key_they_are_given() {
    let spec = SampleSpec {
        merchant_key: Some("KEY with spaces & ₹".into()),
        ..spec()
    };
    let d = built(Gateway::Payu, "captured", &spec);
    let secrets = [SAMPLE_SECRET.to_owned()];
    let with = |key: Option<&'static str>| {
        verify(
            Gateway::Payu,
            Credentials::new(&secrets).with_merchant_key(key),
            &d.headers,
            &d.body,
            0,
            0,
        )
    };
    assert!(with(Some("KEY with spaces & ₹")).is_ok());
    assert_eq!(with(Some(SAMPLE_PAYU_KEY)), Err(VerifyError::Mismatch));
    assert_eq!(with(None), Err(VerifyError::NoMerchantKey));
    assert_eq!(with(Some("")), Err(VerifyError::NoMerchantKey));
}

#[test]
fn payu_attempts_are_told_apart_by_txnid() {
    let first = SampleSpec {
        payment_id: "TXN_A1".into(),
        ..spec()
    };
    let second = SampleSpec {
        payment_id: "TXN_A2".into(),
        ..spec()
    };
    let failed = built(Gateway::Payu, "failure", &first);
    let paid = built(Gateway::Payu, "success", &second);
    let failed = parse(Gateway::Payu, &failed.headers, &failed.body).unwrap();
    let paid = parse(Gateway::Payu, &paid.headers, &paid.body).unwrap();
    assert_eq!(failed.event_id, "TXN_A1:failure");
    assert_eq!(paid.event_id, "TXN_A2:success");
    assert_eq!(failed.payment_id.as_deref(), Some("TXN_A1"));
    assert_eq!(paid.payment_id.as_deref(), Some("TXN_A2"));
    assert_eq!(failed.order_ref, paid.order_ref);
    assert_eq!(paid.order_ref.as_deref(), Some("order_1042"));
}

#[test]
fn payu_specs_that_cannot_be_hashed_are_refused() {
    let cases = [
        SampleSpec {
            order_ref: "order|1".into(),
            ..spec()
        },
        SampleSpec {
            payment_id: "T|1".into(),
            ..spec()
        },
        SampleSpec {
            email: "a|b@c.d".into(),
            ..spec()
        },
        SampleSpec {
            merchant_key: Some("K|1".into()),
            ..spec()
        },
        SampleSpec {
            payment_id: String::new(),
            ..spec()
        },
    ];
    for spec in &cases {
        let r = sample::build(Gateway::Payu, "captured", spec, SAMPLE_SECRET);
        assert!(
            matches!(r, Err(SampleError::InvalidSpec(_))),
            "{spec:?}: {r:?}"
        );
    }
}

#[test]
fn stripe_samples_without_an_order_reference_omit_it() {
    let spec = SampleSpec {
        order_ref: String::new(),
        payment_id: "pi_3Checkout".into(),
        ..spec()
    };
    for name in [
        "payment_intent.succeeded",
        "payment_intent.payment_failed",
        "charge.refunded",
        "refund.created",
    ] {
        let d = built(Gateway::Stripe, name, &spec);
        let v: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
        assert_eq!(
            v["data"]["object"]["metadata"],
            serde_json::json!({}),
            "{name}"
        );
        let e = parse(Gateway::Stripe, &d.headers, &d.body).unwrap();
        assert_eq!(e.order_ref, None, "{name}");
        assert_eq!(e.payment_id.as_deref(), Some("pi_3Checkout"), "{name}");
    }
    // The session that links the intent to the order.
    let linked = SampleSpec {
        order_ref: "order_1042".into(),
        ..spec.clone()
    };
    let d = built(Gateway::Stripe, "checkout.session.completed", &linked);
    let e = parse(Gateway::Stripe, &d.headers, &d.body).unwrap();
    assert_eq!(e.kind, EventKind::Captured);
    assert_eq!(e.payment_id.as_deref(), Some("pi_3Checkout"));
    assert_eq!(e.order_ref.as_deref(), Some("order_1042"));
    let v: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
    assert_eq!(v["data"]["object"]["client_reference_id"], "order_1042");
    assert_eq!(v["data"]["object"]["payment_status"], "paid");
    assert_eq!(v["data"]["object"]["amount_total"], 50_000);
}
