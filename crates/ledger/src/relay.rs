//! The outbox relay: publishes committed `email_outbox` rows to `P.emails`
//! with confirms and marks them published. Safe in every worker copy: rows
//! are claimed with `FOR UPDATE SKIP LOCKED`. A crash between publish and
//! mark publishes a row twice; the mailer's `sent_at` check absorbs that.
//! Every few seconds the relay also sets the outbox gauges (the queue gauges
//! are the broker module's, `oncehook_common::broker::queues`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::Channel;
use oncehook_common::amqp::{self, PublishError};
use oncehook_common::email::EmailMessage;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::{Pooled, outbox};
use oncehook_common::{Topology, otel};
use tokio::sync::Notify;

const BATCH: i64 = 100;

/// Why a relay pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("outbox query failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("publishing a batch of {count} outbox row(s) failed: {source}")]
    Publish { count: usize, source: PublishError },
}

/// Publishes batches on `ch` until `stop` fires or the channel dies.
/// `wakeup` lets the consumer nudge the relay right after a commit that
/// wrote an email.
pub async fn run(
    db: Pooled,
    ch: Channel,
    topology: Topology,
    timeout: Duration,
    wakeup: Arc<Notify>,
    stop: Shutdown,
) {
    let mut last_gauges = Instant::now() - Duration::from_secs(60);
    loop {
        match publish_batch(&db, &ch, &topology, timeout).await {
            Ok(n) if n as i64 == BATCH => continue,
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, "outbox relay pass failed; will retry");
                if !ch.status().connected() {
                    return;
                }
            }
        }
        if last_gauges.elapsed() > Duration::from_secs(5) {
            last_gauges = Instant::now();
            update_gauges(&db).await;
        }
        tokio::select! {
            () = wakeup.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            () = stop.wait() => return,
        }
    }
}

/// Publishes up to `BATCH` unpublished rows; returns how many.
pub async fn publish_batch(
    pool: &Pooled,
    ch: &Channel,
    topology: &Topology,
    timeout: Duration,
) -> Result<usize, RelayError> {
    let mut tx = pool.begin().await?;
    let rows = outbox::lock_unpublished(&mut tx, BATCH).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let exchange = topology.emails();
    let messages = rows
        .iter()
        .map(|(id, trace_parent)| {
            let msg = EmailMessage { outbox_id: *id };
            // A producer span in the trace of the delivery that wrote the
            // row; the message carries it on to the mailer.
            let mut properties = msg.properties();
            if let Some(tp) = trace_parent {
                let span =
                    otel::producer_span(&exchange, topology.email_routing_key(), &id.to_string());
                otel::set_parent(&span, otel::from_traceparent(tp));
                let mut headers = lapin::types::FieldTable::default();
                span.in_scope(|| otel::inject_amqp(&mut headers));
                properties = properties.with_headers(headers);
            }
            (msg.to_bytes(), properties)
        })
        .collect();
    let ids: Vec<uuid::Uuid> = rows.iter().map(|(id, _)| *id).collect();
    // One round trip for the batch; if any confirm fails, nothing is marked
    // and the whole batch is published again (the mailer skips sent rows).
    amqp::publish_all_confirmed(
        ch,
        &topology.emails(),
        topology.email_routing_key(),
        messages,
        timeout,
    )
    .await
    .map_err(|source| RelayError::Publish {
        count: ids.len(),
        source,
    })?;
    outbox::mark_published(&mut tx, &ids).await?;
    tx.commit().await?;
    metrics::counter!("oncehook_outbox_published_total").increment(ids.len() as u64);
    tracing::debug!(count = ids.len(), "outbox rows published");
    Ok(ids.len())
}

async fn update_gauges(db: &Pooled) {
    if let Ok(backlog) = outbox::backlog(db).await {
        metrics::gauge!("oncehook_outbox_backlog").set(backlog.rows as f64);
        metrics::gauge!("oncehook_outbox_oldest_age_seconds").set(backlog.oldest_age_secs);
    }
}
