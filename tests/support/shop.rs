//! Shop fixtures: products and pending orders written straight into the
//! test database, and the read-backs tests assert on.

use sqlx::{PgPool, Row};

/// Creates a product with `stock` units.
pub async fn product(pool: &PgPool, sku: &str, stock: i32) {
    sqlx::query("INSERT INTO products (sku, name, stock) VALUES ($1, $1, $2)")
        .bind(sku)
        .bind(stock)
        .execute(pool)
        .await
        .expect("insert product");
}

/// Creates a pending order with `items` (sku, qty); returns its id.
pub async fn order(
    pool: &PgPool,
    order_ref: &str,
    amount_minor: i64,
    currency: &str,
    items: &[(&str, i32)],
) -> i64 {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (order_ref, customer_email, amount_minor, currency) VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(order_ref)
    .bind(format!("{order_ref}@example.com"))
    .bind(amount_minor)
    .bind(currency)
    .fetch_one(pool)
    .await
    .expect("insert order");
    for (sku, qty) in items {
        sqlx::query("INSERT INTO order_items (order_id, sku, qty) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(sku)
            .bind(qty)
            .execute(pool)
            .await
            .expect("insert order item");
    }
    id
}

pub async fn order_status(pool: &PgPool, order_ref: &str) -> String {
    sqlx::query_scalar("SELECT status FROM orders WHERE order_ref = $1")
        .bind(order_ref)
        .fetch_one(pool)
        .await
        .expect("order status")
}

pub async fn stock(pool: &PgPool, sku: &str) -> i32 {
    sqlx::query_scalar("SELECT stock FROM products WHERE sku = $1")
        .bind(sku)
        .fetch_one(pool)
        .await
        .expect("stock")
}

/// (status, flag) of every payment row of an order, oldest first.
pub async fn payments(pool: &PgPool, order_ref: &str) -> Vec<(String, Option<String>)> {
    sqlx::query(
        "SELECT p.status, p.flag FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE o.order_ref = $1 ORDER BY p.id",
    )
    .bind(order_ref)
    .fetch_all(pool)
    .await
    .expect("payments")
    .iter()
    .map(|r| (r.get("status"), r.get("flag")))
    .collect()
}

/// Outbox rows of an order: (kind, sent?).
pub async fn emails(pool: &PgPool, order_ref: &str) -> Vec<(String, bool)> {
    sqlx::query(
        "SELECT e.kind, e.sent_at IS NOT NULL AS sent FROM email_outbox e JOIN orders o ON o.id = e.order_id
         WHERE o.order_ref = $1 ORDER BY e.created_at",
    )
    .bind(order_ref)
    .fetch_all(pool)
    .await
    .expect("emails")
    .iter()
    .map(|r| (r.get("kind"), r.get("sent")))
    .collect()
}

/// Rows in processed_webhooks for an order: (event_id, outcome, deliveries).
pub async fn webhooks(pool: &PgPool, order_ref: &str) -> Vec<(String, String, i32)> {
    sqlx::query("SELECT event_id, outcome, deliveries FROM processed_webhooks WHERE order_ref = $1 ORDER BY received_at")
        .bind(order_ref)
        .fetch_all(pool)
        .await
        .expect("webhooks")
        .iter()
        .map(|r| (r.get("event_id"), r.get("outcome"), r.get("deliveries")))
        .collect()
}
