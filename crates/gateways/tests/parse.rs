//! Parsing edge cases per gateway: lenient shapes real payloads use, strict
//! amounts, identity fallbacks and the errors for what cannot be understood.

mod common;

use common::*;
use oncehook_gateways::sample::{PAYU_HASHED_FIELDS, payu_hash};
use oncehook_gateways::{
    Credentials, EventKind, Gateway, Headers, ParseError, VerifyError, parse, verify,
};
use serde_json::json;

fn parse_json(
    gateway: Gateway,
    headers: &Headers,
    v: &serde_json::Value,
) -> Result<oncehook_gateways::NormalizedEvent, ParseError> {
    parse(gateway, headers, &serde_json::to_vec(v).unwrap())
}

fn std_headers() -> Headers {
    Headers::new().with("webhook-id", "msg_1")
}

#[test]
fn bodies_that_are_not_json_or_form_are_syntax_errors() {
    for gateway in [
        Gateway::Razorpay,
        Gateway::Cashfree,
        Gateway::Stripe,
        Gateway::Standard,
    ] {
        let r = parse(gateway, &std_headers(), b"not json {");
        assert!(
            matches!(r, Err(ParseError::Syntax("JSON", _))),
            "{gateway}: {r:?}"
        );
        let r = parse(gateway, &std_headers(), b"[1,2]");
        assert!(
            matches!(r, Err(ParseError::MissingField(_))),
            "{gateway}: {r:?}"
        );
    }
    assert!(matches!(
        parse(Gateway::Payu, &Headers::new(), b"status=\xff"),
        Err(ParseError::Syntax("form", _))
    ));
    assert!(matches!(
        parse(Gateway::Payu, &Headers::new(), b"status=a&status=b"),
        Err(ParseError::Syntax("form", _))
    ));
}

#[test]
fn missing_event_names_and_ids_are_missing_fields() {
    assert_eq!(
        parse_json(Gateway::Razorpay, &Headers::new(), &json!({"payload": {}})),
        Err(ParseError::MissingField("event"))
    );
    assert_eq!(
        parse_json(Gateway::Cashfree, &Headers::new(), &json!({"data": {}})),
        Err(ParseError::MissingField("type"))
    );
    assert_eq!(
        parse_json(Gateway::Stripe, &Headers::new(), &json!({"type": "x"})),
        Err(ParseError::MissingField("id"))
    );
    assert_eq!(
        parse_json(Gateway::Stripe, &Headers::new(), &json!({"id": "evt_1"})),
        Err(ParseError::MissingField("type"))
    );
    assert_eq!(
        parse_json(
            Gateway::Standard,
            &Headers::new(),
            &json!({"type": "payment.succeeded"})
        ),
        Err(ParseError::MissingField("webhook-id"))
    );
    assert_eq!(
        parse_json(Gateway::Standard, &std_headers(), &json!({"data": {}})),
        Err(ParseError::MissingField("type"))
    );
    assert_eq!(
        parse(Gateway::Payu, &Headers::new(), b"txnid=T1"),
        Err(ParseError::MissingField("status"))
    );
    assert_eq!(
        parse(Gateway::Payu, &Headers::new(), b"status=success"),
        Err(ParseError::MissingField("txnid"))
    );
    // An acting event with no identity at all cannot be deduplicated.
    assert_eq!(
        parse_json(
            Gateway::Razorpay,
            &Headers::new(),
            &json!({"event": "payment.captured", "payload": {}})
        ),
        Err(ParseError::MissingField("x-razorpay-event-id"))
    );
    assert_eq!(
        parse_json(
            Gateway::Cashfree,
            &Headers::new(),
            &json!({"type": "PAYMENT_SUCCESS_WEBHOOK", "data": {}})
        ),
        Err(ParseError::MissingField("data.payment.cf_payment_id"))
    );
}

