//! The locks every road of the ledger takes before it reads or writes the
//! books, in the one global order (docs/ledger.md, "One lock order"): the
//! order references' advisory locks, then the payments', each by key
//! ([`lock_names`], taken with the worker's claim or by [`lock_keys`]); then, in one statement ([`lock_orders`]), the orders by
//! id and their products by sku, with the events parked for the group's
//! payments taken out on the way.
//!
//! Rows are locked `FOR NO KEY UPDATE`, as strong as the updates that
//! follow need and no stronger: the foreign-key checks of rows written
//! beside them (`order_items` → `products`, `order_gateway_refs` →
//! `orders`) take `FOR KEY SHARE`, which that does not wait for, so no
//! transaction ever has to upgrade a share it holds past another's.

use sqlx::PgConnection;
use sqlx::types::Json;
use time::OffsetDateTime;

use super::parking::Parked;
pub use super::shop::GatewayRef;
use oncehook_common::store::advisory::{self, LockName};
use oncehook_common::store::dedup::DeliveryKey;

/// An order row, locked for the transaction, with its items and their
/// products' stock as locked.
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
    /// The shop cancelled it (`order_cancellations`).
    pub cancelled: bool,
    /// Its tenant (its order events' ids name it: docs/tenants.md).
    pub tenant_id: String,
    /// Its items, by sku, each with its product's stock when locked.
    pub items: Vec<Item>,
}

/// One item of a locked order, with its product's stock before this
/// transaction moved any.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Item {
    pub sku: String,
    pub qty: i32,
    pub stock: i32,
}

/// A payment as a provider names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
pub struct PaymentKey {
    pub provider: String,
    pub payment_id: String,
}

/// The advisory locks of every payment and every order reference (the
/// shop's or a gateway's) a group names: a park and a link of one payment,
/// and a park for an order and that order's creation, never miss each
/// other (`parking`). The references' first (kind 0), then the payments'
/// (kind 1), each in key order: the roads of an order created after its
/// webhooks (`waiting`) hold its references' locks before they can know
/// the payments that waited for it, so every road takes them in that
/// order. The worker's deliveries take them with their claim
/// (`Effect::locks`); the other roads with [`lock_keys`].
pub fn lock_names(payments: &[PaymentKey], order_refs: &[String]) -> Vec<LockName> {
    let refs = order_refs.iter().map(|r| LockName {
        kind: 0,
        name: format!("order:{r}"),
    });
    let paid = payments.iter().map(|p| LockName {
        kind: 1,
        name: format!("{}:{}", p.provider, p.payment_id),
    });
    refs.chain(paid).collect()
}

/// Takes the advisory locks of [`lock_names`].
pub async fn lock_keys(
    conn: &mut PgConnection,
    payments: &[PaymentKey],
    order_refs: &[String],
) -> Result<(), sqlx::Error> {
    advisory::lock(conn, &lock_names(payments, order_refs)).await
}

/// An order locked by a batch, with the batch's payments already linked to
/// it and the batch's gateway references registered for it.
#[derive(Debug, Clone)]
pub struct LockedOrder {
    pub order: OrderRow,
    pub linked: Vec<PaymentKey>,
    pub known_as: Vec<GatewayRef>,
}

/// What [`lock_orders`] locked and took.
#[derive(Debug, Default)]
pub struct Locked {
    /// The orders, in id order.
    pub orders: Vec<LockedOrder>,
    /// The events that were parked for the batch's payments (waiting for
    /// their link), taken out of `parked_events`: the caller adopts those
    /// whose payment it links and parks the others again, with their
    /// `parked_at`, in the same transaction.
    pub taken: Vec<Parked>,
}

/// A parked row as the statement returns it (JSON; the envelope in hex,
/// `parked_at` in microseconds since the epoch).
#[derive(Debug, serde::Deserialize)]
struct TakenRow {
    source: String,
    event_id: String,
    body_sha256: String,
    provider: String,
    payment_id: String,
    routing_key: String,
    envelope: String,
    replays: i64,
    trace_parent: Option<String>,
    parked_at_us: i64,
}

