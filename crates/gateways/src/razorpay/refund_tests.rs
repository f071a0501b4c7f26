use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::Gateway;
use crate::documented::{body, razorpay};
use crate::refund::test_support::{self, any_answer, read_any, read_page_and_first};

/// The documented refund's payment.
const PAYMENT: &str = "pay_29QQoUBi66xm2f";
const INTENT: &str = "ri_5c1d0e7a93b24f68a1c2";

fn ask() -> RefundAsk {
    test_support::ask(INTENT, PAYMENT, 500_100, "INR")
}

fn refunds() -> &'static dyn GatewayRefunds {
    Gateway::Razorpay.refunds().expect("Razorpay refunds")
}

fn creds() -> ApiCredentials {
    let fields = [("key_id", "rzp_test_k"), ("key_secret", "s3cret")];
    test_support::api_credentials(Gateway::Razorpay, &fields, "whsec")
}

/// The documented refund made, as the intent's (its receipt), with
/// `fields` changed.
fn entity(fields: &[(&str, serde_json::Value)]) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_str(body(razorpay::REFUND_CREATE)).expect("json");
    v["receipt"] = json!(INTENT);
    for (k, value) in fields {
        v[*k] = value.clone();
    }
    v
}

fn list(items: &[serde_json::Value]) -> Vec<u8> {
    json!({"entity": "collection", "count": items.len(), "items": items})
        .to_string()
        .into_bytes()
}

#[test]
fn the_request_names_the_intent_three_ways_and_the_lookup_lists_the_payments_refunds() {
    let request = refunds().create(&ask(), &creds()).expect("a request");
    assert_eq!(request.method, Method::Post);
    assert_eq!(request.path, "/v1/payments/pay_29QQoUBi66xm2f/refund");
    let body = request.body.as_ref().expect("a body");
    assert_eq!(body.content_type, "application/json");
    let sent: serde_json::Value = serde_json::from_slice(&body.bytes).expect("json");
    assert_eq!(
        sent,
        json!({"amount": 500_100, "receipt": INTENT,
               "notes": {"oncehook_intent": INTENT, "reason": "duplicate_capture"}})
    );
    let header = |name: &str| request.headers.iter().find(|h| h.name == name);
    assert_eq!(
        header("x-refund-idempotency").map(|h| h.value.as_str()),
        Some(INTENT)
    );
    assert!(header("authorization").is_some_and(|h| h.sensitive && h.value.starts_with("Basic ")));
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
            "/v1/payments/pay_29QQoUBi66xm2f/refunds?count=100"
        )
    );
    assert!(lookup.body.is_none());
}

#[test]
fn an_intent_id_razorpay_would_refuse_as_a_key_becomes_a_stable_one() {
    assert_eq!(idempotency_key("ri_0123456789"), "ri_0123456789");
    for odd in ["ri_1", "ri:weird/id 1234567"] {
        let key = idempotency_key(odd);
        assert_eq!(key, idempotency_key(odd), "the same every time");
        assert!(
            key.len() >= 10 && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{key}"
        );
        assert_ne!(key, idempotency_key("ri_2"));
    }
    let bad = RefundAsk {
        amount_minor: -5,
        ..ask()
    };
    assert!(matches!(
        refunds().create(&bad, &creds()),
        Err(RequestError::Invalid(_))
    ));
    assert!(matches!(
        refunds().lookup(
            &RefundAsk {
                payment_id: String::new(),
                ..ask()
            },
            &creds()
        ),
        Err(RequestError::Invalid(_))
    ));
    assert_eq!(
        refunds().create(&ask(), &ApiCredentials::default()),
        Err(RequestError::MissingCredential("key_id"))
    );
}

#[test]
fn the_documented_refund_made_is_accepted_with_the_fact_reconciliation_reads() {
    let answer = body(razorpay::REFUND_CREATE).as_bytes();
    let RefundOutcome::Accepted { refund_id, facts } =
        refunds().read(&ask(), RefundCall::Create, 200, answer)
    else {
        panic!("accepted");
    };
    assert_eq!(refund_id, "rfnd_FP8QHiV938haTz");
    let made: serde_json::Value = serde_json::from_slice(answer).expect("json");
    let reconciled = super::super::api::payment_refunds(&list(&[made])).expect("read");
    assert_eq!(facts, reconciled, "one fact, whoever finds it");
    assert_eq!(
        facts[0].event_id,
        "reconciliation:rfnd_FP8QHiV938haTz:processed"
    );
    assert_eq!(
        (facts[0].amount_minor, facts[0].payment_id.as_deref()),
        (Some(500_100), Some(PAYMENT))
    );

    let pending = entity(&[("status", json!("pending"))]).to_string();
    assert_eq!(
        refunds().read(&ask(), RefundCall::Create, 200, pending.as_bytes()),
        RefundOutcome::Accepted {
            refund_id: "rfnd_FP8QHiV938haTz".into(),
            facts: vec![]
        }
    );
    let failed = entity(&[("status", json!("failed"))]).to_string();
    assert!(matches!(
        refunds().read(&ask(), RefundCall::Create, 200, failed.as_bytes()),
        RefundOutcome::Failed { code, .. } if code == "refund_failed"
    ));
}

