//! The consume loop owns the delivery. Worker and mailer implement a
//! [`Handler`] that looks at a message and returns a [`Verdict`]; everything
//! else happens here, in one place:
//!
//! * `session` (with the `db` feature): supervision — wait for Postgres,
//!   connect to the broker with backoff, declare the topology, consume, and
//!   start over when the connection breaks, until shutdown;
//! * `broker`: the RabbitMQ side of the seam and consuming one queue with per-consumer prefetch, one task per
//!   delivery up to a concurrency limit ([`Window`]), draining in-flight deliveries on shutdown;
//! * [`dispatch`] / [`settle`]: running the handler (a panic requeues as a
//!   failed delivery and is counted in `oncehook_handler_panics_total`) and
//!   carrying out its verdict — ack, give back uncounted, or
//!   dead-letter-then-ack (a failed delivery if the dead letter could not be
//!   published; a published one is counted by kind in
//!   `oncehook_dead_letters_total`);
//! * `counting`: what the delivery's headers say about its earlier
//!   failures, and how a delivery goes back so that failures count toward
//!   the delivery limit and give-backs never do, whichever way the broker
//!   counts (RabbitMQ 3.10–4.2 count every return, 4.3+ failures only).
//!
//! `queue` is the seam to the broker (a delivery and its settle operations,
//! the dead-letter sink); `memory` implements it without one, for tests,
//! counting either way.

pub mod broker;
pub mod counting;
pub mod memory;
pub mod queue;
#[cfg(feature = "db")]
pub mod session;

use std::future::Future;
use std::sync::Arc;

use futures_lite::FutureExt;

pub use broker::{DRAIN_TIMEOUT, Window, consume};
pub use counting::{Admission, Counts, Requeue, Return};
pub use queue::{DeadLetterSink, Delivery, Message, Published};

use crate::dead_letter::{self, DeadLetterKind};

/// What to do with a message once its handler is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Done (or nothing to do): acknowledge.
    Ack,
    /// Not now, and not the message's fault (shutdown while it is held
    /// through database trouble, a lease held elsewhere): give it back
    /// without counting toward the queue's delivery limit, on every broker
    /// version (see [`counting`]).
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
/// the handler requeues the message as a failed delivery (the quorum
/// queue's delivery limit then dead-letters a message that always crashes).
/// A delivery whose failures, carried across requeued copies, are already
/// past the queue's delivery limit is dead-lettered (`delivery_limit`)
/// without running the handler.
pub async fn dispatch<H, D, S>(handler: Arc<H>, delivery: D, sink: Arc<S>)
where
    H: Handler,
    D: Delivery,
    S: DeadLetterSink,
{
    let counts = delivery.counts();
    if let Some(limit) = sink.delivery_limit()
        && counting::admit(counts, Some(limit)) == Admission::DeadLetter
    {
        let error = format!(
            "message {} failed {} deliveries (requeued copies included), past the delivery limit of {limit}",
            delivery.message_id(),
            counts.failures(),
        );
        let verdict = Verdict::DeadLetter {
            kind: DeadLetterKind::DeliveryLimit,
            error,
            trace_parent: None,
        };
        settle(handler.as_ref(), &delivery, sink.as_ref(), verdict).await;
        return;
    }
    let work = std::panic::AssertUnwindSafe(handler.handle(&delivery)).catch_unwind();
    match work.await {
        Ok(verdict) => settle(handler.as_ref(), &delivery, sink.as_ref(), verdict).await,
        Err(_) => {
            tracing::error!(
                message_id = %delivery.message_id(),
                "handler panicked; requeueing as a failed delivery (the delivery limit dead-letters repeat offenders)"
            );
            metrics::counter!("oncehook_handler_panics_total").increment(1);
            put_back(&delivery, sink.as_ref(), Return::Failed).await;
        }
    }
}

/// Gives `delivery` back to its queue without running a handler and
/// without counting toward the delivery limit (a delivery the consume loop
/// received but did not start before shutdown).
pub async fn give_back<D: Delivery, S: DeadLetterSink>(delivery: D, sink: Arc<S>) {
    put_back(&delivery, sink.as_ref(), Return::GiveBack).await;
}

