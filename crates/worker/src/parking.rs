//! Parked events: events whose payment is not linked to an order yet — a
//! Stripe `payment_intent.succeeded` that overtook the
//! `checkout.session.completed` naming its order. The processor parks them
//! (the delivery is recorded with outcome `parked`); the commerce effect
//! takes them back when a link for their payment arrives; the sweeper here
//! dead-letters those no link claimed within `ONCEHOOK_UNLINKED_TTL` (kind
//! `unknown_order`), and the worker's dead-letter counters start here at
//! zero. The table belongs to `oncehook_common::store::parking`.

use std::time::Duration;

use lapin::Channel;
use oncehook_common::amqp::PublishError;
use oncehook_common::dead_letter::{self, DeadLetter, DeadLetterKind, Writer};
use oncehook_common::store::{dedup, parking};
use oncehook_common::{Envelope, Topology};
use oncehook_gateways::Gateway;
use sqlx::PgPool;

/// Sweeps at most this many expired events per transaction.
const SWEEP_BATCH: i64 = 50;

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
    let expired = parking::lock_expired(&mut tx, ttl, SWEEP_BATCH).await?;
    let ttl_text = format!("{}s", ttl.as_secs());
    for parked in &expired {
        let key = &parked.key;
        let properties = Envelope::from_bytes(&parked.envelope)
            .map(|e| e.properties())
            .unwrap_or_default();
        let why = DeadLetter {
            kind: DeadLetterKind::UnknownOrder,
            error: format!(
                "{} event {} (source {}): no event linked payment {} to an order within {ttl_text} (ONCEHOOK_UNLINKED_TTL); create or link the order, then replay",
                parked.provider, key.event_id, key.source, parked.payment_id
            ),
            origin: topology.events(),
            attempts: 1,
        };
        dead_letter::publish(
            ch,
            &topology.dead(),
            &parked.envelope,
            &properties,
            &parked.routing_key,
            &why,
            timeout,
        )
        .await
        .map_err(|error| SweepError::Publish {
            source_name: key.source.clone(),
            event_id: key.event_id.clone(),
            error,
        })?;
        parking::remove(&mut tx, key).await?;
        dedup::forget(&mut tx, key).await?;
        metrics::counter!("oncehook_worker_events_total", "gateway" => parked.provider.clone(), "outcome" => "dead")
            .increment(1);
        dead_letter::count(&why.kind);
        tracing::error!(gateway = %parked.provider, event_id = %key.event_id, source = %key.source, payment_id = %parked.payment_id, kind = %why.kind, error = %why.error, "parked event dead-lettered");
    }
    tx.commit().await?;
    Ok(expired.len())
}

/// Makes the worker's dead-letter counters exist at zero from its start —
/// by kind (`oncehook_dead_letters_total`, counted by the consume loop and
/// the sweeper) and by gateway (`oncehook_worker_events_total` with outcome
/// `dead`) — so Prometheus' `increase()` also counts the first dead letter.
pub fn zero_dead_letter_counters() {
    dead_letter::zero_counters(Writer::Worker);
    for gateway in Gateway::ALL {
        metrics::counter!("oncehook_worker_events_total", "gateway" => gateway.as_str(), "outcome" => "dead")
            .increment(0);
    }
}

/// Parked events, for the gauge.
pub async fn count(pool: &PgPool) -> Result<i64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let n = parking::count(&mut tx).await?;
    tx.commit().await?;
    Ok(n)
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
