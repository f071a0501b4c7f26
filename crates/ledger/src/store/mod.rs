//! The ledger's tables, next to their one user. `books`: `orders` (with
//! `order_items` and the `products` whose stock they move) and the facts
//! recorded for them — `payments` (one per provider, payment and status),
//! `refunds` (one per refund id, or per cumulative total), `payment_links`
//! (which order a payment belongs to) and `order_cancellations` — in the
//! set-based statements the ledger runs; `orders`: the one write of an
//! order row; `reads`: the operators' reads
//! (trace, stats); `order_events`: what the ledger tells the shop, written
//! with the effect, published and paged; `parking`: `parked_events`, events
//! waiting for their payment's link or their order; `refund_intents`: the
//! refunds the books owe, minted and settled with the facts, decided and
//! sent by the refunder (one module, one row type); `shop`: products and
//! the shop's orders as the API creates and lists them; `gateway_refs`:
//! references registered for an existing order. Plain order inserts for
//! tests are here. Only this module writes the ledger's tables
//! (`tests/tests/architecture.rs`).

use sqlx::PgConnection;

pub mod books;
pub mod gateway_refs;
pub mod locks;
pub mod order_events;
pub mod orders;
pub mod parking;
pub(crate) mod reads;
pub mod refund_intents;
pub mod shop;
pub use books::OrderRow;
pub use reads::{
    Attention, ItemStock, OrderDetail, PaymentRecord, RefundRecord, attention, items_of,
    order_by_ref, payments_of, refunds_of,
};

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
         ON CONFLICT (tenant_id, order_ref) DO NOTHING RETURNING id",
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
