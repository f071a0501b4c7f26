use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::parse;
use crate::refund::test_support::{self, any_answer, read_any, read_page_and_first};
use crate::sample::{self, SampleSpec};

const PAYMENT: &str = "pay_1";
const INTENT: &str = "ri_0f1e2d3c4b5a6978";

fn ask() -> RefundAsk {
    test_support::ask(INTENT, PAYMENT, 50_000, "INR")
}

fn refunds() -> &'static dyn GatewayRefunds {
    Gateway::Toy.refunds().expect("the toy refunds")
}

fn creds() -> ApiCredentials {
    test_support::api_credentials(Gateway::Toy, &[("api_key", "toy_k")], "s")
}

/// The refund the toy made for the attempt `key`, in `status`.
fn made(id: &str, key: &str, status: &str) -> serde_json::Value {
    json!({"id": id, "payment": PAYMENT, "amount": 50_000, "currency": "INR",
           "key": key, "status": status})
}

fn list(refunds: &[serde_json::Value]) -> Vec<u8> {
    json!({ "refunds": refunds }).to_string().into_bytes()
}

#[test]
fn the_request_carries_the_attempts_key_twice_and_the_lookup_lists_the_payments_refunds() {
    let request = refunds().create(&ask(), &creds()).expect("a request");
    assert_eq!(
        (request.method, request.path.as_str()),
        (Method::Post, "/v1/refunds")
    );
    let body = request.body.as_ref().expect("a body");
    assert_eq!(body.content_type, "application/json");
    let sent: serde_json::Value = serde_json::from_slice(&body.bytes).expect("json");
    assert_eq!(
        sent,
        json!({"payment": PAYMENT, "amount": 50_000, "currency": "INR", "key": INTENT})
    );
    let header = |name: &str| request.headers.iter().find(|h| h.name == name);
    assert_eq!(header(KEY_HEADER).map(|h| h.value.as_str()), Some(INTENT));
    assert!(header("toy-api-key").is_some_and(|h| h.sensitive && h.value == "toy_k"));
    assert!(!format!("{request:?}").contains("toy_k"));
    assert_eq!(
        refunds().create(&ask(), &creds()),
        Ok(request),
        "every try the same"
    );

    let lookup = refunds()
        .lookup(
            &RefundAsk {
                payment_id: "pay 1".into(),
                ..ask()
            },
            &creds(),
        )
        .expect("a request");
    assert_eq!(
        (lookup.method, lookup.path.as_str()),
        (Method::Get, "/v1/payments/pay%201/refunds")
    );
    assert!(lookup.body.is_none());

    let second = RefundAsk {
        attempt: 2,
        ..ask()
    };
    let request = refunds().create(&second, &creds()).expect("a request");
    let key = request.headers.iter().find(|h| h.name == KEY_HEADER);
    assert_eq!(key.map(|h| h.value.as_str()), Some("ri_0f1e2d3c4b5a6978-2"));
}

#[test]
fn an_ask_it_cannot_send_is_refused_before_anything_is_sent() {
    for bad in [
        RefundAsk {
            amount_minor: 0,
            ..ask()
        },
        RefundAsk {
            payment_id: String::new(),
            ..ask()
        },
    ] {
        assert!(matches!(
            refunds().create(&bad, &creds()),
            Err(RequestError::Invalid(_))
        ));
        assert!(matches!(
            refunds().lookup(&bad, &creds()),
            Err(RequestError::Invalid(_))
        ));
    }
    assert_eq!(
        refunds().create(&ask(), &ApiCredentials::default()),
        Err(RequestError::MissingCredential("api_key"))
    );
}

#[test]
fn a_done_refund_is_accepted_with_the_fact_its_webhook_carries() {
    let spec = SampleSpec {
        order_ref: "order_1".into(),
        payment_id: PAYMENT.into(),
        event_id: "evt_9".into(),
        amount_minor: 50_000,
        currency: "INR".into(),
        email: "a@example.com".into(),
        timestamp: 1_717_740_003,
        merchant_key: None,
    };
    let d = sample::build(Gateway::Toy, "refunded", &spec, "s").expect("a sample");
    let hook = parse(Gateway::Toy, &d.headers, &d.body).expect("parsed");
    let id = spec.refund_id(Gateway::Toy);
    let answer = made(&id, INTENT, "done").to_string();
    let RefundOutcome::Accepted { refund_id, facts } =
        refunds().read(&ask(), RefundCall::Create, 200, answer.as_bytes())
    else {
        panic!("accepted");
    };
    assert_eq!(refund_id, id);
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].fact(), hook.fact(), "one fact, whoever brings it");
    assert_eq!(facts[0].event_id, format!("reconciliation:{id}:refunded"));

    let pending = made("toyrf_2", INTENT, "pending").to_string();
    assert_eq!(
        refunds().read(&ask(), RefundCall::Create, 201, pending.as_bytes()),
        RefundOutcome::Accepted {
            refund_id: "toyrf_2".into(),
            facts: vec![]
        }
    );
    let failed = made("toyrf_3", INTENT, "failed").to_string();
    assert!(matches!(
        refunds().read(&ask(), RefundCall::Create, 200, failed.as_bytes()),
        RefundOutcome::Failed { refund_id, code, .. } if refund_id == "toyrf_3" && code == "refund_failed"
    ));
}

