use proptest::prelude::*;

use super::*;

/// An answer in the documented shape (values made up here): a success, a
/// failure, one still pending and one PayU never saw.
const ANSWER: &str = r#"{
  "status": 1,
  "msg": "4 out of 4 Transactions Fetched Successfully",
  "transaction_details": {
    "shop_tx_1": {"mihpayid": "403993715521937565", "request_id": "", "bank_ref_num": "643495",
      "amt": "499.50", "transaction_amount": "499.50", "txnid": "shop_tx_1",
      "additional_charges": "0.00", "productinfo": "tea", "firstname": "Asha",
      "bankcode": "CC", "udf1": "shop_order_9", "udf2": "", "field9": "Transaction Completed Successfully",
      "error_code": "E000", "status": "success", "unmappedstatus": "captured",
      "email": "asha@example.com"},
    "shop_tx_2": {"mihpayid": "403993715521937566", "amt": "499.50", "txnid": "shop_tx_2",
      "udf1": "", "status": "failure", "unmappedstatus": "failed", "error_code": "E308"},
    "shop_tx_3": {"mihpayid": "403993715521937567", "amt": "499.50", "txnid": "shop_tx_3",
      "status": "pending", "unmappedstatus": "in progress"},
    "shop_tx_4": {"mihpayid": "Not Found", "status": "Not Found"}
  }
}"#;

#[test]
fn the_request_is_signed_with_key_command_txnids_and_salt() {
    let body = verify_payment_request("JPM7Fg", "salt_for_tests", &["shop_tx_1", "shop_tx_2"])
        .expect("signed");
    // sha512("JPM7Fg|verify_payment|shop_tx_1|shop_tx_2|salt_for_tests"),
    // computed outside this code.
    assert_eq!(
        body,
        "key=JPM7Fg&command=verify_payment&var1=shop_tx_1%7Cshop_tx_2&hash=\
         a003024a53308e47e23aa796ff8313a28cb7bb28f9b15a94a498dec59ae157950480669ad247a833d7fbb73c4b788607e2564375371087a3d675068ef450e327"
    );
    assert_eq!(verify_payment_request("k", "s", &[]), Err(VerifyRequestError::Count(0)));
    let many: Vec<&str> = std::iter::repeat_n("t", MAX_TXNIDS + 1).collect();
    assert_eq!(
        verify_payment_request("k", "s", &many),
        Err(VerifyRequestError::Count(MAX_TXNIDS + 1))
    );
    assert_eq!(
        verify_payment_request("k", "s", &["a|b"]),
        Err(VerifyRequestError::BadTxnid("a|b".into()))
    );
}

#[test]
fn known_transactions_become_facts_as_their_notifications_would() {
    let mut events = verify_payment(ANSWER.as_bytes()).expect("parsed");
    events.sort_by(|a, b| a.event_id.cmp(&b.event_id));
    let seen: Vec<(&str, EventKind, Option<&str>, Option<i64>)> = events
        .iter()
        .map(|e| (e.event_id.as_str(), e.kind, e.order_ref.as_deref(), e.amount_minor))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("reconciliation:shop_tx_1:captured", EventKind::Captured, Some("shop_order_9"), Some(49_950)),
            ("reconciliation:shop_tx_2:failed", EventKind::Failed, Some("shop_tx_2"), Some(49_950)),
        ],
        "pending and not found record nothing; no udf1 means the txnid is the order"
    );
    assert_eq!(events[0].payment_id.as_deref(), Some("shop_tx_1"));
    assert_eq!(events[0].currency.as_deref(), Some("INR"));
    assert_eq!(events[0].email.as_deref(), Some("asha@example.com"));
}