#[test]
fn the_lookup_finds_the_intents_refund_by_receipt_or_note_and_nothing_else() {
    let read =
        |items: &[serde_json::Value]| refunds().read(&ask(), RefundCall::Lookup, 200, &list(items));
    // The documented list: two refunds, neither the intent's.
    let documented = body(razorpay::PAYMENT_REFUNDS).as_bytes();
    assert_eq!(
        refunds().read(&ask(), RefundCall::Lookup, 200, documented),
        RefundOutcome::NotFound
    );
    assert_eq!(read(&[]), RefundOutcome::NotFound);
    let other = entity(&[
        ("id", json!("rfnd_other")),
        ("receipt", json!("someone else")),
    ]);
    let mine = entity(&[("id", json!("rfnd_mine"))]);
    let RefundOutcome::Accepted { refund_id, facts } = read(&[other.clone(), mine]) else {
        panic!("found");
    };
    assert_eq!((refund_id.as_str(), facts.len()), ("rfnd_mine", 1));
    let by_note = entity(&[
        ("id", json!("rfnd_note")),
        ("receipt", json!(null)),
        ("status", json!("pending")),
        ("notes", json!({"oncehook_intent": INTENT})),
    ]);
    assert_eq!(
        read(&[by_note]),
        RefundOutcome::Accepted {
            refund_id: "rfnd_note".into(),
            facts: vec![]
        }
    );
    // Made twice before oncehook looked: both are facts, the intent's refund is the first.
    let twice = [
        entity(&[("id", json!("rfnd_a"))]),
        entity(&[("id", json!("rfnd_b"))]),
    ];
    assert!(
        matches!(read(&twice), RefundOutcome::Accepted { refund_id, facts } if refund_id == "rfnd_a" && facts.len() == 2)
    );
    let failed = entity(&[("status", json!("failed"))]);
    assert!(
        matches!(read(&[failed]), RefundOutcome::Failed { code, .. } if code == "refund_failed")
    );
    let full_page = vec![other.clone(); LOOKUP_COUNT];
    assert_eq!(
        read(&full_page),
        RefundOutcome::FullPage {
            listed: LOOKUP_COUNT,
            last: Some("rfnd_other".into())
        },
        "a full page without the intent's refund asks for the next page"
    );
    let short_page = vec![other; LOOKUP_COUNT - 1];
    assert_eq!(read(&short_page), RefundOutcome::NotFound);
}

#[test]
fn a_refund_the_lookup_names_as_another_payments_proves_no_fact() {
    let read =
        |items: &[serde_json::Value]| refunds().read(&ask(), RefundCall::Lookup, 200, &list(items));
    let elsewhere = entity(&[
        ("id", json!("rfnd_elsewhere")),
        ("payment_id", json!("pay_other")),
    ]);
    let mine = entity(&[("id", json!("rfnd_mine"))]);
    let RefundOutcome::Accepted { refund_id, facts } = read(&[elsewhere.clone(), mine]) else {
        panic!("found");
    };
    assert_eq!(refund_id, "rfnd_mine");
    let proved: Vec<_> = facts.iter().map(|f| f.refund_id.as_deref()).collect();
    assert_eq!(proved, [Some("rfnd_mine")]);
    assert!(
        matches!(read(&[elsewhere]), RefundOutcome::Refused { code, .. } if code == "payment_mismatch")
    );
}

#[test]
fn the_lookup_pages_with_skip() {
    let page = |skip| {
        refunds()
            .lookup_page(&ask(), &creds(), &LookupPage { skip, after: None })
            .expect("a lookup")
            .expect("a request")
            .path
    };
    assert_eq!(page(0), "/v1/payments/pay_29QQoUBi66xm2f/refunds?count=100");
    assert_eq!(
        page(100),
        "/v1/payments/pay_29QQoUBi66xm2f/refunds?count=100&skip=100"
    );
    assert_eq!(
        page(0),
        refunds().lookup(&ask(), &creds()).expect("a request").path
    );
}

