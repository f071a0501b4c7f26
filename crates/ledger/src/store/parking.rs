//! `parked_events`: events whose payment is not linked to an order yet,
//! with their envelope, until a link arrives or the TTL passes. An advisory
//! lock per payment (`ledger::books::lock_payments`) orders "park" against
//! "link".

use std::time::Duration;

use sqlx::PgConnection;
use time::OffsetDateTime;

use oncehook_common::store::dedup::DeliveryKey;

/// A parked event.
#[derive(Debug, Clone)]
pub struct Parked {
    pub key: DeliveryKey,
    pub provider: String,
    pub payment_id: String,
    /// The order reference it waits for (no order has it yet); `None`: it
    /// waits for its payment's link.
    pub order_ref: Option<String>,
    pub routing_key: String,
    pub envelope: Vec<u8>,
    /// The message's `x-oncehook-replays` when it was parked.
    pub replays: i64,
    /// The delivery's `traceparent`, when traced.
    pub trace_parent: Option<String>,
    /// When it was first parked (`None`: now). A row taken out and parked
    /// again keeps it, so its wait still ends `ONCEHOOK_UNLINKED_TTL` after
    /// it first came.
    pub parked_at: Option<OffsetDateTime>,
}

/// A `parked_events` row as read.
struct Row {
    source: String,
    event_id: String,
    body_sha256: String,
    provider: String,
    payment_id: String,
    order_ref: Option<String>,
    routing_key: String,
    envelope: Vec<u8>,
    replays: i64,
    trace_parent: Option<String>,
    parked_at: OffsetDateTime,
}

impl From<Row> for Parked {
    fn from(r: Row) -> Self {
        Parked {
            key: DeliveryKey {
                source: r.source,
                event_id: r.event_id,
                body_sha256: r.body_sha256,
            },
            provider: r.provider,
            payment_id: r.payment_id,
            order_ref: r.order_ref,
            routing_key: r.routing_key,
            envelope: r.envelope,
            replays: r.replays,
            trace_parent: r.trace_parent,
            parked_at: Some(r.parked_at),
        }
    }
}

/// Parks events (a second park of one is a no-op), one statement for a
/// batch; hold the payments' advisory locks (`ledger::books::lock_payments`).
pub async fn park_many(conn: &mut PgConnection, parked: &[Parked]) -> Result<(), sqlx::Error> {
    if parked.is_empty() {
        return Ok(());
    }
    let text = |f: fn(&Parked) -> &str| parked.iter().map(|p| f(p).to_owned()).collect::<Vec<_>>();
    sqlx::query!(
        "INSERT INTO parked_events (source, event_id, body_sha256, provider, payment_id, order_ref, routing_key, envelope, replays, trace_parent, parked_at)
         SELECT t.source, t.event_id, t.body_sha256, t.provider, t.payment_id, t.order_ref, t.routing_key, t.envelope, t.replays, t.trace_parent,
                COALESCE(t.parked_at, now())
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[], $9::int8[], $10::text[], $11::timestamptz[])
              AS t(source, event_id, body_sha256, provider, payment_id, order_ref, routing_key, envelope, replays, trace_parent, parked_at)
         ON CONFLICT DO NOTHING",
        &text(|p| &p.key.source),
        &text(|p| &p.key.event_id),
        &text(|p| &p.key.body_sha256),
        &text(|p| &p.provider),
        &text(|p| &p.payment_id),
        &parked.iter().map(|p| p.order_ref.clone()).collect::<Vec<_>>() as &[Option<String>],
        &text(|p| &p.routing_key),
        &parked.iter().map(|p| p.envelope.clone()).collect::<Vec<_>>(),
        &parked.iter().map(|p| p.replays).collect::<Vec<_>>(),
        &parked
            .iter()
            .map(|p| p.trace_parent.clone())
            .collect::<Vec<_>>() as &[Option<String>],
        &parked.iter().map(|p| p.parked_at).collect::<Vec<_>>() as &[Option<OffsetDateTime>],
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes and returns the events waiting for an order known by
/// `order_ref` or, from a gateway, by one of its own references
/// (`(gateway, reference)` pairs); hold the references' advisory locks
/// (`ledger::books::lock_keys`).
pub async fn take_for_order(
    conn: &mut PgConnection,
    order_ref: &str,
    gateways: &[String],
    gateway_refs: &[String],
) -> Result<Vec<Parked>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Row,
        "DELETE FROM parked_events p
         WHERE p.order_ref = $1
            OR (p.provider, p.order_ref) IN (SELECT * FROM unnest($2::text[], $3::text[]))
         RETURNING p.source, p.event_id, p.body_sha256, p.provider, p.payment_id, p.order_ref, p.routing_key, p.envelope, p.replays, p.trace_parent, p.parked_at",
        order_ref,
        gateways,
        gateway_refs
    )
    .fetch_all(conn)
    .await?;
    let mut parked: Vec<Parked> = rows.into_iter().map(Parked::from).collect();
    parked.sort_by(|a, b| a.key.event_id.cmp(&b.key.event_id));
    Ok(parked)
}

/// Locks (skipping those another sweeper holds) up to `limit` events parked
/// longer than `ttl`.
pub async fn lock_expired(
    conn: &mut PgConnection,
    ttl: Duration,
    limit: i64,
) -> Result<Vec<Parked>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Row,
        "SELECT source, event_id, body_sha256, provider, payment_id, order_ref, routing_key, envelope, replays, trace_parent, parked_at
         FROM parked_events
         WHERE parked_at < now() - make_interval(secs => $1)
         ORDER BY parked_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED",
        ttl.as_secs_f64(),
        limit
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Parked::from).collect())
}

/// Removes one parked event.
pub async fn remove(conn: &mut PgConnection, key: &DeliveryKey) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM parked_events WHERE source = $1 AND event_id = $2 AND body_sha256 = $3",
        key.source,
        key.event_id,
        key.body_sha256
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// How many events are parked.
pub async fn count(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM parked_events"#)
        .fetch_one(conn)
        .await
}

/// How many events are parked, and for how long the oldest has waited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    pub parked: i64,
    /// Seconds; `None` when nothing is parked.
    pub oldest_age_secs: Option<f64>,
}

/// The parked backlog (`oncehookctl stats`).
pub async fn backlog(conn: &mut PgConnection) -> Result<Backlog, sqlx::Error> {
    sqlx::query_as!(
        Backlog,
        r#"SELECT count(*) AS "parked!",
                  EXTRACT(EPOCH FROM now() - min(parked_at))::float8 AS "oldest_age_secs?"
           FROM parked_events"#
    )
    .fetch_one(conn)
    .await
}
