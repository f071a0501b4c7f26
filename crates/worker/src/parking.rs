//! Parked events (`parked_events`): events whose payment is not linked to an
//! order yet — a Stripe `payment_intent.succeeded` that overtook the
//! `checkout.session.completed` naming its order. The processor parks them
//! (the delivery is recorded with outcome `parked`); the commerce effect
//! takes them back when a link for their payment arrives; the sweeper
//! dead-letters those no link claimed within `ONCEHOOK_UNLINKED_TTL`.
//!
//! [`lock_payment`] (a transaction-scoped advisory lock per payment) orders
//! "park" against "link", so a parked event never misses a concurrent link.

use std::time::Duration;

use lapin::Channel;
use oncehook_common::Envelope;
use oncehook_common::Topology;
use oncehook_common::amqp::{self, DeadLetter, PublishError};
use sqlx::{PgConnection, PgPool, Row};

use crate::dedup::{self, DeliveryKey};

/// Sweeps at most this many expired events per transaction.
const SWEEP_BATCH: i64 = 50;

/// A parked event taken back for applying.
#[derive(Debug)]
pub struct Parked {
    pub key: DeliveryKey,
    pub envelope: Vec<u8>,
}

/// Serialises park/link decisions for one payment until the transaction ends.
pub async fn lock_payment(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 7))")
        .bind(provider)
        .bind(payment_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Keeps `envelope` until its payment is linked (or the TTL passes).
pub async fn park(
    conn: &mut PgConnection,
    key: &DeliveryKey,
    provider: &str,
    payment_id: &str,
    routing_key: &str,
    envelope: &[u8],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO parked_events (source, event_id, body_sha256, provider, payment_id, routing_key, envelope)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT DO NOTHING",
    )
    .bind(&key.source)
    .bind(&key.event_id)
    .bind(&key.body_sha256)
    .bind(provider)
    .bind(payment_id)
    .bind(routing_key)
    .bind(envelope)
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes and returns the events parked for a payment (call with
/// [`lock_payment`] held).
pub async fn take(
    conn: &mut PgConnection,
    provider: &str,
    payment_id: &str,
) -> Result<Vec<Parked>, sqlx::Error> {
    let rows = sqlx::query(
        "DELETE FROM parked_events WHERE provider = $1 AND payment_id = $2
         RETURNING source, event_id, body_sha256, envelope, parked_at",
    )
    .bind(provider)
    .bind(payment_id)
    .fetch_all(conn)
    .await?;
    let mut parked = Vec::with_capacity(rows.len());
    for row in rows {
        parked.push(Parked {
            key: DeliveryKey {
                source: row.try_get("source")?,
                event_id: row.try_get("event_id")?,
                body_sha256: row.try_get("body_sha256")?,
            },
            envelope: row.try_get("envelope")?,
        });
    }
    Ok(parked)
}

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("reading or removing parked events failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("dead-lettering parked event {event_id} (source {source_name}) failed: {error}")]
    Publish {
        source_name: String,
        event_id: String,
        error: PublishError,
    },
}

/// Dead-letters (as `unknown_order`) the events parked longer than `ttl`
/// and forgets their delivery records, so a replay is processed afresh. The
/// rows are removed only after the broker confirmed the dead letter.
pub async fn sweep(
    pool: &PgPool,
    ch: &Channel,
    topology: &Topology,
    ttl: Duration,
    timeout: Duration,
) -> Result<usize, SweepError> {
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(
        "SELECT source, event_id, body_sha256, provider, payment_id, routing_key, envelope
         FROM parked_events
         WHERE parked_at < now() - make_interval(secs => $1)
         ORDER BY parked_at
         LIMIT $2
         FOR UPDATE SKIP LOCKED",
    )
    .bind(ttl.as_secs_f64())
    .bind(SWEEP_BATCH)
    .fetch_all(&mut *tx)
    .await?;
    let ttl_text = format!("{}s", ttl.as_secs());
    for row in &rows {
        let key = DeliveryKey {
            source: row.try_get("source")?,
            event_id: row.try_get("event_id")?,
            body_sha256: row.try_get("body_sha256")?,
        };
        let provider: String = row.try_get("provider")?;
        let payment_id: String = row.try_get("payment_id")?;
        let routing_key: String = row.try_get("routing_key")?;
        let envelope: Vec<u8> = row.try_get("envelope")?;
        let properties = Envelope::from_bytes(&envelope)
            .map(|e| e.properties())
            .unwrap_or_default();
        let why = DeadLetter {
            kind: "unknown_order".to_owned(),
            error: format!(
                "{provider} event {} (source {}): no event linked payment {payment_id} to an order within {ttl_text} (ONCEHOOK_UNLINKED_TTL); create or link the order, then replay",
                key.event_id, key.source
            ),
            origin: topology.events(),
            attempts: 1,
        };
        amqp::dead_letter_message(
            ch,
            &topology.dead(),
            &envelope,
            &properties,
            &routing_key,
            &why,
            timeout,
        )
        .await
        .map_err(|error| SweepError::Publish {
            source_name: key.source.clone(),
            event_id: key.event_id.clone(),
            error,
        })?;
        sqlx::query(
            "DELETE FROM parked_events WHERE source = $1 AND event_id = $2 AND body_sha256 = $3",
        )
        .bind(&key.source)
        .bind(&key.event_id)
        .bind(&key.body_sha256)
        .execute(&mut *tx)
        .await?;
        dedup::forget(&mut tx, &key).await?;
        metrics::counter!("oncehook_worker_events_total", "gateway" => provider.clone(), "outcome" => "dead")
            .increment(1);
        tracing::error!(gateway = %provider, event_id = %key.event_id, source = %key.source, payment_id = %payment_id, kind = "unknown_order", error = %why.error, "parked event dead-lettered");
    }
    tx.commit().await?;
    Ok(rows.len())
}

/// Parked events, for gauges and stats.
pub async fn count(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM parked_events"#)
        .fetch_one(pool)
        .await
}

/// Sweeps expired parked events until `stop` fires or the channel dies.
pub async fn run_sweeper(
    pool: PgPool,
    ch: Channel,
    topology: Topology,
    ttl: Duration,
    timeout: Duration,
    stop: oncehook_common::shutdown::Shutdown,
) {
    let every = (ttl / 2).clamp(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        match sweep(&pool, &ch, &topology, ttl, timeout).await {
            Ok(n) if n as i64 == SWEEP_BATCH => continue,
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, "sweeping parked events failed; will retry");
                if !ch.status().connected() {
                    return;
                }
            }
        }
        if let Ok(n) = count(&pool).await {
            metrics::gauge!("oncehook_worker_parked_events").set(n as f64);
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.wait() => return,
        }
    }
}
