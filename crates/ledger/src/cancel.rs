//! Cancelling an order: the shop gives up on it (the customer left). A
//! cancellation is one more fact (`order_cancellations`); the order is
//! recomputed from all its facts in the same transaction, like after any
//! other fact, so a capture that came before is owed back (`needs_refund`)
//! and its stock given back, and one that comes after is recorded and owed
//! back and takes no stock: the same books whatever the order of the two.
//! Emails already written stay (a confirmation cannot be unsent); the
//! order events it causes (`order.cancelled`, `order.needs_refund`) are
//! written in the same transaction, through the ledger's one tail like any
//! fact's: counted, and joined to the trace of the caller's request.

use std::collections::BTreeMap;

use sqlx::PgConnection;

use crate::input::Cancel;
use crate::plan::Plan;
use crate::store::books;
use crate::tail::follow_locked;

/// What cancelling did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The order is cancelled now.
    Now,
    /// It was cancelled before: nothing changed.
    Already,
    /// No order has this reference.
    Unknown,
}

/// Cancels the order in `conn`'s transaction ([`Cancel`]): the
/// cancellation is recorded, then the ledger's one tail runs for the order,
/// its consequences joined to the caller's trace.
pub(crate) async fn cancel(
    conn: &mut PgConnection,
    Cancel {
        order_ref,
        by,
        reason,
        trace_parent,
    }: Cancel<'_>,
) -> Result<Cancelled, sqlx::Error> {
    let refs = [order_ref.to_owned()];
    books::lock_keys(conn, &[], &refs).await?;
    let locked = books::lock_orders(conn, &refs, &[], &[]).await?.orders;
    let Some(mut order) = locked
        .into_iter()
        .map(|l| l.order)
        .find(|o| o.order_ref == order_ref)
    else {
        return Ok(Cancelled::Unknown);
    };
    if !books::record_cancellation(conn, order.id, by, reason).await? {
        return Ok(Cancelled::Already);
    }
    order.cancelled = true;
    let id = order.id;
    let plan = Plan {
        orders: BTreeMap::from([(id, order)]),
        ..Plan::default()
    };
    let traces = trace_parent
        .map(|tp| (id, tp.to_owned()))
        .into_iter()
        .collect();
    follow_locked(conn, &plan, traces).await?;
    tracing::info!(%order_ref, cancelled_by = by, "order cancelled");
    Ok(Cancelled::Now)
}
