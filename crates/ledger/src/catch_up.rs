//! Catching orders up (docs/operations.md, "Deploying a new version"):
//! orders whose facts something other than this release's ledger
//! recorded — an older release's worker or API while a release rolls
//! out — are recomputed from all their facts, as the ledger's tail does
//! for every order a new fact touches: their state and stock, the order
//! events that state owes and their refund intents. Events and intents
//! are written under ids derived from the facts, so catching an order up
//! again writes nothing new (its version moves once more, its state
//! stays).
//!
//! This is the road's head; who takes it, and when, is `rollout`'s.

use std::collections::BTreeMap;

use sqlx::PgConnection;

use crate::input::CatchUp;
use crate::plan::Plan;
use crate::store::books;
use crate::tail::{follow_locked, sorted};

/// The [`CatchUp`] road: locks the orders (their reference's advisory
/// lock, then the rows in id order, as every road does) and sends them
/// down the ledger's one tail as if a fact had just come for each.
/// Returns how many orders it found.
pub(crate) async fn catch_up(
    conn: &mut PgConnection,
    CatchUp { order_refs }: CatchUp<'_>,
) -> Result<usize, sqlx::Error> {
    let refs = sorted(order_refs.iter().cloned());
    if refs.is_empty() {
        return Ok(0);
    }
    books::lock_keys(conn, &[], &refs).await?;
    let locked = books::lock_orders(conn, &refs, &[], &[]).await?.orders;
    let plan = Plan {
        orders: locked
            .into_iter()
            .map(|l| (l.order.id, l.order))
            .filter(|(_, o)| refs.binary_search(&o.order_ref).is_ok())
            .collect::<BTreeMap<_, _>>(),
        ..Plan::default()
    };
    follow_locked(conn, &plan, BTreeMap::new()).await?;
    Ok(plan.orders.len())
}
