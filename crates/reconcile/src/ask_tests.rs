use time::OffsetDateTime;

use super::*;

fn order(refs: &[(&str, &str)], payments: &[(&str, &str)]) -> DueOrder {
    let pairs = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    DueOrder {
        id: 1,
        order_ref: "ORD-1".into(),
        status: "pending".into(),
        created_at: OffsetDateTime::UNIX_EPOCH,
        refs: pairs(refs),
        payments: pairs(payments),
    }
}

#[test]
fn an_order_naming_no_gateway_is_asked_by_its_own_reference_only_where_that_works() {
    let bare = order(&[], &[]);
    assert!(asks_about(Gateway::Cashfree, &bare));
    assert!(asks_about(Gateway::Payu, &bare));
    assert!(!asks_about(Gateway::Razorpay, &bare));
    assert!(!asks_about(Gateway::Stripe, &bare));
    assert_eq!(
        asks_for(Gateway::Cashfree, &bare),
        [
            Ask::CashfreePayments {
                order_id: "ORD-1".into()
            },
            Ask::CashfreeRefunds {
                order_id: "ORD-1".into()
            }
        ]
    );
    assert_eq!(
        asks_for(Gateway::Payu, &bare),
        [Ask::PayuVerify {
            txnids: vec!["ORD-1".into()]
        }]
    );
    assert!(asks_for(Gateway::Razorpay, &bare).is_empty());
}

#[test]
fn an_order_naming_a_gateway_is_asked_of_that_gateway_only() {
    let o = order(&[("razorpay", "order_9")], &[("razorpay", "pay_1")]);
    assert!(asks_about(Gateway::Razorpay, &o));
    assert!(!asks_about(Gateway::Cashfree, &o));
    assert_eq!(
        asks_for(Gateway::Razorpay, &o),
        [
            Ask::RazorpayOrderPayments {
                order_id: "order_9".into()
            },
            Ask::RazorpayRefunds {
                payment_id: "pay_1".into()
            }
        ]
    );
    let s = order(
        &[("stripe", "cs_1"), ("stripe", "pi_2")],
        &[("stripe", "pi_2")],
    );
    assert_eq!(
        asks_for(Gateway::Stripe, &s),
        [
            Ask::StripeIntent { id: "pi_2".into() },
            Ask::StripeRefunds {
                intent: "pi_2".into(),
                starting_after: None
            }
        ],
        "one intent once; a Checkout session is not an intent"
    );
}

#[test]
fn payu_txnids_are_batched_and_a_pipe_is_never_sent() {
    let refs: Vec<(String, String)> = (0..150)
        .map(|i| ("payu".to_owned(), format!("t{i:03}")))
        .chain([("payu".to_owned(), "bad|id".to_owned())])
        .collect();
    let mut o = order(&[], &[]);
    o.refs = refs;
    let asks = asks_for(Gateway::Payu, &o);
    let sizes: Vec<usize> = asks
        .iter()
        .map(|a| match a {
            Ask::PayuVerify { txnids } => txnids.len(),
            _ => 0,
        })
        .collect();
    assert_eq!(sizes, [100, 51], "150 refs and the order's own reference");
}

#[test]
fn a_captured_razorpay_payment_leads_to_its_refunds_and_pages_to_the_next() {
    let captured = NormalizedEvent {
        provider: Gateway::Razorpay,
        event_id: "reconciliation:pay_7:captured".into(),
        event_type: "payment.captured".into(),
        kind: EventKind::Captured,
        payment_id: Some("pay_7".into()),
        order_ref: None,
        amount_minor: Some(100),
        currency: Some("INR".into()),
        email: None,
        refund_id: None,
        cumulative_refund: false,
    };
    let ask = Ask::RazorpayOrderPayments {
        order_id: "order_1".into(),
    };
    assert_eq!(
        ask.follow_ups(std::slice::from_ref(&captured), None),
        [Ask::RazorpayRefunds {
            payment_id: "pay_7".into()
        }]
    );
    let failed = NormalizedEvent {
        kind: EventKind::Failed,
        ..captured
    };
    assert!(ask.follow_ups(&[failed], None).is_empty());
    let events = Ask::StripeUndelivered {
        since: 5,
        starting_after: None,
    };
    assert_eq!(
        events.follow_ups(&[], Some("evt_9".into())),
        [Ask::StripeUndelivered {
            since: 5,
            starting_after: Some("evt_9".into())
        }]
    );
    assert!(events.follow_ups(&[], None).is_empty());
}
