//! The worker's writes to the books, set-based: every function here is one
//! statement for a whole batch of deliveries, whatever its size (arrays in,
//! `unnest` inside), so a batch of eight costs the same number of round
//! trips as a batch of one. The order in which a batch calls them is the
//! ledger's (`crate`, the ledger's decisions): lock the payments, lock the
//! orders, take what was parked, record the facts, read the facts back,
//! move stock, write the orders and their emails, park what stays unlinked.
//!
//! Locks are always taken in one global order, whatever the road
//! (docs/ledger.md, "One lock order"): the order references' advisory
//! locks, then the payments', each by key; orders by id; products by sku.
//! Rows are locked `FOR NO KEY UPDATE`, as strong as the updates that
//! follow need and no stronger: the foreign-key checks of rows written
//! beside them (`order_items` → `products`, `order_gateway_refs` →
//! `orders`) take `FOR KEY SHARE`, which that does not wait for, so no
//! transaction ever has to upgrade a share it holds past another's.

pub use super::shop::GatewayRef;
use sqlx::PgConnection;
use sqlx::types::Json;

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
    /// The shop cancelled it (`order_cancellations`).
    pub cancelled: bool,
}

/// A payment as a provider names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
pub struct PaymentKey {
    pub provider: String,
    pub payment_id: String,
}

/// Takes the advisory locks of every payment and every order reference
/// (the shop's or a gateway's) a group names: a park and a link of one
/// payment, and a park for an order and that order's creation, never miss
/// each other (`parking`). The references' first, then the payments', each
/// in key order: the roads of an order created after its webhooks
/// (`waiting`) hold its references' locks before they can know the
/// payments that waited for it, so every road takes them in that order.
pub async fn lock_keys(
    conn: &mut PgConnection,
    payments: &[PaymentKey],
    order_refs: &[String],
) -> Result<(), sqlx::Error> {
    if payments.is_empty() && order_refs.is_empty() {
        return Ok(());
    }
    let (providers, ids) = columns(payments);
    sqlx::query_scalar!(
        r#"WITH keys AS MATERIALIZED (
               SELECT 0 AS kind, hashtextextended('order:' || r, 7) AS k FROM unnest($3::text[]) AS t(r)
               UNION
               SELECT 1, hashtextextended(p || ':' || i, 7)
               FROM unnest($1::text[], $2::text[]) AS t(p, i)),
           locked AS MATERIALIZED (
               SELECT pg_advisory_xact_lock(s.k) FROM (SELECT kind, k FROM keys ORDER BY kind, k) s)
           SELECT count(*) AS "locked!" FROM locked"#,
        &providers,
        &ids,
        order_refs
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// An order locked by a batch, with the batch's payments already linked to
/// it and the batch's gateway references registered for it.
#[derive(Debug, Clone)]
pub struct LockedOrder {
    pub order: OrderRow,
    pub linked: Vec<PaymentKey>,
    pub known_as: Vec<GatewayRef>,
}

/// Locks (`FOR NO KEY UPDATE`), in id order, the orders with these
/// references, the orders registered under these gateway references and
/// the orders these payments are linked to; each comes with which of
/// `payments` are linked to it and which of `gateway_refs` name it.
///
/// Whether an order is cancelled is read from the locked row's `status`
/// first: a statement that waited for the row lock sees the row as the
/// holder committed it, but its subqueries still see the statement's
/// snapshot, so a cancellation committed while it waited (by a road that
/// took the order's reference lock when this one took only a payment's)
/// is missing from `order_cancellations` here. A cancelled order's status
/// is `cancelled` from the cancellation's own transaction on.
pub async fn lock_orders(
    conn: &mut PgConnection,
    order_refs: &[String],
    gateway_refs: &[GatewayRef],
    payments: &[PaymentKey],
) -> Result<Vec<LockedOrder>, sqlx::Error> {
    let (providers, ids) = columns(payments);
    let (gateways, refs): (Vec<String>, Vec<String>) = gateway_refs
        .iter()
        .map(|g| (g.gateway.clone(), g.gateway_ref.clone()))
        .unzip();
    let rows = sqlx::query!(
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
               SELECT o.id, o.order_ref, o.status, o.amount_minor, o.currency, o.customer_email,
                      o.paid_by, o.refunded_minor, o.stock_applied,
                      (o.status = 'cancelled'
                       OR EXISTS (SELECT 1 FROM order_cancellations c WHERE c.order_id = o.id)) AS cancelled
               FROM orders o WHERE o.id IN (SELECT id FROM wanted)
               ORDER BY o.id FOR NO KEY UPDATE)
           SELECT k.id AS "id!", k.order_ref AS "order_ref!", k.status AS "status!",
                  k.amount_minor AS "amount_minor!", k.currency AS "currency!",
                  k.customer_email AS "customer_email!", k.paid_by AS "paid_by?",
                  k.refunded_minor AS "refunded_minor!", k.stock_applied AS "stock_applied!",
                  k.cancelled AS "cancelled!",
                  COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', l.provider, 'payment_id', l.payment_id))
                            FROM payment_links l JOIN batch b
                              ON b.provider = l.provider AND b.payment_id = l.payment_id
                            WHERE l.order_id = k.id), '[]'::jsonb) AS "linked!: Json<Vec<PaymentKey>>",
                  COALESCE((SELECT jsonb_agg(jsonb_build_object('gateway', g.gateway, 'gateway_ref', g.gateway_ref))
                            FROM order_gateway_refs g JOIN named n
                              ON n.gateway = g.gateway AND n.gateway_ref = g.gateway_ref
                            WHERE g.order_id = k.id), '[]'::jsonb) AS "known_as!: Json<Vec<GatewayRef>>"
           FROM locked k ORDER BY k.id"#,
        order_refs,
        &providers,
        &ids,
        &gateways,
        &refs
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| LockedOrder {
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
            },
            linked: r.linked.0,
            known_as: r.known_as.0,
        })
        .collect())
}

