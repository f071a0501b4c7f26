//! Razorpay's published sample payloads (tests/fixtures/razorpay-doc-samples)
//! all parse, with the kind their event implies and the fallback identity
//! `{event}:{entity id}` (the samples come without an event-id header).

use oncehook_gateways::{EventKind, Gateway, Headers, parse};

const SAMPLES: &[(&str, &str)] = &[
    (
        "order.paid__card",
        include_str!("fixtures/razorpay-doc-samples/razorpay_order.paid__card.json"),
    ),
    (
        "order.paid__netbanking",
        include_str!("fixtures/razorpay-doc-samples/razorpay_order.paid__netbanking.json"),
    ),
    (
        "order.paid__upi",
        include_str!("fixtures/razorpay-doc-samples/razorpay_order.paid__upi.json"),
    ),
    (
        "order.paid__wallets",
        include_str!("fixtures/razorpay-doc-samples/razorpay_order.paid__wallets.json"),
    ),
    (
        "payment.authorized__card",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.authorized__card.json"),
    ),
    (
        "payment.authorized__netbanking",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.authorized__netbanking.json"),
    ),
    (
        "payment.authorized__upi",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.authorized__upi.json"),
    ),
    (
        "payment.authorized__wallets",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.authorized__wallets.json"),
    ),
    (
        "payment.captured__card",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.captured__card.json"),
    ),
    (
        "payment.captured__netbanking",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.captured__netbanking.json"),
    ),
    (
        "payment.captured__upi",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.captured__upi.json"),
    ),
    (
        "payment.captured__wallets",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.captured__wallets.json"),
    ),
    (
        "payment.failed__card",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.failed__card.json"),
    ),
    (
        "payment.failed__netbanking",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.failed__netbanking.json"),
    ),
    (
        "payment.failed__upi",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.failed__upi.json"),
    ),
    (
        "payment.failed__wallets",
        include_str!("fixtures/razorpay-doc-samples/razorpay_payment.failed__wallets.json"),
    ),
    (
        "refund.created__normal_refunds",
        include_str!("fixtures/razorpay-doc-samples/razorpay_refund.created__normal_refunds.json"),
    ),
    (
        "refund.failed__normal_refunds",
        include_str!("fixtures/razorpay-doc-samples/razorpay_refund.failed__normal_refunds.json"),
    ),
    (
        "refund.processed__normal_refunds",
        include_str!(
            "fixtures/razorpay-doc-samples/razorpay_refund.processed__normal_refunds.json"
        ),
    ),
    (
        "refund.speed_changed__refund.speed_changed",
        include_str!(
            "fixtures/razorpay-doc-samples/razorpay_refund.speed_changed__refund.speed_changed.json"
        ),
    ),
];

fn expected_kind(event: &str) -> EventKind {
    match event {
        "payment.captured" | "order.paid" => EventKind::Captured,
        "payment.failed" => EventKind::Failed,
        "payment.authorized" => EventKind::Authorized,
        "refund.processed" => EventKind::Refunded,
        _ => EventKind::Other,
    }
}

#[test]
fn every_doc_sample_parses_with_the_right_kind() {
    for (name, body) in SAMPLES {
        let event = name.split("__").next().unwrap();
        let e = parse(Gateway::Razorpay, &Headers::new(), body.as_bytes())
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(e.event_type, event, "{name}");
        assert_eq!(e.kind, expected_kind(event), "{name}");
        assert_eq!(e.currency.as_deref(), Some("INR"), "{name}");
        assert!(e.amount_minor.is_some_and(|a| a > 0), "{name}");
        assert!(
            e.order_ref
                .as_deref()
                .is_some_and(|o| o.starts_with("order_")),
            "{name}"
        );
        assert!(
            e.payment_id
                .as_deref()
                .is_some_and(|p| p.starts_with("pay_")),
            "{name}"
        );
        if event.starts_with("refund.") {
            let refund = e.refund_id.clone().unwrap();
            assert!(refund.starts_with("rfnd_"), "{name}");
            assert_eq!(e.event_id, format!("{event}:{refund}"), "{name}");
        } else {
            assert_eq!(
                e.event_id,
                format!("{event}:{}", e.payment_id.clone().unwrap()),
                "{name}"
            );
            assert_eq!(
                e.email.as_deref(),
                Some("gaurav.kumar@example.com"),
                "{name}"
            );
        }
    }
}

#[test]
fn doc_samples_carry_the_documented_facts() {
    let get = |name: &str| {
        let body = SAMPLES.iter().find(|(n, _)| *n == name).unwrap().1;
        parse(Gateway::Razorpay, &Headers::new(), body.as_bytes()).unwrap()
    };
    let paid = get("order.paid__card");
    assert_eq!(paid.payment_id.as_deref(), Some("pay_DESp9bgForNoUd"));
    assert_eq!(paid.order_ref.as_deref(), Some("order_DESoU0U4ikYA19"));
    assert_eq!(paid.amount_minor, Some(100));

    // The refund amount, not the payment's.
    let refund = get("refund.processed__normal_refunds");
    assert_eq!(refund.amount_minor, Some(50_000));
    assert_eq!(refund.payment_id.as_deref(), Some("pay_FPoJKWQQ8lK13n"));
    assert_eq!(refund.order_ref.as_deref(), Some("order_FPoIeimWki9j8A"));
    assert_eq!(refund.refund_id.as_deref(), Some("rfnd_FS8TWyPrCsa0OB"));

    // refund.created and refund.processed of one refund are distinct deliveries.
    assert_ne!(
        get("refund.created__normal_refunds").event_id,
        refund.event_id
    );
}

#[test]
fn the_event_id_header_wins_over_the_fallback() {
    let body = SAMPLES[0].1;
    let headers = Headers::new().with("X-Razorpay-Event-Id", "Evt123");
    let e = parse(Gateway::Razorpay, &headers, body.as_bytes()).unwrap();
    assert_eq!(e.event_id, "Evt123");
}

#[test]
fn notes_and_error_code_shapes_do_not_matter() {
    let body = SAMPLES
        .iter()
        .find(|(n, _)| *n == "payment.failed__card")
        .unwrap()
        .1;
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    for notes in [
        serde_json::json!([]),
        serde_json::json!({"k": "v"}),
        serde_json::json!(null),
    ] {
        for error_code in [
            serde_json::json!(""),
            serde_json::json!(null),
            serde_json::json!("BAD_REQUEST_ERROR"),
        ] {
            let mut v = v.clone();
            v["payload"]["payment"]["entity"]["notes"] = notes.clone();
            v["payload"]["payment"]["entity"]["error_code"] = error_code;
            let e = parse(
                Gateway::Razorpay,
                &Headers::new(),
                &serde_json::to_vec(&v).unwrap(),
            )
            .unwrap();
            assert_eq!(e.kind, EventKind::Failed);
            assert_eq!(e.amount_minor, Some(100));
        }
    }
}
