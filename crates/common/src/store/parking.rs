//! `parked_events`: events whose payment is not linked to an order yet,
//! with their envelope, until a link arrives or the TTL passes. An advisory
//! lock per payment ([`lock_payment`]) orders "park" against "link".

use std::time::Duration;

use sqlx::PgConnection;

use super::dedup::DeliveryKey;

/// Serialises park/link decisions for one payment until the transaction ends.
pub async fn lock_payment(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 7))",
        provider,
        payment_id
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// A parked event.
#[derive(Debug, Clone)]
pub struct Parked {
    pub key: DeliveryKey,
    pub provider: String,
    pub payment_id: String,
    pub routing_key: String,
    pub envelope: Vec<u8>,
}

/// A `parked_events` row as read.
struct Row {
    source: String,
    event_id: String,
    body_sha256: String,
    provider: String,
    payment_id: String,
    routing_key: String,
    envelope: Vec<u8>,
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
            routing_key: r.routing_key,
            envelope: r.envelope,
        }
    }
}

/// Keeps an event until its payment is linked.
pub async fn park(conn: &mut PgConnection, p: &Parked) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO parked_events (source, event_id, body_sha256, provider, payment_id, routing_key, envelope)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT DO NOTHING",
        p.key.source,
        p.key.event_id,
        p.key.body_sha256,
        p.provider,
        p.payment_id,
        p.routing_key,
        p.envelope
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes and returns the events parked for a payment (hold [`lock_payment`]).
pub async fn take(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
) -> Result<Vec<Parked>, sqlx::Error> {
    let rows = sqlx::query_as!(
        Row,
        "DELETE FROM parked_events WHERE provider = $1 AND payment_id = $2
         RETURNING source, event_id, body_sha256, provider, payment_id, routing_key, envelope",
        provider,
        payment_id
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Parked::from).collect())
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
        "SELECT source, event_id, body_sha256, provider, payment_id, routing_key, envelope
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
