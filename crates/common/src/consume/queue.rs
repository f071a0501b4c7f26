//! The queue seam between the consume loop and the broker: what a handler
//! may read of a message ([`Message`]), what the loop may do with a delivery
//! ([`Delivery`]: ack, requeue) and where dead letters go
//! ([`DeadLetterSink`]). `consume::broker` implements them over RabbitMQ,
//! `consume::memory` in memory so decisions are testable without a broker.

use std::future::Future;

use lapin::BasicProperties;

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
    /// How many times the broker handed it out before (0 on the first delivery).
    fn delivery_count(&self) -> u32;

    /// This delivery's attempt number (1 on the first delivery).
    fn attempts(&self) -> u32 {
        self.delivery_count().saturating_add(1)
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
    /// Puts the message back on the queue (counts toward the delivery
    /// limit); `false` if the nack was lost (the broker redelivers anyway).
    fn requeue(&self) -> impl Future<Output = bool> + Send;
}

/// The outcome of publishing a dead letter: `Ok` once the broker holds it.
pub type Published = Result<(), PublishError>;

/// Where dead letters go: the dead-letter exchange, with the headers
/// `dead_letter` writes, confirmed.
pub trait DeadLetterSink: Send + Sync + 'static {
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
