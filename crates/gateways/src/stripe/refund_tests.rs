use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::Gateway;
use crate::documented::{body, stripe};
use crate::reconcile::Method;
use crate::refund::test_support::{self, any_answer, read_any};

/// The documented refund's intent.
const INTENT: &str = "pi_1GszsK2eZvKYlo2CfhZyoZLp";

fn ask() -> RefundAsk {
    test_support::ask("ri_7f3a9c2e41d8b6a05e1f", INTENT, 1_000, "USD")
}

fn refunds() -> &'static dyn GatewayRefunds {
    Gateway::Stripe.refunds().expect("Stripe refunds")
}

fn creds() -> ApiCredentials {
    test_support::api_credentials(Gateway::Stripe, &[("api_key", "sk_test_1")], "whsec_x")
}

/// The documented Refund object with `fields` changed.
fn refund_object(fields: &[(&str, serde_json::Value)]) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_str(body(stripe::REFUND)).expect("json");
    for (k, value) in fields {
        v[*k] = value.clone();
    }
    v.to_string().into_bytes()
}

#[test]
fn the_request_is_one_form_under_the_intents_key_the_same_every_time() {
    let request = refunds().create(&ask(), &creds()).expect("a request");
    assert_eq!(request.method, Method::Post);
    assert_eq!(request.path, "/v1/refunds");
    let body = request.body.as_ref().expect("a body");
    assert_eq!(body.content_type, "application/x-www-form-urlencoded");
    assert_eq!(
        String::from_utf8_lossy(&body.bytes),
        "payment_intent=pi_1GszsK2eZvKYlo2CfhZyoZLp&amount=1000\
         &metadata%5Boncehook_intent%5D=ri_7f3a9c2e41d8b6a05e1f\
         &metadata%5Boncehook_reason%5D=duplicate_capture"
    );
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name == name)
            .map(|h| (h.value.as_str(), h.sensitive))
    };
    assert_eq!(
        header("idempotency-key"),
        Some(("ri_7f3a9c2e41d8b6a05e1f", false))
    );
    assert_eq!(header("authorization"), Some(("Bearer sk_test_1", true)));
    assert!(!format!("{request:?}").contains("sk_test_1"));
    assert_eq!(
        refunds().create(&ask(), &creds()),
        Ok(request),
        "every attempt the same"
    );
    let lookup = refunds().lookup(&ask(), &creds()).expect("a lookup");
    assert_eq!(
        (lookup.method, lookup.path.as_str()),
        (
            Method::Get,
            "/v1/refunds?payment_intent=pi_1GszsK2eZvKYlo2CfhZyoZLp&limit=100"
        ),
        "the key is not the guarantee: a lookup"
    );
    let next = refunds()
        .lookup_page(
            &ask(),
            &creds(),
            &LookupPage {
                skip: 100,
                after: Some("re_9".into()),
            },
        )
        .expect("a next page")
        .expect("a request");
    assert!(
        next.path.ends_with("&limit=100&starting_after=re_9"),
        "{}",
        next.path
    );
}

#[test]
fn a_second_attempt_has_its_own_key_and_names_its_attempt() {
    let second = RefundAsk {
        attempt: 2,
        ..ask()
    };
    let request = refunds().create(&second, &creds()).expect("a request");
    let key = request.headers.iter().find(|h| h.name == "idempotency-key");
    assert_eq!(
        key.map(|h| h.value.as_str()),
        Some("ri_7f3a9c2e41d8b6a05e1f-2")
    );
    let body = String::from_utf8_lossy(&request.body.as_ref().expect("a body").bytes).into_owned();
    assert!(
        body.contains(
            "metadata%5Boncehook_intent%5D=ri_7f3a9c2e41d8b6a05e1f&metadata%5Boncehook_attempt%5D=2"
        ),
        "{body}"
    );
}

/// A list answer holding `refunds` (Refund objects with `fields` changed).
fn list(refunds: &[&[(&str, serde_json::Value)]], has_more: bool) -> Vec<u8> {
    let data: Vec<serde_json::Value> = refunds
        .iter()
        .map(|f| serde_json::from_slice(&refund_object(f)).expect("json"))
        .collect();
    json!({"object": "list", "url": "/v1/refunds", "has_more": has_more, "data": data})
        .to_string()
        .into_bytes()
}