#[test]
fn razorpays_refusals_are_refused_in_its_words_and_the_rest_is_tried_again() {
    let read = |status, body: &[u8]| refunds().read(&ask(), RefundCall::Create, status, body);
    assert_eq!(
        read(400, body(razorpay::REFUND_CREATE_FAILURE).as_bytes()),
        RefundOutcome::Refused {
            code: "BAD_REQUEST_ERROR".into(),
            message: "The amount must be at least INR 1.00".into()
        }
    );
    let too_old = read(400, body(razorpay::REFUND_NOT_SUPPORTED).as_bytes());
    assert!(
        matches!(too_old, RefundOutcome::Refused { message, .. } if message.contains("more than 6 months old"))
    );
    let unknown = refunds().read(
        &ask(),
        RefundCall::Lookup,
        400,
        body(razorpay::ID_DOES_NOT_EXIST).as_bytes(),
    );
    assert!(
        matches!(unknown, RefundOutcome::Refused { message, .. } if message == "The id provided does not exist")
    );
    let auth =
        json!({"error": {"code": "BAD_REQUEST_ERROR", "description": "Authentication failed"}})
            .to_string();
    for status in [401, 403, 409, 429, 500, 502, 504] {
        assert!(
            matches!(read(status, auth.as_bytes()), RefundOutcome::Retry { .. }),
            "{status}"
        );
    }
    for (status, junk) in [
        (400, &b"<html>"[..]),
        (404, b"{}"),
        (200, b"{}"),
        (200, b"[]"),
    ] {
        assert!(
            matches!(read(status, junk), RefundOutcome::Retry { .. }),
            "{status}"
        );
    }
    assert!(matches!(
        refunds().read(&ask(), RefundCall::Lookup, 200, b"{}"),
        RefundOutcome::Retry { .. }
    ));
}

proptest! {
    #[test]
    fn read_never_panics_on_any_answer((status, body, lookup) in any_answer()) {
        read_any(refunds(), &ask(), status, &body, lookup);
    }

    #[test]
    fn read_never_panics_on_refund_shaped_answers(
        items in proptest::collection::vec(
            (any::<Option<String>>(), prop_oneof![Just("processed"), Just("pending"), Just("failed"), Just("x")],
             any::<i64>(), prop_oneof![Just(json!(INTENT)), Just(json!(null)), Just(json!([]))]), 0..6),
        status in prop_oneof![Just(200u16), Just(400)],
    ) {
        let items: Vec<serde_json::Value> = items
            .into_iter()
            .map(|(id, state, amount, receipt)| json!({"id": id, "entity": "refund", "status": state,
                "amount": amount, "payment_id": PAYMENT, "receipt": receipt, "notes": receipt}))
            .collect();
        read_page_and_first(refunds(), &ask(), status, &list(&items), &items);
    }
}

#[test]
fn a_second_attempt_sends_its_own_key_and_receipt_and_finds_only_its_refund() {
    let second = RefundAsk {
        attempt: 2,
        ..ask()
    };
    let request = refunds().create(&second, &creds()).expect("a request");
    let key = request
        .headers
        .iter()
        .find(|h| h.name == "x-refund-idempotency");
    assert_eq!(
        key.map(|h| h.value.as_str()),
        Some("ri_5c1d0e7a93b24f68a1c2-2")
    );
    let sent: serde_json::Value =
        serde_json::from_slice(&request.body.expect("a body").bytes).expect("json");
    assert_eq!(sent["receipt"], "ri_5c1d0e7a93b24f68a1c2-2");
    assert_eq!(sent["notes"]["oncehook_attempt"], "2");
    assert_eq!(sent["notes"]["oncehook_intent"], INTENT);
    // The first attempt's refund, failed, is not the second's.
    let first = json!({"id": "rfnd_1", "entity": "refund", "payment_id": PAYMENT,
        "receipt": INTENT, "notes": {"oncehook_intent": INTENT}, "status": "failed"});
    let page = json!({"entity": "collection", "count": 1, "items": [first]}).to_string();
    let read = |a: &RefundAsk| refunds().read(a, RefundCall::Lookup, 200, page.as_bytes());
    assert_eq!(read(&second), RefundOutcome::NotFound);
    assert!(matches!(read(&ask()), RefundOutcome::Failed { .. }));
}
