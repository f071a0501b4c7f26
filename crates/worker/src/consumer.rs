//! The worker's broker session and the life of one delivery.
//!
//! Session: connect (with backoff) → declare the topology → a confirm channel
//! for dead letters and the outbox relay, a consumer channel with
//! per-consumer prefetch → consume until the connection breaks or shutdown →
//! drain in-flight deliveries → reconnect.
//!
//! Delivery: decode → process (one transaction) → ack after commit.
//! Duplicates are acked and counted. Permanent failures are republished to
//! `P.dead` with the reason, then acked. Transient database failures are
//! retried with exponential backoff while the message stays unacked; while
//! Postgres is unreachable consumption pauses (no delivery attempts burnt);
//! contention that outlasts the retries requeues. A panic requeues the
//! message, so the quorum queue's delivery limit dead-letters a crash loop.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use lapin::message::Delivery;
use lapin::{Channel, Connection};
use oncehook_common::amqp::{self, DeadLetter};
use oncehook_common::health::Readiness;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::{Settings, Topology};
use oncehook_common::{consume, db};
use sqlx::PgPool;
use tokio::sync::Notify;

use crate::effect::Effect;
use crate::processor::{self, ProcessError, Processed, Rejection};
use crate::relay;

/// Shared state of one worker process.
pub struct Worker<E: Effect> {
    pub pool: PgPool,
    pub effect: E,
    pub settings: Settings,
    pub topology: Topology,
    pub readiness: Readiness,
    shutdown: Shutdown,
    relay_wakeup: Arc<Notify>,
}

impl<E: Effect> Worker<E> {
    pub fn new(pool: PgPool, effect: E, settings: Settings, shutdown: Shutdown) -> Arc<Self> {
        Arc::new(Worker {
            pool,
            effect,
            topology: Topology::new(settings.amqp_prefix.clone()),
            settings,
            readiness: Readiness::default(),
            shutdown,
            relay_wakeup: Arc::new(Notify::new()),
        })
    }

    /// Runs broker sessions until shutdown.
    pub async fn run(self: Arc<Self>) {
        let worker = self.clone();
        db::run_sessions(
            &self.settings.amqp_url,
            "oncehook-worker",
            &self.pool,
            &self.readiness,
            &self.shutdown,
            move |conn| {
                let worker = worker.clone();
                Box::pin(async move {
                    let shutdown = worker.shutdown.clone();
                    worker.session(conn, &shutdown).await
                })
            },
        )
        .await;
    }

    async fn session(self: Arc<Self>, conn: &Connection, shutdown: &Shutdown) -> lapin::Result<()> {
        let pub_ch = amqp::confirm_channel(conn).await?;
        self.topology
            .declare(&pub_ch, self.settings.delivery_limit)
            .await?;
        let pub_ch_for_close = pub_ch.clone();
        let relay_stop = Shutdown::new();
        let relay = tokio::spawn(relay::run(
            self.pool.clone(),
            pub_ch.clone(),
            self.topology.clone(),
            self.settings.publish_timeout,
            self.relay_wakeup.clone(),
            relay_stop.clone(),
        ));
        let sweeper = tokio::spawn(crate::parking::run_sweeper(
            self.pool.clone(),
            pub_ch.clone(),
            self.topology.clone(),
            self.settings.unlinked_ttl,
            self.settings.publish_timeout,
            relay_stop.clone(),
        ));
        let worker = self.clone();
        let result = consume::consume(
            conn,
            &self.topology.events(),
            self.settings.prefetch,
            &self.readiness,
            shutdown,
            move |delivery| {
                let worker = worker.clone();
                let pub_ch = pub_ch.clone();
                async move { worker.handle(pub_ch, delivery).await }
            },
        )
        .await;
        relay_stop.trigger();
        let _ = relay.await;
        let _ = sweeper.await;
        let _ = pub_ch_for_close.close(200, "session ends".into()).await;
        result
    }

