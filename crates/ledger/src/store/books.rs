//! The worker's writes to the books, set-based: every function here is one
//! statement for a whole batch of deliveries, whatever its size (arrays in,
//! `unnest` inside), so a batch of eight costs the same number of round
//! trips as a batch of one. The order in which a batch calls them is the
//! ledger's (`crate`, the ledger's decisions): lock the payments, lock the
//! orders with their products and take what was parked (`locks`), record
//! the facts, read the facts back, write the orders with their stock and
//! events (`orders`) and their emails, park what stays unlinked.

pub use super::locks::{
    GatewayRef, Item, Locked, LockedOrder, OrderRow, PaymentKey, lock_keys, lock_names, lock_orders,
};
use sqlx::PgConnection;

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

/// One row of [`record`]: a fact written now (`link`, `attempt`,
/// `refund`, with its key in `provider` and `id`), or (`fact`) one
/// recorded before for an order read with them; the others columns are
/// those of a [`FactRow`] where the row is one.
struct RecordRow {
    fact: String,
    provider: String,
    id: Option<String>,
    status: Option<String>,
    order_id: Option<i64>,
    payment_id: Option<String>,
    amount_minor: Option<i64>,
    currency: Option<String>,
    flag: Option<String>,
    cumulative: Option<bool>,
}

/// Records every link, attempt and refund of a batch in one statement (a
/// fact already recorded is left as it is) and reads, in the same
/// statement, every fact of the orders `read_for`: those recorded before
/// and those written now, which the statement's own snapshot does not see
/// (one round trip where the read took another).
pub async fn record(
    conn: &mut PgConnection,
    facts: &NewFacts,
    read_for: &[i64],
) -> Result<(Written, Vec<FactRow>), sqlx::Error> {
    let l = &facts.links;
    let a = &facts.attempts;
    let r = &facts.refunds;
    let rows = sqlx::query_as!(
        RecordRow,
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
               ON CONFLICT (tenant_id, provider, payment_id, status) DO NOTHING
               RETURNING provider, payment_id, status, order_id, amount_minor, currency, flag),
           refund AS (
               INSERT INTO refunds (provider, refund_id, payment_id, order_id, amount_minor, currency, event_id, cumulative)
               SELECT t.provider, t.refund_id, t.payment_id, t.order_id, t.amount_minor, t.currency, t.event_id, t.cumulative
               FROM unnest($12::text[], $13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::text[],
                           $18::text[], $19::boolean[])
                    WITH ORDINALITY AS t(provider, refund_id, payment_id, order_id, amount_minor, currency,
                                         event_id, cumulative, n)
               ORDER BY t.n
               ON CONFLICT (tenant_id, provider, refund_id) DO NOTHING
               RETURNING provider, refund_id, payment_id, order_id, amount_minor, currency, cumulative)
           SELECT 'link' AS "fact!", provider AS "provider!", payment_id AS "id?", NULL::text AS "status?",
                  NULL::bigint AS "order_id?", NULL::text AS "payment_id?", NULL::bigint AS "amount_minor?",
                  NULL::text AS "currency?", NULL::text AS "flag?", NULL::boolean AS "cumulative?"
           FROM link
           UNION ALL SELECT 'attempt', provider, payment_id, status, order_id, payment_id, amount_minor,
                            currency, flag, false
           FROM attempt
           UNION ALL SELECT 'refund', provider, refund_id, NULL, order_id, payment_id, amount_minor, currency,
                            NULL, cumulative
           FROM refund
           UNION ALL SELECT 'fact', provider, NULL, CASE WHEN capture THEN 'captured' END, order_id, payment_id,
                            amount_minor, currency, flag, cumulative
           FROM order_facts WHERE order_id = ANY($20::bigint[])"#,
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
        read_for,
    )
    .fetch_all(conn)
    .await?;
    Ok(recorded(rows, read_for))
}

/// What was written, and the facts of the orders read (those written now
/// included, for the orders read).
fn recorded(rows: Vec<RecordRow>, read_for: &[i64]) -> (Written, Vec<FactRow>) {
    let mut written = Written::default();
    let mut facts = Vec::new();
    for row in rows {
        let key = || PaymentKey {
            provider: row.provider.clone(),
            payment_id: row.id.clone().unwrap_or_default(),
        };
        let read = row.order_id.is_some_and(|id| read_for.contains(&id));
        match row.fact.as_str() {
            "link" => written.links.push(key()),
            "attempt" => written
                .attempts
                .push((key(), row.status.clone().unwrap_or_default())),
            "refund" => written
                .refunds
                .push((row.provider.clone(), row.id.clone().unwrap_or_default())),
            _ => {}
        }
        let is_fact = match row.fact.as_str() {
            "attempt" => row.status.as_deref() == Some("captured"),
            "refund" | "fact" => true,
            _ => false,
        };
        if let (true, Some(order_id)) = (is_fact && read, row.order_id) {
            facts.push(FactRow {
                order_id,
                capture: row.status.as_deref() == Some("captured"),
                provider: row.provider,
                payment_id: row.payment_id,
                amount_minor: row.amount_minor,
                currency: row.currency,
                flag: row.flag,
                cumulative: row.cumulative.unwrap_or(false),
            });
        }
    }
    (written, facts)
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

/// A captured payment's new flag.
#[derive(Debug, Clone)]
pub struct FlagChange {
    pub order_id: i64,
    pub payment: PaymentKey,
    pub flag: Option<String>,
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
