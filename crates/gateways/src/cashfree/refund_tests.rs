use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::Gateway;
use crate::documented::{body, cashfree};
use crate::reconcile::OrderNames;
use crate::refund::test_support::{self, any_answer, read_any};

const INTENT: &str = "ri_2b7e151628aed2a6abf7";

fn ask() -> RefundAsk {
    RefundAsk {
        order: OrderNames {
            order_ref: "c6G-QMcbm1848".into(),
            refs: vec![],
            payments: vec!["918812".into()],
        },
        ..test_support::ask(INTENT, "918812", 10_081, "INR")
    }
}

fn refunds() -> &'static dyn GatewayRefunds {
    Gateway::Cashfree.refunds().expect("Cashfree refunds")
}

fn creds() -> ApiCredentials {
    let fields = [("client_id", "cf_id"), ("client_secret", "cf_secret")];
    test_support::api_credentials(Gateway::Cashfree, &fields, "cf_secret")
}

/// The documented refund entity (the first of the documented list).
fn documented_entity() -> serde_json::Value {
    let list: serde_json::Value =
        serde_json::from_str(body(cashfree::ORDER_REFUNDS)).expect("json");
    list[0].clone()
}

/// The documented entity as the intent's, with `fields` changed.
fn entity(fields: &[(&str, serde_json::Value)]) -> Vec<u8> {
    let mut v = documented_entity();
    v["refund_id"] = json!(INTENT);
    for (k, value) in fields {
        v[*k] = value.clone();
    }
    v.to_string().into_bytes()
}

#[test]
fn the_request_refunds_the_order_under_the_intents_refund_id_with_an_exact_amount() {
    let request = refunds().create(&ask(), &creds()).expect("a request");
    assert_eq!(
        (request.method, request.path.as_str()),
        (Method::Post, "/pg/orders/c6G-QMcbm1848/refunds")
    );
    let body = request.body.as_ref().expect("a body");
    assert_eq!(body.content_type, "application/json");
    assert_eq!(
        String::from_utf8_lossy(&body.bytes),
        r#"{"refund_amount":100.81,"refund_id":"ri_2b7e151628aed2a6abf7","refund_note":"duplicate_capture"}"#
    );
    let names: Vec<(&str, bool)> = request
        .headers
        .iter()
        .map(|h| (h.name, h.sensitive))
        .collect();
    assert_eq!(
        names,
        [
            ("x-client-id", true),
            ("x-client-secret", true),
            ("x-api-version", false),
            ("x-idempotency-key", false)
        ]
    );
    let key = request
        .headers
        .iter()
        .find(|h| h.name == "x-idempotency-key")
        .map(|h| h.value.as_str());
    assert_eq!(
        key,
        Some(INTENT),
        "Cashfree's documented key, the intent's refund_id"
    );
    assert_eq!(
        refunds().create(&ask(), &creds()),
        Ok(request),
        "every attempt the same"
    );

    let lookup = refunds().lookup(&ask(), &creds()).expect("a request");
    assert_eq!(
        (lookup.method, lookup.path.as_str()),
        (
            Method::Get,
            "/pg/orders/c6G-QMcbm1848/refunds/ri_2b7e151628aed2a6abf7"
        )
    );
}

#[test]
fn the_order_is_the_one_cashfree_reference_else_the_shops_and_odd_ids_are_derived() {
    let by_ref = RefundAsk {
        order: OrderNames {
            refs: vec!["cf order/1".into()],
            ..ask().order
        },
        amount_minor: 7,
        currency: "JPY".into(),
        reason: "x".into(),
        ..ask()
    };
    let request = refunds().create(&by_ref, &creds()).expect("a request");
    assert_eq!(request.path, "/pg/orders/cf%20order%2F1/refunds");
    let sent = String::from_utf8_lossy(&request.body.expect("a body").bytes).into_owned();
    assert_eq!(
        sent, r#"{"refund_amount":7,"refund_id":"ri_2b7e151628aed2a6abf7"}"#,
        "no note under 3 characters"
    );
    let several = RefundAsk {
        order: OrderNames {
            refs: vec!["a".into(), "b".into()],
            ..ask().order
        },
        ..ask()
    };
    assert!(matches!(
        refunds().create(&several, &creds()),
        Err(RequestError::Invalid(_))
    ));
    let none = RefundAsk {
        order: OrderNames::default(),
        ..ask()
    };
    assert!(matches!(
        refunds().lookup(&none, &creds()),
        Err(RequestError::Invalid(_))
    ));
    assert!(matches!(
        refunds().create(
            &RefundAsk {
                amount_minor: 0,
                ..ask()
            },
            &creds()
        ),
        Err(RequestError::Invalid(_))
    ));

    assert_eq!(refund_id("REF-123"), "REF-123");
    for odd in ["r1", "ri:with spaces", &"r".repeat(41)] {
        let id = refund_id(odd);
        assert_eq!(id.len(), 35, "{id}");
        assert_eq!(id, refund_id(odd), "the same every time");
        assert_eq!(idempotency_key(odd), id, "the key is the refund_id");
    }
}

