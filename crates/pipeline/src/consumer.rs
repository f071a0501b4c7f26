//! The worker's handler: the life of one delivery, from message to verdict.
//! The consume loop in `oncehook_common::consume` owns the session (connect,
//! topology, prefetch, one task per delivery, drain) and settles every
//! delivery by the verdict returned here; this module adds the worker's
//! session tasks: the queue gauges, and the effect's own (the ledger's
//! outbox relay and parked-event sweeper: `Effect::session_tasks`).
//!
//! Lanes: the worker consumes the main lane (`P.events`, with the session
//! tasks) and every bulk lane (`P.events-bulk.N`), each in a broker session
//! of its own with its own prefetch, so a backlog in one lane never holds
//! back another's deliveries; the grouper commits the main lane's first
//! (`group`, "Lanes").
//!
//! Delivery: decode → the pipeline's grouper (one transaction for the
//! deliveries in flight together: see `pipeline`) → `Ack` after commit.
//! Duplicates — a copy under the same event id, or of the same signed body
//! under another — are acked and counted. Permanent failures become
//! `DeadLetter` (published to `P.dead` with the reason, then acked).
//! Transient database failures never settle a delivery: it is held
//! (unacked) and retried by [`RetryPolicy::DELIVERY`], then at its capped
//! delay, and while Postgres is unreachable it waits for it — for as long as
//! it takes, so database trouble never counts toward the queue's delivery
//! limit; holding every prefetched delivery pauses consumption. Only
//! shutdown gives a held delivery back (`Retry`, requeue). A panic requeues
//! the message, so the quorum queue's delivery limit dead-letters a crash
//! loop.

use std::sync::Arc;

use lapin::{Channel, Connection};
use oncehook_common::background::{self, Supervised};
use oncehook_common::broker::queues;
use oncehook_common::consume::session::{self, ConsumerSpec, SessionTasks};
use oncehook_common::consume::{Handler, Message, Verdict};
use oncehook_common::dead_letter;
use oncehook_common::health::Readiness;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{RetryPolicy, Topology, WorkerSettings, db, otel};
use tracing::Instrument as _;

use crate::group::Lane;
use crate::{
    self as pipeline, Delivery, Effect, Grouper, ProcessError, Processed, Rejection, Session,
};

/// Shared state of one worker process.
pub struct Worker<E: Effect> {
    pub pool: Pooled,
    pub effect: Arc<E>,
    pub settings: WorkerSettings,
    pub topology: Topology,
    pub readiness: Readiness,
    /// How a delivery's transient database errors are retried.
    pub retry: RetryPolicy,
    shutdown: Shutdown,
    /// Groups the deliveries in flight into transactions (`[worker] batch.size`).
    grouper: Grouper,
}

impl<E: Effect> Worker<E> {
    pub fn new(pool: Pooled, effect: E, settings: WorkerSettings, shutdown: Shutdown) -> Arc<Self> {
        effect.zero_counters();
        let effect = Arc::new(effect);
        let size = usize::from(settings.worker.batch_size.max(1));
        // As many transactions in flight as configured (`batch.committers`),
        // whatever the group size: a free committer takes what waits, up to
        // `size`, so groups grow with the load and never cap the committers.
        let committers = usize::from(settings.worker.committers);
        let grouper = Grouper::start(pool.clone(), effect.clone(), size, committers, &shutdown);
        Arc::new(Worker {
            grouper,
            pool,
            effect,
            topology: Topology::new(settings.broker.prefix.clone()),
            retry: settings.worker.retry,
            settings,
            readiness: Readiness::default(),
            shutdown,
        })
    }

    /// Runs broker sessions until shutdown: the main lane's (with the
    /// session tasks) and one per bulk lane.
    pub async fn run(self: Arc<Self>) {
        let spec = ConsumerSpec::new(
            &self.settings.broker,
            self.settings.worker.prefetch,
            "oncehook-worker",
            Topology::events,
        );
        let tasks = WorkerTasks {
            pool: self.pool.clone(),
            topology: self.topology.clone(),
            settings: self.settings.clone(),
            effect: self.effect.clone(),
        };
        // Each bulk lane's session in a task of its own, ended by the same
        // shutdown and joined after the main lane's.
        let lanes: Vec<_> = self
            .topology
            .bulk_lanes()
            .map(|queue| {
                let spec = ConsumerSpec {
                    name: "oncehook-worker-bulk",
                    queue,
                    ..spec.clone()
                };
                let worker = self.clone();
                tokio::spawn(async move {
                    // The main lane's session alone says whether the worker
                    // is ready; a bulk lane's keeps a flag of its own.
                    let readiness = Readiness::default();
                    let handler = Arc::new(BulkLane(worker.clone()));
                    session::run_sessions(
                        &spec,
                        handler,
                        &worker.pool,
                        &readiness,
                        &worker.shutdown,
                        (),
                    )
                    .await;
                })
            })
            .collect();
        session::run_sessions(
            &spec,
            self.clone(),
            &self.pool,
            &self.readiness,
            &self.shutdown,
            tasks,
        )
        .await;
        for lane in lanes {
            if let Err(err) = lane.await {
                tracing::error!(%err, "a bulk lane's session ended abnormally");
            }
        }
    }