#[test]
fn the_lookup_finds_the_attempts_refund_by_its_key_and_nothing_else() {
    let read = |a: &RefundAsk, refunds_listed: &[serde_json::Value]| {
        refunds().read(a, RefundCall::Lookup, 200, &list(refunds_listed))
    };
    assert_eq!(read(&ask(), &[]), RefundOutcome::NotFound);
    let other = made("toyrf_other", "someone else", "done");
    assert_eq!(
        read(&ask(), std::slice::from_ref(&other)),
        RefundOutcome::NotFound
    );
    let RefundOutcome::Accepted { refund_id, facts } =
        read(&ask(), &[other, made("toyrf_mine", INTENT, "done")])
    else {
        panic!("found");
    };
    assert_eq!((refund_id.as_str(), facts.len()), ("toyrf_mine", 1));
    // Made twice before oncehook looked: both are facts, the first is the attempt's.
    let twice = [
        made("toyrf_a", INTENT, "failed"),
        made("toyrf_b", INTENT, "done"),
        made("toyrf_c", INTENT, "done"),
    ];
    assert!(matches!(
        read(&ask(), &twice),
        RefundOutcome::Accepted { refund_id, facts } if refund_id == "toyrf_b" && facts.len() == 2
    ));
    // The first attempt's refund, failed, is not the second's.
    let first = [made("toyrf_1", INTENT, "failed")];
    assert!(matches!(read(&ask(), &first), RefundOutcome::Failed { .. }));
    let second = RefundAsk {
        attempt: 2,
        ..ask()
    };
    assert_eq!(read(&second, &first), RefundOutcome::NotFound);
}

#[test]
fn the_toys_refusals_are_refused_in_its_words_and_the_rest_is_tried_again() {
    let read = |status, body: &[u8]| refunds().read(&ask(), RefundCall::Create, status, body);
    let refused = json!({"error": {"code": "insufficient_balance", "message": "no money"}});
    assert_eq!(
        read(400, refused.to_string().as_bytes()),
        RefundOutcome::Refused {
            code: "insufficient_balance".into(),
            message: "no money".into()
        }
    );
    let elsewhere = json!({"id": "toyrf_x", "payment": "pay_2", "amount": 1, "key": INTENT,
                           "status": "done"});
    assert!(matches!(
        read(200, elsewhere.to_string().as_bytes()),
        RefundOutcome::Refused { code, .. } if code == "payment_mismatch"
    ));
    for status in [401, 404, 409, 429, 500, 502, 503] {
        assert!(
            matches!(
                read(status, refused.to_string().as_bytes()),
                RefundOutcome::Retry { .. }
            ),
            "{status}"
        );
    }
    let no_status = json!({"id": "toyrf_x", "payment": PAYMENT}).to_string();
    for (status, junk) in [
        (400, &b"<html>"[..]),
        (400, b"{}"),
        (200, b"{}"),
        (200, b"[]"),
        (200, no_status.as_bytes()),
    ] {
        assert!(
            matches!(read(status, junk), RefundOutcome::Retry { .. }),
            "{status} {junk:?}"
        );
    }
    for junk in [&b"{}"[..], br#"{"refunds": {}}"#, b"nope"] {
        assert!(matches!(
            refunds().read(&ask(), RefundCall::Lookup, 200, junk),
            RefundOutcome::Retry { .. }
        ));
    }
}

proptest! {
    #[test]
    fn read_never_panics_on_any_answer((status, body, lookup) in any_answer()) {
        read_any(refunds(), &ask(), status, &body, lookup);
    }

    #[test]
    fn read_never_panics_on_refund_shaped_answers(
        items in proptest::collection::vec(
            (any::<Option<String>>(),
             prop_oneof![Just("done"), Just("pending"), Just("failed"), Just("x")],
             prop_oneof![Just(json!(50_000)), Just(json!(-1)), Just(json!(1.5)), Just(json!(null))],
             prop_oneof![Just(json!(INTENT)), Just(json!(null)), Just(json!([]))]), 0..6),
        status in prop_oneof![Just(200u16), Just(400)],
    ) {
        let items: Vec<serde_json::Value> = items
            .into_iter()
            .map(|(id, state, amount, key)| json!({"id": id, "payment": PAYMENT, "status": state,
                "amount": amount, "currency": "INR", "key": key}))
            .collect();
        read_page_and_first(refunds(), &ask(), status, &list(&items), &items);
    }
}