/// Locks (`FOR NO KEY UPDATE`), in id order, the orders with these
/// references, the orders registered under these gateway references and
/// the orders these payments are linked to, then those orders' products in
/// sku order; each order comes with its items and their stock, which of
/// `payments` are linked to it and which of `gateway_refs` name it. When
/// it locked an order it also takes out, in the same statement, the events
/// parked for `payments` that wait for their link ([`Locked::taken`]; one
/// round trip where adopting them took another).
///
/// Whether an order is cancelled is read from the locked row's `status`
/// first: a statement that waited for the row lock sees the row as the
/// holder committed it, but its subqueries still see the statement's
/// snapshot, so a cancellation committed while it waited (by a road that
/// took the order's reference lock when this one took only a payment's)
/// is missing from `order_cancellations` here. A cancelled order's status
/// is `cancelled` from the cancellation's own transaction on.
///
/// Products are locked for every order locked, whether or not its stock
/// moves: the stock is known before the facts are read, and the one write
/// at the end of the transaction moves it (`orders::write`).
pub async fn lock_orders(
    conn: &mut PgConnection,
    order_refs: &[String],
    gateway_refs: &[GatewayRef],
    payments: &[PaymentKey],
) -> Result<Locked, sqlx::Error> {
    let (providers, ids) = columns(payments);
    let (gateways, refs): (Vec<String>, Vec<String>) = gateway_refs
        .iter()
        .map(|g| (g.gateway.clone(), g.gateway_ref.clone()))
        .unzip();
    let rows = sqlx::query_as!(
        LockRow,
        r#"WITH batch AS (SELECT * FROM unnest($2::text[], $3::text[]) AS t(provider, payment_id)),
           named AS (SELECT * FROM unnest($4::text[], $5::text[]) AS t(gateway, gateway_ref)),
           wanted AS (
               SELECT id FROM orders WHERE order_ref = ANY($1::text[])
               UNION
               SELECT g.order_id FROM order_gateway_refs g
               JOIN named n ON n.gateway = g.gateway AND n.gateway_ref = g.gateway_ref
               UNION
               SELECT l.order_id FROM payment_links l
               JOIN batch b ON b.provider = l.provider AND b.payment_id = l.payment_id),
           locked AS MATERIALIZED (
               SELECT o.id, o.order_ref, o.status, o.amount_minor, o.currency, o.customer_email, o.tenant_id,
                      o.paid_by, o.refunded_minor, o.stock_applied,
                      (o.status = 'cancelled'
                       OR EXISTS (SELECT 1 FROM order_cancellations c WHERE c.order_id = o.id)) AS cancelled
               FROM orders o WHERE o.id IN (SELECT id FROM wanted)
               ORDER BY o.id FOR NO KEY UPDATE),
           stock AS MATERIALIZED (
               SELECT p.sku, p.stock FROM products p
               WHERE p.sku IN (SELECT i.sku FROM order_items i WHERE i.order_id IN (SELECT id FROM locked))
               ORDER BY p.sku FOR NO KEY UPDATE),
           taken AS (
               DELETE FROM parked_events p USING batch b
               WHERE p.provider = b.provider AND p.payment_id = b.payment_id AND p.order_ref IS NULL
                 AND EXISTS (SELECT 1 FROM locked)
               RETURNING p.source, p.event_id, p.body_sha256, p.provider, p.payment_id, p.routing_key,
                         encode(p.envelope, 'hex') AS envelope, p.replays, p.trace_parent,
                         (extract(epoch FROM p.parked_at) * 1000000)::bigint AS parked_at_us)
           SELECT k.id AS "id!", k.order_ref AS "order_ref!", k.status AS "status!",
                  k.amount_minor AS "amount_minor!", k.currency AS "currency!",
                  k.customer_email AS "customer_email!", k.paid_by AS "paid_by?",
                  k.refunded_minor AS "refunded_minor!", k.stock_applied AS "stock_applied!",
                  k.cancelled AS "cancelled!", k.tenant_id AS "tenant_id!",
                  COALESCE((SELECT jsonb_agg(jsonb_build_object('sku', i.sku, 'qty', i.qty, 'stock', s.stock)
                                             ORDER BY i.sku)
                            FROM order_items i JOIN stock s ON s.sku = i.sku
                            WHERE i.order_id = k.id), '[]'::jsonb) AS "items!: Json<Vec<Item>>",
                  COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', l.provider, 'payment_id', l.payment_id))
                            FROM payment_links l JOIN batch b
                              ON b.provider = l.provider AND b.payment_id = l.payment_id
                            WHERE l.order_id = k.id), '[]'::jsonb) AS "linked!: Json<Vec<PaymentKey>>",
                  COALESCE((SELECT jsonb_agg(jsonb_build_object('gateway', g.gateway, 'gateway_ref', g.gateway_ref))
                            FROM order_gateway_refs g JOIN named n
                              ON n.gateway = g.gateway AND n.gateway_ref = g.gateway_ref
                            WHERE g.order_id = k.id), '[]'::jsonb) AS "known_as!: Json<Vec<GatewayRef>>",
                  CASE WHEN k.id = (SELECT min(id) FROM locked)
                       THEN (SELECT jsonb_agg(to_jsonb(t)) FROM taken t) END
                      AS "taken?: Json<Vec<TakenRow>>"
           FROM locked k ORDER BY k.id"#,
        order_refs,
        &providers,
        &ids,
        &gateways,
        &refs
    )
    .fetch_all(conn)
    .await?;
    locked(rows)
}