    /// Commits a delivery until it has a verdict. Transient database
    /// errors never settle it: the delivery is held (unacked) and retried —
    /// by the policy's backoff, then at its capped delay, or once Postgres
    /// answers again — for as long as the trouble lasts, so they never count
    /// toward the queue's delivery limit. Only shutdown gives it back.
    async fn process(&self, delivery: Arc<Delivery>, lane: Lane) -> Verdict {
        let gateway = delivery.event.provider.as_str();
        let event_id = &delivery.event.event_id;
        let mut hold = db::Hold::by(self.retry, &self.pool, &self.shutdown);
        let mut tries: u32 = 0;
        loop {
            let err = match self.grouper.submit(delivery.clone(), lane).await {
                Some(Ok(processed)) => {
                    self.record(&delivery, &processed);
                    return Verdict::Ack;
                }
                Some(Err(err)) => err,
                None if self.shutdown.is_triggered() => {
                    tracing::info!(gateway, %event_id, "stopping; requeueing the delivery");
                    return Verdict::Retry;
                }
                // Its committer panicked (logged, counted and started
                // again by its supervisor): the delivery fails as if its
                // handler had, requeued and counted toward the delivery
                // limit, so one that panics every time is dead-lettered.
                None => panic!("the committer of delivery {event_id} panicked"),
            };
            let err = match next_step(err) {
                Step::Settle(verdict) => return verdict,
                Step::PauseForDatabase(err) => {
                    tracing::warn!(gateway, %event_id, %err, "database unreachable; holding this delivery until it is back");
                    err
                }
                Step::Backoff(err) => {
                    tries = tries.saturating_add(1);
                    if self.retry.max_attempts == Some(tries) {
                        tracing::warn!(gateway, %event_id, %err, "still failing after retries; holding the delivery and retrying at the capped delay");
                    } else {
                        tracing::warn!(gateway, %event_id, %err, "transient database error; retrying");
                    }
                    err
                }
            };
            metrics::counter!("oncehook_worker_retries_total", "gateway" => gateway).increment(1);
            if !hold.pause(&err).await {
                tracing::info!(gateway, %event_id, "stopping; requeueing the held delivery");
                return Verdict::Retry;
            }
        }
    }

    /// Counts and logs a committed delivery, and tells the effect (which
    /// may wake a relay for what it wrote).
    fn record(&self, decoded: &Delivery, processed: &Processed) {
        let gateway = decoded.event.provider.as_str();
        let event = &decoded.event;
        let receipt = &decoded.envelope.receipt_id;
        tracing::Span::current().record(
            "oncehook.outcome",
            match processed {
                Processed::Done(applied) => applied.outcome.as_str(),
                Processed::Duplicate { .. } => "duplicate",
            },
        );
        match processed {
            Processed::Done(applied) => {
                self.effect.committed(applied);
                let pipeline::Applied { outcome, detail } = applied;
                metrics::counter!("oncehook_worker_events_total", "gateway" => gateway, "outcome" => outcome.as_str())
                    .increment(1);
                tracing::info!(
                    gateway,
                    event_id = %event.event_id,
                    event_type = %event.event_type,
                    order_ref = event.order_ref.as_deref().unwrap_or("-"),
                    %receipt,
                    outcome = outcome.as_str(),
                    %detail,
                    "event processed"
                );
            }
            Processed::Duplicate { same_body_as: None } => {
                metrics::counter!("oncehook_worker_events_total", "gateway" => gateway, "outcome" => "duplicate")
                    .increment(1);
                tracing::info!(gateway, event_id = %event.event_id, %receipt, "duplicate delivery absorbed");
            }
            Processed::Duplicate {
                same_body_as: Some(first),
            } => {
                metrics::counter!("oncehook_worker_events_total", "gateway" => gateway, "outcome" => "duplicate")
                    .increment(1);
                count_redelivered_body(decoded.key.source.clone(), 1);
                tracing::info!(
                    gateway,
                    source = %decoded.key.source,
                    event_id = %event.event_id,
                    first_event_id = %first,
                    %receipt,
                    "signed body already delivered under another event id; absorbed as a duplicate"
                );
            }
        }
    }
}

/// Counts `n` copies of a signed body that arrived from `source` under
/// another event id than its first delivery (the event-id header is not
/// signed: a replay, or a sender that re-keyed a retry).
fn count_redelivered_body(source: String, n: u64) {
    metrics::counter!("oncehook_worker_redelivered_bodies_total", "source" => source).increment(n);
}