#[test]
fn the_documented_refund_is_accepted_with_the_fact_reconciliation_reads() {
    let published = RefundAsk {
        intent_id: "REF-123".into(),
        attempt: 1,
        ..ask()
    };
    let answer = documented_entity().to_string();
    let RefundOutcome::Accepted { refund_id, facts } =
        refunds().read(&published, RefundCall::Lookup, 200, answer.as_bytes())
    else {
        panic!("accepted");
    };
    assert_eq!(refund_id, "REF-123");
    let reconciled =
        super::super::api::order_refunds(body(cashfree::ORDER_REFUNDS).as_bytes()).expect("read");
    assert_eq!(facts, reconciled, "one fact, whoever finds it");
    assert_eq!(facts[0].event_id, "reconciliation:REF-123:processed");
    assert_eq!(
        (facts[0].amount_minor, facts[0].payment_id.as_deref()),
        (Some(10_081), Some("918812"))
    );
    // The same entity under another refund_id is not the intent's.
    assert!(matches!(
        refunds().read(&ask(), RefundCall::Create, 200, answer.as_bytes()),
        RefundOutcome::Refused { code, .. } if code == "refund_mismatch"
    ));
}

#[test]
fn pending_waits_cancelled_is_refused_and_a_404_to_the_lookup_is_nothing_there() {
    let read = |call, status, body: &[u8]| refunds().read(&ask(), call, status, body);
    assert_eq!(
        read(
            RefundCall::Create,
            200,
            &entity(&[("refund_status", json!("PENDING"))])
        ),
        RefundOutcome::Accepted {
            refund_id: INTENT.into(),
            facts: vec![]
        }
    );
    assert!(matches!(
        read(RefundCall::Lookup, 200, &entity(&[("refund_status", json!("CANCELLED")), ("status_description", json!("Refund cancelled"))])),
        RefundOutcome::Failed { code, message, .. } if code == "refund_cancelled" && message == "Refund cancelled"
    ));
    let not_found = body(cashfree::NOT_FOUND).as_bytes();
    assert_eq!(
        read(RefundCall::Lookup, 404, not_found),
        RefundOutcome::NotFound
    );
    assert!(
        matches!(
            read(RefundCall::Lookup, 404, b"<html>404</html>"),
            RefundOutcome::Retry { .. }
        ),
        "a wrong base_url"
    );
    assert!(
        matches!(read(RefundCall::Create, 404, not_found), RefundOutcome::Refused { code, .. } if code == "something_not_found")
    );
}

/// Cashfree's error object (`message`, `code`, `type`; its 409 is
/// "duplicate request", ApiError409): no sample body is published.
fn cashfree_error(code: &str, message: &str) -> Vec<u8> {
    json!({"message": message, "code": code, "type": "invalid_request_error"})
        .to_string()
        .into_bytes()
}

#[test]
fn a_repeated_refund_id_is_tried_again_through_the_lookup_and_refusals_keep_cashfrees_words() {
    let read = |call, status, body: &[u8]| refunds().read(&ask(), call, status, body);
    let duplicate = cashfree_error("refund_already_exists", "refund with this refund_id exists");
    assert!(
        matches!(read(RefundCall::Create, 409, &duplicate), RefundOutcome::Retry { reason } if reason.contains("lookup"))
    );
    let too_much = cashfree_error(
        "refund_amount_invalid",
        "refund amount is greater than the refundable amount",
    );
    assert_eq!(
        read(RefundCall::Create, 400, &too_much),
        RefundOutcome::Refused {
            code: "refund_amount_invalid".into(),
            message: "refund amount is greater than the refundable amount".into()
        }
    );
    for status in [401, 403, 409, 429, 500, 502] {
        assert!(
            matches!(
                read(RefundCall::Lookup, status, &too_much),
                RefundOutcome::Retry { .. }
            ),
            "{status}"
        );
    }
    for (status, junk) in [(400, &b"oops"[..]), (200, b"[]"), (200, b"{}"), (422, b"")] {
        assert!(
            matches!(
                read(RefundCall::Create, status, junk),
                RefundOutcome::Retry { .. }
            ),
            "{status}"
        );
    }
}

proptest! {
    #[test]
    fn read_never_panics_on_any_answer((status, body, lookup) in any_answer()) {
        read_any(refunds(), &ask(), status, &body, lookup);
    }

    #[test]
    fn read_never_panics_on_refund_shaped_answers(
        id in prop_oneof![Just(json!(INTENT)), Just(json!(null)), Just(json!(12)), Just(json!("x"))],
        state in prop_oneof![Just("SUCCESS"), Just("PENDING"), Just("FAILED"), Just("x")],
        amount in prop_oneof![Just(json!(1.5)), Just(json!("2.25")), Just(json!(-1)), Just(json!(1e300)), Just(json!(null))],
        status in prop_oneof![Just(200u16), Just(400), Just(404), Just(409)],
        lookup in any::<bool>(),
    ) {
        let entity = json!({"refund_id": id, "cf_refund_id": id, "cf_payment_id": id, "refund_status": state,
                            "refund_amount": amount, "refund_currency": "INR", "code": id, "message": state});
        read_any(refunds(), &ask(), status, entity.to_string().as_bytes(), lookup);
    }
}

#[test]
fn a_second_attempt_has_its_own_refund_id_and_key() {
    let second = RefundAsk {
        attempt: 2,
        ..ask()
    };
    let request = refunds().create(&second, &creds()).expect("a request");
    let sent: serde_json::Value =
        serde_json::from_slice(&request.body.as_ref().expect("a body").bytes).expect("json");
    assert_eq!(sent["refund_id"], "ri_2b7e151628aed2a6abf7-2");
    let key = request
        .headers
        .iter()
        .find(|h| h.name == "x-idempotency-key");
    assert_eq!(
        key.map(|h| h.value.as_str()),
        Some("ri_2b7e151628aed2a6abf7-2")
    );
    let lookup = refunds().lookup(&second, &creds()).expect("a lookup");
    assert!(
        lookup.path.ends_with("/refunds/ri_2b7e151628aed2a6abf7-2"),
        "{}",
        lookup.path
    );
}
