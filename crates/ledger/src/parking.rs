//! Parking: events whose payment is not linked to an order yet — a
//! Stripe `payment_intent.succeeded` that overtook the
//! `checkout.session.completed` naming its order. The ledger parks them in
//! the group's transaction (the delivery is recorded with outcome
//! `parked`) and takes them back ([`adopt`]) in the transaction of the
//! group whose event links their payment, recording their facts there;
//! both happen under the payment's advisory lock, so a park and a link
//! never miss each other. The sweeper here dead-letters what no link has
//! taken back within `ONCEHOOK_UNLINKED_TTL` (kind `unknown_order`), and the
//! worker's dead-letter counters start here at zero. The table belongs to
//! `crate::store::parking`.

use std::time::Duration;

use crate::store::books::PaymentKey;
use crate::store::parking;
use crate::store::parking::Parked;
use lapin::Channel;
use oncehook_common::amqp::PublishError;
use oncehook_common::dead_letter::{self, DeadLetter, DeadLetterKind, Writer};
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::store::Pooled;
use oncehook_common::store::dedup;
use oncehook_common::{Envelope, Topology};
use oncehook_gateways::NormalizedEvent;

use super::facts::{Fact, fact_of};
use oncehook_pipeline::Delivery;

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
    pool: &Pooled,
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
        // The envelope's properties lack the delivery's headers: the replay
        // count parked with it goes back on (its trace goes on as the
        // letter's, below).
        let headers = dead_letter::with_replays(properties.headers().as_ref(), parked.replays);
        let properties = properties.with_headers(headers);
        let error = match &parked.order_ref {
            Some(order_ref) => format!(
                "{} event {} (source {}): no order {order_ref:?} was created within {ttl_text} (ONCEHOOK_UNLINKED_TTL), by the shop's reference or a {} reference registered with an order; create the order, then replay",
                parked.provider, key.event_id, key.source, parked.provider
            ),
            None => format!(
                "{} event {} (source {}): no event linked payment {} to an order within {ttl_text} (ONCEHOOK_UNLINKED_TTL); create or link the order, then replay",
                parked.provider, key.event_id, key.source, parked.payment_id
            ),
        };
        let why = DeadLetter {
            kind: DeadLetterKind::UnknownOrder,
            error,
            origin: topology.events(),
            attempts: 1,
            // The delivery's trace, kept with the parked row.
            trace_parent: parked.trace_parent.clone(),
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
    for gateway in oncehook_gateways::registered() {
        metrics::counter!("oncehook_worker_events_total", "gateway" => gateway.as_str(), "outcome" => "dead")
            .increment(0);
    }
}

/// Parked events, for the gauge.
pub async fn count(pool: &Pooled) -> Result<i64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let n = parking::count(&mut tx).await?;
    tx.commit().await?;
    Ok(n)
}

/// Sweeps expired parked events until `stop` fires or the channel dies.
pub async fn run_sweeper(
    pool: Pooled,
    ch: Channel,
    topology: Topology,
    ttl: Duration,
    timeout: Duration,
    stop: oncehook_common::shutdown::Shutdown,
) {
    let every = (ttl / 2).clamp(Duration::from_millis(200), Duration::from_secs(5));
    let (pool, ch, topology) = (&pool, &ch, &topology);
    Periodic::every("parked-event sweeper", every)
        .logs(
            "sweeping parked events failed; will retry",
            "parked events are swept again",
        )
        .run(&stop, move || async move {
            let swept = match sweep(pool, ch, topology, ttl, timeout).await {
                Ok(n) => n,
                Err(error) if !ch.status().connected() => {
                    tracing::warn!(%error, "sweeping parked events failed (the channel closed; the next broker session sweeps)");
                    return Ok(Next::Stop);
                }
                Err(error) => return Err(error),
            };
            if let Ok(n) = count(pool).await {
                metrics::gauge!("oncehook_worker_parked_events").set(n as f64);
            }
            Ok(if swept as i64 == SWEEP_BATCH {
                Next::Again
            } else {
                Next::Pause
            })
        })
        .await;
}

/// A parked event taken back because its payment is now linked.
#[derive(Debug)]
pub struct Adopted {
    pub parked: Parked,
    pub event: NormalizedEvent,
    pub fact: Fact,
    pub payment: PaymentKey,
}

/// Sorts the events taken out of `parked_events` for the group's payments
/// (`locks::lock_orders`): those whose payment the group now links are
/// adopted; the others, and any that can no longer be read (for the
/// sweeper, then the DLQ), are parked again, never lost: the second list,
/// each with its first `parked_at`.
pub fn adopt(taken: Vec<Parked>, linked: &[&PaymentKey]) -> (Vec<Adopted>, Vec<Parked>) {
    let mut adopted = Vec::new();
    let mut again = Vec::new();
    for parked in taken {
        let payment = PaymentKey {
            provider: parked.provider.clone(),
            payment_id: parked.payment_id.clone(),
        };
        if !linked.contains(&&payment) {
            again.push(parked);
            continue;
        }
        let read = read_back(&parked).and_then(|delivery| match fact_of(&delivery.event) {
            Ok(Some(fact)) => Ok((delivery.event, fact)),
            Ok(None) => Err("it records no fact".to_owned()),
            Err(rejection) => Err(rejection.message),
        });
        match read {
            Ok((event, fact)) => adopted.push(Adopted {
                payment,
                parked,
                event,
                fact,
            }),
            Err(error) => {
                tracing::error!(event_id = %parked.key.event_id, source = %parked.key.source, %error, "a parked event can no longer be read; left parked");
                again.push(parked);
            }
        }
    }
    (adopted, again)
}

/// The one reader of a parked row: the delivery it parked, as it came (its
/// envelope, event, key, replays and trace); why not, if it can no longer
/// be read.
pub fn read_back(parked: &Parked) -> Result<Delivery, String> {
    let envelope = Envelope::from_bytes(&parked.envelope).map_err(|e| e.to_string())?;
    let event = envelope.normalized_event().map_err(|e| e.to_string())?;
    Ok(Delivery {
        envelope,
        event,
        key: parked.key.clone(),
        replays: parked.replays,
        trace_parent: parked.trace_parent.clone(),
    })
}

/// The row that parks a delivery (waiting for the order `order_ref`, or
/// with `None` for its payment's link).
pub fn parked(delivery: &Delivery, order_ref: Option<String>) -> Parked {
    Parked {
        key: delivery.key.clone(),
        provider: delivery.event.provider.as_str().to_owned(),
        payment_id: delivery.event.payment_id.clone().unwrap_or_default(),
        order_ref,
        routing_key: delivery.envelope.routing_key(),
        envelope: delivery.envelope.to_bytes(),
        replays: delivery.replays,
        trace_parent: delivery.trace_parent.clone(),
        parked_at: None,
    }
}
