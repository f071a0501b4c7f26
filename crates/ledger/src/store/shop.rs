//! The shop's side of the books, as the API writes and reads it: products
//! (stock by deltas only, each in `stock_adjustments`), orders created
//! with their items and gateway references in one transaction, and the
//! keyset pages of `GET /v1/orders`. The ledger owns these tables; the
//! API's own (`api_idempotency`, `api_audit`) are `oncehook_api::store`'s.

use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use time::OffsetDateTime;

/// A product as the API shows it; `created` when this call made it.
#[derive(Debug, Clone, Serialize)]
pub struct ProductRow {
    pub sku: String,
    pub name: String,
    pub stock: i32,
    #[serde(skip)]
    pub created: bool,
}

/// Creates the product with `stock`, or renames it (its stock untouched).
pub async fn put_product(
    conn: &mut PgConnection,
    sku: &str,
    name: &str,
    stock: i32,
) -> Result<ProductRow, sqlx::Error> {
    sqlx::query_as!(
        ProductRow,
        r#"INSERT INTO products (sku, name, stock) VALUES ($1, $2, $3)
           ON CONFLICT (tenant_id, sku) DO UPDATE SET name = EXCLUDED.name
           RETURNING sku, name, stock, (xmax = 0) AS "created!""#,
        sku,
        name,
        stock
    )
    .fetch_one(conn)
    .await
}

/// The product with this sku.
pub async fn product(
    conn: &mut PgConnection,
    sku: &str,
) -> Result<Option<ProductRow>, sqlx::Error> {
    sqlx::query_as!(
        ProductRow,
        r#"SELECT sku, name, stock, false AS "created!" FROM products WHERE sku = $1"#,
        sku
    )
    .fetch_optional(conn)
    .await
}

/// Moves the product's stock by `delta` and records the adjustment;
/// `None` when there is no such product. A stock that would leave the
/// range of `integer` fails with Postgres's `22003`.
pub async fn adjust_stock(
    conn: &mut PgConnection,
    sku: &str,
    delta: i32,
    reason: &str,
    key_name: &str,
) -> Result<Option<ProductRow>, sqlx::Error> {
    let row = sqlx::query_as!(
        ProductRow,
        r#"UPDATE products SET stock = stock + $2 WHERE sku = $1
           RETURNING sku, name, stock, false AS "created!""#,
        sku,
        delta
    )
    .fetch_optional(&mut *conn)
    .await?;
    if row.is_some() {
        sqlx::query!(
            "INSERT INTO stock_adjustments (sku, delta, reason, key_name) VALUES ($1, $2, $3, $4)",
            sku,
            delta,
            reason,
            key_name
        )
        .execute(conn)
        .await?;
    }
    Ok(row)
}

/// The skus of `skus` that name no product.
pub async fn missing_skus(
    conn: &mut PgConnection,
    skus: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT s AS "s!" FROM unnest($1::text[]) AS s
           WHERE NOT EXISTS (SELECT 1 FROM products p WHERE p.sku = s) ORDER BY s"#,
        skus
    )
    .fetch_all(conn)
    .await
}

/// One item of an order: sku, quantity, unit price (`None` for orders
/// written before the API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShopItem {
    pub sku: String,
    pub qty: i32,
    pub unit_minor: Option<i64>,
}

/// A gateway's own reference for an order (Razorpay's `order_…` id), as
/// registered with the order (`order_gateway_refs`); the ledger looks the
/// webhooks' orders up by it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize, serde::Serialize,
)]
pub struct GatewayRef {
    pub gateway: String,
    pub gateway_ref: String,
}

/// An order as the shop wrote it: what "the same content" compares.
#[derive(Debug, Clone, PartialEq)]
pub struct ShopOrder {
    pub order_ref: String,
    pub customer_email: String,
    pub currency: String,
    pub amount_minor: i64,
    /// By sku.
    pub items: Vec<ShopItem>,
    /// By gateway.
    pub gateway_refs: Vec<GatewayRef>,
    pub metadata: Value,
}

/// How a create ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    Order(i64),
    /// An order with this reference exists.
    RefTaken,
    /// A gateway reference is registered for another order.
    GatewayRefTaken(GatewayRef),
}