/// A payment → order link to write.
#[derive(Debug, Clone)]
pub struct NewLink {
    pub payment: PaymentKey,
    pub order_id: i64,
    pub event_id: String,
}

/// A payment attempt (`captured`, `failed`, `authorized`) to record.
#[derive(Debug, Clone)]
pub struct NewAttempt {
    pub payment: PaymentKey,
    pub order_id: i64,
    pub status: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub event_id: String,
}

/// A refund, or (`cumulative`) a payment's refunded total, to record.
#[derive(Debug, Clone)]
pub struct NewRefund {
    pub provider: String,
    pub refund_id: String,
    pub payment_id: Option<String>,
    pub order_id: i64,
    pub amount_minor: i64,
    pub currency: Option<String>,
    pub event_id: String,
    pub cumulative: bool,
}

/// The facts a batch records, in the batch's order (the first of two equal
/// facts is the one written).
#[derive(Debug, Clone, Default)]
pub struct NewFacts {
    pub links: Vec<NewLink>,
    pub attempts: Vec<NewAttempt>,
    pub refunds: Vec<NewRefund>,
}

/// Which of a batch's facts were new.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// `(provider, payment_id)` of each link written.
    pub links: Vec<PaymentKey>,
    /// `(provider, payment_id, status)` of each attempt written.
    pub attempts: Vec<(PaymentKey, String)>,
    /// `(provider, refund_id)` of each refund written.
    pub refunds: Vec<(String, String)>,
}