/// Makes the worker's per-source counters exist at zero from its start, so
/// Prometheus' `increase()` also counts the first copy of each source.
pub fn zero_counters<'a>(sources: impl IntoIterator<Item = &'a str>) {
    for source in sources {
        count_redelivered_body(source.to_owned(), 0);
    }
}

impl<E: Effect> Worker<E> {
    /// Decodes `message`, from `queue` of `lane`, and commits it.
    async fn handle_from(&self, message: &dyn Message, queue: &str, lane: Lane) -> Verdict {
        let headers = message.properties().headers().clone();
        let span = otel::consumer_span(queue, message);
        async {
            let mut delivery = match pipeline::decode(message.body(), &message.message_id()) {
                Ok(d) => d,
                Err(rejection) => return rejected(rejection),
            };
            delivery.replays = dead_letter::replays(headers.as_ref());
            delivery.trace_parent = otel::current_traceparent();
            let span = tracing::Span::current();
            span.record("oncehook.event_id", delivery.event.event_id.as_str());
            if let Some(order_ref) = &delivery.event.order_ref {
                span.record("oncehook.order_ref", order_ref.as_str());
            }
            if let Some(bad) = &self.settings.worker.fault_panic_order_ref
                && delivery.event.order_ref.as_deref() == Some(bad.as_str())
            {
                panic!("fault injection: configured to panic on order {bad}");
            }
            self.process(Arc::new(delivery), lane).await
        }
        .instrument(span)
        .await
    }

    /// Counts and logs a dead-lettered delivery.
    fn count_dead(&self, message: &dyn Message, kind: &str, error: &str) {
        let message_id = message.message_id();
        // Decoded again only for its gateway label (dead letters are rare).
        let gateway = pipeline::decode(message.body(), &message_id)
            .map_or("unknown", |d| d.event.provider.as_str());
        metrics::counter!("oncehook_worker_events_total", "gateway" => gateway, "outcome" => "dead")
            .increment(1);
        tracing::error!(gateway, %message_id, kind, error, "dead-lettered");
    }
}

/// The main lane's handler.
impl<E: Effect> Handler for Worker<E> {
    async fn handle(&self, message: &dyn Message) -> Verdict {
        self.handle_from(message, &self.topology.events(), Lane::Main)
            .await
    }

    fn dead_lettered(&self, message: &dyn Message, kind: &str, error: &str) {
        self.count_dead(message, kind, error);
    }
}

/// A bulk lane's handler: the same worker, its deliveries taken after the
/// main lane's.
struct BulkLane<E: Effect>(Arc<Worker<E>>);

impl<E: Effect> Handler for BulkLane<E> {
    async fn handle(&self, message: &dyn Message) -> Verdict {
        self.0
            .handle_from(message, &self.0.topology.bulk(), Lane::Bulk)
            .await
    }

    fn dead_lettered(&self, message: &dyn Message, kind: &str, error: &str) {
        self.0.count_dead(message, kind, error);
    }
}

/// What a failed processing attempt leads to.
#[derive(Debug)]
enum Step {
    /// Settled: the message gets this verdict.
    Settle(Verdict),
    /// Postgres is unreachable: wait for it, then try again.
    PauseForDatabase(sqlx::Error),
    /// Contention or a passing fault: back off (by the policy, then at its
    /// capped delay) and try again.
    Backoff(sqlx::Error),
}

/// The decision table for a processing error.
fn next_step(err: ProcessError) -> Step {
    match err {
        ProcessError::Permanent(rejection) => Step::Settle(rejected(rejection)),
        ProcessError::Transient(err) if db::is_connection_problem(&err) => {
            Step::PauseForDatabase(err)
        }
        ProcessError::Transient(err) => Step::Backoff(err),
    }
}

fn rejected(Rejection { kind, message }: Rejection) -> Verdict {
    Verdict::dead_letter(kind, message)
}

/// The worker's session tasks: the queue gauges (channels of their own on
/// the session's connection) and the effect's own, publishing over the
/// session's confirm channel.
struct WorkerTasks<E: Effect> {
    pool: Pooled,
    topology: Topology,
    settings: WorkerSettings,
    effect: Arc<E>,
}

impl<E: Effect> SessionTasks for WorkerTasks<E> {
    fn start(
        &mut self,
        conn: &Arc<Connection>,
        channel: &Channel,
        stop: &Shutdown,
    ) -> Vec<Supervised> {
        let mut tasks = self.effect.session_tasks(Session {
            pool: &self.pool,
            channel,
            topology: &self.topology,
            settings: &self.settings,
            stop,
        });
        let (conn, topology, session_stop) = (conn.clone(), self.topology.clone(), stop.clone());
        tasks.push(background::supervise("queue gauges", stop, move || {
            queues::report_gauges(conn.clone(), topology.clone(), session_stop.clone())
        }));
        tasks
    }
}

#[cfg(test)]
mod tests;