    async fn handle(&self, pub_ch: Channel, delivery: Delivery) {
        let message_id = consume::message_id(&delivery);
        let attempts = amqp::delivery_count(&delivery) + 1;
        let decoded = match processor::decode(&delivery.data, &message_id) {
            Ok(d) => d,
            Err(Rejection { kind, message }) => {
                return self
                    .dead_letter(&pub_ch, &delivery, "unknown", kind, message, attempts)
                    .await;
            }
        };
        let gateway = decoded.event.provider.as_str();
        if let Some(bad) = &self.settings.fault_panic_order_ref
            && decoded.event.order_ref.as_deref() == Some(bad.as_str())
        {
            panic!("fault injection: configured to panic on order {bad}");
        }

        let mut backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(self.settings.max_attempts.saturating_sub(1) as usize)
            .with_jitter()
            .build();
        loop {
            match processor::process(&self.pool, &self.effect, &decoded).await {
                Ok(Processed::Done { outcome, detail }) => {
                    consume::ack(&delivery).await;
                    self.relay_wakeup.notify_one();
                    metrics::counter!("oncehook_worker_events_total", "gateway" => gateway, "outcome" => outcome.as_str())
                        .increment(1);
                    tracing::info!(
                        gateway,
                        event_id = %decoded.event.event_id,
                        event_type = %decoded.event.event_type,
                        order_ref = decoded.event.order_ref.as_deref().unwrap_or("-"),
                        receipt = %decoded.envelope.receipt_id,
                        outcome = outcome.as_str(),
                        %detail,
                        "event processed"
                    );
                    return;
                }
                Ok(Processed::Duplicate) => {
                    consume::ack(&delivery).await;
                    metrics::counter!("oncehook_worker_events_total", "gateway" => gateway, "outcome" => "duplicate")
                        .increment(1);
                    tracing::info!(gateway, event_id = %decoded.event.event_id, receipt = %decoded.envelope.receipt_id, "duplicate delivery absorbed");
                    return;
                }
                Err(ProcessError::Permanent(Rejection { kind, message })) => {
                    return self
                        .dead_letter(&pub_ch, &delivery, gateway, kind, message, attempts)
                        .await;
                }
                Err(ProcessError::Transient(err)) => {
                    metrics::counter!("oncehook_worker_retries_total", "gateway" => gateway)
                        .increment(1);
                    if db::is_connection_problem(&err) {
                        tracing::warn!(gateway, event_id = %decoded.event.event_id, %err, "database unreachable; pausing this delivery until it is back");
                        if !db::wait_for_database(&self.pool, &self.shutdown).await {
                            return consume::requeue(&delivery).await;
                        }
                        continue;
                    }
                    match backoff.next() {
                        Some(delay) => {
                            tracing::warn!(gateway, event_id = %decoded.event.event_id, %err, retry_in_ms = delay.as_millis() as u64, "transient database error; retrying");
                            tokio::time::sleep(delay).await;
                        }
                        None => {
                            tracing::warn!(gateway, event_id = %decoded.event.event_id, %err, "still failing after retries; requeueing");
                            return consume::requeue(&delivery).await;
                        }
                    }
                }
            }
        }
    }

    async fn dead_letter(
        &self,
        pub_ch: &Channel,
        delivery: &Delivery,
        gateway: &str,
        kind: &'static str,
        message: String,
        attempts: u32,
    ) {
        let why = DeadLetter {
            kind: kind.to_owned(),
            error: message,
            origin: self.topology.events(),
            attempts,
        };
        match amqp::dead_letter(
            pub_ch,
            &self.topology.dead(),
            delivery,
            &why,
            self.settings.publish_timeout,
        )
        .await
        {
            Ok(()) => {
                consume::ack(delivery).await;
                metrics::counter!("oncehook_worker_events_total", "gateway" => gateway.to_owned(), "outcome" => "dead")
                    .increment(1);
                tracing::error!(gateway, message_id = %consume::message_id(delivery), kind, error = %why.error, "dead-lettered");
            }
            Err(err) => {
                tracing::error!(gateway, message_id = %consume::message_id(delivery), kind, error = %why.error, publish_error = %err, "could not dead-letter; requeueing");
                consume::requeue(delivery).await;
            }
        }
    }
}
