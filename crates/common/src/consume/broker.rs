//! The RabbitMQ side of the queue seam: `lapin`'s delivery as a
//! [`Delivery`], the dead-letter exchange as a [`DeadLetterSink`], and
//! [`consume`] — one queue with per-consumer prefetch, one task per delivery
//! (so deliveries run concurrently up to a limit, the prefetch unless the
//! binary sets its own); on shutdown the consumer is cancelled, deliveries
//! received but not started are given back uncounted, and in-flight
//! deliveries are drained.

use std::sync::Arc;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    BasicRejectOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use tokio::task::JoinSet;

use super::counting;
use super::queue::{DeadLetterSink, Delivery, Message, Published};
use super::{Handler, dispatch, give_back};
use crate::amqp;
use crate::dead_letter::{self, DeadLetter, DeadLetterKind};
use crate::health::Readiness;
use crate::shutdown::Shutdown;

/// How long a stopping consumer waits for in-flight deliveries.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

impl Message for lapin::message::Delivery {
    fn body(&self) -> &[u8] {
        &self.data
    }
    fn properties(&self) -> &BasicProperties {
        &self.properties
    }
    /// A requeued copy's original routing key, else the delivery's own.
    fn routing_key(&self) -> &str {
        counting::original_routing_key(
            self.exchange.as_str(),
            self.routing_key.as_str(),
            self.properties.headers().as_ref(),
        )
    }
}

impl Delivery for lapin::message::Delivery {
    async fn ack(&self) -> bool {
        matches!(self.acker.ack(BasicAckOptions::default()).await, Ok(true))
    }
    /// `basic.reject` with requeue: a failed delivery on every version.
    async fn requeue(&self) -> bool {
        let options = BasicRejectOptions { requeue: true };
        matches!(self.acker.reject(options).await, Ok(true))
    }
    /// `basic.nack` with requeue: not a failure on RabbitMQ 4.3+.
    async fn release(&self) -> bool {
        let options = BasicNackOptions {
            multiple: false,
            requeue: true,
        };
        matches!(self.acker.nack(options).await, Ok(true))
    }
}

/// The dead-letter exchange and the consumed queue, reached over a confirm
/// channel.
#[derive(Clone)]
pub struct BrokerDeadLetters {
    pub channel: Channel,
    /// The dead-letter exchange (`P.dead`).
    pub exchange: String,
    /// The queue the messages come from (the `x-oncehook-origin` header, and
    /// where requeued copies go).
    pub origin: String,
    /// The delivery limit `origin` was declared with.
    pub delivery_limit: Option<u32>,
    pub timeout: Duration,
}

impl DeadLetterSink for BrokerDeadLetters {
    fn delivery_limit(&self) -> Option<u32> {
        self.delivery_limit
    }

    /// Through the default exchange, straight to `origin` (a republish to
    /// the message's exchange would reach every other queue bound there).
    async fn requeue_copy(&self, message: &dyn Message, failures: u32) -> Published {
        let properties = message.properties();
        let headers = counting::copy_headers(
            properties.headers().as_ref(),
            message.routing_key(),
            failures,
        );
        let properties = properties
            .clone()
            .with_headers(headers)
            .with_delivery_mode(2);
        amqp::publish_confirmed(
            &self.channel,
            "",
            &self.origin,
            message.body(),
            properties,
            self.timeout,
        )
        .await
    }

    async fn dead_letter(
        &self,
        message: &dyn Message,
        kind: &DeadLetterKind,
        error: &str,
        trace_parent: Option<&str>,
    ) -> Published {
        let why = DeadLetter::of(message, kind, error, &self.origin, trace_parent);
        dead_letter::publish(
            &self.channel,
            &self.exchange,
            message.body(),
            message.properties(),
            message.routing_key(),
            &why,
            self.timeout,
        )
        .await
    }
}

/// How many deliveries one consumer takes from the broker and handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Messages the broker hands out ahead (`basic.qos`, per consumer).
    pub prefetch: u16,
    /// Deliveries handled at once; never more than `prefetch`, since each
    /// delivery in flight holds its message unacked.
    pub concurrency: u16,
}

impl Window {
    /// Handles as many deliveries at once as it prefetches.
    pub fn new(prefetch: u16) -> Window {
        Window {
            prefetch,
            concurrency: prefetch,
        }
    }

