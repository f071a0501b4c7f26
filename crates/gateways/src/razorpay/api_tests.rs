use proptest::prelude::*;

use super::*;
use crate::Credentials;
use crate::reconcile::CredentialError;

/// An answer in the documented shape (values made up here).
const ANSWER: &str = r#"{
  "entity": "collection",
  "count": 4,
  "items": [
    {"id": "pay_Q1failedTry01", "entity": "payment", "amount": 49900, "currency": "INR",
     "status": "failed", "order_id": "order_Q1shopOrder7", "captured": false,
     "email": "asha@example.com", "error_code": "BAD_REQUEST_ERROR", "created_at": 1764633600},
    {"id": "pay_Q1capturedOk2", "entity": "payment", "amount": 49900, "currency": "INR",
     "status": "captured", "order_id": "order_Q1shopOrder7", "captured": true,
     "email": "asha@example.com", "created_at": 1764633700},
    {"id": "pay_Q1refundedOk3", "entity": "payment", "amount": 49900, "currency": "inr",
     "status": "refunded", "order_id": "order_Q1shopOrder7", "amount_refunded": 49900,
     "created_at": 1764633800},
    {"id": "pay_Q1createdOnly", "entity": "payment", "amount": 49900, "currency": "INR",
     "status": "created", "order_id": "order_Q1shopOrder7", "created_at": 1764633900}
  ]
}"#;

#[test]
fn the_payments_of_an_order_become_facts_named_by_payment_and_status() {
    let events = order_payments(ANSWER.as_bytes()).expect("parsed");
    let seen: Vec<(&str, EventKind, &str)> = events
        .iter()
        .map(|e| (e.payment_id.as_deref().unwrap_or(""), e.kind, e.event_id.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("pay_Q1failedTry01", EventKind::Failed, "reconciliation:pay_Q1failedTry01:failed"),
            ("pay_Q1capturedOk2", EventKind::Captured, "reconciliation:pay_Q1capturedOk2:captured"),
            ("pay_Q1refundedOk3", EventKind::Captured, "reconciliation:pay_Q1refundedOk3:captured"),
        ],
        "created is skipped; a refunded payment was captured"
    );
    let captured = &events[1];
    assert_eq!(captured.provider, Gateway::Razorpay);
    assert_eq!(captured.event_type, "payment.captured");
    assert_eq!(captured.order_ref.as_deref(), Some("order_Q1shopOrder7"));
    assert_eq!((captured.amount_minor, captured.currency.as_deref()), (Some(49_900), Some("INR")));
    assert_eq!(events[2].currency.as_deref(), Some("INR"), "upper-cased");
    assert_eq!(captured.email.as_deref(), Some("asha@example.com"));
}

