//! What to ask which gateway about an order (pure: no I/O). An order names
//! the gateways it has dealt with through its references (Razorpay's
//! `order_…`, a Stripe `pi_…`) and the payments the ledger knows; those
//! sources are asked. An order that names none is asked of every source
//! that can be asked by the shop's reference alone (Cashfree's `order_id`
//! and PayU's `txnid` are the merchant's own). Each [`Ask`] is one API call;
//! an answer may lead to more (a page after this one, the refunds of a
//! payment just found).

use std::collections::BTreeSet;

use oncehook_common::store::reconcile::DueOrder;
use oncehook_gateways::reconcile::PAYU_MAX_TXNIDS;
use oncehook_gateways::{EventKind, Gateway, NormalizedEvent};

/// One API call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Razorpay `GET /v1/orders/{order_id}/payments`.
    RazorpayOrderPayments { order_id: String },
    /// Razorpay `GET /v1/payments/{payment_id}/refunds`.
    RazorpayRefunds { payment_id: String },
    /// Cashfree `GET /pg/orders/{order_id}/payments`.
    CashfreePayments { order_id: String },
    /// Cashfree `GET /pg/orders/{order_id}/refunds`.
    CashfreeRefunds { order_id: String },
    /// PayU `verify_payment` for these txnids.
    PayuVerify { txnids: Vec<String> },
    /// Stripe `GET /v1/payment_intents/{id}`.
    StripeIntent { id: String },
    /// Stripe `GET /v1/refunds?payment_intent={intent}`.
    StripeRefunds {
        intent: String,
        starting_after: Option<String>,
    },
    /// Stripe `GET /v1/events?delivery_success=false&created[gte]={since}`.
    StripeUndelivered {
        since: i64,
        starting_after: Option<String>,
    },
}

impl Ask {
    /// The call in an operator's words (`GET /v1/orders/order_1/payments`).
    pub fn describe(&self) -> String {
        let page = |after: &Option<String>| match after {
            Some(a) => format!("&starting_after={a}"),
            None => String::new(),
        };
        match self {
            Ask::RazorpayOrderPayments { order_id } => {
                format!("GET /v1/orders/{order_id}/payments")
            }
            Ask::RazorpayRefunds { payment_id } => format!("GET /v1/payments/{payment_id}/refunds"),
            Ask::CashfreePayments { order_id } => format!("GET /pg/orders/{order_id}/payments"),
            Ask::CashfreeRefunds { order_id } => format!("GET /pg/orders/{order_id}/refunds"),
            Ask::PayuVerify { txnids } => format!("POST verify_payment {}", txnids.join("|")),
            Ask::StripeIntent { id } => format!("GET /v1/payment_intents/{id}"),
            Ask::StripeRefunds {
                intent,
                starting_after,
            } => format!(
                "GET /v1/refunds?payment_intent={intent}{}",
                page(starting_after)
            ),
            Ask::StripeUndelivered {
                since,
                starting_after,
            } => format!(
                "GET /v1/events?delivery_success=false&created[gte]={since}{}",
                page(starting_after)
            ),
        }
    }

    /// The calls an answer leads to: the refunds of a Razorpay payment
    /// found captured (unless already asked), the next page of a list.
    pub fn follow_ups(&self, facts: &[NormalizedEvent], next_page: Option<String>) -> Vec<Ask> {
        match (self, next_page) {
            (Ask::RazorpayOrderPayments { .. }, _) => facts
                .iter()
                .filter(|f| f.kind == EventKind::Captured)
                .filter_map(|f| f.payment_id.clone())
                .map(|payment_id| Ask::RazorpayRefunds { payment_id })
                .collect(),
            (Ask::StripeRefunds { intent, .. }, Some(after)) => vec![Ask::StripeRefunds {
                intent: intent.clone(),
                starting_after: Some(after),
            }],
            (Ask::StripeUndelivered { since, .. }, Some(after)) => vec![Ask::StripeUndelivered {
                since: *since,
                starting_after: Some(after),
            }],
            _ => Vec::new(),
        }
    }
}

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
    let named = named_gateways(order);
    if named.is_empty() {
        matches!(gateway, Gateway::Cashfree | Gateway::Payu)
    } else {
        named.contains(gateway.as_str())
    }
}

/// The calls that ask a `gateway` source about `order` (none when the
/// order gives nothing to ask it by).
pub fn asks_for(gateway: Gateway, order: &DueOrder) -> Vec<Ask> {
    let name = gateway.as_str();
    let refs: Vec<String> = order
        .refs
        .iter()
        .filter(|(g, _)| g == name)
        .map(|(_, r)| r.clone())
        .collect();
    let payments: Vec<String> = order
        .payments
        .iter()
        .filter(|(p, _)| p == name)
        .map(|(_, id)| id.clone())
        .collect();
    match gateway {
        Gateway::Razorpay => razorpay(refs, payments),
        Gateway::Cashfree => cashfree(refs, &order.order_ref),
        Gateway::Payu => payu(refs, payments, &order.order_ref),
        Gateway::Stripe => stripe(refs, payments),
        _ => Vec::new(),
    }
}

/// Each Razorpay order's payments, and the refunds of each known payment.
fn razorpay(orders: Vec<String>, payments: Vec<String>) -> Vec<Ask> {
    orders
        .into_iter()
        .map(|order_id| Ask::RazorpayOrderPayments { order_id })
        .chain(
            payments
                .into_iter()
                .map(|payment_id| Ask::RazorpayRefunds { payment_id }),
        )
        .collect()
}

/// The payments and refunds of each Cashfree order id (the shop's own
/// reference when the order has no Cashfree reference).
fn cashfree(mut ids: Vec<String>, order_ref: &str) -> Vec<Ask> {
    if ids.is_empty() {
        ids.push(order_ref.to_owned());
    }
    ids.into_iter()
        .flat_map(|order_id| {
            [
                Ask::CashfreePayments {
                    order_id: order_id.clone(),
                },
                Ask::CashfreeRefunds { order_id },
            ]
        })
        .collect()
}

/// `verify_payment` for every txnid the order may have used (its PayU
/// references, known payments and its own reference), 100 at a time.
fn payu(refs: Vec<String>, payments: Vec<String>, order_ref: &str) -> Vec<Ask> {
    let txnids: BTreeSet<String> = refs
        .into_iter()
        .chain(payments)
        .chain([order_ref.to_owned()])
        .filter(|t| !t.is_empty() && !t.contains('|'))
        .collect();
    let txnids: Vec<String> = txnids.into_iter().collect();
    txnids
        .chunks(PAYU_MAX_TXNIDS)
        .map(|c| Ask::PayuVerify { txnids: c.to_vec() })
        .collect()
}

/// Each PaymentIntent's state and refunds (a Checkout session reference
/// is not an intent).
fn stripe(refs: Vec<String>, payments: Vec<String>) -> Vec<Ask> {
    let intents: BTreeSet<String> = refs
        .into_iter()
        .chain(payments)
        .filter(|id| id.starts_with("pi_"))
        .collect();
    intents
        .into_iter()
        .flat_map(|id| {
            [
                Ask::StripeIntent { id: id.clone() },
                Ask::StripeRefunds {
                    intent: id,
                    starting_after: None,
                },
            ]
        })
        .collect()
}

/// Removes calls made or planned already for this order (a refunds call a
/// payments answer leads to may be planned already).
pub fn not_yet_asked(asks: Vec<Ask>, planned: &[Ask]) -> Vec<Ask> {
    asks.into_iter().filter(|a| !planned.contains(a)).collect()
}

#[cfg(test)]
#[path = "ask_tests.rs"]
mod tests;