    /// At most `concurrency` deliveries at once; the prefetch is raised to
    /// it when lower (each of them holds its message unacked).
    pub fn with_concurrency(prefetch: u16, concurrency: u16) -> Window {
        let concurrency = concurrency.max(1);
        Window {
            prefetch: prefetch.max(concurrency),
            concurrency,
        }
    }
}

/// Consumes `queue` until the connection breaks (`Err`), the broker cancels
/// the consumer, or `shutdown` fires (`Ok`). Each delivery is dispatched to
/// `handler` in its own task and settled by its verdict; at most
/// `window.concurrency` run at once, the rest wait in the prefetch.
pub async fn consume<H: Handler, S: DeadLetterSink>(
    conn: &Connection,
    queue: &str,
    window: Window,
    readiness: &Readiness,
    shutdown: &Shutdown,
    handler: Arc<H>,
    sink: Arc<S>,
) -> lapin::Result<()> {
    let ch = conn.create_channel().await?;
    // Per-consumer prefetch: quorum queues reject global QoS.
    ch.basic_qos(window.prefetch, BasicQosOptions { global: false })
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
    tracing::info!(
        queue,
        prefetch = window.prefetch,
        concurrency = window.concurrency,
        "consuming"
    );
    let limit = usize::from(window.concurrency.max(1));

    let mut in_flight = JoinSet::new();
    let mut result = Ok(());
    loop {
        tokio::select! {
            () = shutdown.wait() => break,
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
            next = consumer.next(), if in_flight.len() < limit => match next {
                Some(Ok(delivery)) => {
                    in_flight.spawn(dispatch(handler.clone(), delivery, sink.clone()));
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
        // Stop taking work, then give back what the broker sent but no task
        // started: returned with the channel, it would count as a failed
        // delivery on every broker version.
        match ch
            .basic_cancel(consumer.tag(), BasicCancelOptions::default())
            .await
        {
            Ok(()) => give_back_unstarted(&mut consumer, &mut in_flight, &sink).await,
            Err(err) => {
                tracing::warn!(queue, %err, "could not cancel the consumer; unstarted deliveries are returned with the channel");
            }
        }
    }
    drain(&mut in_flight).await;
    // Close explicitly (and wait) before the connection goes: a channel
    // still closing when the connection closes makes the client log an error.
    // Anything prefetched but not acked is requeued by the broker.
    let _ = ch.close(200, "consumer stops".into()).await;
    result
}

/// How long a cancelled consumer waits for the broker's cancel to pass the
/// deliveries it had already sent.
const UNSTARTED_TIMEOUT: Duration = Duration::from_secs(5);

/// Gives back, uncounted, the deliveries a cancelled `consumer` still
/// buffers (the stream ends once the broker's cancel went past them).
async fn give_back_unstarted<S: DeadLetterSink>(
    consumer: &mut lapin::Consumer,
    in_flight: &mut JoinSet<()>,
    sink: &Arc<S>,
) {
    let unstarted = async {
        let mut n = 0_usize;
        while let Some(Ok(delivery)) = consumer.next().await {
            in_flight.spawn(give_back(delivery, sink.clone()));
            n += 1;
        }
        n
    };
    match tokio::time::timeout(UNSTARTED_TIMEOUT, unstarted).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            deliveries = n,
            "gave back deliveries not started before shutdown"
        ),
        Err(_) => tracing::warn!(
            "the consumer's cancel did not arrive in time; deliveries not started yet are returned with the channel"
        ),
    }
}

/// Waits up to [`DRAIN_TIMEOUT`] for in-flight deliveries, then abandons
/// the rest (unacked, so the broker redelivers them).
async fn drain(in_flight: &mut JoinSet<()>) {
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
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn the_window_never_handles_more_than_it_prefetches() {
        assert_eq!(
            Window::new(16),
            Window {
                prefetch: 16,
                concurrency: 16
            }
        );
        // Fewer at once than prefetched: the rest wait in the prefetch.
        assert_eq!(
            Window::with_concurrency(16, 4),
            Window {
                prefetch: 16,
                concurrency: 4
            }
        );
        // More at once than the prefetch: the prefetch is raised, since each
        // delivery in flight holds its message unacked.
        assert_eq!(
            Window::with_concurrency(2, 32),
            Window {
                prefetch: 32,
                concurrency: 32
            }
        );
        assert_eq!(Window::with_concurrency(8, 0).concurrency, 1);
    }
}