#[test]
fn other_events_parse_with_a_stable_identity() {
    let rzp = json!({"event": "subscription.charged", "contains": ["subscription"], "payload": {"subscription": {"entity": {"id": "sub_1"}}}});
    let e = parse_json(Gateway::Razorpay, &Headers::new(), &rzp).unwrap();
    assert_eq!(
        (e.kind, e.event_id.as_str()),
        (EventKind::Other, "subscription.charged:sub_1")
    );

    let bare = serde_json::to_vec(&json!({"event": "account.updated", "payload": {}})).unwrap();
    let a = parse(Gateway::Razorpay, &Headers::new(), &bare).unwrap();
    let b = parse(Gateway::Razorpay, &Headers::new(), &bare).unwrap();
    assert_eq!(a.kind, EventKind::Other);
    assert!(
        a.event_id.starts_with("account.updated:sha256:"),
        "{}",
        a.event_id
    );
    assert_eq!(a.event_id, b.event_id);

    let cf = json!({"type": "SETTLEMENT_WEBHOOK", "data": {"settlement": {"id": 1}}});
    let e = parse_json(Gateway::Cashfree, &Headers::new(), &cf).unwrap();
    assert_eq!(e.kind, EventKind::Other);
    assert!(e.event_id.starts_with("SETTLEMENT_WEBHOOK:sha256:"));

    let stripe = json!({"id": "evt_9", "type": "customer.created", "data": {"object": {"id": "cus_1", "object": "customer"}}});
    let e = parse_json(Gateway::Stripe, &Headers::new(), &stripe).unwrap();
    assert_eq!(
        (e.kind, e.event_id.as_str(), e.amount_minor),
        (EventKind::Other, "evt_9", None)
    );

    let std = json!({"type": "invoice.created", "timestamp": "x", "data": {}});
    let e = parse_json(Gateway::Standard, &std_headers(), &std).unwrap();
    assert_eq!((e.kind, e.event_id.as_str()), (EventKind::Other, "msg_1"));

    let e = parse(Gateway::Payu, &Headers::new(), b"status=bounced&txnid=T9").unwrap();
    assert_eq!(
        (e.kind, e.event_id.as_str()),
        (EventKind::Other, "T9:bounced")
    );
}

#[test]
fn integer_amounts_must_be_non_negative_integers() {
    for bad in [
        json!(500.5),
        json!(500.0),
        json!(-1),
        json!("50000"),
        json!(1e3),
        json!(u64::MAX),
        json!({"v": 1}),
    ] {
        let rzp = json!({"event": "payment.captured", "payload": {"payment": {"entity": {"id": "pay_1", "amount": bad}}}});
        assert!(
            matches!(
                parse_json(Gateway::Razorpay, &Headers::new(), &rzp),
                Err(ParseError::InvalidField { .. })
            ),
            "{bad}"
        );
        let stripe = json!({"id": "evt_1", "type": "payment_intent.payment_failed", "data": {"object": {"id": "pi_1", "amount": bad}}});
        assert!(
            matches!(
                parse_json(Gateway::Stripe, &Headers::new(), &stripe),
                Err(ParseError::InvalidField { .. })
            ),
            "{bad}"
        );
        let std = json!({"type": "payment.succeeded", "data": {"amount": bad}});
        assert!(
            matches!(
                parse_json(Gateway::Standard, &std_headers(), &std),
                Err(ParseError::InvalidField { .. })
            ),
            "{bad}"
        );
    }
    let rzp = json!({"event": "payment.captured", "payload": {"payment": {"entity": {"id": "pay_1", "amount": null}}}});
    assert_eq!(
        parse_json(Gateway::Razorpay, &Headers::new(), &rzp)
            .unwrap()
            .amount_minor,
        None
    );
}