/// Creates a pending order with its items and gateway references (call it
/// inside a transaction: on anything but [`Created::Order`] roll back).
pub async fn create_order(conn: &mut PgConnection, o: &ShopOrder) -> Result<Created, sqlx::Error> {
    let Some(id) = sqlx::query_scalar!(
        "INSERT INTO orders (order_ref, customer_email, amount_minor, currency, metadata)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, order_ref) DO NOTHING RETURNING id",
        o.order_ref,
        o.customer_email,
        o.amount_minor,
        o.currency,
        o.metadata
    )
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(Created::RefTaken);
    };
    sqlx::query!(
        "INSERT INTO order_items (order_id, sku, qty, unit_minor)
         SELECT $1, * FROM unnest($2::text[], $3::int[], $4::bigint[])",
        id,
        &o.items.iter().map(|i| i.sku.clone()).collect::<Vec<_>>(),
        &o.items.iter().map(|i| i.qty).collect::<Vec<_>>(),
        &o.items.iter().map(|i| i.unit_minor).collect::<Vec<_>>() as &[Option<i64>],
    )
    .execute(&mut *conn)
    .await?;
    let (gateways, refs): (Vec<String>, Vec<String>) = o
        .gateway_refs
        .iter()
        .map(|g| (g.gateway.clone(), g.gateway_ref.clone()))
        .unzip();
    let inserted = sqlx::query_scalar!(
        r#"INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id)
           SELECT g, r, $1 FROM unnest($2::text[], $3::text[]) AS t(g, r)
           ON CONFLICT DO NOTHING RETURNING gateway AS "gateway!""#,
        id,
        &gateways,
        &refs
    )
    .fetch_all(&mut *conn)
    .await?;
    if let Some(taken) = o
        .gateway_refs
        .iter()
        .find(|g| !inserted.contains(&g.gateway))
    {
        return Ok(Created::GatewayRefTaken(taken.clone()));
    }
    Ok(Created::Order(id))
}

/// The order with this reference as the shop wrote it.
pub async fn shop_order(
    conn: &mut PgConnection,
    order_ref: &str,
) -> Result<Option<(i64, ShopOrder)>, sqlx::Error> {
    let Some(o) = sqlx::query!(
        "SELECT id, order_ref, customer_email, currency, amount_minor, metadata
         FROM orders WHERE order_ref = $1",
        order_ref
    )
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    let items = sqlx::query_as!(
        ShopItem,
        "SELECT sku, qty, unit_minor FROM order_items WHERE order_id = $1 ORDER BY sku",
        o.id
    )
    .fetch_all(&mut *conn)
    .await?;
    let gateway_refs = gateway_refs_of(conn, o.id).await?;
    Ok(Some((
        o.id,
        ShopOrder {
            order_ref: o.order_ref,
            customer_email: o.customer_email,
            currency: o.currency,
            amount_minor: o.amount_minor,
            items,
            gateway_refs,
            metadata: o.metadata,
        },
    )))
}

/// The gateway references of an order, by gateway.
pub async fn gateway_refs_of(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<Vec<GatewayRef>, sqlx::Error> {
    sqlx::query_as!(
        GatewayRef,
        "SELECT gateway, gateway_ref FROM order_gateway_refs WHERE order_id = $1 ORDER BY gateway",
        order_id
    )
    .fetch_all(conn)
    .await
}

/// The order a gateway's reference names (for the ledger: a webhook that
/// carries Razorpay's `order_…` id finds the shop's order by it).
pub async fn order_id_by_gateway_ref(
    conn: &mut PgConnection,
    gateway: &str,
    gateway_ref: &str,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT order_id FROM order_gateway_refs WHERE gateway = $1 AND gateway_ref = $2",
        gateway,
        gateway_ref
    )
    .fetch_optional(conn)
    .await
}

/// What the API adds to the ledger's view of an order.
#[derive(Debug, Clone)]
pub struct OrderExtras {
    pub version: i64,
    pub updated_at: OffsetDateTime,
    pub metadata: Value,
}

pub async fn order_extras(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<Option<OrderExtras>, sqlx::Error> {
    sqlx::query_as!(
        OrderExtras,
        "SELECT version, updated_at, metadata FROM orders WHERE id = $1",
        order_id
    )
    .fetch_optional(conn)
    .await
}

/// One order of a page of `GET /v1/orders`.
#[derive(Debug, Clone)]
pub struct OrderSummary {
    pub id: i64,
    pub order_ref: String,
    pub status: String,
    pub currency: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
    pub oversold: bool,
    pub version: i64,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A page of `tenant`'s orders by `(updated_at, id)`, oldest change first:
/// those after `after` (a cursor), or updated after `updated_after`, with
/// the status if given. Naming the tenant (besides the transaction's scope)
/// lets the page start at the tenant's range of `orders_tenant_updated_at_id`
/// whatever other tenants' rows come before it.
pub async fn list_orders(
    conn: &mut PgConnection,
    tenant: &str,
    status: Option<&str>,
    updated_after: Option<OffsetDateTime>,
    after: Option<(OffsetDateTime, i64)>,
    limit: i64,
) -> Result<Vec<OrderSummary>, sqlx::Error> {
    let (after_at, after_id) = after.unzip();
    sqlx::query_as!(
        OrderSummary,
        "SELECT id, order_ref, status, currency, amount_minor, refunded_minor, oversold, version,
                created_at, updated_at
         FROM orders
         WHERE tenant_id = $6
           AND ($1::text IS NULL OR status = $1)
           AND ($2::timestamptz IS NULL OR updated_at > $2)
           AND ($3::timestamptz IS NULL OR (updated_at, id) > ($3, $4::bigint))
         ORDER BY tenant_id, updated_at, id LIMIT $5",
        status,
        updated_after,
        after_at,
        after_id,
        limit,
        tenant
    )
    .fetch_all(conn)
    .await
}