/// One row of [`lock_orders`]: a locked order, and on the first the
/// parked rows taken.
struct LockRow {
    id: i64,
    order_ref: String,
    status: String,
    amount_minor: i64,
    currency: String,
    customer_email: String,
    paid_by: Option<String>,
    refunded_minor: i64,
    stock_applied: bool,
    cancelled: bool,
    tenant_id: String,
    items: Json<Vec<Item>>,
    linked: Json<Vec<PaymentKey>>,
    known_as: Json<Vec<GatewayRef>>,
    taken: Option<Json<Vec<TakenRow>>>,
}

fn locked(rows: Vec<LockRow>) -> Result<Locked, sqlx::Error> {
    let mut locked = Locked::default();
    for r in rows {
        if let Some(Json(taken)) = r.taken {
            locked.taken = taken
                .into_iter()
                .map(TakenRow::parked)
                .collect::<Result<_, _>>()?;
        }
        locked.orders.push(LockedOrder {
            order: OrderRow {
                id: r.id,
                order_ref: r.order_ref,
                status: r.status,
                amount_minor: r.amount_minor,
                currency: r.currency,
                customer_email: r.customer_email,
                paid_by: r.paid_by,
                refunded_minor: r.refunded_minor,
                stock_applied: r.stock_applied,
                cancelled: r.cancelled,
                tenant_id: r.tenant_id,
                items: r.items.0,
            },
            linked: r.linked.0,
            known_as: r.known_as.0,
        });
    }
    // One order however Postgres returns them.
    locked
        .taken
        .sort_by(|a, b| a.key.event_id.cmp(&b.key.event_id));
    Ok(locked)
}

impl TakenRow {
    fn parked(self) -> Result<Parked, sqlx::Error> {
        let envelope = hex::decode(&self.envelope).map_err(|e| {
            sqlx::Error::Decode(format!("parked event {}: its envelope: {e}", self.event_id).into())
        })?;
        let parked_at =
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.parked_at_us) * 1000)
                .map_err(|e| {
                    sqlx::Error::Decode(
                        format!("parked event {}: its parked_at: {e}", self.event_id).into(),
                    )
                })?;
        Ok(Parked {
            key: DeliveryKey {
                source: self.source,
                event_id: self.event_id,
                body_sha256: self.body_sha256,
            },
            provider: self.provider,
            payment_id: self.payment_id,
            order_ref: None,
            routing_key: self.routing_key,
            envelope,
            replays: self.replays,
            trace_parent: self.trace_parent,
            parked_at: Some(parked_at),
        })
    }
}

fn columns(payments: &[PaymentKey]) -> (Vec<String>, Vec<String>) {
    payments
        .iter()
        .map(|p| (p.provider.clone(), p.payment_id.clone()))
        .unzip()
}