#[test]
fn an_answer_that_is_not_a_payment_collection_is_refused_with_the_field() {
    for (body, field) in [
        (r#"{"entity": "order", "items": []}"#, "entity"),
        (r#"{"entity": "collection"}"#, "items"),
        (r#"{"entity": "collection", "items": [{"status": "captured"}]}"#, "items[].id"),
        (r#"{"entity": "collection", "items": [{"id": "pay_1"}]}"#, "items[].status"),
        (r#"{"entity": "collection", "items": [{"id": "pay_1", "status": "captured", "amount": 1.5}]}"#, "items[].amount"),
    ] {
        let err = order_payments(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
    assert!(order_payments(b"<html>502</html>").is_err());
    let empty = order_payments(br#"{"entity": "collection", "count": 0, "items": []}"#);
    assert!(empty.expect("no payments yet").is_empty());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = order_payments(&body);
        let _ = orders_by_receipt(&body, "ORD-1");
        let _ = unknown_id_error(&body);
    }

    #[test]
    fn a_receipt_lookup_finds_exactly_the_orders_of_that_receipt(
        orders in proptest::collection::vec(("[a-zA-Z0-9]{1,12}", prop_oneof![Just("ORD-1"), Just("ORD-2"), Just("ord-1")]), 0..8)
    ) {
        let items: Vec<Value> = orders
            .iter()
            .map(|(id, receipt)| serde_json::json!({"id": format!("order_{id}"), "entity": "order", "receipt": receipt}))
            .collect();
        let body = serde_json::json!({"entity": "collection", "count": items.len(), "items": items}).to_string();
        let found = orders_by_receipt(body.as_bytes(), "ORD-1").expect("a readable answer");
        let mut wanted: Vec<String> = Vec::new();
        for (id, receipt) in &orders {
            let id = format!("order_{id}");
            if *receipt == "ORD-1" && !wanted.contains(&id) {
                wanted.push(id);
            }
        }
        prop_assert_eq!(found, wanted);
    }

    #[test]
    fn arbitrary_items_never_panic(items in proptest::collection::vec(
        (any::<Option<String>>(), prop_oneof![Just("captured"), Just("failed"), Just("x")], any::<i64>()), 0..8)
    ) {
        let items: Vec<Value> = items
            .into_iter()
            .map(|(id, status, amount)| serde_json::json!({"id": id, "status": status, "amount": amount}))
            .collect();
        let body = serde_json::json!({"entity": "collection", "items": items}).to_string();
        let _ = order_payments(body.as_bytes());
    }
}

/// A refunds answer in the documented shape (values made up here).
const REFUNDS: &str = r#"{
  "entity": "collection",
  "count": 3,
  "items": [
    {"id": "rfnd_Q1partOne001", "entity": "refund", "amount": 10000, "currency": "INR",
     "payment_id": "pay_Q1capturedOk2", "status": "processed", "speed_processed": "normal",
     "created_at": 1764634000},
    {"id": "rfnd_Q1stillPend2", "entity": "refund", "amount": 5000, "currency": "INR",
     "payment_id": "pay_Q1capturedOk2", "status": "pending", "created_at": 1764634100},
    {"id": "rfnd_Q1failedRef3", "entity": "refund", "amount": 5000, "currency": "INR",
     "payment_id": "pay_Q1capturedOk2", "status": "failed", "created_at": 1764634200}
  ]
}"#;

#[test]
fn processed_refunds_become_refund_facts_and_the_others_wait() {
    let events = payment_refunds(REFUNDS.as_bytes()).expect("parsed");
    assert_eq!(events.len(), 1, "pending and failed refunds record nothing");
    let refund = &events[0];
    assert_eq!(refund.kind, EventKind::Refunded);
    assert_eq!(refund.event_id, "reconciliation:rfnd_Q1partOne001:processed");
    assert_eq!(refund.event_type, "refund.processed");
    assert_eq!(refund.refund_id.as_deref(), Some("rfnd_Q1partOne001"));
    assert_eq!(refund.payment_id.as_deref(), Some("pay_Q1capturedOk2"));
    assert_eq!((refund.amount_minor, refund.currency.as_deref()), (Some(10_000), Some("INR")));
    assert!(!refund.cumulative_refund);
}

#[test]
fn a_refunds_answer_without_what_a_refund_needs_is_refused_with_the_field() {
    for (body, field) in [
        (r#"{"entity": "refund"}"#, "entity"),
        (r#"{"entity": "collection", "items": {}}"#, "items"),
        (r#"{"entity": "collection", "items": [{"status": "processed"}]}"#, "items[].id"),
        (r#"{"entity": "collection", "items": [{"id": "rfnd_1", "status": "processed"}]}"#, "items[].payment_id"),
        (r#"{"entity": "collection", "items": [{"id": "rfnd_1", "status": "processed", "payment_id": "pay_1", "amount": "ten"}]}"#, "items[].amount"),
    ] {
        let err = payment_refunds(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
}

proptest! {
    #[test]
    fn arbitrary_refund_answers_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = payment_refunds(&body);
    }
}

fn names(refs: &[&str], payments: &[&str]) -> OrderNames {
    OrderNames {
        order_ref: "ORD-1".into(),
        refs: refs.iter().map(|r| (*r).to_owned()).collect(),
        payments: payments.iter().map(|p| (*p).to_owned()).collect(),
    }
}

#[test]
fn an_order_is_asked_by_its_razorpay_orders_and_payments_and_else_by_its_receipt() {
    let api = Gateway::Razorpay.api().expect("an API");
    assert!(api.asks_by_shop_reference());
    assert_eq!(
        api.asks(&names(&[], &[])),
        [Ask::of(ORDERS_BY_RECEIPT, "ORD-1")],
        "no Razorpay order known: looked up by the receipt"
    );
    let own = OrderNames {
        order_ref: "order_Q1shopOrder7".into(),
        ..OrderNames::default()
    };
    assert_eq!(
        api.asks(&own),
        [Ask::of(ORDER_PAYMENTS, "order_Q1shopOrder7")],
        "a shop reference that is a Razorpay order id is asked directly"
    );
    let asks = api.asks(&names(&["order_9"], &["pay_1"]));
    assert_eq!(
        asks,
        [
            Ask::of(ORDER_PAYMENTS, "order_9"),
            Ask::of(PAYMENT_REFUNDS, "pay_1")
        ]
    );
    let described: Vec<String> = asks
        .iter()
        .chain(&[Ask::of(ORDERS_BY_RECEIPT, "ORD-1")])
        .map(|a| api.describe(a))
        .collect();
    assert_eq!(
        described,
        [
            "GET /v1/orders/order_9/payments",
            "GET /v1/payments/pay_1/refunds",
            "GET /v1/orders?receipt=ORD-1"
        ]
    );
}

#[test]
fn a_receipt_lookup_finds_the_orders_of_that_receipt_and_leads_to_their_payments() {
    let api = Gateway::Razorpay.api().expect("an API");
    let secrets = vec!["s".to_owned()];
    let table = crate::reconcile::table(&[("key_id", "rzp_test_1"), ("key_secret", "sec")]);
    let creds = crate::reconcile::credentials(Gateway::Razorpay, &table, Credentials::new(&secrets))
        .expect("credentials");
    let ask = Ask::of(ORDERS_BY_RECEIPT, "ORD 1/&x");
    let request = api.request(&ask, &creds).expect("a request");
    assert_eq!(request.path, "/v1/orders?receipt=ORD%201%2F%26x", "the receipt is encoded");
    let body = br#"{"entity": "collection", "count": 3, "items": [
        {"id": "order_A", "entity": "order", "receipt": "ORD 1/&x", "status": "paid"},
        {"id": "order_B", "entity": "order", "receipt": "ORD 1/&x-other", "status": "paid"},
        {"id": "order_C", "entity": "order", "receipt": "ORD 1/&x", "status": "attempted"}]}"#;
    let read = api.read(&ask, body).expect("read");
    assert_eq!(read.refs, ["order_A", "order_C"], "only an exact receipt");
    assert_eq!(
        read.follow_ups,
        [Ask::of(ORDER_PAYMENTS, "order_A"), Ask::of(ORDER_PAYMENTS, "order_C")]
    );
    assert!(read.facts.is_empty());
    let none = api
        .read(&ask, br#"{"entity": "collection", "count": 0, "items": []}"#)
        .expect("read");
    assert_eq!(none, Answer::default(), "no Razorpay order: nothing found, no failure");
    for (body, field) in [
        (r#"{"entity": "collection", "items": [{"receipt": "x"}]}"#, "items[].id"),
        (r#"{"entity": "collection", "items": [{"id": "pay_1", "receipt": "x"}]}"#, "items[].id"),
    ] {
        let err = api.read(&ask, body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
}

#[test]
fn an_id_razorpay_does_not_know_is_nothing_found_and_other_refusals_are_not() {
    let api = Gateway::Razorpay.api().expect("an API");
    let ask = Ask::of(ORDER_PAYMENTS, "order_X");
    let unknown = br#"{"error": {"code": "BAD_REQUEST_ERROR", "description": "The id provided does not exist", "source": "business", "step": "payment_initiation", "reason": "input_validation_failed", "metadata": {}, "field": "id"}}"#;
    assert!(api.unknown_id(&ask, 400, unknown));
    assert!(api.unknown_id(&ask, 404, b""));
    let other = br#"{"error": {"code": "BAD_REQUEST_ERROR", "description": "The api key provided is invalid"}}"#;
    assert!(!api.unknown_id(&ask, 400, other), "another bad request is a refusal");
    assert!(!api.unknown_id(&ask, 400, b"not json"));
    assert!(!api.unknown_id(&ask, 500, unknown));
    assert!(!api.unknown_id(&ask, 401, unknown));
}

#[test]
fn the_request_carries_http_basic_and_a_capture_leads_to_its_refunds() {
    let api = Gateway::Razorpay.api().expect("an API");
    let secrets = vec!["s".to_owned()];
    let table = crate::reconcile::table(&[("key_id", "rzp_test_1"), ("key_secret", "sec")]);
    let creds = crate::reconcile::credentials(Gateway::Razorpay, &table, Credentials::new(&secrets))
        .expect("credentials");
    let request = api
        .request(&Ask::of(ORDER_PAYMENTS, "order/1"), &creds)
        .expect("a request");
    assert_eq!(request.path, "/v1/orders/order%2F1/payments");
    // base64("rzp_test_1:sec")
    assert_eq!(request.headers[0].value, "Basic cnpwX3Rlc3RfMTpzZWM=");
    assert!(request.headers[0].sensitive);
    let colon = crate::reconcile::table(&[("key_id", "a:b"), ("key_secret", "sec")]);
    assert!(matches!(
        crate::reconcile::credentials(Gateway::Razorpay, &colon, Credentials::new(&secrets)),
        Err(CredentialError::Shape { key: "key_id", .. })
    ));

    let answer = br#"{"entity": "collection", "items": [
        {"id": "pay_7", "entity": "payment", "amount": 100, "currency": "INR", "status": "captured"},
        {"id": "pay_8", "entity": "payment", "amount": 100, "currency": "INR", "status": "failed"}]}"#;
    let read = api
        .read(&Ask::of(ORDER_PAYMENTS, "order_1"), answer)
        .expect("read");
    assert_eq!(read.facts.len(), 2);
    assert_eq!(read.follow_ups, [Ask::of(PAYMENT_REFUNDS, "pay_7")]);
}

/// The documented answers (`crate::documented`), read as published.
mod documented {
    use super::*;

    /// Payment, kind, amount, currency and order of a fact.
    type Seen<'a> = (&'a str, EventKind, Option<i64>, Option<&'a str>, Option<&'a str>);
    use crate::documented::{body, razorpay};

    #[test]
    fn the_documented_payments_of_an_order_become_a_failed_attempt_and_a_capture() {
        let events = order_payments(body(razorpay::ORDER_PAYMENTS).as_bytes()).expect("read");
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
                ("pay_N8FUmetkCE2hZP", EventKind::Failed, Some(100), Some("INR"), Some("order_N8FRN5zTm5S3wx")),
                ("pay_N8FVRD1DzYzBh1", EventKind::Captured, Some(100), Some("INR"), Some("order_N8FRN5zTm5S3wx")),
            ]
        );
        assert_eq!(events[1].email.as_deref(), Some("void@razorpay.com"));
        assert_eq!(events[1].event_id, "reconciliation:pay_N8FVRD1DzYzBh1:captured");
    }

    #[test]
    fn the_documented_order_list_gives_the_orders_of_a_receipt() {
        let found = orders_by_receipt(body(razorpay::ORDERS).as_bytes(), "Receipt No. 1").expect("read");
        assert_eq!(found, ["order_EKzX2WiEWbMxmx", "order_EAI5nRfThga2TU"]);
        let other = orders_by_receipt(body(razorpay::ORDERS).as_bytes(), "Receipt No. 2").expect("read");
        assert!(other.is_empty());
    }

    #[test]
    fn the_documented_refunds_of_a_payment_become_two_refund_facts() {
        let events = payment_refunds(body(razorpay::PAYMENT_REFUNDS).as_bytes()).expect("read");
        let seen: Vec<(&str, Option<i64>, &str)> = events
            .iter()
            .map(|e| {
                (
                    e.refund_id.as_deref().unwrap_or(""),
                    e.amount_minor,
                    e.payment_id.as_deref().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("rfnd_FP8DDKxqJif6ca", Some(300_100), "pay_29QQoUBi66xm2f"),
                ("rfnd_FP8DRfu3ygfOaC", Some(200_000), "pay_29QQoUBi66xm2f"),
            ]
        );
        assert!(events.iter().all(|e| e.kind == EventKind::Refunded));
    }

    #[test]
    fn the_documented_unknown_id_answer_is_nothing_found() {
        let api = Gateway::Razorpay.api().expect("an API");
        let unknown = body(razorpay::ID_DOES_NOT_EXIST).as_bytes();
        assert!(api.unknown_id(&Ask::of(ORDER_PAYMENTS, "order_X"), 400, unknown));
        assert!(api.unknown_id(&Ask::of(PAYMENT_REFUNDS, "pay_X"), 400, unknown));
        assert!(!api.unknown_id(&Ask::of(ORDER_PAYMENTS, "order_X"), 401, unknown));
    }
}
