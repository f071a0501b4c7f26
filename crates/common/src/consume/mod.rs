//! The consume loop owns the delivery. Worker and mailer implement a
//! [`Handler`] that looks at a message and returns a [`Verdict`]; everything
//! else happens here, in one place:
//!
//! * `session` (with the `db` feature): supervision — wait for Postgres,
//!   connect to the broker with backoff, declare the topology, consume, and
//!   start over when the connection breaks, until shutdown;
//! * `broker`: the RabbitMQ side of the seam and consuming one queue with per-consumer prefetch, one task per
//!   delivery up to a concurrency limit ([`Window`]), draining in-flight deliveries on shutdown;
//! * [`dispatch`] / [`settle`]: running the handler (a panic requeues and is
//!   counted in `oncehook_handler_panics_total`) and carrying out its
//!   verdict — ack, requeue, or dead-letter-then-ack (requeue if the dead
//!   letter could not be published; a published one is counted by kind in
//!   `oncehook_dead_letters_total`).
//!
//! `queue` is the seam to the broker (a delivery and its settle operations,
//! the dead-letter sink); `memory` implements it without one, for tests.

pub mod broker;
pub mod memory;
pub mod queue;
#[cfg(feature = "db")]
pub mod session;

use std::future::Future;
use std::sync::Arc;

use futures_lite::FutureExt;

pub use broker::{DRAIN_TIMEOUT, Window, consume};
pub use queue::{DeadLetterSink, Delivery, Message, Published};

use crate::dead_letter::{self, DeadLetterKind};

/// What to do with a message once its handler is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Done (or nothing to do): acknowledge.
    Ack,
    /// Not now: requeue (counts toward the queue's delivery limit).
    Retry,
    /// Never as is: publish to the dead-letter exchange with the reason,
    /// then acknowledge.
    DeadLetter {
        /// The class of failure (`unknown_order`, `bad_envelope`, …).
        kind: DeadLetterKind,
        /// What failed and for which message.
        error: String,
        /// The trace of the handling that gave up (the handler's span), so
        /// the letter, and a replay's link, lead to where it failed.
        trace_parent: Option<String>,
    },
}

impl Verdict {
    /// A dead-letter verdict, in the trace of the current span (the
    /// handler's). `kind` is a [`DeadLetterKind`], or its name (a name this
    /// version does not know is kept as it is).
    pub fn dead_letter(kind: impl Into<DeadLetterKind>, error: impl Into<String>) -> Self {
        Verdict::DeadLetter {
            kind: kind.into(),
            error: error.into(),
            trace_parent: crate::otel::current_traceparent(),
        }
    }
}

/// The part of a consumer that differs between the worker and the mailer.
pub trait Handler: Send + Sync + 'static {
    /// Decides what becomes of `message`. May take its time (retrying
    /// transient trouble while the message stays unacked); must not settle
    /// the message itself.
    fn handle(&self, message: &dyn Message) -> impl Future<Output = Verdict> + Send;

    /// Called once a dead letter is published (and counted by kind) and the
    /// original acked, with the kind's name; the default logs it. Override
    /// to count it otherwise or add context.
    fn dead_lettered(&self, message: &dyn Message, kind: &str, error: &str) {
        tracing::error!(message_id = %message.message_id(), kind, error, "dead-lettered");
    }
}

/// Runs `handler` on one delivery and settles it by the verdict. A panic in
/// the handler requeues the message (the quorum queue's delivery limit then
/// dead-letters a message that always crashes).
pub async fn dispatch<H, D, S>(handler: Arc<H>, delivery: D, sink: Arc<S>)
where
    H: Handler,
    D: Delivery,
    S: DeadLetterSink,
{
    let work = std::panic::AssertUnwindSafe(handler.handle(&delivery)).catch_unwind();
    match work.await {
        Ok(verdict) => settle(handler.as_ref(), &delivery, sink.as_ref(), verdict).await,
        Err(_) => {
            tracing::error!(
                message_id = %delivery.message_id(),
                "handler panicked; requeueing (the delivery limit dead-letters repeat offenders)"
            );
            metrics::counter!("oncehook_handler_panics_total").increment(1);
            requeue(&delivery).await;
        }
    }
}