/// Records every link, attempt and refund of a batch in one statement;
/// a fact already recorded is left as it is.
pub async fn record(conn: &mut PgConnection, facts: &NewFacts) -> Result<Written, sqlx::Error> {
    let l = &facts.links;
    let a = &facts.attempts;
    let r = &facts.refunds;
    let rows = sqlx::query!(
        r#"WITH link AS (
               INSERT INTO payment_links (provider, payment_id, order_id, event_id)
               SELECT t.provider, t.payment_id, t.order_id, t.event_id
               FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) WITH ORDINALITY
                    AS t(provider, payment_id, order_id, event_id, n)
               ORDER BY t.n
               ON CONFLICT DO NOTHING RETURNING provider, payment_id),
           attempt AS (
               INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
               SELECT t.provider, t.payment_id, t.order_id, t.status, t.amount_minor, t.currency, t.event_id
               FROM unnest($5::text[], $6::text[], $7::bigint[], $8::text[], $9::bigint[], $10::text[], $11::text[])
                    WITH ORDINALITY AS t(provider, payment_id, order_id, status, amount_minor, currency, event_id, n)
               ORDER BY t.n
               ON CONFLICT (provider, payment_id, status) DO NOTHING
               RETURNING provider, payment_id, status),
           refund AS (
               INSERT INTO refunds (provider, refund_id, payment_id, order_id, amount_minor, currency, event_id, cumulative)
               SELECT t.provider, t.refund_id, t.payment_id, t.order_id, t.amount_minor, t.currency, t.event_id, t.cumulative
               FROM unnest($12::text[], $13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::text[],
                           $18::text[], $19::boolean[])
                    WITH ORDINALITY AS t(provider, refund_id, payment_id, order_id, amount_minor, currency,
                                         event_id, cumulative, n)
               ORDER BY t.n
               ON CONFLICT (provider, refund_id) DO NOTHING
               RETURNING provider, refund_id)
           SELECT 'link' AS "fact!", provider AS "provider!", payment_id AS "id!", NULL::text AS "status?" FROM link
           UNION ALL SELECT 'attempt', provider, payment_id, status FROM attempt
           UNION ALL SELECT 'refund', provider, refund_id, NULL FROM refund"#,
        &l.iter().map(|x| x.payment.provider.clone()).collect::<Vec<_>>(),
        &l.iter().map(|x| x.payment.payment_id.clone()).collect::<Vec<_>>(),
        &l.iter().map(|x| x.order_id).collect::<Vec<_>>(),
        &l.iter().map(|x| x.event_id.clone()).collect::<Vec<_>>(),
        &a.iter().map(|x| x.payment.provider.clone()).collect::<Vec<_>>(),
        &a.iter().map(|x| x.payment.payment_id.clone()).collect::<Vec<_>>(),
        &a.iter().map(|x| x.order_id).collect::<Vec<_>>(),
        &a.iter().map(|x| x.status.clone()).collect::<Vec<_>>(),
        &a.iter().map(|x| x.amount_minor).collect::<Vec<_>>() as &[Option<i64>],
        &a.iter().map(|x| x.currency.clone()).collect::<Vec<_>>() as &[Option<String>],
        &a.iter().map(|x| x.event_id.clone()).collect::<Vec<_>>(),
        &r.iter().map(|x| x.provider.clone()).collect::<Vec<_>>(),
        &r.iter().map(|x| x.refund_id.clone()).collect::<Vec<_>>(),
        &r.iter().map(|x| x.payment_id.clone()).collect::<Vec<_>>() as &[Option<String>],
        &r.iter().map(|x| x.order_id).collect::<Vec<_>>(),
        &r.iter().map(|x| x.amount_minor).collect::<Vec<_>>(),
        &r.iter().map(|x| x.currency.clone()).collect::<Vec<_>>() as &[Option<String>],
        &r.iter().map(|x| x.event_id.clone()).collect::<Vec<_>>(),
        &r.iter().map(|x| x.cumulative).collect::<Vec<_>>(),
    )
    .fetch_all(conn)
    .await?;
    let mut written = Written::default();
    for row in rows {
        match (row.fact.as_str(), row.status) {
            ("link", _) => written.links.push(PaymentKey {
                provider: row.provider,
                payment_id: row.id,
            }),
            ("attempt", Some(status)) => written.attempts.push((
                PaymentKey {
                    provider: row.provider,
                    payment_id: row.id,
                },
                status,
            )),
            _ => written.refunds.push((row.provider, row.id)),
        }
    }
    Ok(written)
}

