//! An order event as the shop receives it — the same JSON from the broker
//! (`P.order-events`), the notifier's HTTP delivery and `GET /v1/events`:
//! the stored event (`store::order_events`) with the order's snapshot as
//! `GET /v1/orders/{order_ref}` shows it now (`view::order`).

use crate::store::order_events::OrderEventRow;
use oncehook_common::store::scope;
use sqlx::PgConnection;

use crate::view::{self, OrderEvent};

/// The event with its order's current snapshot; `None` if the order is
/// gone. The order is read in the event's tenant's scope (an `order_ref`
/// names an order within one tenant), then the caller's scope is back:
/// `conn` must be inside a transaction.
pub async fn render(
    conn: &mut PgConnection,
    row: &OrderEventRow,
) -> Result<Option<OrderEvent>, sqlx::Error> {
    let before = scope::switch(conn, &row.tenant_id).await?;
    let order = view::order(conn, &row.order_ref).await;
    scope::switch(conn, &before).await?;
    let Some(order) = order? else {
        return Ok(None);
    };
    Ok(Some(OrderEvent {
        id: row.id.clone(),
        kind: row.kind.clone(),
        created_at: view::rfc3339(row.created_at),
        data: row.data.clone(),
        order,
    }))
}

/// [`render`] as the bytes sent.
pub async fn render_bytes(
    conn: &mut PgConnection,
    row: &OrderEventRow,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    Ok(render(conn, row)
        .await?
        .map(|e| serde_json::to_vec(&e).unwrap_or_default()))
}
