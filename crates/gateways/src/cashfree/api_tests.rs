use proptest::prelude::*;

use super::*;

/// A payments answer in the documented shape (values made up here).
const PAYMENTS: &str = r#"[
  {"cf_payment_id": 5114910362147, "order_id": "shop_order_81", "entity": "payment",
   "is_captured": false, "order_amount": 499.50, "payment_amount": 499.50,
   "payment_currency": "INR", "payment_status": "USER_DROPPED",
   "payment_time": "2026-12-01T10:00:00+05:30", "payment_group": "upi"},
  {"cf_payment_id": 5114910362148, "order_id": "shop_order_81", "entity": "payment",
   "is_captured": true, "order_amount": 499.50, "payment_amount": 499.50,
   "payment_currency": "INR", "payment_status": "SUCCESS",
   "payment_message": "00::Transaction success", "bank_reference": "234928698581",
   "payment_time": "2026-12-01T10:02:00+05:30", "payment_group": "upi"},
  {"cf_payment_id": "5114910362149", "order_id": "shop_order_81", "entity": "payment",
   "payment_amount": 499.50, "payment_currency": "INR", "payment_status": "PENDING"},
  {"cf_payment_id": "5114910362150", "order_id": "shop_order_81", "entity": "payment",
   "payment_amount": "499.5", "payment_currency": "inr", "payment_status": "FAILED"}
]"#;

/// A refunds answer in the documented shape (values made up here).
const REFUNDS: &str = r#"[
  {"cf_payment_id": 5114910362148, "cf_refund_id": "9182736", "refund_id": "shop_refund_1",
   "order_id": "shop_order_81", "entity": "refund", "refund_amount": 100.25,
   "refund_currency": "INR", "refund_status": "SUCCESS", "refund_type": "MERCHANT_INITIATED"},
  {"cf_payment_id": 5114910362148, "cf_refund_id": "9182737",
   "order_id": "shop_order_81", "entity": "refund", "refund_amount": 50,
   "refund_currency": "INR", "refund_status": "SUCCESS"},
  {"cf_payment_id": 5114910362148, "cf_refund_id": "9182738", "refund_id": "shop_refund_3",
   "order_id": "shop_order_81", "entity": "refund", "refund_amount": 10,
   "refund_currency": "INR", "refund_status": "PENDING"}
]"#;

