//! The order ledger's tables: `orders` (with `order_items` and the
//! `products` whose stock they move) and the facts recorded for them —
//! `payments` (one per provider, payment and status), `refunds` (one per
//! refund id, or per cumulative total) and `payment_links` (which order a
//! payment belongs to). The worker's commerce effect decides; this module
//! only reads and writes. Operators' reads (trace, stats) are in `reads`.

use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::outbox::NewEmail;

mod reads;
pub use reads::{
    Attention, ItemStock, OrderDetail, PaymentRecord, RefundRecord, attention, items_of,
    order_by_ref, payments_of, refunds_of,
};

/// An order row, locked for the transaction.
#[derive(Debug, Clone)]
pub struct OrderRow {
    pub id: i64,
    pub order_ref: String,
    pub status: String,
    pub amount_minor: i64,
    pub currency: String,
    pub customer_email: String,
    pub paid_by: Option<String>,
    pub refunded_minor: i64,
    pub stock_applied: bool,
}

/// Locks the order with this reference.
pub async fn lock_order(
    conn: &mut PgConnection,
    order_ref: &str,
) -> Result<Option<OrderRow>, sqlx::Error> {
    sqlx::query_as!(
        OrderRow,
        "SELECT id, order_ref, status, amount_minor, currency, customer_email, paid_by, refunded_minor, stock_applied
         FROM orders WHERE order_ref = $1 FOR UPDATE",
        order_ref
    )
    .fetch_optional(conn)
    .await
}

/// Locks, for a batch of events (group commit), the orders with these
/// references, in id order, so that batches sharing orders wait for each
/// other instead of deadlocking. Their products are locked only at the end
/// of the batch ([`lock_stock`]), in sku order. Returns how many orders
/// were locked.
pub async fn lock_orders(
    conn: &mut PgConnection,
    order_refs: &[String],
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"WITH o AS MATERIALIZED (
               SELECT id FROM orders WHERE order_ref = ANY($1::text[])
               ORDER BY id FOR UPDATE)
           SELECT count(*) AS "orders!" FROM o"#,
        order_refs
    )
    .fetch_one(conn)
    .await
}

/// One item of an order whose stock moves at the end of a batch, with its
/// product's stock before the batch moved any.
#[derive(Debug, Clone)]
pub struct ItemToMove {
    pub order_id: i64,
    pub sku: String,
    pub qty: i32,
    pub stock: i32,
}

/// Locks the products of these orders in sku order (one lock order for
/// every batch and every single delivery) and returns the orders' items
/// with their products' current stock.
pub async fn lock_stock(
    conn: &mut PgConnection,
    order_ids: &[i64],
) -> Result<Vec<ItemToMove>, sqlx::Error> {
    sqlx::query_as!(
        ItemToMove,
        r#"WITH locked AS MATERIALIZED (
               SELECT p.sku, p.stock FROM products p
               WHERE p.sku IN (SELECT sku FROM order_items WHERE order_id = ANY($1::bigint[]))
               ORDER BY p.sku FOR UPDATE)
           SELECT i.order_id AS "order_id!", i.sku AS "sku!", i.qty AS "qty!", l.stock AS "stock!"
           FROM order_items i JOIN locked l ON l.sku = i.sku
           WHERE i.order_id = ANY($1::bigint[])
           ORDER BY i.order_id, i.sku"#,
        order_ids
    )
    .fetch_all(conn)
    .await
}