/// Carries out `verdict` on `delivery`: the only place a handled delivery is
/// settled.
pub async fn settle<H, D, S>(handler: &H, delivery: &D, sink: &S, verdict: Verdict)
where
    H: Handler,
    D: Delivery,
    S: DeadLetterSink,
{
    match verdict {
        Verdict::Ack => ack(delivery).await,
        Verdict::Retry => put_back(delivery, sink, Return::GiveBack).await,
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
                    tracing::error!(message_id = %delivery.message_id(), %kind, error, publish_error = %err, "could not dead-letter; requeueing as a failed delivery");
                    put_back(delivery, sink, Return::Failed).await;
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

/// Puts `delivery` back on its queue for `why`, the way
/// [`counting::requeue`] decides for its counters.
async fn put_back<D: Delivery, S: DeadLetterSink>(delivery: &D, sink: &S, why: Return) {
    let id = delivery.message_id();
    match counting::requeue(delivery.counts(), why) {
        Requeue::Reject => {
            if !delivery.requeue().await {
                tracing::warn!(message_id = %id, "reject lost with the channel; the broker will redeliver");
            }
        }
        Requeue::Nack => {
            release(delivery).await;
            tracing::info!(message_id = %id, "given back with a nack (not counted toward the delivery limit)");
        }
        Requeue::Copy { failures } => match sink.requeue_copy(delivery, failures).await {
            Ok(()) => {
                ack(delivery).await;
                tracing::info!(message_id = %id, failures, "given back as a requeued copy (not counted toward the delivery limit)");
            }
            Err(err) => {
                tracing::warn!(message_id = %id, %err, "could not requeue a copy; nacking instead (brokers before RabbitMQ 4.3 count that return)");
                release(delivery).await;
            }
        },
    }
}

async fn release(delivery: &impl Delivery) {
    if !delivery.release().await {
        tracing::warn!(message_id = %delivery.message_id(), "nack lost with the channel; the broker will redeliver");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::memory::{Counting, MemoryDeadLetters, MemoryDelivery, MemoryQueue, Next, Settled};
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

    /// The third delivery of a message that failed twice, as a broker
    /// counting by `counting` hands it out.
    async fn run(
        counting: Counting,
        verdict: Option<Verdict>,
        sink: MemoryDeadLetters,
    ) -> (MemoryDelivery, Arc<Fixed>) {
        let handler = Fixed::new(verdict);
        let delivery = MemoryDelivery::new(b"body".to_vec())
            .with_message_id("m1")
            .counted(counting, 2, 2);
        dispatch(handler.clone(), delivery.clone(), Arc::new(sink)).await;
        (delivery, handler)
    }

    #[tokio::test]
    async fn ack_acks_under_both_countings() {
        for counting in Counting::ALL {
            let sink = MemoryDeadLetters::default();
            let (delivery, _) = run(counting, Some(Verdict::Ack), sink.clone()).await;
            assert_eq!(delivery.settled(), [Settled::Acked], "{counting:?}");
            assert!(sink.published().is_empty());
            assert_eq!(sink.copies(), 0);
        }
    }

    #[tokio::test]
    async fn retry_gives_back_without_a_count_under_both_countings() {
        // 3.x–4.2 count every return: a copy carrying the two failures takes
        // its place, and the original is acked.
        let sink = MemoryDeadLetters::default();
        let (delivery, _) = run(Counting::EveryReturn, Some(Verdict::Retry), sink.clone()).await;
        assert_eq!(delivery.settled(), [Settled::Acked]);
        let copy = sink.take_copy().expect("a requeued copy");
        assert_eq!(copy.counts().failures(), 2);
        assert_eq!(copy.counts().delivery_count, 0, "no stale broker counter");
        assert_eq!(copy.body(), b"body");
        assert_eq!(copy.message_id(), "m1");
        assert!(sink.published().is_empty());

        // 4.3+ do not count a nack.
        let sink = MemoryDeadLetters::default();
        let (delivery, _) = run(Counting::FailuresOnly, Some(Verdict::Retry), sink.clone()).await;
        assert_eq!(delivery.settled(), [Settled::Released]);
        assert_eq!(sink.copies(), 0);
        assert!(sink.published().is_empty());
    }

    #[tokio::test]
    async fn a_give_back_whose_copy_fails_is_nacked_and_never_rejected() {
        let (delivery, _) = run(
            Counting::EveryReturn,
            Some(Verdict::Retry),
            MemoryDeadLetters::failing(),
        )
        .await;
        assert_eq!(delivery.settled(), [Settled::Released]);
    }

    #[tokio::test]
    async fn dead_letter_publishes_then_acks() {
        for counting in Counting::ALL {
            let sink = MemoryDeadLetters::default();
            let verdict = Verdict::dead_letter(DeadLetterKind::UnknownOrder, "no order o1");
            let (delivery, handler) = run(counting, Some(verdict), sink.clone()).await;
            assert_eq!(delivery.settled(), [Settled::Acked], "{counting:?}");
            let published = sink.published();
            assert_eq!(published.len(), 1);
            assert_eq!(published[0].kind, DeadLetterKind::UnknownOrder);
            assert_eq!(published[0].error, "no order o1");
            assert_eq!(published[0].attempts, 3, "two returns = third attempt");
            assert_eq!(published[0].body, b"body");
            assert_eq!(published[0].message_id, "m1");
            assert_eq!(*handler.dead.lock().unwrap(), ["unknown_order"]);
            assert_eq!(sink.copies(), 0);
        }
    }

    #[tokio::test]
    async fn a_failing_dead_letter_publish_requeues_as_a_failure_and_never_acks() {
        for counting in Counting::ALL {
            let sink = MemoryDeadLetters::failing();
            let verdict = Verdict::dead_letter(DeadLetterKind::Unparseable, "bad");
            let (delivery, handler) = run(counting, Some(verdict), sink.clone()).await;
            assert_eq!(delivery.settled(), [Settled::Requeued], "{counting:?}");
            assert!(sink.published().is_empty());
            assert!(handler.dead.lock().unwrap().is_empty());
        }
    }

    #[tokio::test]
    async fn a_panicking_handler_requeues_as_a_failure() {
        for counting in Counting::ALL {
            let sink = MemoryDeadLetters::default();
            let (delivery, _) = run(counting, None, sink.clone()).await;
            assert_eq!(delivery.settled(), [Settled::Requeued], "{counting:?}");
            assert!(sink.published().is_empty());
            assert_eq!(sink.copies(), 0);
        }
    }

    /// One step of a scripted handler.
    #[derive(Debug, Clone)]
    enum Step {
        Do(Verdict),
        Panic,
        /// The consumer dies holding the delivery (never settled).
        Die,
    }

    /// Plays `steps` on successive deliveries (the last one repeating).
    struct Scripted {
        steps: Vec<Step>,
        calls: AtomicUsize,
    }

    impl Scripted {
        fn new(steps: Vec<Step>) -> Arc<Self> {
            Arc::new(Scripted {
                steps,
                calls: AtomicUsize::new(0),
            })
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    impl Handler for Scripted {
        async fn handle(&self, _message: &dyn Message) -> Verdict {
            let i = self.calls.fetch_add(1, Ordering::SeqCst);
            match &self.steps[i.min(self.steps.len() - 1)] {
                Step::Do(verdict) => verdict.clone(),
                Step::Panic => panic!("handler bug"),
                Step::Die => std::future::pending().await,
            }
        }

        fn dead_lettered(&self, _message: &dyn Message, _kind: &str, _error: &str) {}
    }

    /// How a message's deliveries ended.
    #[derive(Debug, PartialEq, Eq)]
    enum End {
        Acked,
        /// The broker's delivery limit.
        DeadLetteredByBroker,
        /// The consume loop (published, then acked), with this kind.
        DeadLetteredByLoop(DeadLetterKind),
    }

    const LIMIT: u32 = 3;

    /// Delivers one message to `handler` through a queue counting by
    /// `counting` with a delivery limit of [`LIMIT`] until it is gone;
    /// `returned` times returned (not failed) before the first delivery here.
    async fn deliver(counting: Counting, handler: &Arc<Scripted>, returned: u32) -> End {
        let queue = MemoryQueue::new(counting, LIMIT);
        let sink = MemoryDeadLetters::default().with_delivery_limit(LIMIT);
        let mut delivery = MemoryDelivery::new(b"body".to_vec()).with_message_id("m1");
        if returned > 0 {
            delivery = delivery.counted(counting, 0, returned);
        }
        for _ in 0..200 {
            let run = dispatch(handler.clone(), delivery.clone(), Arc::new(sink.clone()));
            // A consumer that dies holding it: the delivery stays unsettled.
            let _ = tokio::time::timeout(Duration::from_millis(20), run).await;
            match queue.next(&delivery, &sink) {
                Next::Redelivered(next) => delivery = *next,
                Next::DeadLetteredByBroker => return End::DeadLetteredByBroker,
                Next::Gone => {
                    return match sink.published().pop() {
                        Some(letter) => End::DeadLetteredByLoop(letter.kind),
                        None => End::Acked,
                    };
                }
            }
        }
        panic!(
            "{counting:?}: still delivered after 200 deliveries: the delivery limit never ended it"
        );
    }

    #[tokio::test]
    async fn a_handler_that_always_panics_is_dead_lettered_after_the_limit_under_both_countings() {
        for counting in Counting::ALL {
            let handler = Scripted::new(vec![Step::Panic]);
            let end = deliver(counting, &handler, 0).await;
            assert_eq!(end, End::DeadLetteredByBroker, "{counting:?}");
            assert_eq!(handler.calls(), LIMIT as usize + 1, "{counting:?}");
        }
    }

    #[tokio::test]
    async fn a_consumer_that_always_dies_is_dead_lettered_after_the_limit_under_both_countings() {
        for counting in Counting::ALL {
            let handler = Scripted::new(vec![Step::Die]);
            let end = deliver(counting, &handler, 0).await;
            assert_eq!(end, End::DeadLetteredByBroker, "{counting:?}");
            assert_eq!(handler.calls(), LIMIT as usize + 1, "{counting:?}");
        }
    }

    #[tokio::test]
    async fn give_backs_never_count_toward_the_limit_under_both_countings() {
        for counting in Counting::ALL {
            // Held through database trouble and given back at shutdown, ten
            // times the limit, then applied.
            let mut steps = vec![Step::Do(Verdict::Retry); 10 * LIMIT as usize];
            steps.push(Step::Do(Verdict::Ack));
            let handler = Scripted::new(steps);
            // Handed out once before (so 4.3+ shows its `x-acquired-count`).
            let end = deliver(counting, &handler, 1).await;
            assert_eq!(end, End::Acked, "{counting:?}");
            assert_eq!(handler.calls(), 10 * LIMIT as usize + 1, "{counting:?}");
        }
    }

    #[tokio::test]
    async fn failures_between_give_backs_still_end_at_the_limit_under_both_countings() {
        for (counting, ends) in [
            // Each give-back is a copy carrying the failures: the loop
            // dead-letters the copy that is past the limit.
            (
                Counting::EveryReturn,
                End::DeadLetteredByLoop(DeadLetterKind::DeliveryLimit),
            ),
            // Give-backs are nacks, which 4.3+ do not count: the broker's
            // limit ends it.
            (Counting::FailuresOnly, End::DeadLetteredByBroker),
        ] {
            let mut steps = Vec::new();
            for _ in 0..=LIMIT {
                steps.extend([Step::Panic, Step::Do(Verdict::Retry)]);
            }
            let handler = Scripted::new(steps);
            assert_eq!(deliver(counting, &handler, 0).await, ends, "{counting:?}");
            // limit + 1 failures, with a give-back between each two.
            assert_eq!(handler.calls(), 2 * LIMIT as usize + 1, "{counting:?}");
        }
    }

    #[tokio::test]
    async fn a_consumer_dying_after_a_give_back_still_ends_at_the_limit_under_both_countings() {
        for counting in Counting::ALL {
            // One failure, a give-back, then the consumer dies every time.
            let handler = Scripted::new(vec![Step::Panic, Step::Do(Verdict::Retry), Step::Die]);
            let end = deliver(counting, &handler, 0).await;
            assert!(
                matches!(
                    end,
                    End::DeadLetteredByBroker
                        | End::DeadLetteredByLoop(DeadLetterKind::DeliveryLimit)
                ),
                "{counting:?}: {end:?}"
            );
            // limit + 1 failures (the panic and three deaths) and the give-back.
            assert_eq!(handler.calls(), LIMIT as usize + 2, "{counting:?}");
        }
    }
}
