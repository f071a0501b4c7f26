//! The order events the ledger writes for the shop (docs/shop-integration.md),
//! beside the emails and in the same transaction. Each is derived from one
//! fact, and its id from that fact alone (a UUID v5 of the type, the order's
//! reference and the fact's key), so writing it again is a no-op and the
//! set of events of an order depends only on the set of its facts:
//!
//! - `order.paid`: the order is first paid (one per order);
//! - `order.refunded`: one per refund fact;
//! - `order.needs_refund` / `order.amount_mismatch`: one per capture that is
//!   not the primary payment (a second capture, a capture of a cancelled
//!   order / a capture of another amount or currency), whenever it came;
//! - `order.oversold`: its stock went below zero when it was paid;
//! - `order.cancelled`: the shop cancelled it;
//! - `order.payment_failed`: one per failed attempt, whatever the order's
//!   state when it arrives.
//!
//! The order's snapshot is not part of the event as written: it is rendered
//! when the event is sent, so every copy carries the latest version.

use crate::store::books::{NewAttempt, NewRefund, OrderRow};
use crate::store::order_events::NewOrderEvent;
use serde_json::{Value, json};
use uuid::Uuid;

use super::state::{FLAG_AMOUNT_MISMATCH, OrderState};
use oncehook_common::tenant::TenantId;

pub const PAID: &str = "order.paid";
pub const REFUNDED: &str = "order.refunded";
pub const NEEDS_REFUND: &str = "order.needs_refund";
pub const AMOUNT_MISMATCH: &str = "order.amount_mismatch";
pub const OVERSOLD: &str = "order.oversold";
pub const CANCELLED: &str = "order.cancelled";
pub const PAYMENT_FAILED: &str = "order.payment_failed";

/// Every type, in the order docs/shop-integration.md lists them.
pub const TYPES: [&str; 7] = [
    PAID,
    REFUNDED,
    NEEDS_REFUND,
    AMOUNT_MISMATCH,
    OVERSOLD,
    CANCELLED,
    PAYMENT_FAILED,
];

/// The namespace of the events' UUIDs (fixed: changing it would mint new
/// ids for facts already told).
const NAMESPACE: Uuid = Uuid::from_u128(0x6f6e_6365_686f_6f6b_2d6f_7264_6572_7376);

/// The id of the event of type `kind` caused by `fact` (`paid`,
/// `refund:razorpay:rfnd_1`, …) of the order `order_ref` of `tenant`. An
/// `order_ref` is unique within a tenant only, so another tenant's event
/// names its tenant; the default tenant's keep the ids they always had.
pub fn event_id(tenant: &str, kind: &str, order_ref: &str, fact: &str) -> String {
    // As a JSON array, so no part can run into the next.
    let name = if tenant == TenantId::DEFAULT {
        json!([kind, order_ref, fact])
    } else {
        json!([kind, order_ref, fact, { "tenant": tenant }])
    }
    .to_string();
    format!("evt_{}", Uuid::new_v5(&NAMESPACE, name.as_bytes()).simple())
}

fn event(kind: &'static str, order: &OrderRow, fact: &str, data: Value) -> NewOrderEvent {
    NewOrderEvent {
        id: event_id(&order.tenant_id, kind, &order.order_ref, fact),
        kind,
        order_id: order.id,
        data,
        trace_parent: None,
    }
}

/// The order is first paid.
pub fn paid(order: &OrderRow) -> NewOrderEvent {
    event(PAID, order, "paid", json!({}))
}

/// Its stock went below zero when it was paid.
pub fn oversold(order: &OrderRow) -> NewOrderEvent {
    event(OVERSOLD, order, "oversold", json!({}))
}

/// The shop cancelled it.
pub fn cancelled(order: &OrderRow) -> NewOrderEvent {
    event(CANCELLED, order, "cancelled", json!({}))
}

/// A refund fact recorded for it.
pub fn refunded(order: &OrderRow, r: &NewRefund) -> NewOrderEvent {
    event(
        REFUNDED,
        order,
        &format!("refund:{}:{}", r.provider, r.refund_id),
        json!({
            "provider": r.provider,
            "refund_id": r.refund_id,
            "payment_id": r.payment_id,
            "amount_minor": r.amount_minor,
            "currency": r.currency.as_deref().unwrap_or(&order.currency),
            "cumulative": r.cumulative,
        }),
    )
}

/// A failed attempt recorded for it.
pub fn payment_failed(order: &OrderRow, a: &NewAttempt) -> NewOrderEvent {
    event(
        PAYMENT_FAILED,
        order,
        &format!("failed:{}:{}", a.payment.provider, a.payment.payment_id),
        json!({
            "provider": a.payment.provider,
            "payment_id": a.payment.payment_id,
            "amount_minor": a.amount_minor,
            "currency": a.currency,
        }),
    )
}

/// The events `state` owes for the captures that are not its primary
/// payment (written again at every recompute; the ids make that a no-op).
pub fn owed(order: &OrderRow, state: &OrderState) -> Vec<NewOrderEvent> {
    state
        .owed
        .iter()
        .map(|((provider, payment_id), owed)| {
            let kind = if *owed == FLAG_AMOUNT_MISMATCH {
                AMOUNT_MISMATCH
            } else {
                NEEDS_REFUND
            };
            event(
                kind,
                order,
                &format!("capture:{provider}:{payment_id}"),
                json!({ "provider": provider, "payment_id": payment_id }),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_depend_on_the_fact_alone() {
        let d = TenantId::DEFAULT;
        let a = event_id(d, PAID, "ord_1", "paid");
        assert_eq!(a, event_id(d, PAID, "ord_1", "paid"));
        assert!(a.starts_with("evt_") && a.len() == 36, "{a}");
        assert_ne!(a, event_id(d, PAID, "ord_2", "paid"));
        assert_ne!(a, event_id(d, CANCELLED, "ord_1", "paid"));
        // No part runs into the next.
        assert_ne!(
            event_id(d, REFUNDED, "a", "b\nc"),
            event_id(d, REFUNDED, "a\nb", "c")
        );
    }

    #[test]
    fn the_default_tenants_ids_are_as_before_and_another_tenants_differ() {
        // The ids told before tenants existed, for the same facts.
        let before = format!(
            "evt_{}",
            Uuid::new_v5(
                &NAMESPACE,
                json!([PAID, "ord_1", "paid"]).to_string().as_bytes()
            )
            .simple()
        );
        assert_eq!(event_id(TenantId::DEFAULT, PAID, "ord_1", "paid"), before);
        let acme = event_id("acme", PAID, "ord_1", "paid");
        assert_ne!(acme, before);
        assert_ne!(acme, event_id("globex", PAID, "ord_1", "paid"));
    }
}