#[test]
fn cashfree_amounts_are_exact_decimals() {
    let body = |amount: &str, id: &str| {
        format!(
            r#"{{"data":{{"order":{{"order_id":"o1","order_amount":999,"order_currency":"inr"}},"payment":{{"cf_payment_id":{id},"payment_status":"SUCCESS","payment_amount":{amount}}}}},"type":"PAYMENT_SUCCESS_WEBHOOK"}}"#
        )
    };
    let ok = |amount: &str| {
        parse(
            Gateway::Cashfree,
            &Headers::new(),
            body(amount, "5114910371254").as_bytes(),
        )
        .map(|e| e.amount_minor)
    };
    assert_eq!(ok("500.00"), Ok(Some(50_000)));
    assert_eq!(ok("500"), Ok(Some(50_000)));
    assert_eq!(ok("0.10"), Ok(Some(10)));
    assert_eq!(
        ok("1.005e2"),
        Err(ParseError::InvalidField {
            field: "data.payment.payment_amount",
            reason: "amount \"1.005e2\" is not a decimal number".into()
        })
    );
    assert!(ok("500.001").is_err());
    assert!(ok("-5").is_err());
    assert!(ok("true").is_err());
    assert_eq!(ok(r#""12.50""#), Ok(Some(1_250)));
    assert_eq!(
        ok("null"),
        Ok(Some(99_900)),
        "falls back to the order amount"
    );
    assert_eq!(ok("92233720368547758.07"), Ok(Some(i64::MAX)));
    assert!(ok("92233720368547758.08").is_err());

    // cf_payment_id as a number, currency upper-cased.
    let e = parse(
        Gateway::Cashfree,
        &Headers::new(),
        body("1.00", "5114910371254").as_bytes(),
    )
    .unwrap();
    assert_eq!(e.payment_id.as_deref(), Some("5114910371254"));
    assert_eq!(e.event_id, "PAYMENT_SUCCESS_WEBHOOK:5114910371254:SUCCESS");
    assert_eq!(e.currency.as_deref(), Some("INR"));
    let e = parse(
        Gateway::Cashfree,
        &Headers::new(),
        body("1.00", r#""cf_77""#).as_bytes(),
    )
    .unwrap();
    assert_eq!(e.payment_id.as_deref(), Some("cf_77"));
}

#[test]
fn cashfree_failure_and_refund_kinds() {
    for (ty, kind) in [
        ("PAYMENT_FAILED_WEBHOOK", EventKind::Failed),
        ("PAYMENT_USER_DROPPED_WEBHOOK", EventKind::Failed),
        ("PAYMENT_SUCCESS_WEBHOOK", EventKind::Captured),
        ("PAYMENT_CHARGES_WEBHOOK", EventKind::Other),
    ] {
        let v =
            json!({"type": ty, "data": {"payment": {"cf_payment_id": 1, "payment_status": "X"}}});
        let e = parse_json(Gateway::Cashfree, &Headers::new(), &v).unwrap();
        assert_eq!(e.kind, kind, "{ty}");
        assert_eq!(e.event_id, format!("{ty}:1:X"));
    }
    let refund = |status: &str| {
        json!({"type": "REFUND_STATUS_WEBHOOK", "data": {"refund": {
        "cf_refund_id": 11, "cf_payment_id": 22, "refund_id": "refund_1", "order_id": "o1",
        "refund_amount": "150.50", "refund_currency": "INR", "refund_status": status}}})
    };
    let e = parse_json(Gateway::Cashfree, &Headers::new(), &refund("SUCCESS")).unwrap();
    assert_eq!(e.kind, EventKind::Refunded);
    assert_eq!(e.event_id, "REFUND_STATUS_WEBHOOK:refund_1:SUCCESS");
    assert_eq!(e.refund_id.as_deref(), Some("refund_1"));
    assert_eq!(e.payment_id.as_deref(), Some("22"));
    assert_eq!(e.order_ref.as_deref(), Some("o1"));
    assert_eq!(e.amount_minor, Some(15_050));
    let pending = parse_json(Gateway::Cashfree, &Headers::new(), &refund("PENDING")).unwrap();
    assert_eq!(pending.kind, EventKind::Other);
    assert_ne!(pending.event_id, e.event_id);
    // The idempotency key wins when present.
    let keyed = parse_json(
        Gateway::Cashfree,
        &Headers::new().with("x-idempotency-key", "idem-1"),
        &refund("SUCCESS"),
    )
    .unwrap();
    assert_eq!(keyed.event_id, "idem-1");
}

#[test]
fn razorpay_refund_and_order_paid_shapes() {
    let refund = json!({"event": "refund.processed", "payload": {
        "refund": {"entity": {"id": "rfnd_1", "amount": 2500, "currency": "inr", "payment_id": "pay_1"}},
        "payment": {"entity": {"id": "pay_1", "amount": 10000, "order_id": "order_1", "email": "a@b.c", "notes": []}}}});
    let e = parse_json(Gateway::Razorpay, &Headers::new(), &refund).unwrap();
    assert_eq!(e.kind, EventKind::Refunded);
    assert_eq!(e.event_id, "refund.processed:rfnd_1");
    assert_eq!(e.amount_minor, Some(2500));
    assert_eq!(e.currency.as_deref(), Some("INR"));
    assert_eq!(e.payment_id.as_deref(), Some("pay_1"));
    assert_eq!(e.order_ref.as_deref(), Some("order_1"));
    assert_eq!(e.refund_id.as_deref(), Some("rfnd_1"));

    // order.paid with only the order entity still yields the order facts.
    let paid = json!({"event": "order.paid", "payload": {"order": {"entity": {"id": "order_9", "amount": 700, "currency": "INR"}}}});
    let e = parse_json(Gateway::Razorpay, &Headers::new(), &paid).unwrap();
    assert_eq!(e.kind, EventKind::Captured);
    assert_eq!(e.event_id, "order.paid:order_9");
    assert_eq!(e.order_ref.as_deref(), Some("order_9"));
    assert_eq!(e.amount_minor, Some(700));
    assert_eq!(e.payment_id, None);
}

#[test]
fn payu_additional_charges_prefix_the_hash() {
    let salt = "SALT9".to_owned();
    for name in ["additional_charges", "additionalCharges"] {
        let fields = [
            ("key", "K"),
            ("txnid", "T1"),
            ("amount", "100.00"),
            ("status", "success"),
            (name, "5.00"),
            ("email", "a@b.c"),
        ];
        let body = payu_form(&fields, &salt);
        assert_eq!(
            verify(
                Gateway::Payu,
                Credentials::new(std::slice::from_ref(&salt)).with_merchant_key(Some("K")),
                &Headers::new(),
                &body,
                0,
                0
            )
            .map(|v| v.secret_index),
            Ok(0),
            "{name}"
        );
        // Dropping the charges field changes the hash input.
        let text = String::from_utf8(body)
            .unwrap()
            .replace(&format!("{name}=5.00&"), "");
        assert_eq!(
            verify(
                Gateway::Payu,
                Credentials::new(std::slice::from_ref(&salt)).with_merchant_key(Some("K")),
                &Headers::new(),
                text.as_bytes(),
                0,
                0
            ),
            Err(VerifyError::Mismatch)
        );
    }
    // An empty charges field is the same as none.
    let with_empty = payu_form(
        &[
            ("key", "K"),
            ("txnid", "T1"),
            ("status", "success"),
            ("additional_charges", ""),
        ],
        &salt,
    );
    assert!(
        verify(
            Gateway::Payu,
            Credentials::new(std::slice::from_ref(&salt)).with_merchant_key(Some("K")),
            &Headers::new(),
            &with_empty,
            0,
            0
        )
        .is_ok()
    );
}

#[test]
fn payu_statuses_refunds_and_amounts() {
    for (status, kind) in [
        ("success", EventKind::Captured),
        ("failure", EventKind::Failed),
        ("failed", EventKind::Failed),
        ("pending", EventKind::Failed),
        // PayU does not sign its refund notifications: a refund status never moves money.
        ("refund", EventKind::Other),
        ("refunded", EventKind::Other),
        ("dropped", EventKind::Other),
    ] {
        let body = format!("mihpayid=9&txnid=T1&status={status}&amount=10.5&email=a%40b.c");
        let e = parse(Gateway::Payu, &Headers::new(), body.as_bytes()).unwrap();
        assert_eq!(e.kind, kind, "{status}");
        assert_eq!(e.event_id, format!("T1:{status}"));
        assert_eq!(e.amount_minor, Some(1_050));
        assert_eq!(e.currency.as_deref(), Some("INR"));
        assert_eq!(e.email.as_deref(), Some("a@b.c"));
        // The payment is the (hashed) txnid, not the unsigned mihpayid.
        assert_eq!(e.payment_id.as_deref(), Some("T1"));
        // Without udf1 the order reference falls back to the txnid.
        assert_eq!(e.order_ref.as_deref(), Some("T1"));
        assert_eq!((e.refund_id, e.cumulative_refund), (None, false));
    }
    let e = parse(
        Gateway::Payu,
        &Headers::new(),
        b"txnid=T1&status=refund&amount=40.00&refund_amount=99.00&refund_id=R7&currency=KWD",
    )
    .unwrap();
    // refund_amount, refund_id and currency are outside the hash: they never decide money.
    assert_eq!(
        (e.kind, e.amount_minor, e.refund_id.as_deref()),
        (EventKind::Other, Some(4_000), None)
    );
    assert_eq!(e.currency.as_deref(), Some("INR"));
    // udf1 names the order; the txnid names the attempt.
    let e = parse(
        Gateway::Payu,
        &Headers::new(),
        b"mihpayid=77&txnid=TXN_2&udf1=order_9&status=success&amount=100.00",
    )
    .unwrap();
    assert_eq!(e.order_ref.as_deref(), Some("order_9"));
    assert_eq!(e.payment_id.as_deref(), Some("TXN_2"));
    assert_eq!(e.event_id, "TXN_2:success");
    let e = parse(
        Gateway::Payu,
        &Headers::new(),
        b"txnid=TXN_3&udf1=&status=success",
    )
    .unwrap();
    assert_eq!(e.order_ref.as_deref(), Some("TXN_3"));
    for bad in ["1e3", "-1", "10.001", "abc", "1,000"] {
        let body = format!("txnid=T1&status=success&amount={bad}");
        assert!(
            matches!(
                parse(Gateway::Payu, &Headers::new(), body.as_bytes()),
                Err(ParseError::InvalidField {
                    field: "amount",
                    ..
                })
            ),
            "{bad}"
        );
    }
}

#[test]
fn stripe_checkout_refund_and_expanded_shapes() {
    let session = |status: &str| {
        json!({"id": "evt_cs", "type": "checkout.session.completed", "data": {"object": {
        "id": "cs_1", "object": "checkout.session", "amount_total": 1999, "currency": "usd",
        "client_reference_id": "order_7", "customer_details": {"email": "c@d.e"}, "payment_intent": "pi_7",
        "payment_status": status}}})
    };
    let e = parse_json(Gateway::Stripe, &Headers::new(), &session("paid")).unwrap();
    assert_eq!(e.kind, EventKind::Captured);
    assert_eq!(e.payment_id.as_deref(), Some("pi_7"));
    assert_eq!(e.order_ref.as_deref(), Some("order_7"));
    assert_eq!(e.amount_minor, Some(1999));
    assert_eq!(e.currency.as_deref(), Some("USD"));
    assert_eq!(e.email.as_deref(), Some("c@d.e"));
    assert_eq!(
        parse_json(Gateway::Stripe, &Headers::new(), &session("unpaid"))
            .unwrap()
            .kind,
        EventKind::Other
    );

    // metadata.order_ref wins over client_reference_id; an expanded intent works.
    let mut v = session("paid");
    v["data"]["object"]["metadata"] = json!({"order_ref": "order_meta"});
    v["data"]["object"]["payment_intent"] =
        json!({"id": "pi_expanded", "object": "payment_intent"});
    let e = parse_json(Gateway::Stripe, &Headers::new(), &v).unwrap();
    assert_eq!(e.order_ref.as_deref(), Some("order_meta"));
    assert_eq!(e.payment_id.as_deref(), Some("pi_expanded"));

    // A charge refund without the refunds list or an intent: the refund total of the charge.
    let refund = json!({"id": "evt_r", "type": "charge.refunded", "data": {"object": {
        "id": "ch_1", "object": "charge", "amount": 5000, "amount_refunded": 1500, "currency": "eur",
        "billing_details": {"email": "b@x.y"}}}});
    let e = parse_json(Gateway::Stripe, &Headers::new(), &refund).unwrap();
    assert_eq!(e.kind, EventKind::Refunded);
    assert_eq!(e.payment_id.as_deref(), Some("ch_1"));
    assert_eq!(e.amount_minor, Some(1500));
    assert_eq!(e.refund_id.as_deref(), Some("ch_1:refunded:1500"));
    assert!(e.cumulative_refund);
    assert_eq!(e.email.as_deref(), Some("b@x.y"));
}

#[test]
fn standard_refunds_and_missing_fields() {
    let v = json!({"type": "payment.refunded", "data": {"payment_id": "p1", "order_id": "o1", "amount": 100, "currency": "inr"}});
    let e = parse_json(Gateway::Standard, &std_headers(), &v).unwrap();
    assert_eq!(e.kind, EventKind::Refunded);
    assert_eq!(e.refund_id.as_deref(), Some("msg_1"));
    assert_eq!(e.currency.as_deref(), Some("INR"));
    assert_eq!(e.email, None);
    let v = json!({"type": "payment.failed", "data": {}});
    let e = parse_json(Gateway::Standard, &std_headers(), &v).unwrap();
    assert_eq!(
        (e.kind, e.payment_id, e.order_ref, e.amount_minor),
        (EventKind::Failed, None, None, None)
    );
}

/// A genuine PayU success for 1.00 whose `firstname` carries separators.
fn payu_genuine_fields(firstname: &str) -> Vec<(&'static str, String)> {
    vec![
        ("key", "K".to_owned()),
        ("txnid", "order_1".to_owned()),
        ("amount", "1.00".to_owned()),
        ("productinfo", "mug".to_owned()),
        ("firstname", firstname.to_owned()),
        ("email", "a@b.c".to_owned()),
        ("udf1", "order_1".to_owned()),
        ("status", "success".to_owned()),
    ]
}

fn pairs<'a>(fields: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    fields.iter().map(|(n, v)| (*n, v.as_str())).collect()
}

fn verify_payu(body: &[u8], salt: &str, key: Option<&str>) -> Result<usize, VerifyError> {
    let salts = [salt.to_owned()];
    verify(
        Gateway::Payu,
        Credentials::new(&salts).with_merchant_key(key),
        &Headers::new(),
        body,
        0,
        0,
    )
    .map(|v| v.secret_index)
}

#[test]
fn payu_refuses_values_that_re_split_the_hash_input() {
    let salt = "SALT9";
    // A genuine 1.00 notification: the customer typed separators into their name.
    let genuine = payu_genuine_fields("A|B|500.00|order_x");
    let genuine_hash = payu_hash(&pairs(&genuine), salt);
    // Re-split: the same `|`-joined string, different field boundaries, so the
    // same hash now says 500.00 for order_x.
    let resplit = vec![
        ("key", "mug|1.00|order_1|K".to_owned()),
        ("txnid", "order_x".to_owned()),
        ("amount", "500.00".to_owned()),
        ("productinfo", "B".to_owned()),
        ("firstname", "A".to_owned()),
        ("email", "a@b.c".to_owned()),
        ("udf1", "order_1".to_owned()),
        ("status", "success".to_owned()),
    ];
    assert_eq!(
        payu_hash(&pairs(&resplit), salt),
        genuine_hash,
        "the attack is real"
    );
    let forged = payu_form_with_hash(&pairs(&resplit), &genuine_hash);
    assert!(matches!(
        verify_payu(&forged, salt, Some("K")),
        Err(VerifyError::Malformed { what: "key", .. })
    ));
    // The genuine one is refused too, naming the field: the hash cannot say
    // what its fields were.
    let body = payu_form_with_hash(&pairs(&genuine), &genuine_hash);
    assert!(matches!(
        verify_payu(&body, salt, Some("K")),
        Err(VerifyError::Malformed {
            what: "firstname",
            ..
        })
    ));
    // Every hash-covered field, the additional charges included.
    for field in PAYU_HASHED_FIELDS
        .into_iter()
        .chain(["additional_charges", "additionalCharges"])
    {
        let mut fields = payu_genuine_fields("Asha");
        match fields.iter_mut().find(|(n, _)| *n == field) {
            Some(slot) => slot.1.push('|'),
            None => fields.push((field, "x|".to_owned())),
        }
        let body = payu_form(&pairs(&fields), salt);
        assert!(
            matches!(
                verify_payu(&body, salt, Some("K")),
                Err(VerifyError::Malformed { what, .. }) if what == field
            ),
            "{field}"
        );
    }
    // Fields outside the hash may contain `|`.
    let mut fields = payu_genuine_fields("Asha");
    fields.push(("field9", "a|b".to_owned()));
    let body = payu_form(&pairs(&fields), salt);
    assert_eq!(verify_payu(&body, salt, Some("K")), Ok(0));
}

#[test]
fn payu_requires_the_configured_merchant_key() {
    let salt = "SALT9";
    let fields = payu_genuine_fields("Asha");
    let body = payu_form(&pairs(&fields), salt);
    assert_eq!(verify_payu(&body, salt, Some("K")), Ok(0));
    // Correctly hashed under this salt, but for another merchant key.
    assert_eq!(
        verify_payu(&body, salt, Some("OTHER")),
        Err(VerifyError::Mismatch)
    );
    // No key configured: never accepted.
    assert_eq!(
        verify_payu(&body, salt, None),
        Err(VerifyError::NoMerchantKey)
    );
    // No key field in the form.
    let without: Vec<_> = fields
        .iter()
        .filter(|(n, _)| *n != "key")
        .cloned()
        .collect();
    let body = payu_form(&pairs(&without), salt);
    assert_eq!(
        verify_payu(&body, salt, Some("K")),
        Err(VerifyError::Missing("key"))
    );
}

#[test]
fn payu_refund_status_callbacks_are_refused_or_ignored() {
    // PayU's refund status callback: JSON, no hash. Not a form, not signed.
    let json = br#"{"mihpayid":"403993715531077182","request_id":"131866","amt":"500.00","action":"refund","status":"SUCCESS","merchantTxnId":"order_1","key":"K"}"#;
    assert!(verify_payu(json, "SALT9", Some("K")).is_err());
    // The same facts posted as a form without a hash.
    let form = b"mihpayid=403993715531077182&request_id=131866&amt=500.00&action=refund&status=refund&txnid=order_1&key=K";
    assert_eq!(
        verify_payu(form, "SALT9", Some("K")),
        Err(VerifyError::Missing("hash"))
    );
    // A correctly hashed form whose status is a refund: authentic, but it
    // moves no money.
    let mut fields = payu_genuine_fields("Asha");
    if let Some(slot) = fields.iter_mut().find(|(n, _)| *n == "status") {
        slot.1 = "refund".to_owned();
    }
    let body = payu_form(&pairs(&fields), "SALT9");
    assert_eq!(verify_payu(&body, "SALT9", Some("K")), Ok(0));
    let e = parse(Gateway::Payu, &Headers::new(), &body).unwrap();
    assert_eq!(e.kind, EventKind::Other);
    assert_eq!(e.refund_id, None);
}

#[test]
fn stripe_cumulative_and_single_refunds() {
    // charge.refunded: the charge's cumulative total, whatever refunds.data says.
    let charge = json!({"id": "evt_c", "type": "charge.refunded", "data": {"object": {
        "id": "ch_9", "object": "charge", "amount": 5000, "amount_refunded": 3500, "currency": "usd",
        "payment_intent": "pi_9", "metadata": {"order_ref": "order_9"},
        "refunds": {"object": "list", "data": [{"id": "re_2", "amount": 2000}, {"id": "re_1", "amount": 1500}]}}}});
    let e = parse_json(Gateway::Stripe, &Headers::new(), &charge).unwrap();
    assert_eq!(e.kind, EventKind::Refunded);
    assert!(e.cumulative_refund);
    assert_eq!(e.payment_id.as_deref(), Some("pi_9"));
    assert_eq!(e.amount_minor, Some(3500));
    assert_eq!(e.refund_id.as_deref(), Some("ch_9:refunded:3500"));
    assert_eq!(e.order_ref.as_deref(), Some("order_9"));
    // Without amount_refunded there is no total to record.
    let mut bare = charge.clone();
    bare["data"]["object"]
        .as_object_mut()
        .map(|o| o.remove("amount_refunded"));
    assert_eq!(
        parse_json(Gateway::Stripe, &Headers::new(), &bare),
        Err(ParseError::MissingField("data.object.amount_refunded"))
    );

    // refund.created: one refund, counted once it has succeeded.
    let refund = |ty: &str, status: &str| {
        json!({"id": "evt_r", "type": ty, "data": {"object": {
            "id": "re_1", "object": "refund", "amount": 1500, "charge": "ch_9", "currency": "usd",
            "payment_intent": "pi_9", "metadata": {}, "status": status}}})
    };
    for ty in ["refund.created", "refund.updated", "charge.refund.updated"] {
        let e = parse_json(Gateway::Stripe, &Headers::new(), &refund(ty, "succeeded")).unwrap();
        assert_eq!(e.kind, EventKind::Refunded, "{ty}");
        assert!(!e.cumulative_refund, "{ty}");
        assert_eq!(e.refund_id.as_deref(), Some("re_1"), "{ty}");
        assert_eq!(e.payment_id.as_deref(), Some("pi_9"), "{ty}");
        assert_eq!(e.amount_minor, Some(1500), "{ty}");
        assert_eq!(e.currency.as_deref(), Some("USD"), "{ty}");
        assert_eq!(e.order_ref, None, "{ty}");
        for status in ["pending", "requires_action", "failed", "canceled"] {
            let e = parse_json(Gateway::Stripe, &Headers::new(), &refund(ty, status)).unwrap();
            assert_eq!(
                (e.kind, e.refund_id),
                (EventKind::Other, None),
                "{ty} {status}"
            );
        }
    }
    // Without a payment intent the refund names its charge.
    let mut v = refund("refund.created", "succeeded");
    v["data"]["object"]["payment_intent"] = serde_json::Value::Null;
    let e = parse_json(Gateway::Stripe, &Headers::new(), &v).unwrap();
    assert_eq!(e.payment_id.as_deref(), Some("ch_9"));
}

#[test]
fn stripe_checkout_async_payments() {
    let session = |ty: &str, status: &str| {
        json!({"id": "evt_cs", "type": ty, "data": {"object": {
        "id": "cs_1", "object": "checkout.session", "amount_total": 1999, "currency": "usd",
        "client_reference_id": "order_7", "payment_intent": "pi_7", "payment_status": status}}})
    };
    let e = parse_json(
        Gateway::Stripe,
        &Headers::new(),
        &session("checkout.session.async_payment_succeeded", "paid"),
    )
    .unwrap();
    assert_eq!(
        (
            e.kind,
            e.payment_id.as_deref(),
            e.order_ref.as_deref(),
            e.amount_minor
        ),
        (
            EventKind::Captured,
            Some("pi_7"),
            Some("order_7"),
            Some(1999)
        )
    );
    let e = parse_json(
        Gateway::Stripe,
        &Headers::new(),
        &session("checkout.session.async_payment_failed", "unpaid"),
    )
    .unwrap();
    assert_eq!(
        (e.kind, e.payment_id.as_deref(), e.order_ref.as_deref()),
        (EventKind::Failed, Some("pi_7"), Some("order_7"))
    );
}
