//! The ledger as operators read it (`oncehookctl trace`, `stats`, `send`):
//! an order with its items, payments and refunds, and the counts of books
//! that need a human. Plain reads, no locks; re-exported from the ledger.

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

/// An order as operators read it (`oncehookctl trace`, `send`).
#[derive(Debug, Clone, Serialize)]
pub struct OrderDetail {
    #[serde(skip)]
    pub id: i64,
    pub order_ref: String,
    pub customer_email: String,
    pub amount_minor: i64,
    pub currency: String,
    pub status: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub paid_at: Option<OffsetDateTime>,
    pub paid_by: Option<String>,
    pub refunded_minor: i64,
    pub oversold: bool,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// The order with this reference (not locked).
pub async fn order_by_ref(
    conn: &mut PgConnection,
    order_ref: &str,
) -> Result<Option<OrderDetail>, sqlx::Error> {
    sqlx::query_as!(
        OrderDetail,
        "SELECT id, order_ref, customer_email, amount_minor, currency, status, paid_at, paid_by,
                refunded_minor, oversold, created_at
         FROM orders WHERE order_ref = $1",
        order_ref
    )
    .fetch_optional(conn)
    .await
}

/// An order item with its product's current stock.
#[derive(Debug, Clone, Serialize)]
pub struct ItemStock {
    pub sku: String,
    pub qty: i32,
    pub stock: i32,
}

/// The order's items, by sku, with each product's stock now.
pub async fn items_of(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<Vec<ItemStock>, sqlx::Error> {
    sqlx::query_as!(
        ItemStock,
        "SELECT i.sku, i.qty, p.stock
         FROM order_items i JOIN products p ON p.sku = i.sku
         WHERE i.order_id = $1 ORDER BY i.sku",
        order_id
    )
    .fetch_all(conn)
    .await
}

/// A recorded payment attempt.
#[derive(Debug, Clone, Serialize)]
pub struct PaymentRecord {
    pub provider: String,
    pub payment_id: String,
    pub status: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub flag: Option<String>,
    pub event_id: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// The order's payment attempts, in the order they were recorded.
pub async fn payments_of(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<Vec<PaymentRecord>, sqlx::Error> {
    sqlx::query_as!(
        PaymentRecord,
        "SELECT provider, payment_id, status, amount_minor, currency, flag, event_id, created_at
         FROM payments WHERE order_id = $1 ORDER BY created_at, id",
        order_id
    )
    .fetch_all(conn)
    .await
}

/// A recorded refund (or, `cumulative`, a payment's refunded total).
#[derive(Debug, Clone, Serialize)]
pub struct RefundRecord {
    pub provider: String,
    pub refund_id: String,
    pub payment_id: Option<String>,
    pub amount_minor: i64,
    pub cumulative: bool,
    pub event_id: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// The order's refunds, in the order they were recorded.
pub async fn refunds_of(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<Vec<RefundRecord>, sqlx::Error> {
    sqlx::query_as!(
        RefundRecord,
        "SELECT provider, refund_id, payment_id, amount_minor, cumulative, event_id, created_at
         FROM refunds WHERE order_id = $1 ORDER BY created_at",
        order_id
    )
    .fetch_all(conn)
    .await
}

/// Books that need a human.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attention {
    /// Orders whose stock movement went below zero.
    pub oversold_orders: i64,
    /// Captures flagged `needs_refund` (paid twice, or after a refund).
    pub needs_refund: i64,
    /// Captures flagged `amount_mismatch`.
    pub amount_mismatch: i64,
}

/// Counts the orders and payments that need a human.
pub async fn attention(conn: &mut PgConnection) -> Result<Attention, sqlx::Error> {
    sqlx::query_as!(
        Attention,
        r#"SELECT (SELECT count(*) FROM orders WHERE oversold) AS "oversold_orders!",
                  (SELECT count(*) FROM payments WHERE flag = 'needs_refund') AS "needs_refund!",
                  (SELECT count(*) FROM payments WHERE flag = 'amount_mismatch') AS "amount_mismatch!""#
    )
    .fetch_one(conn)
    .await
}

/// The references of orders changed at or after `since` (their
/// `updated_at`), after `after`, in reference order: what the contract
/// step catches up after a roll (`rollout::changed_since`).
pub async fn orders_changed_since(
    conn: &mut PgConnection,
    since: OffsetDateTime,
    after: &str,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT order_ref FROM orders WHERE updated_at >= $1 AND order_ref > $2
         ORDER BY order_ref LIMIT $3",
        since,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}
