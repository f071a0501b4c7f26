//! Writing `orders`: the one statement that updates an order row, once
//! per order and transaction, with its state where it changed and always
//! its `version` and `updated_at` (no trigger moves them:
//! migrations/20261216000001_one_write_per_order.sql) — and, in the same
//! statement, what the new states bring with them: the captures' flags,
//! the stock and the order events (one round trip where it took four).
//! tests/tests/architecture.rs holds every other module to reading orders.

use sqlx::PgConnection;

use super::books::FlagChange;
use super::order_events::NewOrderEvent;

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

/// What a transaction of the ledger writes once it has computed the
/// orders' new states: the captures' flags, the products' stock, the
/// orders and the order events they owe.
#[derive(Debug, Default)]
pub struct Writes {
    pub flags: Vec<FlagChange>,
    /// `(sku, qty)`: the quantity taken off each product's stock (given
    /// back when negative); the products were locked with the orders.
    pub stock: Vec<(String, i32)>,
    pub orders: Vec<OrderUpdate>,
    pub events: Vec<NewOrderEvent>,
}

impl Writes {
    fn is_empty(&self) -> bool {
        self.flags.is_empty()
            && self.stock.is_empty()
            && self.orders.is_empty()
            && self.events.is_empty()
    }
}

/// Writes it all in one statement, and with it the one write of each
/// order row in its transaction: the state where it changed (`paid_at`
/// set when an order is first paid), and for every order its `version` +
/// 1 and `updated_at`. This is the only statement that updates `orders`
/// (tests/tests/architecture.rs holds it to that), so the version grows
/// exactly when the ledger recorded something for the order. Order events
/// are idempotent on their id; returns `(id, type)` of those written now.
pub async fn write(
    conn: &mut PgConnection,
    w: &Writes,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    if w.is_empty() {
        return Ok(Vec::new());
    }
    let (f, o, e) = (&w.flags, &w.orders, &w.events);
    let rows = sqlx::query!(
        "WITH flags AS (
             UPDATE payments p SET flag = t.flag
             FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS t(order_id, provider, payment_id, flag)
             WHERE p.order_id = t.order_id AND p.provider = t.provider AND p.payment_id = t.payment_id
               AND p.status = 'captured'
             RETURNING 1),
         stock AS (
             UPDATE products p SET stock = p.stock - t.qty
             FROM unnest($5::text[], $6::int[]) AS t(sku, qty)
             WHERE p.sku = t.sku
             RETURNING 1),
         written AS (
             UPDATE orders o SET
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
             FROM unnest($7::bigint[], $8::text[], $9::bigint[], $10::text[], $11::boolean[], $12::boolean[], $13::boolean[])
                  AS t(id, status, refunded_minor, paid_by, stock_applied, oversold, changed)
             WHERE o.id = t.id
             RETURNING 1),
         events AS (
             INSERT INTO order_events (id, type, order_id, data, trace_parent)
             SELECT * FROM unnest($14::text[], $15::text[], $16::bigint[], $17::jsonb[], $18::text[])
             ON CONFLICT (id) DO NOTHING
             RETURNING id, type)
         SELECT id AS \"id!\", type AS \"kind!\" FROM events",
        &f.iter().map(|c| c.order_id).collect::<Vec<_>>(),
        &f.iter().map(|c| c.payment.provider.clone()).collect::<Vec<_>>(),
        &f.iter().map(|c| c.payment.payment_id.clone()).collect::<Vec<_>>(),
        &f.iter().map(|c| c.flag.clone()).collect::<Vec<_>>() as &[Option<String>],
        &w.stock.iter().map(|(sku, _)| sku.clone()).collect::<Vec<_>>(),
        &w.stock.iter().map(|(_, qty)| *qty).collect::<Vec<_>>(),
        &o.iter().map(|u| u.order_id).collect::<Vec<_>>(),
        &o.iter().map(|u| u.status.clone()).collect::<Vec<_>>(),
        &o.iter().map(|u| u.refunded_minor).collect::<Vec<_>>(),
        &o.iter().map(|u| u.paid_by.clone()).collect::<Vec<_>>() as &[Option<String>],
        &o.iter().map(|u| u.stock_applied).collect::<Vec<_>>(),
        &o.iter().map(|u| u.oversold).collect::<Vec<_>>(),
        &o.iter().map(|u| u.changed).collect::<Vec<_>>(),
        &e.iter().map(|x| x.id.clone()).collect::<Vec<_>>(),
        &e.iter().map(|x| x.kind.to_owned()).collect::<Vec<_>>(),
        &e.iter().map(|x| x.order_id).collect::<Vec<_>>(),
        &e.iter().map(|x| x.data.clone()).collect::<Vec<_>>(),
        &e.iter().map(|x| x.trace_parent.clone()).collect::<Vec<_>>() as &[Option<String>],
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.kind)).collect())
}
