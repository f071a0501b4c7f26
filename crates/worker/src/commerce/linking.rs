//! Linking a payment to its order, and applying what waited for the link:
//! events that named only the payment were parked; when an event names both
//! the payment and its order, the parked events are taken back and their
//! facts recorded in the same transaction (under the payment's advisory
//! lock, so a park and a link never miss each other).

use oncehook_common::store::ledger::{self as store, OrderRow as Order};
use oncehook_common::store::{dedup, parking};
use oncehook_gateways::NormalizedEvent;
use sqlx::PgConnection;

use super::emails::write_refund_email;
use super::settle::{StockMoves, settle};
use super::{Fact, fact_of, record};
use crate::effect::{Applied, EffectError, Outcome};
use crate::processor;

/// An event oncehook does not act on may still link a payment to an order
/// (Stripe `checkout.session.expired` names both): record the link, apply
/// what was parked for it, and otherwise ignore the event.
pub(super) async fn link_only(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    defer: Option<&mut StockMoves>,
) -> Result<Applied, EffectError> {
    let ignored = || {
        Ok(Applied::new(
            Outcome::Ignored,
            format!("event type {} is not acted on", event.event_type),
        ))
    };
    let (Some(order_ref), Some(payment_id)) = (&event.order_ref, &event.payment_id) else {
        return ignored();
    };
    let Some(order) = store::lock_order(conn, order_ref).await? else {
        return ignored();
    };
    let linked = store::link(
        conn,
        event.provider.as_str(),
        payment_id,
        order.id,
        &event.event_id,
    )
    .await?;
    let adopted = if linked {
        adopt(conn, event, payment_id, &order).await?
    } else {
        0
    };
    if adopted == 0 {
        return ignored();
    }
    let state = settle(conn, &order, None, defer).await?;
    Ok(Applied::new(
        Outcome::Applied,
        format!(
            "{} linked payment {payment_id} to order {}: {adopted} parked fact(s) applied; order is {}",
            event.event_type, order.order_ref, state.status
        ),
    ))
}

/// Applies the events parked for a payment that `event` just linked to
/// `order`; returns how many facts that added.
pub(super) async fn adopt(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    payment_id: &str,
    order: &Order,
) -> Result<usize, EffectError> {
    let provider = event.provider.as_str();
    parking::lock_payment(conn, provider, payment_id).await?;
    let mut added = 0;
    for parked in parking::take(conn, provider, payment_id).await? {
        let decoded = match processor::decode(&parked.envelope, &parked.key.event_id) {
            Ok(decoded) => decoded,
            Err(rejection) => {
                // It was understood when parked; keep it for the sweeper
                // (and the DLQ) rather than lose it.
                tracing::error!(event_id = %parked.key.event_id, error = %rejection, "a parked event can no longer be read; left parked");
                parking::park(conn, &parked).await?;
                continue;
            }
        };
        let Some(fact) = fact_of(&decoded.event)? else {
            continue;
        };
        let recorded = record(conn, &decoded.event, &fact, order).await?;
        if recorded.recorded {
            added += 1;
            if let Fact::Refund { refund_id, amount } = fact {
                write_refund_email(conn, &decoded.event, order, refund_id, amount).await?;
            }
        }
        let detail = format!(
            "applied when {} linked payment {payment_id} to order {}",
            event.event_id, order.order_ref
        );
        dedup::finish(conn, &parked.key, Outcome::Applied.as_str(), &detail).await?;
        tracing::info!(event_id = %decoded.event.event_id, linked_by = %event.event_id, order_ref = %order.order_ref, "parked event applied");
    }
    Ok(added)
}