/// Takes `qty[i]` off the stock of `sku[i]` (products locked by
/// [`lock_stock`]), one statement for a whole batch.
pub async fn take_stock(
    conn: &mut PgConnection,
    skus: &[String],
    qtys: &[i32],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE products p SET stock = p.stock - t.qty
         FROM unnest($1::text[], $2::int[]) AS t(sku, qty)
         WHERE p.sku = t.sku",
        skus,
        qtys
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks orders whose stock movement left a product below zero.
pub async fn mark_oversold(conn: &mut PgConnection, order_ids: &[i64]) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE orders SET oversold = true WHERE id = ANY($1::bigint[])",
        order_ids
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Locks the order a payment is linked to.
pub async fn lock_order_of_payment(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
) -> Result<Option<OrderRow>, sqlx::Error> {
    sqlx::query_as!(
        OrderRow,
        "SELECT o.id, o.order_ref, o.status, o.amount_minor, o.currency, o.customer_email, o.paid_by, o.refunded_minor, o.stock_applied
         FROM payment_links l JOIN orders o ON o.id = l.order_id
         WHERE l.provider = $1 AND l.payment_id = $2
         FOR UPDATE OF o",
        provider,
        payment_id
    )
    .fetch_optional(conn)
    .await
}

/// What recording an event's fact did.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// A new payment → order link was written.
    pub linked: bool,
    /// The fact is new.
    pub recorded: bool,
    /// Every capture and refund of the order, the new fact included: read
    /// in the same statement, after the order's lock was taken (so it sees
    /// every fact committed before), saving the ledger a round trip.
    pub facts: Vec<FactRow>,
}

/// A payment attempt (`captured`, `failed`, `authorized`).
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub provider: &'a str,
    pub payment_id: &'a str,
    pub order_id: i64,
    pub status: &'a str,
    pub amount_minor: Option<i64>,
    pub currency: Option<&'a str>,
    pub event_id: &'a str,
    /// Also link the payment to the order (the event named both).
    pub link: bool,
}

/// Records an attempt (and the link) in one statement.
pub async fn record_attempt(
    conn: &mut PgConnection,
    a: Attempt<'_>,
) -> Result<Recorded, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH link AS (
               INSERT INTO payment_links (provider, payment_id, order_id, event_id)
               SELECT $1::text, $2::text, $3::bigint, $7::text WHERE $8::boolean
               ON CONFLICT DO NOTHING RETURNING 1),
           fact AS (
               INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
               VALUES ($1, $2, $3, $4, $5, $6, $7)
               ON CONFLICT (provider, payment_id, status) DO NOTHING
               RETURNING provider, payment_id, amount_minor, currency, status)
           SELECT EXISTS (SELECT 1 FROM link) AS "linked!", EXISTS (SELECT 1 FROM fact) AS "recorded!",
                  COALESCE((SELECT jsonb_agg(f) FROM (
                      SELECT capture, provider, payment_id, amount_minor, currency, flag, cumulative
                      FROM order_facts WHERE order_id = $3
                      UNION ALL
                      SELECT true, provider, payment_id, amount_minor, currency, NULL, false
                      FROM fact WHERE status = 'captured') f), '[]'::jsonb) AS "facts!: Json<Vec<FactRow>>""#,
        a.provider,
        a.payment_id,
        a.order_id,
        a.status,
        a.amount_minor,
        a.currency,
        a.event_id,
        a.link,
    )
    .fetch_one(conn)
    .await?;
    Ok(Recorded {
        linked: row.linked,
        recorded: row.recorded,
        facts: row.facts.0,
    })
}

/// A refund, or (`cumulative`) a payment's refunded total.
#[derive(Debug, Clone, Copy)]
pub struct Refund<'a> {
    pub provider: &'a str,
    pub refund_id: &'a str,
    pub payment_id: Option<&'a str>,
    pub order_id: i64,
    pub amount_minor: i64,
    pub currency: Option<&'a str>,
    pub event_id: &'a str,
    pub cumulative: bool,
    /// Also link the payment to the order (the event named both).
    pub link: bool,
}