/// Carries out `verdict` on `delivery`: the only place a delivery is settled.
pub async fn settle<H, D, S>(handler: &H, delivery: &D, sink: &S, verdict: Verdict)
where
    H: Handler,
    D: Delivery,
    S: DeadLetterSink,
{
    match verdict {
        Verdict::Ack => ack(delivery).await,
        Verdict::Retry => requeue(delivery).await,
        Verdict::DeadLetter {
            kind,
            error,
            trace_parent,
        } => {
            match sink
                .dead_letter(delivery, &kind, &error, trace_parent.as_deref())
                .await
            {
                Ok(()) => {
                    ack(delivery).await;
                    dead_letter::count(&kind);
                    handler.dead_lettered(delivery, kind.as_str(), &error);
                }
                Err(err) => {
                    tracing::error!(message_id = %delivery.message_id(), %kind, error, publish_error = %err, "could not dead-letter; requeueing");
                    requeue(delivery).await;
                }
            }
        }
    }
}

async fn ack(delivery: &impl Delivery) {
    if !delivery.ack().await {
        tracing::warn!(
            message_id = %delivery.message_id(),
            "ack lost with the channel; the broker will redeliver and the copy is absorbed"
        );
    }
}

async fn requeue(delivery: &impl Delivery) {
    if !delivery.requeue().await {
        tracing::warn!(message_id = %delivery.message_id(), "nack lost with the channel; the broker will redeliver");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::memory::{MemoryDeadLetters, MemoryDelivery, Settled};
    use super::*;

    /// Returns a fixed verdict (or panics) and remembers dead-letter callbacks.
    struct Fixed {
        verdict: Option<Verdict>,
        dead: Mutex<Vec<String>>,
    }

    impl Fixed {
        fn new(verdict: Option<Verdict>) -> Arc<Self> {
            Arc::new(Fixed {
                verdict,
                dead: Mutex::new(Vec::new()),
            })
        }
    }

    impl Handler for Fixed {
        async fn handle(&self, _message: &dyn Message) -> Verdict {
            match &self.verdict {
                Some(v) => v.clone(),
                None => panic!("handler bug"),
            }
        }

        fn dead_lettered(&self, _message: &dyn Message, kind: &str, _error: &str) {
            self.dead.lock().unwrap().push(kind.to_owned());
        }
    }

    async fn run(
        verdict: Option<Verdict>,
        sink: MemoryDeadLetters,
    ) -> (MemoryDelivery, Arc<Fixed>) {
        let handler = Fixed::new(verdict);
        let delivery = MemoryDelivery::new(b"body".to_vec())
            .with_message_id("m1")
            .with_delivery_count(2);
        dispatch(handler.clone(), delivery.clone(), Arc::new(sink)).await;
        (delivery, handler)
    }

    #[tokio::test]
    async fn ack_acks_and_retry_requeues() {
        for (verdict, settled) in [
            (Verdict::Ack, Settled::Acked),
            (Verdict::Retry, Settled::Requeued),
        ] {
            let sink = MemoryDeadLetters::default();
            let (delivery, _) = run(Some(verdict), sink.clone()).await;
            assert_eq!(delivery.settled(), [settled]);
            assert!(sink.published().is_empty());
        }
    }

    #[tokio::test]
    async fn dead_letter_publishes_then_acks() {
        let sink = MemoryDeadLetters::default();
        let verdict = Verdict::dead_letter(DeadLetterKind::UnknownOrder, "no order o1");
        let (delivery, handler) = run(Some(verdict), sink.clone()).await;
        assert_eq!(delivery.settled(), [Settled::Acked]);
        let published = sink.published();
        assert_eq!(published.len(), 1);
        assert_eq!(published[0].kind, DeadLetterKind::UnknownOrder);
        assert_eq!(published[0].error, "no order o1");
        assert_eq!(published[0].attempts, 3, "delivery count 2 = third attempt");
        assert_eq!(published[0].body, b"body");
        assert_eq!(published[0].message_id, "m1");
        assert_eq!(*handler.dead.lock().unwrap(), ["unknown_order"]);
    }

    #[tokio::test]
    async fn a_failing_dead_letter_publish_requeues_and_never_acks() {
        let sink = MemoryDeadLetters::failing();
        let verdict = Verdict::dead_letter(DeadLetterKind::Unparseable, "bad");
        let (delivery, handler) = run(Some(verdict), sink.clone()).await;
        assert_eq!(delivery.settled(), [Settled::Requeued]);
        assert!(sink.published().is_empty());
        assert!(handler.dead.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_panicking_handler_requeues() {
        let sink = MemoryDeadLetters::default();
        let (delivery, _) = run(None, sink.clone()).await;
        assert_eq!(delivery.settled(), [Settled::Requeued]);
        assert!(sink.published().is_empty());
    }
}
