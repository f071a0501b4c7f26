//! The order-events relay: publishes committed `order_events` rows to the
//! topic exchange `P.order-events` (routing key = the event type) with
//! publisher confirms, each with its order's snapshot as it is now, and
//! marks them published. Safe in every notifier copy (`FOR UPDATE SKIP
//! LOCKED`). A crash between publish and mark publishes an event twice:
//! its `message_id` is the event id, and the notifier's fan-out is
//! idempotent on it.

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::BasicProperties;
use lapin::Channel;
use oncehook_common::amqp::{self, PublishError};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{Topology, otel};
use oncehook_ledger::render;
use oncehook_ledger::store::order_events;

const BATCH: i64 = 100;
/// How often the relay looks for new events when it found none.
const POLL: Duration = Duration::from_millis(200);

/// Why a relay pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("order events query failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("publishing {count} order event(s) of type {kind} failed: {source}")]
    Publish {
        kind: String,
        count: usize,
        source: PublishError,
    },
}

/// Publishes batches on `ch` until `stop` fires or the channel dies.
pub async fn run(pool: Pooled, ch: Channel, topology: Topology, timeout: Duration, stop: Shutdown) {
    loop {
        match publish_batch(&pool, &ch, &topology, timeout).await {
            Ok(n) if n as i64 == BATCH => continue,
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, "order events relay pass failed; will retry");
                if !ch.status().connected() {
                    return;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = stop.wait() => return,
        }
    }
}

/// Publishes up to `BATCH` unpublished events; returns how many.
pub async fn publish_batch(
    pool: &Pooled,
    ch: &Channel,
    topology: &Topology,
    timeout: Duration,
) -> Result<usize, RelayError> {
    let mut tx = pool.begin().await?;
    let rows = order_events::lock_unpublished(&mut tx, BATCH).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let exchange = topology.order_events();
    // One confirmed publish per event type (the routing key).
    let mut by_type: BTreeMap<String, Vec<(Vec<u8>, BasicProperties)>> = BTreeMap::new();
    let mut ids = Vec::with_capacity(rows.len());
    for row in &rows {
        ids.push(row.id.clone());
        let Some(body) = render::render_bytes(&mut tx, row).await? else {
            tracing::warn!(event_id = %row.id, order_ref = %row.order_ref, "order event's order is gone; not published");
            continue;
        };
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(row.id.as_str().into())
            .with_type(row.kind.as_str().into());
        if let Some(tp) = &row.trace_parent {
            let span = otel::producer_span(&exchange, &row.kind, &row.id);
            otel::set_parent(&span, otel::from_traceparent(tp));
            let mut headers = lapin::types::FieldTable::default();
            span.in_scope(|| otel::inject_amqp(&mut headers));
            properties = properties.with_headers(headers);
        }
        by_type
            .entry(row.kind.clone())
            .or_default()
            .push((body, properties));
    }
    for (kind, messages) in by_type {
        let count = messages.len();
        amqp::publish_all_confirmed(ch, &exchange, &kind, messages, timeout)
            .await
            .map_err(|source| RelayError::Publish {
                kind: kind.clone(),
                count,
                source,
            })?;
    }
    order_events::mark_published(&mut tx, &ids).await?;
    tx.commit().await?;
    metrics::counter!("oncehook_notify_events_published_total").increment(ids.len() as u64);
    tracing::debug!(count = ids.len(), "order events published");
    Ok(ids.len())
}
