//! Whom an order is asked of. What each gateway asks (its calls, their
//! batching and paging) is tested in its own folder of the gateways crate.

use oncehook_gateways::reconcile::Ask;
use time::OffsetDateTime;

use super::*;

fn gateway(name: &str) -> Gateway {
    name.parse().expect("a registered gateway")
}

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
    assert!(asks_about(gateway("cashfree"), &bare));
    assert!(asks_about(gateway("payu"), &bare));
    assert!(
        asks_about(gateway("razorpay"), &bare),
        "Razorpay by the receipt the shop gave its order"
    );
    assert!(!asks_about(gateway("stripe"), &bare));
    assert!(
        !asks_about(gateway("standard"), &bare),
        "a gateway without an API is never asked"
    );
    assert_eq!(
        asks_for(gateway("cashfree"), &bare)
            .iter()
            .map(|a| a.id())
            .collect::<Vec<_>>(),
        ["ORD-1", "ORD-1"],
        "payments and refunds by the shop's reference"
    );
    assert_eq!(asks_for(gateway("payu"), &bare)[0].ids, ["ORD-1"]);
    let razorpay: Vec<String> = asks_for(gateway("razorpay"), &bare)
        .iter()
        .map(|a| gateway("razorpay").api().expect("an API").describe(a))
        .collect();
    assert_eq!(razorpay, ["GET /v1/orders?receipt=ORD-1"]);
    assert!(asks_for(gateway("standard"), &bare).is_empty());
}

#[test]
fn an_order_naming_a_gateway_is_asked_of_that_gateway_only_by_its_ids_there() {
    let o = order(
        &[("razorpay", "order_9"), ("stripe", "pi_3")],
        &[("razorpay", "pay_1")],
    );
    assert!(asks_about(gateway("razorpay"), &o));
    assert!(asks_about(gateway("stripe"), &o));
    assert!(!asks_about(gateway("cashfree"), &o));
    let asks = asks_for(gateway("razorpay"), &o);
    let ids: Vec<&str> = asks.iter().map(Ask::id).collect();
    assert_eq!(ids, ["order_9", "pay_1"], "never Stripe's pi_3");
}

#[test]
fn an_ask_already_made_or_planned_is_not_made_again() {
    let a = Ask::of("order_payments", "order_1");
    let b = Ask::of("payment_refunds", "pay_1");
    let planned = [a.clone()];
    assert_eq!(not_yet_asked(vec![a.clone(), b.clone()], &planned), [b]);
    assert!(not_yet_asked(vec![a.clone()], &planned).is_empty());
    assert_eq!(
        not_yet_asked(vec![a.page_after("x".into())], &planned).len(),
        1,
        "the next page is another call"
    );
}
