//! The promise reconciliation rests on: a webhook and the gateway's API
//! answer for the same payment are the same fact to the ledger (same
//! provider, payment, kind, amount, currency, order and refund), so
//! whichever comes second changes nothing.

use proptest::prelude::*;

use crate::cashfree::api::{
    order_payments as cashfree_order_payments, order_refunds as cashfree_order_refunds,
};
use crate::payu::api::verify_payment as payu_verify_payment;
use crate::razorpay::api::{
    order_payments as razorpay_order_payments, payment_refunds as razorpay_payment_refunds,
};
use crate::sample::{SampleSpec, build};
use crate::stripe::api::{events as stripe_events, payment_intent as stripe_payment_intent};
use crate::{Fact, Gateway, Headers, NormalizedEvent};

/// What the ledger keys and books a fact by: the fact's identity (the
/// crate's one [`NormalizedEvent::fact`]) and the money it names.
#[derive(Debug, PartialEq)]
struct Booked<'a> {
    fact: Option<Fact>,
    amount_minor: Option<i64>,
    currency: Option<&'a str>,
}

fn fact(e: &NormalizedEvent) -> Booked<'_> {
    Booked {
        fact: e.fact().expect("an event that records a fact"),
        amount_minor: e.amount_minor,
        currency: e.currency.as_deref(),
    }
}

fn webhook(gateway: Gateway, event: &str, spec: &SampleSpec) -> NormalizedEvent {
    let delivery = build(gateway, event, spec, "whsec_reconcile_test").expect("a sample");
    let headers: &Headers = &delivery.headers;
    crate::parse(gateway, headers, &delivery.body).expect("the sample parses")
}

fn spec(order: &str, payment: &str, amount_minor: i64) -> SampleSpec {
    SampleSpec {
        order_ref: order.into(),
        payment_id: payment.into(),
        event_id: format!("evt_{payment}"),
        amount_minor,
        currency: "INR".into(),
        email: "asha@example.com".into(),
        timestamp: 1_764_633_600,
        merchant_key: None,
    }
}

/// Minor units written as Cashfree's decimal rupees.
fn rupees(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

proptest! {
    #[test]
    fn razorpay_webhooks_and_answers_name_the_same_facts(
        n in 1u32..1_000_000, amount in 1i64..10_000_000, refunded in 1i64..10_000_000,
    ) {
        let (order, payment) = (format!("order_{n}"), format!("pay_{n}"));
        let s = spec(&order, &payment, amount);
        let answer = serde_json::json!({"entity": "collection", "items": [{
            "id": payment, "entity": "payment", "amount": amount, "currency": "INR",
            "status": "captured", "order_id": order, "email": s.email,
        }]});
        let found = razorpay_order_payments(answer.to_string().as_bytes()).expect("parsed");
        let hook = webhook(Gateway::Razorpay, "payment.captured", &s);
        prop_assert_eq!(fact(&found[0]), fact(&hook));
        prop_assert_eq!(found[0].order_ref.as_deref(), hook.order_ref.as_deref());

        let r = SampleSpec { amount_minor: refunded, ..s.clone() };
        let answer = serde_json::json!({"entity": "collection", "items": [{
            "id": r.refund_id(Gateway::Razorpay), "entity": "refund", "amount": refunded,
            "currency": "INR", "payment_id": payment, "status": "processed",
        }]});
        let found = razorpay_payment_refunds(answer.to_string().as_bytes()).expect("parsed");
        let hook = webhook(Gateway::Razorpay, "refund.processed", &r);
        prop_assert_eq!(fact(&found[0]), fact(&hook));
    }

    #[test]
    fn cashfree_webhooks_and_answers_name_the_same_facts(
        n in 1u64..1_000_000_000, amount in 1i64..10_000_000, refunded in 1i64..10_000_000,
    ) {
        let (order, payment) = (format!("shop_{n}"), n.to_string());
        let s = spec(&order, &payment, amount);
        let answer = format!(
            r#"[{{"cf_payment_id": {payment}, "order_id": "{order}", "entity": "payment",
                 "payment_amount": {}, "payment_currency": "INR", "payment_status": "SUCCESS"}}]"#,
            rupees(amount)
        );
        let found = cashfree_order_payments(answer.as_bytes()).expect("parsed");
        let hook = webhook(Gateway::Cashfree, "PAYMENT_SUCCESS_WEBHOOK", &s);
        prop_assert_eq!(fact(&found[0]), fact(&hook));
        prop_assert_eq!(found[0].order_ref.as_deref(), hook.order_ref.as_deref());

        let r = SampleSpec { amount_minor: refunded, ..s.clone() };
        let answer = format!(
            r#"[{{"cf_payment_id": {payment}, "refund_id": "{}", "order_id": "{order}",
                 "entity": "refund", "refund_amount": {}, "refund_currency": "INR",
                 "refund_status": "SUCCESS"}}]"#,
            r.refund_id(Gateway::Cashfree),
            rupees(refunded)
        );
        let found = cashfree_order_refunds(answer.as_bytes()).expect("parsed");
        let hook = webhook(Gateway::Cashfree, "REFUND_STATUS_WEBHOOK", &r);
        prop_assert_eq!(fact(&found[0]), fact(&hook));
    }

    #[test]
    fn stripe_webhooks_and_answers_name_the_same_facts(
        n in 1u32..1_000_000, amount in 1i64..10_000_000,
    ) {
        let s = SampleSpec { currency: "usd".into(), ..spec(&format!("shop_{n}"), &format!("pi_{n}"), amount) };
        let delivery = build(Gateway::Stripe, "payment_intent.succeeded", &s, "whsec_reconcile_test")
            .expect("a sample");
        let body: serde_json::Value = serde_json::from_slice(&delivery.body).expect("json");
        let intent = body["data"]["object"].to_string();
        let found = stripe_payment_intent(intent.as_bytes()).expect("parsed").expect("a fact");
        let hook = crate::parse(Gateway::Stripe, &delivery.headers, &delivery.body).expect("parses");
        prop_assert_eq!(fact(&found), fact(&hook));
        prop_assert_eq!(found.order_ref.as_deref(), hook.order_ref.as_deref());
        prop_assert_eq!(found.event_id, format!("reconciliation:pi_{n}:captured"));

        // The same event listed as undelivered keeps its own id.
        let list = serde_json::json!({"object": "list", "has_more": false, "data": [body]});
        let page = stripe_events(list.to_string().as_bytes()).expect("parsed");
        prop_assert_eq!(&page.events, &vec![hook]);
    }

    #[test]
    fn payu_notifications_and_verify_answers_name_the_same_facts(
        n in 1u32..1_000_000, amount in 1i64..10_000_000, failed in any::<bool>(),
    ) {
        let (order, txnid) = (format!("shop_{n}"), format!("tx_{n}"));
        let s = spec(&order, &txnid, amount);
        let status = if failed { "failure" } else { "success" };
        let answer = serde_json::json!({"status": 1, "transaction_details": {txnid.clone(): {
            "mihpayid": "403993715521937565", "txnid": txnid, "amt": rupees(amount),
            "udf1": order, "status": status, "email": s.email,
        }}});
        let found = payu_verify_payment(answer.to_string().as_bytes()).expect("parsed");
        let hook = webhook(Gateway::Payu, status, &s);
        prop_assert_eq!(fact(&found[0]), fact(&hook));
        prop_assert_eq!(found[0].order_ref.as_deref(), hook.order_ref.as_deref());
    }
}
