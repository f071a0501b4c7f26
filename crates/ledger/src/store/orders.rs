//! Writing `orders`: the one statement that updates an order row, once
//! per order and transaction, with its state where it changed and always
//! its `version` and `updated_at` (no trigger moves them:
//! migrations/20261216000001_one_write_per_order.sql).
//! tests/tests/architecture.rs holds every other module to reading orders.

use sqlx::PgConnection;

/// An order's state as the ledger computed it, to write. Every order whose
/// facts changed in a transaction gets one (its `version` grows by one and
/// `updated_at` moves, in the same statement as its state); `changed` says
/// whether the state columns below differ from the row's.
#[derive(Debug, Clone)]
pub struct OrderUpdate {
    pub order_id: i64,
    /// The state columns differ from the row's (otherwise only the version
    /// and `updated_at` move: a fact was recorded that leaves them as they are).
    pub changed: bool,
    pub status: String,
    pub refunded_minor: i64,
    pub paid_by: Option<String>,
    /// Whether the order's items are out of stock after this transaction
    /// (taken when it was first paid, given back when it was cancelled).
    pub stock_applied: bool,
    /// The stock movement left a product below zero (an order whose stock
    /// is given back is no longer oversold).
    pub oversold: bool,
}

impl OrderUpdate {
    /// An order whose state stays as it is while a fact was recorded for
    /// it: only its version and `updated_at` move.
    pub fn noted(order_id: i64) -> OrderUpdate {
        OrderUpdate {
            order_id,
            changed: false,
            status: String::new(),
            refunded_minor: 0,
            paid_by: None,
            stock_applied: false,
            oversold: false,
        }
    }
}

/// Writes the orders' states, one statement for the batch and the one
/// write of each order row in its transaction: the state where it changed
/// (`paid_at` set when an order is first paid), and for every order its
/// `version` + 1 and `updated_at`. This is the only statement that updates
/// `orders` (tests/tests/architecture.rs holds it to that), so the version
/// grows exactly when the ledger recorded something for the order.
pub async fn write_orders(
    conn: &mut PgConnection,
    updates: &[OrderUpdate],
) -> Result<(), sqlx::Error> {
    if updates.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "UPDATE orders o SET
             status = CASE WHEN t.changed THEN t.status ELSE o.status END,
             refunded_minor = CASE WHEN t.changed THEN t.refunded_minor ELSE o.refunded_minor END,
             paid_by = CASE WHEN t.changed THEN t.paid_by ELSE o.paid_by END,
             paid_at = CASE WHEN NOT t.changed THEN o.paid_at
                            WHEN t.paid_by IS NULL THEN NULL ELSE COALESCE(o.paid_at, now()) END,
             stock_applied = CASE WHEN t.changed THEN t.stock_applied ELSE o.stock_applied END,
             oversold = CASE WHEN NOT t.changed THEN o.oversold
                             WHEN t.stock_applied THEN o.oversold OR t.oversold ELSE false END,
             version = o.version + 1,
             updated_at = now()
         FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::boolean[], $6::boolean[], $7::boolean[])
              AS t(id, status, refunded_minor, paid_by, stock_applied, oversold, changed)
         WHERE o.id = t.id",
        &updates.iter().map(|u| u.order_id).collect::<Vec<_>>(),
        &updates.iter().map(|u| u.status.clone()).collect::<Vec<_>>(),
        &updates.iter().map(|u| u.refunded_minor).collect::<Vec<_>>(),
        &updates.iter().map(|u| u.paid_by.clone()).collect::<Vec<_>>() as &[Option<String>],
        &updates.iter().map(|u| u.stock_applied).collect::<Vec<_>>(),
        &updates.iter().map(|u| u.oversold).collect::<Vec<_>>(),
        &updates.iter().map(|u| u.changed).collect::<Vec<_>>(),
    )
    .execute(conn)
    .await?;
    Ok(())
}
