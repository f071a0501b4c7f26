use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::Credentials;
use crate::documented::{body, payu};
use crate::reconcile::{Method, credentials, table};
use crate::refund::test_support::{self, any_answer, read_any};

/// The documented lookup's transaction and refund token.
const MIHPAYID: &str = "403993715521937565";
const TOKEN: &str = "RefundToken1";

fn ask() -> RefundAsk {
    test_support::ask(TOKEN, MIHPAYID, 1_000, "INR")
}

fn refunds() -> &'static dyn GatewayRefunds {
    Gateway::Payu.refunds().expect("PayU refunds")
}

fn creds() -> ApiCredentials {
    let salts = vec!["salt_1".to_owned()];
    let source = Credentials::new(&salts).with_merchant_key(Some("mkey"));
    credentials(Gateway::Payu, &table(&[]), source).expect("credentials")
}

fn form(request: &ApiRequest) -> Vec<(String, String)> {
    let body = request.body.as_ref().expect("a form");
    assert_eq!(body.content_type, "application/x-www-form-urlencoded");
    url::form_urlencoded::parse(&body.bytes)
        .into_owned()
        .collect()
}

fn sha512(s: &str) -> String {
    hex::encode(Sha512::digest(s.as_bytes()))
}

#[test]
fn the_refund_is_signed_as_payu_signs_its_commands_under_the_intents_token() {
    let request = refunds().create(&ask(), &creds()).expect("a request");
    assert_eq!(
        (request.method, request.path.as_str()),
        (Method::Post, "/merchant/postservice.php?form=2")
    );
    let hash = sha512("mkey|cancel_refund_transaction|403993715521937565|salt_1");
    let expected: Vec<(String, String)> = [
        ("key", "mkey"),
        ("command", "cancel_refund_transaction"),
        ("var1", MIHPAYID),
        ("var2", TOKEN),
        ("var3", "10.00"),
        ("hash", hash.as_str()),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(form(&request), expected);
    assert_eq!(
        refunds().create(&ask(), &creds()),
        Ok(request),
        "every attempt the same"
    );

    let lookup = refunds().lookup(&ask(), &creds()).expect("a request");
    let sent = form(&lookup);
    assert_eq!(
        sent[1],
        ("command".to_owned(), "check_action_status".to_owned())
    );
    assert_eq!(sent[3], ("var2".to_owned(), "payuid".to_owned()));
    assert_eq!(
        sent[4].1,
        sha512("mkey|check_action_status|403993715521937565|salt_1")
    );
}

#[test]
fn tokens_fit_payus_23_characters_and_what_payu_cannot_take_is_refused() {
    assert_eq!(
        token("ri_0123456789abcdefghij"),
        "ri_0123456789abcdefghij",
        "23 fit"
    );
    for long in ["ri_0123456789abcdefghijk", "ri-with-dashes", ""] {
        let t = token(long);
        assert_eq!((t.len(), t.starts_with("ri")), (23, true), "{t}");
        assert!(t.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(t, token(long), "the same every time");
    }
    assert_ne!(
        token("ri_0123456789abcdefghijk"),
        token("ri_0123456789abcdefghijl")
    );
    for bad in [
        RefundAsk {
            payment_id: "txn_order_81".into(),
            ..ask()
        },
        RefundAsk {
            payment_id: String::new(),
            ..ask()
        },
        RefundAsk {
            currency: "USD".into(),
            ..ask()
        },
        RefundAsk {
            amount_minor: 0,
            ..ask()
        },
    ] {
        assert!(
            matches!(
                refunds().create(&bad, &creds()),
                Err(RequestError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        refunds().lookup(
            &RefundAsk {
                payment_id: "t1".into(),
                ..ask()
            },
            &creds()
        ),
        Err(RequestError::Invalid(_))
    ));
    assert_eq!(
        refunds().create(&ask(), &ApiCredentials::default()),
        Err(RequestError::MissingCredential("merchant_key"))
    );
}

#[test]
fn the_documented_answers_to_the_refund_read_as_queued_or_refused() {
    let read = |body: &[u8]| refunds().read(&ask(), RefundCall::Create, 200, body);
    assert_eq!(
        read(body(payu::REFUND_QUEUED).as_bytes()),
        RefundOutcome::Accepted {
            refund_id: "12486538355".into(),
            facts: vec![]
        }
    );
    assert_eq!(
        read(body(payu::REFUND_INVALID_AMOUNT).as_bytes()),
        RefundOutcome::Refused {
            code: "105".into(),
            message: "Refund FAILURE - Invalid amount".into()
        }
    );
    let held =
        json!({"status": 0, "msg": "Refund FAILURE - Token already exists.", "error_code": 106});
    assert!(
        matches!(read(held.to_string().as_bytes()), RefundOutcome::Retry { reason } if reason.contains("lookup"))
    );
    for transient in [
        json!({"status": 0, "msg": "Refund FAILURE - Transaction lock could not be obtained.", "error_code": "120"}),
        json!({"status": 0, "msg": "Invalid Hash."}),
        json!({"status": 1, "msg": "Refund Request Queued"}),
    ] {
        assert!(
            matches!(
                read(transient.to_string().as_bytes()),
                RefundOutcome::Retry { .. }
            ),
            "{transient}"
        );
    }
    let overdraft =
        json!({"status": 0, "msg": "Overdraft has occurred", "error_code": 225, "request_id": 991});
    assert_eq!(
        read(overdraft.to_string().as_bytes()),
        RefundOutcome::Accepted {
            refund_id: "991".into(),
            facts: vec![]
        }
    );
    let five_minutes = json!({"status": 0, "msg": "Refund FAILURE - Same amount same transaction within 5 minutes", "error_code": 214});
    assert!(
        matches!(read(five_minutes.to_string().as_bytes()), RefundOutcome::Refused { code, .. } if code == "214")
    );
    for (status, junk) in [
        (200, &b"<html>"[..]),
        (500, b"{\"status\": 1}"),
        (200, b"[1]"),
    ] {
        assert!(matches!(
            refunds().read(&ask(), RefundCall::Create, status, junk),
            RefundOutcome::Retry { .. }
        ));
    }
}

#[test]
fn the_documented_action_status_finds_the_refund_by_its_token() {
    let read = |ask: &RefundAsk, body: &[u8]| refunds().read(ask, RefundCall::Lookup, 200, body);
    let documented = body(payu::CHECK_ACTION_STATUS).as_bytes();
    let RefundOutcome::Accepted { refund_id, facts } = read(&ask(), documented) else {
        panic!("found");
    };
    assert_eq!(refund_id, "131278422");
    let fact = &facts[..];
    assert_eq!(fact.len(), 1);
    assert_eq!(fact[0].event_id, "reconciliation:131278422:processed");
    assert_eq!(
        (
            fact[0].kind,
            fact[0].amount_minor,
            fact[0].currency.as_deref()
        ),
        (EventKind::Refunded, Some(1_000), Some("INR"))
    );
    assert_eq!(
        (fact[0].payment_id.as_deref(), fact[0].refund_id.as_deref()),
        (Some(MIHPAYID), Some("131278422"))
    );
    let other = RefundAsk {
        intent_id: "ri_someone_else".into(),
        attempt: 1,
        ..ask()
    };
    assert_eq!(
        read(&other, documented),
        RefundOutcome::NotFound,
        "the capture has an empty token"
    );
    assert_eq!(
        read(&ask(), body(payu::CHECK_ACTION_STATUS_NOT_FOUND).as_bytes()),
        RefundOutcome::NotFound
    );

    let mut queued: serde_json::Value =
        serde_json::from_str(body(payu::CHECK_ACTION_STATUS)).expect("json");
    queued["transaction_details"][MIHPAYID]["131278422"]["status"] = json!("queued");
    assert_eq!(
        read(&ask(), queued.to_string().as_bytes()),
        RefundOutcome::Accepted {
            refund_id: "131278422".into(),
            facts: vec![]
        }
    );
    queued["transaction_details"][MIHPAYID]["131278422"]["status"] = json!("failure");
    assert!(
        matches!(read(&ask(), queued.to_string().as_bytes()), RefundOutcome::Failed { code, .. } if code == "refund_failed")
    );
    for no_details in [
        json!({"status": 0, "msg": "Parameter missing"}),
        json!({"status": 0, "msg": "Invalid Hash."}),
    ] {
        assert!(matches!(
            read(&ask(), no_details.to_string().as_bytes()),
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
    fn read_never_panics_on_payu_shaped_answers(
        flag in prop_oneof![Just(json!(1)), Just(json!("0")), Just(json!(null)), Just(json!([]))],
        code in prop_oneof![Just(json!(106)), Just(json!("120")), Just(json!(105)), Just(json!({}))],
        token in prop_oneof![Just(json!(TOKEN)), Just(json!(null)), Just(json!(5))],
        state in prop_oneof![Just(json!("success")), Just(json!("queued")), Just(json!(1))],
        amount in prop_oneof![Just(json!("10.00")), Just(json!("-1")), Just(json!("1e9")), Just(json!(10))],
        lookup in any::<bool>(),
    ) {
        let answer = json!({"status": flag, "msg": "m", "error_code": code, "request_id": code,
            "transaction_details": {MIHPAYID: {"1": {"token": token, "status": state, "amt": amount,
                                                     "request_id": code}}, "2": "No action status found"}});
        read_any(refunds(), &ask(), 200, answer.to_string().as_bytes(), lookup);
    }
}

mod resolving {
    use super::*;

    fn of_txnid(txnid: &str) -> RefundAsk {
        RefundAsk {
            payment_id: txnid.into(),
            ..ask()
        }
    }

    #[test]
    fn the_txnid_is_resolved_to_the_mihpayid_by_verify_payment() {
        let answer = body(payu::VERIFY_PAYMENT).as_bytes();
        let txnid = "7fa6c4783a363b3da573";
        let request = refunds()
            .resolve(&of_txnid(txnid), &creds())
            .expect("PayU resolves")
            .expect("request");
        let form = String::from_utf8(request.body.expect("a form").bytes).expect("utf-8");
        assert!(form.contains("command=verify_payment") && form.contains(&format!("var1={txnid}")));
        assert_eq!(
            refunds().resolved(&of_txnid(txnid), 200, answer),
            Ok("403993715521889530".to_owned())
        );
        // Once resolved, nothing more to resolve; the refund goes by it.
        let resolved = RefundAsk {
            gateway_payment_id: Some("403993715521889530".into()),
            ..of_txnid(txnid)
        };
        assert!(refunds().resolve(&resolved, &creds()).is_none());
        let create = refunds().create(&resolved, &creds()).expect("create");
        let form = String::from_utf8(create.body.expect("a form").bytes).expect("utf-8");
        assert!(form.contains("var1=403993715521889530"), "{form}");
    }

    #[test]
    fn an_unknown_txnid_is_a_refusal_and_garbage_a_retry() {
        let answer = body(payu::VERIFY_PAYMENT_NOT_FOUND).as_bytes();
        match refunds().resolved(&of_txnid("IhfgcZnXR4o4nB"), 200, answer) {
            Err(RefundOutcome::Refused { code, .. }) => assert_eq!(code, "not_found"),
            other => panic!("{other:?}"),
        }
        for (status, body) in [
            (200, &b"<html>"[..]),
            (502, b"{}"),
            (200, b"{\"status\":1}"),
        ] {
            assert!(matches!(
                refunds().resolved(&of_txnid("t1"), status, body),
                Err(RefundOutcome::Retry { .. })
            ));
        }
    }
}

#[test]
fn a_second_attempt_has_its_own_token() {
    let second = RefundAsk {
        attempt: 2,
        ..ask()
    };
    let form = |a: &RefundAsk| {
        let request = refunds().create(a, &creds()).expect("a request");
        let body = request.body.expect("a body").bytes;
        url::form_urlencoded::parse(&body)
            .into_owned()
            .find(|(k, _)| k == "var2")
            .map(|(_, v)| v)
            .expect("a token")
    };
    let (first, again) = (form(&ask()), form(&second));
    assert_eq!(first, TOKEN);
    assert_ne!(again, first);
    assert_eq!(again, token("RefundToken1-2"), "the key, fitted to PayU");
    assert!(again.len() <= 23, "{again}");
}