#[test]
fn a_refused_or_malformed_answer_is_an_error_naming_why() {
    let refused = verify_payment(br#"{"status": 0, "msg": "Invalid Hash."}"#)
        .expect_err("refused")
        .to_string();
    assert!(refused.contains("Invalid Hash."), "{refused}");
    for (body, field) in [
        (r#"{"status": 1, "transaction_details": {"t": {"amt": "1.00"}}}"#, "status"),
        (r#"{"status": 1, "transaction_details": {"t": {"status": "success"}}}"#, "amt"),
        (r#"{"status": 1, "transaction_details": {"t": {"status": "success", "amt": "1.001"}}}"#, "amt"),
    ] {
        let err = verify_payment(body.as_bytes()).expect_err(body).to_string();
        assert!(err.contains(field), "{body}: {err}");
    }
    assert!(verify_payment(b"<html>").is_err());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = verify_payment(&body);
    }

    #[test]
    fn arbitrary_transactions_never_panic(
        txnid in any::<String>(),
        status in prop_oneof![Just("success"), Just("failure"), Just("x")],
        amt in any::<String>(),
    ) {
        let body = serde_json::json!({"status": 1, "transaction_details": {
            txnid.clone(): {"txnid": txnid, "status": status, "amt": amt}}});
        let _ = verify_payment(body.to_string().as_bytes());
        let _ = verify_payment_request("k", "s", &[txnid.as_str()]);
    }
}

#[test]
fn txnids_are_batched_and_a_pipe_is_never_sent() {
    let api = Gateway::Payu.api().expect("an API");
    assert!(api.asks_by_shop_reference());
    let bare = OrderNames {
        order_ref: "ORD-1".into(),
        ..OrderNames::default()
    };
    assert_eq!(api.asks(&bare), [Ask::batch(VERIFY, vec!["ORD-1".into()])]);
    let refs: Vec<String> = (0..150)
        .map(|i| format!("t{i:03}"))
        .chain(["bad|id".to_owned()])
        .collect();
    let many = OrderNames { refs, ..bare };
    let sizes: Vec<usize> = api.asks(&many).iter().map(|a| a.ids.len()).collect();
    assert_eq!(sizes, [100, 51], "150 refs and the order's own reference");
}

#[test]
fn the_request_is_signed_with_the_sources_merchant_key_and_salt() {
    let api = Gateway::Payu.api().expect("an API");
    let salts = vec!["salt1".to_owned(), "old".to_owned()];
    let source = crate::Credentials::new(&salts).with_merchant_key(Some("gtKFFx"));
    let empty = crate::reconcile::table(&[]);
    let creds = crate::reconcile::credentials(Gateway::Payu, &empty, source).expect("credentials");
    assert_eq!(creds.get("salt"), Some("salt1"), "the current salt");
    let ask = Ask::batch(VERIFY, vec!["t1".into(), "t2".into()]);
    let request = api.request(&ask, &creds).expect("a request");
    assert_eq!(request.path, "/merchant/postservice.php?form=2");
    let expected = verify_payment_request("gtKFFx", "salt1", &["t1", "t2"]).expect("form");
    assert_eq!(request.body.map(|b| b.bytes), Some(expected.into_bytes()));
    assert_eq!(api.describe(&ask), "POST verify_payment t1|t2");

    let keyed = crate::reconcile::table(&[("key_id", "k")]);
    let refused = crate::reconcile::credentials(Gateway::Payu, &keyed, source)
        .expect_err("PayU takes no keys");
    assert!(refused.to_string().contains("merchant_key and salt"), "{refused}");
}

/// The documented answers (`crate::documented`), read as published.
mod documented {
    use super::*;
    use crate::documented::{body, payu};

    #[test]
    fn the_documented_answer_becomes_a_capture_of_its_txnid() {
        let events = verify_payment(body(payu::VERIFY_PAYMENT).as_bytes()).expect("read");
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!(e.kind, EventKind::Captured);
        assert_eq!(e.payment_id.as_deref(), Some("7fa6c4783a363b3da573"));
        assert_eq!(e.event_id, "reconciliation:7fa6c4783a363b3da573:captured");
        assert_eq!((e.amount_minor, e.currency.as_deref()), (Some(1_000), Some("INR")));
        assert_eq!(
            e.order_ref.as_deref(),
            Some("7fa6c4783a363b3da573"),
            "udf1 is empty: the txnid is the order"
        );
    }

    #[test]
    fn the_documented_not_found_answer_records_nothing_and_is_no_error() {
        let events = verify_payment(body(payu::VERIFY_PAYMENT_NOT_FOUND).as_bytes())
            .expect("status 0 with the txnid Not Found is an answer");
        assert!(events.is_empty());
    }
}