/// One fact an order's state is computed from: a capture (`capture`) or a refund.
#[derive(Debug, Clone)]
pub struct FactRow {
    pub order_id: i64,
    pub capture: bool,
    pub provider: String,
    pub payment_id: Option<String>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// The capture's current flag.
    pub flag: Option<String>,
    pub cumulative: bool,
}

/// Every capture and refund recorded for these orders.
pub async fn facts(
    conn: &mut PgConnection,
    order_ids: &[i64],
) -> Result<Vec<FactRow>, sqlx::Error> {
    sqlx::query_as!(
        FactRow,
        r#"SELECT order_id AS "order_id!", capture AS "capture!", provider AS "provider!",
                  payment_id AS "payment_id?", amount_minor AS "amount_minor?", currency AS "currency?",
                  flag AS "flag?", cumulative AS "cumulative!"
           FROM order_facts WHERE order_id = ANY($1::bigint[])"#,
        order_ids
    )
    .fetch_all(conn)
    .await
}

/// A captured payment's new flag.
#[derive(Debug, Clone)]
pub struct FlagChange {
    pub order_id: i64,
    pub payment: PaymentKey,
    pub flag: Option<String>,
}

/// Sets the flags of captured payments, one statement for the batch.
pub async fn set_flags(conn: &mut PgConnection, changes: &[FlagChange]) -> Result<(), sqlx::Error> {
    if changes.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "UPDATE payments p SET flag = t.flag
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS t(order_id, provider, payment_id, flag)
         WHERE p.order_id = t.order_id AND p.provider = t.provider AND p.payment_id = t.payment_id
           AND p.status = 'captured'",
        &changes.iter().map(|c| c.order_id).collect::<Vec<_>>(),
        &changes
            .iter()
            .map(|c| c.payment.provider.clone())
            .collect::<Vec<_>>(),
        &changes
            .iter()
            .map(|c| c.payment.payment_id.clone())
            .collect::<Vec<_>>(),
        &changes.iter().map(|c| c.flag.clone()).collect::<Vec<_>>() as &[Option<String>],
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One item of an order whose stock moves, with its product's stock
/// before this batch moved any.
#[derive(Debug, Clone)]
pub struct ItemToMove {
    pub order_id: i64,
    pub sku: String,
    pub qty: i32,
    pub stock: i32,
}

/// Locks the products of these orders in sku order and returns the
/// orders' items with their products' current stock. `FOR NO KEY UPDATE`,
/// which the stock's update needs: an order created in this transaction
/// holds its products' `FOR KEY SHARE` (its items' foreign key), and
/// `FOR UPDATE` would wait for every other creation's share while they
/// wait for this one's (the deadlock of issue 42).
pub async fn lock_stock(
    conn: &mut PgConnection,
    order_ids: &[i64],
) -> Result<Vec<ItemToMove>, sqlx::Error> {
    sqlx::query_as!(
        ItemToMove,
        r#"WITH locked AS MATERIALIZED (
               SELECT p.sku, p.stock FROM products p
               WHERE p.sku IN (SELECT sku FROM order_items WHERE order_id = ANY($1::bigint[]))
               ORDER BY p.sku FOR NO KEY UPDATE)
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
/// [`lock_stock`]).
pub async fn take_stock(
    conn: &mut PgConnection,
    skus: &[String],
    qtys: &[i32],
) -> Result<(), sqlx::Error> {
    if skus.is_empty() {
        return Ok(());
    }
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

fn columns(payments: &[PaymentKey]) -> (Vec<String>, Vec<String>) {
    payments
        .iter()
        .map(|p| (p.provider.clone(), p.payment_id.clone()))
        .unzip()
}

/// Records that the shop cancelled an order (locked by the caller);
/// `false` if it was cancelled already.
pub async fn record_cancellation(
    conn: &mut PgConnection,
    order_id: i64,
    cancelled_by: &str,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query_scalar!(
        r#"INSERT INTO order_cancellations (order_id, cancelled_by, reason) VALUES ($1, $2, $3)
           ON CONFLICT (order_id) DO NOTHING RETURNING 1 AS "one!""#,
        order_id,
        cancelled_by,
        reason
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}
