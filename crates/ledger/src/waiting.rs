//! Orders created after their webhooks: a customer may pay while the
//! shop's create call is still in flight, so the capture names an order no
//! order has yet. The ledger parks such an event with the reference it
//! names; the ledger's `Create` road (`POST /v1/orders` in `oncehook-api`)
//! takes [`lock_refs`] before inserting the order and [`apply_waiting`]
//! after, in the same transaction, and the waiting events are applied
//! there — facts, recompute, stock, emails, their outcomes — exactly as the
//! worker would.
//! The references' advisory locks make a park and a creation never miss
//! each other; events still waiting after `ONCEHOOK_UNLINKED_TTL` are
//! dead-lettered by the sweeper (`parking`).

use crate::store::books::{self, GatewayRef};
use crate::store::parking::{self as parking_store, Parked};
use sqlx::PgConnection;

use super::parking::read_back;
use crate::deliveries::{Keys, deliveries_in};
use oncehook_pipeline::{Delivery, EffectError};

/// Takes the advisory locks of an order's references, before it is inserted.
pub(crate) async fn lock_refs(
    conn: &mut PgConnection,
    order_ref: &str,
    gateway_refs: &[GatewayRef],
) -> Result<(), sqlx::Error> {
    let mut refs: Vec<String> = gateway_refs.iter().map(|g| g.gateway_ref.clone()).collect();
    refs.push(order_ref.to_owned());
    refs.sort_unstable();
    refs.dedup();
    books::lock_keys(conn, &[], &refs).await
}

/// Applies the events waiting for the order just inserted with these
/// references (in `conn`'s transaction, after [`lock_refs`]: the `Create`
/// and `Known` roads) through the same road as any delivery; returns how
/// many were applied.
pub(crate) async fn apply_waiting(
    conn: &mut PgConnection,
    order_ref: &str,
    gateway_refs: &[GatewayRef],
) -> Result<usize, sqlx::Error> {
    let (gateways, refs): (Vec<String>, Vec<String>) = gateway_refs
        .iter()
        .map(|g| (g.gateway.clone(), g.gateway_ref.clone()))
        .unzip();
    let parked = parking_store::take_for_order(conn, order_ref, &gateways, &refs).await?;
    if parked.is_empty() {
        return Ok(0);
    }
    let (deliveries, mut unreadable) = read(parked);
    let list: Vec<&Delivery> = deliveries.iter().map(|(d, _)| d).collect();
    let applied = match deliveries_in(conn, &list, Keys::Take).await {
        Ok(effects) => {
            effects.record(conn, list.iter().map(|d| &d.key)).await?;
            for (delivery, outcome) in list.iter().zip(&effects.applied) {
                tracing::info!(event_id = %delivery.event.event_id, %order_ref, outcome = outcome.outcome.as_str(), "waiting event applied to its new order");
            }
            effects.applied.len()
        }
        Err(EffectError::Database(err)) => return Err(err),
        Err(EffectError::Permanent(rejection)) => {
            // Read when parked, so not expected: keep them for the sweeper.
            tracing::error!(%order_ref, error = %rejection, "waiting events could not be applied; left parked");
            unreadable.extend(deliveries.into_iter().map(|(_, p)| p));
            0
        }
    };
    parking_store::park_many(conn, &unreadable).await?;
    Ok(applied)
}

/// The parked rows as deliveries (`parking::read_back`); those that can
/// no longer be read apart.
fn read(parked: Vec<Parked>) -> (Vec<(Delivery, Parked)>, Vec<Parked>) {
    let mut deliveries = Vec::new();
    let mut unreadable = Vec::new();
    for p in parked {
        match read_back(&p) {
            Ok(delivery) => deliveries.push((delivery, p)),
            Err(error) => {
                tracing::error!(event_id = %p.key.event_id, %error, "a waiting event can no longer be read; left parked");
                unreadable.push(p);
            }
        }
    }
    (deliveries, unreadable)
}