#[test]
fn the_lookup_finds_the_attempts_refund_by_its_metadata() {
    let read = |ask: &RefundAsk, body: Vec<u8>| refunds().read(ask, RefundCall::Lookup, 200, &body);
    let ours = json!({"oncehook_intent": "ri_7f3a9c2e41d8b6a05e1f"});
    let second = json!({"oncehook_intent": "ri_7f3a9c2e41d8b6a05e1f", "oncehook_attempt": "2"});
    let found = read(&ask(), list(&[&[("metadata", ours.clone())]], false));
    assert!(
        matches!(&found, RefundOutcome::Accepted { refund_id, facts } if refund_id == "re_1Nispe2eZvKYlo2Cd31jOCgZ" && facts.len() == 1),
        "{found:?}"
    );
    // Another refund of the payment, or another attempt's, is not ours.
    let theirs = list(
        &[&[("metadata", json!({}))], &[("metadata", second.clone())]],
        false,
    );
    assert_eq!(read(&ask(), theirs.clone()), RefundOutcome::NotFound);
    let attempt_2 = RefundAsk {
        attempt: 2,
        ..ask()
    };
    assert!(matches!(
        read(&attempt_2, theirs),
        RefundOutcome::Accepted { .. }
    ));
    // The attempt's refund failed at Stripe: as final as a refusal.
    let failed = list(
        &[&[("metadata", ours.clone()), ("status", json!("failed"))]],
        false,
    );
    assert!(
        matches!(read(&ask(), failed), RefundOutcome::Failed { code, .. } if code == "refund_failed")
    );
    // More pages and none of the attempt's on this one: the next page, after its last.
    assert_eq!(
        read(
            &ask(),
            list(&[&[("id", json!("re_a"))], &[("id", json!("re_b"))]], true)
        ),
        RefundOutcome::FullPage {
            listed: 2,
            last: Some("re_b".into())
        }
    );
    for not_a_list in [&b"{}"[..], b"[]", b"{\"object\": \"list\"}", b"nope"] {
        assert!(
            matches!(
                refunds().read(&ask(), RefundCall::Lookup, 200, not_a_list),
                RefundOutcome::Retry { .. }
            ),
            "{}",
            String::from_utf8_lossy(not_a_list)
        );
    }
}

#[test]
fn what_cannot_be_sent_is_refused_before_sending() {
    let cases = [
        RefundAsk {
            payment_id: "ch_3Q1".into(),
            ..ask()
        },
        RefundAsk {
            intent_id: String::new(),
            ..ask()
        },
        RefundAsk {
            intent_id: "k".repeat(256),
            ..ask()
        },
        RefundAsk {
            amount_minor: 0,
            ..ask()
        },
    ];
    for bad in cases {
        let err = refunds().create(&bad, &creds()).expect_err("refused");
        assert!(matches!(err, RequestError::Invalid(_)), "{err}");
    }
    let none = ApiCredentials::default();
    assert_eq!(
        refunds().create(&ask(), &none),
        Err(RequestError::MissingCredential("api_key"))
    );
}

#[test]
fn the_documented_refund_made_is_accepted_with_the_fact_reconciliation_reads() {
    let answer = body(stripe::REFUND).as_bytes();
    let outcome = refunds().read(&ask(), RefundCall::Create, 200, answer);
    let RefundOutcome::Accepted { refund_id, facts } = outcome else {
        panic!("accepted: {outcome:?}");
    };
    assert_eq!(refund_id, "re_1Nispe2eZvKYlo2Cd31jOCgZ");
    let object: serde_json::Value = serde_json::from_slice(answer).expect("json");
    let list = json!({"object": "list", "has_more": false, "data": [object]});
    let reconciled = super::super::api::refunds(list.to_string().as_bytes()).expect("read");
    assert_eq!(facts, reconciled.events, "one fact, whoever finds it");
    assert_eq!(
        facts[0].event_id,
        "reconciliation:re_1Nispe2eZvKYlo2Cd31jOCgZ:processed"
    );
    assert_eq!(facts[0].payment_id.as_deref(), Some(INTENT));
    assert_eq!(
        (facts[0].amount_minor, facts[0].cumulative_refund),
        (Some(1_000), false)
    );
}