/// Records a refund (and the link) in one statement.
pub async fn record_refund(
    conn: &mut PgConnection,
    r: Refund<'_>,
) -> Result<Recorded, sqlx::Error> {
    let row = sqlx::query!(
        r#"WITH link AS (
               INSERT INTO payment_links (provider, payment_id, order_id, event_id)
               SELECT $1::text, $2::text, $3::bigint, $7::text WHERE $8::boolean AND $2::text IS NOT NULL
               ON CONFLICT DO NOTHING RETURNING 1),
           fact AS (
               INSERT INTO refunds (provider, refund_id, payment_id, order_id, amount_minor, currency, event_id, cumulative)
               VALUES ($1, $4, $2, $3, $5, $6, $7, $9)
               ON CONFLICT (provider, refund_id) DO NOTHING
               RETURNING provider, payment_id, amount_minor, currency, cumulative)
           SELECT EXISTS (SELECT 1 FROM link) AS "linked!", EXISTS (SELECT 1 FROM fact) AS "recorded!",
                  COALESCE((SELECT jsonb_agg(f) FROM (
                      SELECT capture, provider, payment_id, amount_minor, currency, flag, cumulative
                      FROM order_facts WHERE order_id = $3
                      UNION ALL
                      SELECT false, provider, payment_id, amount_minor, currency, NULL, cumulative
                      FROM fact) f), '[]'::jsonb) AS "facts!: Json<Vec<FactRow>>""#,
        r.provider,
        r.payment_id,
        r.order_id,
        r.refund_id,
        r.amount_minor,
        r.currency,
        r.event_id,
        r.link,
        r.cumulative,
    )
    .fetch_one(conn)
    .await?;
    Ok(Recorded {
        linked: row.linked,
        recorded: row.recorded,
        facts: row.facts.0,
    })
}

/// Links a payment to an order; `false` if it was linked already.
pub async fn link(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
    order_id: i64,
    event_id: &str,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query_scalar!(
        r#"INSERT INTO payment_links (provider, payment_id, order_id, event_id)
           VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1 AS "one!""#,
        provider,
        payment_id,
        order_id,
        event_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// One fact the order's state is computed from: a capture (`capture`) or a refund.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct FactRow {
    pub capture: bool,
    pub provider: String,
    pub payment_id: Option<String>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// The capture's current flag.
    pub flag: Option<String>,
    pub cumulative: bool,
}

/// Every capture and refund recorded for an order.
pub async fn facts(conn: &mut PgConnection, order_id: i64) -> Result<Vec<FactRow>, sqlx::Error> {
    sqlx::query_as!(
        FactRow,
        r#"SELECT capture AS "capture!", provider AS "provider!", payment_id AS "payment_id?",
                  amount_minor AS "amount_minor?", currency AS "currency?", flag AS "flag?",
                  cumulative AS "cumulative!"
           FROM order_facts WHERE order_id = $1"#,
        order_id
    )
    .fetch_all(conn)
    .await
}

/// Sets the flag of a captured payment.
pub async fn set_capture_flag(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
    order_id: i64,
    flag: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE payments SET flag = $4
         WHERE provider = $1 AND payment_id = $2 AND order_id = $3 AND status = 'captured'",
        provider,
        payment_id,
        order_id,
        flag
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The order's state as the ledger computed it.
#[derive(Debug, Clone, Copy)]
pub struct OrderState<'a> {
    pub status: &'a str,
    pub refunded_minor: i64,
    pub paid_by: Option<&'a str>,
    /// Stock moved in this transaction (`stock_applied` becomes true).
    pub stock_moved: bool,
    /// The stock movement left a product below zero.
    pub oversold: bool,
}

/// Writes the order's state; `paid_at` is set when it is first paid. With
/// `email` (the confirmation when the order is first paid), the email goes
/// into `email_outbox` in the same statement (one round trip; a second
/// write with the same `dedup_key` is a no-op, as in [`super::outbox::write`]).
pub async fn write_order(
    conn: &mut PgConnection,
    order_id: i64,
    s: OrderState<'_>,
    email: Option<NewEmail<'_>>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"WITH o AS (
               UPDATE orders SET status = $2, refunded_minor = $3, paid_by = $4,
                   paid_at = CASE WHEN $4::text IS NULL THEN NULL ELSE COALESCE(paid_at, now()) END,
                   stock_applied = stock_applied OR $5,
                   oversold = oversold OR $6
               WHERE id = $1 RETURNING id),
           e AS (
               INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body)
               SELECT $7, o.id, $8, $9, $10, $11, $12 FROM o WHERE $9::text IS NOT NULL
               ON CONFLICT (dedup_key) DO NOTHING
               RETURNING id)
           SELECT (SELECT count(*) FROM o) AS "orders!", (SELECT count(*) FROM e) AS "emails!""#,
        order_id,
        s.status,
        s.refunded_minor,
        s.paid_by,
        s.stock_moved,
        s.oversold,
        Uuid::new_v4(),
        email.map(|e| e.kind),
        email.map(|e| e.dedup_key),
        email.map(|e| e.to),
        email.map(|e| e.subject),
        email.map(|e| e.body),
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// One product's stock after an order's decrement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StockMove {
    pub sku: String,
    pub qty: i32,
    pub stock: i32,
}

