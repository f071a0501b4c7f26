use proptest::prelude::*;

use super::*;
use crate::Gateway;

/// `GET /v1/events?delivery_success=false` in the documented shape (values
/// made up here): a capture, an event oncehook ignores, a refund.
const EVENTS: &str = r#"{
  "object": "list",
  "url": "/v1/events",
  "has_more": true,
  "data": [
    {"id": "evt_3QlostCapture01", "object": "event", "type": "payment_intent.succeeded",
     "created": 1764633600, "livemode": false, "pending_webhooks": 1,
     "data": {"object": {"id": "pi_3QlostCapture01", "object": "payment_intent",
       "amount": 4990, "amount_received": 4990, "currency": "eur", "status": "succeeded",
       "receipt_email": "asha@example.com", "metadata": {"order_ref": "shop_1001"}}}},
    {"id": "evt_3QcustomerNew02", "object": "event", "type": "customer.created",
     "created": 1764633700, "data": {"object": {"id": "cus_Q1", "object": "customer"}}},
    {"id": "evt_3QlostRefund003", "object": "event", "type": "refund.updated",
     "created": 1764633800,
     "data": {"object": {"id": "re_3QlostRefund003", "object": "refund", "amount": 990,
       "currency": "eur", "payment_intent": "pi_3QlostCapture01", "status": "succeeded"}}}
  ]
}"#;

#[test]
fn undelivered_events_are_read_as_their_webhooks_under_their_own_ids() {
    let page = events(EVENTS.as_bytes()).expect("parsed");
    let seen: Vec<(&str, EventKind)> = page.events.iter().map(|e| (e.event_id.as_str(), e.kind)).collect();
    assert_eq!(
        seen,
        vec![("evt_3QlostCapture01", EventKind::Captured), ("evt_3QlostRefund003", EventKind::Refunded)],
        "the customer event is not a fact"
    );
    assert_eq!(page.next.as_deref(), Some("evt_3QlostRefund003"), "has_more: ask after the last");
    let capture = &page.events[0];
    assert_eq!(capture.provider, Gateway::Stripe);
    assert_eq!(capture.payment_id.as_deref(), Some("pi_3QlostCapture01"));
    assert_eq!(capture.order_ref.as_deref(), Some("shop_1001"));
    assert_eq!((capture.amount_minor, capture.currency.as_deref()), (Some(4_990), Some("EUR")));
    let last = events(br#"{"object": "list", "has_more": false, "data": []}"#).expect("empty");
    assert_eq!(last, Page { events: vec![], next: None });
}

#[test]
fn a_payment_intent_is_one_fact_named_by_intent_and_state() {
    let intent = |status: &str, error: &str| {
        format!(
            r#"{{"id": "pi_3Qintent", "object": "payment_intent", "amount": 2500,
                "amount_received": {}, "amount_capturable": 2500, "currency": "usd",
                "status": "{status}", "last_payment_error": {error},
                "metadata": {{"order_ref": "shop_7"}}}}"#,
            if status == "succeeded" { 2500 } else { 0 }
        )
    };
    let read = |status: &str, error: &str| {
        payment_intent(intent(status, error).as_bytes())
            .expect("parsed")
            .map(|e| (e.event_id, e.kind, e.amount_minor))
    };
    assert_eq!(
        read("succeeded", "null"),
        Some(("reconciliation:pi_3Qintent:captured".into(), EventKind::Captured, Some(2_500)))
    );
    assert_eq!(
        read("requires_capture", "null"),
        Some(("reconciliation:pi_3Qintent:authorized".into(), EventKind::Authorized, Some(2_500)))
    );
    assert_eq!(
        read("requires_payment_method", r#"{"code": "card_declined"}"#),
        Some(("reconciliation:pi_3Qintent:failed".into(), EventKind::Failed, Some(2_500)))
    );
    assert_eq!(read("requires_payment_method", "null"), None, "not tried yet");
    assert_eq!(read("processing", "null"), None, "still in flight");
    assert_eq!(read("canceled", "null"), None);
}

