//! The queue seam between the consume loop and the broker: what a handler
//! may read of a message ([`Message`]), what the loop may do with a delivery
//! ([`Delivery`]: ack, requeue counted or not) and the queue's side of it
//! ([`DeadLetterSink`]: dead letters, requeued copies, the delivery limit).
//! `consume::broker` implements them over RabbitMQ, `consume::memory` in
//! memory (either way of counting deliveries) so decisions are testable
//! without a broker.

use std::future::Future;

use lapin::BasicProperties;

use super::counting::Counts;
use crate::amqp::PublishError;
use crate::dead_letter::{DeadLetter, DeadLetterKind};

/// A received message as a handler sees it: read-only.
pub trait Message: Send + Sync {
    /// The payload.
    fn body(&self) -> &[u8];
    /// AMQP properties, headers included.
    fn properties(&self) -> &BasicProperties;
    /// The routing key it was published with.
    fn routing_key(&self) -> &str;
    /// Its delivery counters, as its headers carry them (see
    /// [`counting`](super::counting)).
    fn counts(&self) -> Counts {
        Counts::from_headers(self.properties().headers().as_ref())
    }

    /// This delivery's attempt number (1 on the first delivery).
    fn attempts(&self) -> u32 {
        self.counts().attempt()
    }

    /// The message's `message_id`, or `-`.
    fn message_id(&self) -> String {
        self.properties()
            .message_id()
            .as_ref()
            .map(|m| m.as_str().to_owned())
            .unwrap_or_else(|| "-".to_owned())
    }
}

/// A message held by this consumer until it is settled — exactly once, by
/// the consume loop.
pub trait Delivery: Message + 'static {
    /// Acknowledges; `false` if the ack was lost (dead channel: the broker
    /// redelivers and the receiver's idempotency absorbs the copy).
    fn ack(&self) -> impl Future<Output = bool> + Send;
    /// Puts the message back on the queue as a failed delivery
    /// (`basic.reject`, which every broker version counts toward the
    /// delivery limit); `false` if it was lost (the broker redelivers
    /// anyway, and counts that too).
    fn requeue(&self) -> impl Future<Output = bool> + Send;
    /// Puts the message back without calling it a failure (`basic.nack`:
    /// RabbitMQ 4.3+ does not count it, earlier versions do); `false` if it
    /// was lost.
    fn release(&self) -> impl Future<Output = bool> + Send;
}

/// The outcome of publishing a dead letter: `Ok` once the broker holds it.
pub type Published = Result<(), PublishError>;

/// The queue's side of the consume loop: where dead letters go (the
/// dead-letter exchange, with the headers `dead_letter` writes, confirmed),
/// where requeued copies go (the queue itself), and its delivery limit.
pub trait DeadLetterSink: Send + Sync + 'static {
    /// The delivery limit the queue was declared with (`None`: unknown;
    /// then only the broker enforces one).
    fn delivery_limit(&self) -> Option<u32>;

    /// Publishes a copy of `message` (body and properties kept) to the
    /// queue it came from, with the headers of
    /// [`counting::copy_headers`](super::counting::copy_headers) carrying
    /// `failures`; `Ok` only once the broker holds it. The loop then acks
    /// the original: a return no broker version counts.
    fn requeue_copy(
        &self,
        message: &dyn Message,
        failures: u32,
    ) -> impl Future<Output = Published> + Send;

    /// Publishes a copy of `message` (body and properties kept) as a dead
    /// letter of class `kind`, in the trace `trace_parent` when given; `Ok`
    /// only once the broker holds it.
    fn dead_letter(
        &self,
        message: &dyn Message,
        kind: &DeadLetterKind,
        error: &str,
        trace_parent: Option<&str>,
    ) -> impl Future<Output = Published> + Send;
}

impl DeadLetter {
    /// Why `message` is dead-lettered, as every sink records it: `kind`,
    /// `error`, this delivery's attempt number and `origin`, the queue it
    /// came from; `trace_parent`, the handling that gave up.
    pub fn of(
        message: &dyn Message,
        kind: &DeadLetterKind,
        error: &str,
        origin: &str,
        trace_parent: Option<&str>,
    ) -> Self {
        DeadLetter {
            kind: kind.clone(),
            error: error.to_owned(),
            origin: origin.to_owned(),
            attempts: message.attempts(),
            trace_parent: trace_parent.map(str::to_owned),
        }
    }
}
