//! The mailer's broker session and the life of one email message:
//! claim the outbox row → send (retried with exponential backoff and
//! jitter) → mark sent → ack. Already-sent rows are skipped, so a
//! redelivered or doubly-relayed message never mails twice. After the retry
//! limit (or a permanent SMTP refusal) the row is marked failed and the
//! message dead-lettered; the order it belongs to is never touched.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use lapin::message::Delivery;
use lapin::{Channel, Connection};
use oncehook_common::amqp::{self, DeadLetter};
use oncehook_common::email::EmailMessage;
use oncehook_common::health::Readiness;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::{Settings, Topology, consume, db};
use sqlx::PgPool;

use crate::outbox::{self, Claim};
use crate::transport::{Email, Transport};

/// Shared state of one mailer process.
pub struct Mailer {
    pub pool: PgPool,
    pub transport: Transport,
    pub settings: Settings,
    pub topology: Topology,
    pub readiness: Readiness,
    shutdown: Shutdown,
}

impl Mailer {
    pub fn new(
        pool: PgPool,
        transport: Transport,
        settings: Settings,
        shutdown: Shutdown,
    ) -> Arc<Self> {
        Arc::new(Mailer {
            pool,
            transport,
            topology: Topology::new(settings.amqp_prefix.clone()),
            settings,
            readiness: Readiness::default(),
            shutdown,
        })
    }

    /// Runs broker sessions until shutdown.
    pub async fn run(self: Arc<Self>) {
        let mailer = self.clone();
        db::run_sessions(
            &self.settings.amqp_url,
            "oncehook-mailer",
            &self.pool,
            &self.readiness,
            &self.shutdown,
            move |conn| {
                let mailer = mailer.clone();
                Box::pin(async move {
                    let shutdown = mailer.shutdown.clone();
                    mailer.session(conn, &shutdown).await
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
        let mailer = self.clone();
        let handler_ch = pub_ch.clone();
        let result = consume::consume(
            conn,
            &self.topology.emails(),
            self.settings.prefetch,
            &self.readiness,
            shutdown,
            move |delivery| {
                let mailer = mailer.clone();
                let pub_ch = handler_ch.clone();
                async move { mailer.handle(pub_ch, delivery).await }
            },
        )
        .await;
        let _ = pub_ch.close(200, "session ends".into()).await;
        result
    }

    async fn handle(&self, pub_ch: Channel, delivery: Delivery) {
        let attempts = amqp::delivery_count(&delivery) + 1;
        let msg = match EmailMessage::from_bytes(&delivery.data) {
            Ok(m) => m,
            Err(e) => {
                let error = format!(
                    "email message {} is not readable: {e}",
                    consume::message_id(&delivery)
                );
                return self
                    .dead_letter(&pub_ch, &delivery, "bad_message", error, attempts)
                    .await;
            }
        };
        let id = msg.outbox_id;
        let busy_since = Instant::now();
        loop {
            match outbox::claim(&self.pool, id).await {
                Ok(Claim::Claimed(email)) => {
                    return self.send(&pub_ch, &delivery, email, attempts).await;
                }
                Ok(Claim::AlreadySent) => {
                    metrics::counter!("oncehook_mailer_emails_total", "outcome" => "skipped")
                        .increment(1);
                    tracing::info!(outbox_id = %id, "already sent; skipping the copy");
                    return consume::ack(&delivery).await;
                }
                Ok(Claim::AlreadyFailed) => {
                    tracing::info!(outbox_id = %id, "already marked failed; skipping the copy");
                    return consume::ack(&delivery).await;
                }
                Ok(Claim::Missing) => {
                    let error = format!("outbox row {id} does not exist");
                    return self
                        .dead_letter(&pub_ch, &delivery, "unknown_outbox_row", error, attempts)
                        .await;
                }
                Ok(Claim::Busy) => {
                    // Another mailer is sending it; hold this copy until its lease
                    // ends, so a crash there does not lose the email.
                    if busy_since.elapsed() > outbox::LEASE + Duration::from_secs(5)
                        || self.shutdown.is_triggered()
                    {
                        return consume::requeue(&delivery).await;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(err) => {
                    tracing::warn!(outbox_id = %id, %err, "claiming the outbox row failed; waiting for the database");
                    if !db::wait_for_database(&self.pool, &self.shutdown).await {
                        return consume::requeue(&delivery).await;
                    }
                }
            }
        }
    }

    async fn send(&self, pub_ch: &Channel, delivery: &Delivery, email: Email, attempts: u32) {
        let id = email.outbox_id;
        let mut backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(Duration::from_secs(30))
            .with_max_times(self.settings.max_attempts.saturating_sub(1) as usize)
            .with_jitter()
            .build();
        loop {
            let started = Instant::now();
            let result = self.transport.send(&self.settings.mail_from, &email).await;
            metrics::histogram!("oncehook_mailer_send_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(()) => {
                    self.mark_sent(id).await;
                    metrics::counter!("oncehook_mailer_emails_total", "outcome" => "sent")
                        .increment(1);
                    tracing::info!(outbox_id = %id, subject = %email.subject, "email sent");
                    return consume::ack(delivery).await;
                }
                Err(err) => {
                    let error = format!(
                        "sending outbox email {id} ({:?}) failed: {err}",
                        email.subject
                    );
                    let next = if err.is_permanent() {
                        None
                    } else {
                        backoff.next()
                    };
                    match next {
                        Some(delay) if !self.shutdown.is_triggered() => {
                            metrics::counter!("oncehook_mailer_retries_total").increment(1);
                            tracing::warn!(outbox_id = %id, %err, retry_in_ms = delay.as_millis() as u64, "send failed; retrying");
                            let _ = outbox::record_attempt_failure(&self.pool, id, &error).await;
                            tokio::select! {
                                () = tokio::time::sleep(delay) => {}
                                () = self.shutdown.wait() => {}
                            }
                        }
                        Some(_) => {
                            // Stopping: leave the row for the next mailer.
                            let _ = outbox::record_attempt_failure(&self.pool, id, &error).await;
                            return consume::requeue(delivery).await;
                        }
                        None => {
                            if let Err(db_err) = outbox::mark_failed(&self.pool, id, &error).await {
                                tracing::error!(outbox_id = %id, %db_err, "could not mark the email failed");
                            }
                            metrics::counter!("oncehook_mailer_emails_total", "outcome" => "failed").increment(1);
                            return self
                                .dead_letter(pub_ch, delivery, "smtp_failed", error, attempts)
                                .await;
                        }
                    }
                }
            }
        }
    }

    /// The email left: record that, waiting out a database outage if need be
    /// (acking without marking would make a redelivery send it again).
    async fn mark_sent(&self, id: uuid::Uuid) {
        loop {
            match outbox::mark_sent(&self.pool, id).await {
                Ok(()) => return,
                Err(err) => {
                    tracing::warn!(outbox_id = %id, %err, "email sent but not yet marked; retrying");
                    if !db::wait_for_database(&self.pool, &self.shutdown).await {
                        return;
                    }
                }
            }
        }
    }

    async fn dead_letter(
        &self,
        pub_ch: &Channel,
        delivery: &Delivery,
        kind: &str,
        error: String,
        attempts: u32,
    ) {
        let why = DeadLetter {
            kind: kind.to_owned(),
            error,
            origin: self.topology.emails(),
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
                tracing::error!(kind, error = %why.error, "email dead-lettered");
                consume::ack(delivery).await;
            }
            Err(err) => {
                tracing::error!(kind, error = %why.error, publish_error = %err, "could not dead-letter; requeueing");
                consume::requeue(delivery).await;
            }
        }
    }
}