#[test]
fn succeeded_refunds_become_refund_facts_under_the_webhooks_refund_id() {
    let body = br#"{"object": "list", "has_more": false, "data": [
        {"id": "re_1", "object": "refund", "amount": 500, "currency": "usd",
         "payment_intent": "pi_3Qintent", "status": "succeeded"},
        {"id": "re_2", "object": "refund", "amount": 500, "currency": "usd",
         "payment_intent": "pi_3Qintent", "status": "pending"}
    ]}"#;
    let page = refunds(body).expect("parsed");
    assert_eq!(page.events.len(), 1, "a pending refund waits");
    let refund = &page.events[0];
    assert_eq!(refund.event_id, "reconciliation:re_1:processed");
    assert_eq!(refund.kind, EventKind::Refunded);
    assert_eq!(refund.refund_id.as_deref(), Some("re_1"));
    assert_eq!(refund.payment_id.as_deref(), Some("pi_3Qintent"));
    assert_eq!(refund.amount_minor, Some(500));
}

#[test]
fn answers_that_are_not_what_was_asked_are_refused_with_the_field() {
    for (body, field) in [
        (r#"{"object": "event"}"#, "object"),
        (r#"{"object": "list"}"#, "data"),
        (r#"{"object": "list", "has_more": true, "data": [{"object": "event"}]}"#, "id"),
    ] {
        let err = events(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
    for (body, field) in [
        (r#"{"object": "charge", "id": "ch_1"}"#, "object"),
        (r#"{"object": "payment_intent", "status": "succeeded"}"#, "id"),
        (r#"{"object": "payment_intent", "id": "pi_1"}"#, "status"),
        (r#"{"object": "payment_intent", "id": "pi_1", "status": "succeeded", "amount": "x"}"#, "amount"),
    ] {
        let err = payment_intent(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
    for (body, field) in [
        (r#"{"object": "list", "data": [{"status": "succeeded"}]}"#, "data[].id"),
        (r#"{"object": "list", "data": [{"id": "re_1", "status": "succeeded", "amount": 5}]}"#, "payment_intent"),
    ] {
        let err = refunds(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = events(&body);
        let _ = payment_intent(&body);
        let _ = refunds(&body);
    }

    #[test]
    fn arbitrary_objects_never_panic(
        id in any::<Option<String>>(),
        status in prop_oneof![Just("succeeded"), Just("requires_capture"), Just("x")],
        amount in any::<i64>(),
        more in any::<bool>(),
    ) {
        let object = serde_json::json!({"id": id, "object": "payment_intent", "status": status, "amount": amount});
        let _ = payment_intent(object.to_string().as_bytes());
        let list = serde_json::json!({"object": "list", "has_more": more, "data": [object,
            {"id": id, "type": "payment_intent.succeeded", "data": {"object": object}}]});
        let _ = events(list.to_string().as_bytes());
        let _ = refunds(list.to_string().as_bytes());
    }
}

#[test]
fn an_orders_intents_are_asked_once_and_lists_page_on() {
    let api = Gateway::Stripe.api().expect("an API");
    assert!(!api.asks_by_shop_reference());
    let order = OrderNames {
        order_ref: "ORD-1".into(),
        refs: vec!["cs_1".into(), "pi_2".into()],
        payments: vec!["pi_2".into()],
    };
    assert_eq!(
        api.asks(&order),
        [Ask::of(INTENT, "pi_2"), Ask::of(REFUNDS, "pi_2")],
        "one intent once; a Checkout session is not an intent"
    );
    let sweep = api.sweep(5);
    assert_eq!(sweep, [Ask::of(UNDELIVERED, "5")]);
    let list = br#"{"object": "list", "has_more": true, "data": [{"id": "evt_9",
        "object": "event", "type": "customer.created", "data": {"object": {}}}]}"#;
    let read = api.read(&sweep[0], list).expect("read");
    let next = sweep[0].page_after("evt_9".into());
    assert_eq!(read.follow_ups, std::slice::from_ref(&next));
    assert_eq!(
        api.describe(&next),
        "GET /v1/events?delivery_success=false&created[gte]=5&starting_after=evt_9"
    );
    let last = br#"{"object": "list", "has_more": false, "data": []}"#;
    assert!(api.read(&next, last).expect("read").follow_ups.is_empty());
}

#[test]
fn the_request_carries_the_bearer_key_and_a_publishable_key_is_refused() {
    let api = Gateway::Stripe.api().expect("an API");
    let secrets = vec!["whsec_x".to_owned()];
    let source = crate::Credentials::new(&secrets);
    let table = crate::reconcile::table(&[("api_key", "sk_test_1")]);
    let creds = crate::reconcile::credentials(Gateway::Stripe, &table, source).expect("credentials");
    let ask = Ask::of(REFUNDS, "pi_1").page_after("re_1".into());
    let request = api.request(&ask, &creds).expect("a request");
    assert_eq!(
        request.path,
        "/v1/refunds?payment_intent=pi_1&limit=100&starting_after=re_1"
    );
    assert_eq!(request.headers[0].value, "Bearer sk_test_1");
    assert!(!format!("{request:?}").contains("sk_test_1"), "{request:?}");
    let publishable = crate::reconcile::table(&[("api_key", "pk_live_1")]);
    let refused = crate::reconcile::credentials(Gateway::Stripe, &publishable, source)
        .expect_err("a publishable key");
    assert!(refused.to_string().contains("publishable"), "{refused}");
}

/// The documented answers (`crate::documented`), read as published.
mod documented {
    use super::*;
    use crate::documented::{body, stripe};

    #[test]
    fn the_documented_intent_awaiting_a_payment_method_records_nothing_yet() {
        let read = payment_intent(body(stripe::PAYMENT_INTENT).as_bytes()).expect("read");
        assert_eq!(read, None, "requires_payment_method with no error: still in flight");
    }

    #[test]
    fn the_documented_refund_listed_becomes_a_refund_fact() {
        let refund: serde_json::Value =
            serde_json::from_str(body(stripe::REFUND)).expect("the refund object");
        let list = serde_json::json!({"object": "list", "url": "/v1/refunds", "has_more": false, "data": [refund]});
        let page = refunds(list.to_string().as_bytes()).expect("read");
        assert_eq!(page.next, None);
        assert_eq!(page.events.len(), 1);
        let e = &page.events[0];
        assert_eq!(e.kind, EventKind::Refunded);
        assert_eq!(e.refund_id.as_deref(), Some("re_1Nispe2eZvKYlo2Cd31jOCgZ"));
        assert_eq!(e.payment_id.as_deref(), Some("pi_1GszsK2eZvKYlo2CfhZyoZLp"));
        assert_eq!((e.amount_minor, e.currency.as_deref()), (Some(1_000), Some("USD")));
    }

    #[test]
    fn the_documented_event_list_holds_nothing_oncehook_acts_on() {
        let page = events(body(stripe::EVENTS).as_bytes()).expect("read");
        assert!(page.events.is_empty(), "setup_intent.created is not a payment fact");
        assert_eq!(page.next, None);
    }

    #[test]
    fn a_404_is_nothing_found_only_with_stripes_resource_missing() {
        let api = Gateway::Stripe.api().expect("an API");
        let ask = crate::reconcile::Ask::of("payment_intent", "pi_X");
        let missing = br#"{"error": {"code": "resource_missing", "message": "No such payment_intent: 'pi_X'", "param": "intent", "type": "invalid_request_error"}}"#;
        assert!(api.unknown_id(&ask, 404, missing));
        assert!(!api.unknown_id(&ask, 404, b"<html>404</html>"), "a wrong base_url");
    }
}

proptest! {
    #[test]
    fn arbitrary_error_bodies_never_panic(status in 100u16..600, body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let api = crate::Gateway::Stripe.api().expect("an API");
        let unknown = api.unknown_id(&crate::reconcile::Ask::of("payment_intent", "pi_1"), status, &body);
        prop_assert!(!unknown || status == 404, "only a 404 can be its no-such-id");
    }
}