#[test]
fn the_payments_of_an_order_become_facts_as_their_webhooks_would() {
    let events = order_payments(PAYMENTS.as_bytes()).expect("parsed");
    let seen: Vec<(&str, EventKind, &str, &str)> = events
        .iter()
        .map(|e| {
            (
                e.payment_id.as_deref().unwrap_or(""),
                e.kind,
                e.event_id.as_str(),
                e.event_type.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("5114910362147", EventKind::Failed, "reconciliation:5114910362147:failed", "PAYMENT_USER_DROPPED_WEBHOOK"),
            ("5114910362148", EventKind::Captured, "reconciliation:5114910362148:captured", "PAYMENT_SUCCESS_WEBHOOK"),
            ("5114910362150", EventKind::Failed, "reconciliation:5114910362150:failed", "PAYMENT_FAILED_WEBHOOK"),
        ],
        "pending records nothing; a numeric id reads as its digits"
    );
    let captured = &events[1];
    assert_eq!(captured.provider, Gateway::Cashfree);
    assert_eq!(captured.order_ref.as_deref(), Some("shop_order_81"));
    assert_eq!((captured.amount_minor, captured.currency.as_deref()), (Some(49_950), Some("INR")));
    assert_eq!(events[2].amount_minor, Some(49_950), "a decimal string reads exactly");
    assert_eq!(events[2].currency.as_deref(), Some("INR"), "upper-cased");
}

#[test]
fn successful_refunds_become_refund_facts_under_the_webhooks_refund_id() {
    let events = order_refunds(REFUNDS.as_bytes()).expect("parsed");
    let seen: Vec<(Option<&str>, &str, Option<i64>)> = events
        .iter()
        .map(|e| (e.refund_id.as_deref(), e.event_id.as_str(), e.amount_minor))
        .collect();
    assert_eq!(
        seen,
        vec![
            (Some("shop_refund_1"), "reconciliation:shop_refund_1:processed", Some(10_025)),
            (Some("9182737"), "reconciliation:9182737:processed", Some(5_000)),
        ],
        "the merchant's refund id, else Cashfree's; a pending refund waits"
    );
    assert!(events.iter().all(|e| e.kind == EventKind::Refunded
        && e.payment_id.as_deref() == Some("5114910362148")
        && e.event_type == "REFUND_STATUS_WEBHOOK"));
}

#[test]
fn answers_without_what_a_fact_needs_are_refused_with_the_field() {
    for (body, field) in [
        (r#"{"payments": []}"#, "JSON array"),
        (r#"[1]"#, "[]"),
        (r#"[{"payment_status": "SUCCESS"}]"#, "[].cf_payment_id"),
        (r#"[{"cf_payment_id": 1}]"#, "[].payment_status"),
        (r#"[{"cf_payment_id": 1, "payment_status": "SUCCESS", "payment_amount": 1.005}]"#, "[].payment_amount"),
    ] {
        let err = order_payments(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
    for (body, field) in [
        (r#"[{"refund_status": "SUCCESS"}]"#, "[].refund_id"),
        (r#"[{"refund_id": "r1"}]"#, "[].refund_status"),
        (r#"[{"refund_id": "r1", "refund_status": "SUCCESS"}]"#, "[].cf_payment_id"),
        (r#"[{"refund_id": "r1", "refund_status": "SUCCESS", "cf_payment_id": 7, "refund_amount": "x"}]"#, "[].refund_amount"),
    ] {
        let err = order_refunds(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
    assert!(order_payments(b"<html>502</html>").is_err());
    assert!(order_payments(b"[]").expect("no payments yet").is_empty());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = order_payments(&body);
        let _ = order_refunds(&body);
    }

    #[test]
    fn arbitrary_entries_never_panic(items in proptest::collection::vec(
        (any::<Option<String>>(), prop_oneof![Just("SUCCESS"), Just("FAILED"), Just("x")], any::<f64>()), 0..8)
    ) {
        let items: Vec<Value> = items
            .into_iter()
            .map(|(id, status, amount)| serde_json::json!({
                "cf_payment_id": id, "payment_status": status, "payment_amount": amount,
                "refund_id": id, "refund_status": status, "refund_amount": amount,
            }))
            .collect();
        let body = Value::Array(items).to_string();
        let _ = order_payments(body.as_bytes());
        let _ = order_refunds(body.as_bytes());
    }
}

#[test]
fn an_order_naming_no_cashfree_order_is_asked_by_the_shops_reference() {
    let api = crate::Gateway::Cashfree.api().expect("an API");
    assert!(api.asks_by_shop_reference());
    let bare = OrderNames {
        order_ref: "ORD-1".into(),
        ..OrderNames::default()
    };
    assert_eq!(
        api.asks(&bare),
        [Ask::of(ORDER_PAYMENTS, "ORD-1"), Ask::of(ORDER_REFUNDS, "ORD-1")]
    );
    let named = OrderNames {
        refs: vec!["cf_order_2".into()],
        ..bare
    };
    assert_eq!(
        api.asks(&named),
        [Ask::of(ORDER_PAYMENTS, "cf_order_2"), Ask::of(ORDER_REFUNDS, "cf_order_2")]
    );
}

#[test]
fn the_request_carries_the_client_headers_and_the_default_api_version() {
    let api = crate::Gateway::Cashfree.api().expect("an API");
    let secrets = vec!["s".to_owned()];
    let table = crate::reconcile::table(&[("client_id", "id"), ("client_secret", "cs")]);
    let creds = crate::reconcile::credentials(
        crate::Gateway::Cashfree,
        &table,
        crate::Credentials::new(&secrets),
    )
    .expect("credentials");
    let request = api
        .request(&Ask::of(ORDER_REFUNDS, "ORD 1"), &creds)
        .expect("a request");
    assert_eq!(request.path, "/pg/orders/ORD%201/refunds");
    let headers: Vec<(&str, &str, bool)> = request
        .headers
        .iter()
        .map(|h| (h.name, h.value.as_str(), h.sensitive))
        .collect();
    assert_eq!(
        headers,
        [
            ("x-client-id", "id", true),
            ("x-client-secret", "cs", true),
            ("x-api-version", API_VERSION, false)
        ]
    );
    assert!(!format!("{creds:?}").contains("cs"), "{creds:?}");
    assert!(format!("{creds:?}").contains(API_VERSION), "{creds:?}");
}

/// The documented answers (`crate::documented`), read as published.
mod documented {
    use super::*;

    /// Payment, kind, amount, currency and order of a fact.
    type Seen<'a> = (&'a str, EventKind, Option<i64>, Option<&'a str>, Option<&'a str>);
    use crate::documented::{body, cashfree};
    use crate::reconcile::Ask;

    #[test]
    fn the_documented_payments_of_an_order_become_a_capture_and_two_failed_attempts() {
        let events = order_payments(body(cashfree::ORDER_PAYMENTS).as_bytes()).expect("read");
        let seen: Vec<Seen<'_>> = events
            .iter()
            .map(|e| {
                (
                    e.payment_id.as_deref().unwrap_or(""),
                    e.kind,
                    e.amount_minor,
                    e.currency.as_deref(),
                    e.order_ref.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("12376123", EventKind::Captured, Some(1_001), Some("INR"), Some("order_8123")),
                ("12376124", EventKind::Failed, Some(1_001), Some("INR"), Some("order_8123")),
                ("12376152", EventKind::Failed, Some(125), Some("USD"), Some("order_8125")),
            ]
        );
    }

    #[test]
    fn the_documented_refunds_of_an_order_become_a_refund_fact() {
        let events = order_refunds(body(cashfree::ORDER_REFUNDS).as_bytes()).expect("read");
        assert_eq!(events.len(), 1);
        let r = &events[0];
        assert_eq!(r.refund_id.as_deref(), Some("REF-123"));
        assert_eq!(r.payment_id.as_deref(), Some("918812"));
        assert_eq!(r.order_ref.as_deref(), Some("c6G-QMcbm1848"));
        assert_eq!((r.amount_minor, r.currency.as_deref()), (Some(10_081), Some("INR")));
        assert_eq!(r.kind, EventKind::Refunded);
    }

    #[test]
    fn the_documented_404_is_nothing_found_and_another_404_is_not() {
        let api = Gateway::Cashfree.api().expect("an API");
        let ask = Ask::of("order_payments", "ORD-1");
        assert!(api.unknown_id(&ask, 404, body(cashfree::NOT_FOUND).as_bytes()));
        assert!(!api.unknown_id(&ask, 404, b"<html>Not Found</html>"), "a wrong base_url");
        assert!(!api.unknown_id(&ask, 400, body(cashfree::NOT_FOUND).as_bytes()));
    }
}

proptest! {
    #[test]
    fn arbitrary_error_bodies_never_panic(status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let api = crate::Gateway::Cashfree.api().expect("an API");
        let unknown = api.unknown_id(&crate::reconcile::Ask::of("order_payments", "ORD-1"), status, &body);
        prop_assert!(!unknown || status == 404, "only a 404 can be its no-such-id");
    }
}