/// Decrements stock for every item of the order in one statement; the
/// products are locked in sku order first (the `ORDER BY … FOR UPDATE`
/// subquery) so concurrent orders sharing products cannot deadlock.
pub async fn decrement_stock(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<Vec<StockMove>, sqlx::Error> {
    let mut moves = sqlx::query_as!(
        StockMove,
        "WITH locked AS MATERIALIZED (
             SELECT p.sku FROM products p JOIN order_items i ON i.sku = p.sku
             WHERE i.order_id = $1 ORDER BY p.sku FOR UPDATE OF p)
         UPDATE products p SET stock = p.stock - i.qty
         FROM order_items i, locked l
         WHERE i.order_id = $1 AND i.sku = p.sku AND l.sku = p.sku
         RETURNING p.sku, i.qty, p.stock",
        order_id
    )
    .fetch_all(conn)
    .await?;
    moves.sort();
    Ok(moves)
}

/// Adds a product unless its sku exists (stock is left as it is).
pub async fn upsert_product(
    conn: &mut PgConnection,
    sku: &str,
    name: &str,
    stock: i32,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO products (sku, name, stock) VALUES ($1, $2, $3) ON CONFLICT (sku) DO NOTHING",
        sku,
        name,
        stock
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A pending order to create.
#[derive(Debug, Clone, Copy)]
pub struct NewOrder<'a> {
    pub order_ref: &'a str,
    pub customer_email: &'a str,
    pub amount_minor: i64,
    pub currency: &'a str,
}

/// Creates a pending order; `None` if one with this reference exists.
pub async fn insert_order(
    conn: &mut PgConnection,
    o: NewOrder<'_>,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO orders (order_ref, customer_email, amount_minor, currency) VALUES ($1, $2, $3, $4)
         ON CONFLICT (order_ref) DO NOTHING RETURNING id",
        o.order_ref,
        o.customer_email,
        o.amount_minor,
        o.currency
    )
    .fetch_optional(conn)
    .await
}

/// Adds an item to an order.
pub async fn insert_order_item(
    conn: &mut PgConnection,
    order_id: i64,
    sku: &str,
    qty: i32,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO order_items (order_id, sku, qty) VALUES ($1, $2, $3)",
        order_id,
        sku,
        qty
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The reference of the order a payment belongs to (by a recorded attempt
/// or a link), for any provider; `None` when no order is known for it.
pub async fn order_ref_of_payment(
    conn: &mut PgConnection,
    payment_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT order_ref FROM orders WHERE id IN (
             SELECT order_id FROM payments WHERE payment_id = $1
             UNION SELECT order_id FROM payment_links WHERE payment_id = $1)
         ORDER BY id LIMIT 1",
        payment_id
    )
    .fetch_optional(conn)
    .await
}
