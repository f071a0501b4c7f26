//! The consuming half of a broker session, shared by the worker and the
//! mailer: per-consumer prefetch, one task per delivery (so deliveries run
//! concurrently up to the prefetch), a panic in a handler requeues its
//! message instead of killing the process (the quorum queue's delivery limit
//! then dead-letters a message that always crashes), and on shutdown the
//! consumer is cancelled and in-flight deliveries are drained.

use std::future::Future;
use std::time::Duration;

use futures_lite::{FutureExt, StreamExt};
use lapin::Connection;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
};
use lapin::types::FieldTable;
use tokio::task::JoinSet;

use crate::health::Readiness;
use crate::shutdown::Shutdown;

/// How long a stopping consumer waits for in-flight deliveries.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// Consumes `queue` until the connection breaks (`Err`), the broker cancels
/// the consumer, or `shutdown` fires (`Ok`). `handle` is called once per
/// delivery in its own task and must ack, nack or dead-letter it.
pub async fn consume<H, Fut>(
    conn: &Connection,
    queue: &str,
    prefetch: u16,
    readiness: &Readiness,
    shutdown: &Shutdown,
    handle: H,
) -> lapin::Result<()>
where
    H: Fn(Delivery) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let ch = conn.create_channel().await?;
    // Per-consumer prefetch: quorum queues reject global QoS.
    ch.basic_qos(prefetch, BasicQosOptions { global: false })
        .await?;
    let mut consumer = ch
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    readiness.set(true);
    tracing::info!(queue, prefetch, "consuming");

    let mut in_flight = JoinSet::new();
    let mut result = Ok(());
    loop {
        tokio::select! {
            () = shutdown.wait() => break,
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            next = consumer.next() => match next {
                Some(Ok(delivery)) => {
                    let acker = delivery.acker.clone();
                    let message_id = message_id(&delivery);
                    let work = std::panic::AssertUnwindSafe(handle(delivery)).catch_unwind();
                    in_flight.spawn(async move {
                        if work.await.is_err() {
                            tracing::error!(%message_id, "handler panicked; requeueing (the delivery limit dead-letters repeat offenders)");
                            metrics::counter!("oncehook_handler_panics_total").increment(1);
                            let _ = acker.nack(BasicNackOptions { multiple: false, requeue: true }).await;
                        }
                    });
                }
                Some(Err(err)) => {
                    result = Err(err);
                    break;
                }
                None => {
                    tracing::warn!(queue, "consumer was cancelled by the broker");
                    break;
                }
            },
        }
    }
    readiness.set(false);
    if shutdown.is_triggered() {
        // Stop taking work; prefetched-but-unstarted messages are requeued on close.
        let _ = ch
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await;
    }
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = in_flight.len(),
            "in-flight deliveries did not finish in time; they will be redelivered"
        );
        in_flight.abort_all();
    }
    // Close explicitly (and wait) before the connection goes: a channel
    // still closing when the connection closes makes the client log an error.
    // Anything prefetched but not acked is requeued by the broker.
    let _ = ch.close(200, "consumer stops".into()).await;
    result
}

/// The message's `message_id`, or `-`.
pub fn message_id(delivery: &Delivery) -> String {
    delivery
        .properties
        .message_id()
        .as_ref()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_else(|| "-".to_owned())
}

/// Acks; a lost ack (dead channel) is logged — the broker redelivers and
/// the receiver's idempotency absorbs the copy.
pub async fn ack(delivery: &Delivery) {
    match delivery.ack(BasicAckOptions::default()).await {
        Ok(true) => {}
        Ok(false) | Err(_) => tracing::warn!(
            message_id = %message_id(delivery),
            "ack lost with the channel; the broker will redeliver and the copy is absorbed"
        ),
    }
}

/// Puts the message back on the queue (counts toward the delivery limit).
pub async fn requeue(delivery: &Delivery) {
    if !matches!(
        delivery
            .nack(BasicNackOptions {
                multiple: false,
                requeue: true
            })
            .await,
        Ok(true)
    ) {
        tracing::warn!(message_id = %message_id(delivery), "nack lost with the channel; the broker will redeliver");
    }
}
