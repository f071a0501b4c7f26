//! Whom to ask about an order (pure: no I/O). An order names the gateways
//! it has dealt with through its references (Razorpay's `order_…`, a
//! Stripe `pi_…`) and the payments the ledger knows; those sources are
//! asked. An order that names none is asked of every source whose gateway
//! can be asked by the shop's reference alone (Cashfree's `order_id` and
//! PayU's `txnid` are the merchant's own; Razorpay is asked for the orders
//! whose `receipt` it is). Which calls make up the asking
//! is the gateway's to say ([`GatewayApi::asks`]); each [`Ask`] is one API
//! call, and an answer may lead to more (a page after this one, the refunds
//! of a payment just found).

use std::collections::BTreeSet;

use oncehook_gateway_api::store::DueOrder;
use oncehook_gateways::Gateway;
use oncehook_gateways::reconcile::{Ask, GatewayApi, order_names};

/// The gateways an order names (its references and known payments).
pub fn named_gateways(order: &DueOrder) -> BTreeSet<String> {
    order
        .refs
        .iter()
        .map(|(g, _)| g.clone())
        .chain(order.payments.iter().map(|(p, _)| p.clone()))
        .collect()
}

/// Whether a source of `gateway` is asked about `order`.
pub fn asks_about(gateway: Gateway, order: &DueOrder) -> bool {
    let Some(api) = gateway.api() else {
        return false;
    };
    let named = named_gateways(order);
    if named.is_empty() {
        api.asks_by_shop_reference()
    } else {
        named.contains(gateway.as_str())
    }
}

/// The calls that ask a `gateway` source about `order` (none when the
/// order gives nothing to ask it by).
pub fn asks_for(gateway: Gateway, order: &DueOrder) -> Vec<Ask> {
    let Some(api) = gateway.api() else {
        return Vec::new();
    };
    asks_of(gateway, api, order)
}

/// What `api` asks about `order`, given the order's ids at `gateway`.
fn asks_of(gateway: Gateway, api: &dyn GatewayApi, order: &DueOrder) -> Vec<Ask> {
    api.asks(&order_names(
        gateway,
        &order.order_ref,
        &order.refs,
        &order.payments,
    ))
}

/// `asks` without those already asked or planned.
pub fn not_yet_asked(asks: Vec<Ask>, planned: &[Ask]) -> Vec<Ask> {
    asks.into_iter().filter(|a| !planned.contains(a)).collect()
}

#[cfg(test)]
#[path = "ask_tests.rs"]
mod tests;