#[test]
fn a_pending_refund_is_accepted_without_a_fact_and_a_failed_one_is_failed() {
    let read = |fields: &[(&str, serde_json::Value)]| {
        refunds().read(&ask(), RefundCall::Create, 200, &refund_object(fields))
    };
    assert_eq!(
        read(&[("status", json!("pending"))]),
        RefundOutcome::Accepted {
            refund_id: "re_1Nispe2eZvKYlo2Cd31jOCgZ".into(),
            facts: vec![]
        }
    );
    let failed = read(&[
        ("status", json!("failed")),
        ("failure_reason", json!("expired_or_canceled_card")),
    ]);
    assert_eq!(
        failed,
        RefundOutcome::Failed {
            refund_id: "re_1Nispe2eZvKYlo2Cd31jOCgZ".into(),
            code: "refund_failed".into(),
            message: "expired_or_canceled_card".into()
        }
    );
    assert!(matches!(
        read(&[("payment_intent", json!("pi_other"))]),
        RefundOutcome::Refused { code, .. } if code == "payment_mismatch"
    ));
}

/// Stripe's error object (https://docs.stripe.com/api/errors: `type`,
/// `code`, `message`, `param`); Stripe publishes no sample body.
fn stripe_error(kind: &str, code: Option<&str>, message: &str) -> Vec<u8> {
    json!({"error": {"type": kind, "code": code, "message": message, "param": "amount"}})
        .to_string()
        .into_bytes()
}

#[test]
fn stripes_refusals_are_refused_in_its_words_and_the_rest_is_tried_again() {
    let read = |status, body: &[u8]| refunds().read(&ask(), RefundCall::Create, status, body);
    let already = stripe_error(
        "invalid_request_error",
        Some("charge_already_refunded"),
        "Charge ch_1 has already been refunded.",
    );
    assert_eq!(
        read(400, &already),
        RefundOutcome::Refused {
            code: "charge_already_refunded".into(),
            message: "Charge ch_1 has already been refunded.".into()
        }
    );
    let too_large = stripe_error(
        "invalid_request_error",
        Some("amount_too_large"),
        "too large",
    );
    assert!(
        matches!(read(400, &too_large), RefundOutcome::Refused { code, .. } if code == "amount_too_large")
    );
    let other_params = stripe_error(
        "idempotency_error",
        None,
        "Keys for idempotent requests can only be used with the same parameters they were first used with.",
    );
    assert!(
        matches!(read(400, &other_params), RefundOutcome::Refused { code, .. } if code == "idempotency_error")
    );
    let lock = stripe_error("invalid_request_error", Some("lock_timeout"), "busy");
    assert!(matches!(read(400, &lock), RefundOutcome::Retry { .. }));
    let missing = stripe_error(
        "invalid_request_error",
        Some("resource_missing"),
        "No such payment_intent",
    );
    assert!(matches!(read(404, &missing), RefundOutcome::Refused { .. }));
    for status in [401, 403, 409, 424, 429, 500, 502, 503] {
        assert!(
            matches!(
                read(status, &stripe_error("api_error", None, "x")),
                RefundOutcome::Retry { .. }
            ),
            "{status}"
        );
    }
    for (status, junk) in [
        (400, &b"<html>bad gateway</html>"[..]),
        (404, b"{}"),
        (200, b"{}"),
        (200, b""),
    ] {
        assert!(
            matches!(read(status, junk), RefundOutcome::Retry { .. }),
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
        id in any::<Option<String>>(),
        state in prop_oneof![Just("succeeded"), Just("pending"), Just("failed"), Just("x")],
        amount in any::<i64>(),
        intent in prop_oneof![Just(json!(INTENT)), Just(json!(null)), Just(json!(7))],
        status in prop_oneof![Just(200u16), Just(400), Just(409)],
    ) {
        let object = json!({"id": id, "object": "refund", "status": state, "amount": amount,
                            "currency": "usd", "payment_intent": intent,
                            "error": {"type": state, "code": id}});
        read_any(refunds(), &ask(), status, object.to_string().as_bytes(), false);
    }
}
