//! The mailer's handler: the life of one email message, from message to
//! verdict. The consume loop in `oncehook_common::consume` owns the session
//! and settles every delivery by the verdict returned here.
//!
//! Claim the outbox row → send (retried by [`RetryPolicy::EMAIL_SEND`]) →
//! mark sent → `Ack`. Already-sent rows are skipped, so a redelivered or
//! doubly-relayed message never mails twice. After the retry limit (or a
//! permanent SMTP refusal) the row is marked failed and the message
//! dead-lettered; the order it belongs to is never touched. Transient
//! database trouble (claiming, marking sent) never settles a message: it is
//! held and retried for as long as it lasts (so it never counts toward the
//! queue's delivery limit); only shutdown gives it back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncehook_common::consume::session::{self, ConsumerSpec};
use oncehook_common::consume::{Handler, Message, Verdict};
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_common::email::EmailMessage;
use oncehook_common::health::Readiness;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::{Pooled, outbox as store};
use oncehook_common::{MailerSettings, RetryPolicy, Topology, db, otel};
use tracing::Instrument as _;
use uuid::Uuid;

use crate::outbox::{self, Claim};
use crate::transport::{Email, Transport};

/// Shared state of one mailer process.
pub struct Mailer {
    /// The pool, and the pooler between it and Postgres.
    pub db: Pooled,
    pub transport: Transport,
    pub settings: MailerSettings,
    pub topology: Topology,
    pub readiness: Readiness,
    /// How failed sends are retried.
    pub retry: RetryPolicy,
    shutdown: Shutdown,
}

impl Mailer {
    pub fn new(
        pool: Pooled,
        transport: Transport,
        settings: MailerSettings,
        shutdown: Shutdown,
    ) -> Arc<Self> {
        Arc::new(Mailer {
            db: pool,
            transport,
            topology: Topology::new(settings.broker.prefix.clone()),
            retry: settings.mail.retry,
            settings,
            readiness: Readiness::default(),
            shutdown,
        })
    }

    /// Runs broker sessions until shutdown.
    pub async fn run(self: Arc<Self>) {
        let spec = ConsumerSpec::new(
            &self.settings.broker,
            self.settings.mail.prefetch,
            "oncehook-mailer",
            Topology::emails,
        )
        .with_concurrency(self.settings.mail.concurrency);
        session::run_sessions(
            &spec,
            self.clone(),
            &self.db,
            &self.readiness,
            &self.shutdown,
            (),
        )
        .await;
    }

    /// Sends a claimed email, retrying failures, until it has a verdict.
    async fn send(&self, email: Email) -> Verdict {
        let id = email.outbox_id;
        let mut backoff = self.retry.backoff();
        loop {
            let started = Instant::now();
            let span = tracing::info_span!(
                "send email",
                otel.kind = "client",
                oncehook.outbox_id = %id,
                oncehook.transport = %self.transport.describe(),
            );
            let result = self
                .transport
                .send(&self.settings.mail.from, &email)
                .instrument(span)
                .await;
            metrics::histogram!("oncehook_mailer_send_duration_seconds")
                .record(started.elapsed().as_secs_f64());
            let err = match result {
                Ok(()) => {
                    self.mark_sent(id).await;
                    metrics::counter!("oncehook_mailer_emails_total", "outcome" => "sent")
                        .increment(1);
                    tracing::info!(outbox_id = %id, subject = %email.subject, "email sent");
                    return Verdict::Ack;
                }
                Err(err) => err,
            };
            let error = format!(
                "sending outbox email {id} ({:?}) failed: {err}",
                email.subject
            );
            let next = if err.is_permanent() {
                None
            } else {
                backoff.next()
            };
            let Some(delay) = next else {
                if let Err(db_err) = store::mark_failed(&self.db, id, &error).await {
                    tracing::error!(outbox_id = %id, %db_err, "could not mark the email failed");
                }
                metrics::counter!("oncehook_mailer_emails_total", "outcome" => "failed")
                    .increment(1);
                return Verdict::dead_letter(DeadLetterKind::SmtpFailed, error);
            };
            let _ = store::record_attempt_failure(&self.db, id, &error, outbox::LEASE).await;
            if self.shutdown.is_triggered() {
                // Stopping: leave the row for the next mailer.
                return Verdict::Retry;
            }
            metrics::counter!("oncehook_mailer_retries_total").increment(1);
            tracing::warn!(outbox_id = %id, %err, retry_in_ms = delay.as_millis() as u64, "send failed; retrying");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.wait() => {}
            }
        }
    }

    /// The email left: record that, waiting out database trouble if need be
    /// (acking without marking would make a redelivery send it again).
    async fn mark_sent(&self, id: Uuid) {
        let mut delays = RetryPolicy::DATABASE_WAIT.backoff();
        while let Err(err) = store::mark_sent(&self.db, id).await {
            tracing::warn!(outbox_id = %id, %err, "email sent but not yet marked; retrying");
            if !self.hold(&err, &mut delays).await {
                return;
            }
        }
    }

    /// Waits before retrying a database call that failed transiently; `false`
    /// on shutdown.
    async fn hold(&self, err: &sqlx::Error, delays: &mut impl Iterator<Item = Duration>) -> bool {
        let cap = RetryPolicy::DATABASE_WAIT.max_delay;
        db::hold(&self.db, err, delays, cap, &self.shutdown).await
    }
}

impl Handler for Mailer {
    async fn handle(&self, message: &dyn Message) -> Verdict {
        // The delivery's trace, carried by the outbox row and the relay.
        let span = otel::consumer_span(&self.topology.emails(), message);
        self.handle_traced(message).instrument(span).await
    }

    fn dead_lettered(&self, message: &dyn Message, kind: &str, error: &str) {
        tracing::error!(message_id = %message.message_id(), kind, error, "email dead-lettered");
    }
}

impl Mailer {
    async fn handle_traced(&self, message: &dyn Message) -> Verdict {
        let id = match EmailMessage::from_bytes(message.body()) {
            Ok(m) => m.outbox_id,
            Err(e) => {
                let error = format!(
                    "email message {} is not readable: {e}",
                    message.message_id()
                );
                return Verdict::dead_letter(DeadLetterKind::BadMessage, error);
            }
        };
        let busy_since = Instant::now();
        let mut delays = RetryPolicy::DATABASE_WAIT.backoff();
        loop {
            match after_claim(id, outbox::claim(&self.db, id).await) {
                AfterClaim::Send(email) => return self.send(email).await,
                AfterClaim::Settle(verdict) => return verdict,
                AfterClaim::Busy => {
                    // Another mailer is sending it; hold this copy until its lease
                    // ends, so a crash there does not lose the email.
                    if busy_since.elapsed() > outbox::LEASE + Duration::from_secs(5)
                        || self.shutdown.is_triggered()
                    {
                        return Verdict::Retry;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                AfterClaim::Hold(err) => {
                    if !self.hold(&err, &mut delays).await {
                        return Verdict::Retry;
                    }
                }
            }
        }
    }
}

/// What claiming an outbox row leads to.
#[derive(Debug)]
enum AfterClaim {
    /// Ours: send it.
    Send(Email),
    /// Nothing to send: settle the message so.
    Settle(Verdict),
    /// Another mailer holds the lease.
    Busy,
    /// The claim failed transiently: hold the message, then claim again.
    Hold(sqlx::Error),
}

/// The decision table for a claim (counting and logging the skips).
fn after_claim(id: Uuid, claim: Result<Claim, sqlx::Error>) -> AfterClaim {
    match claim {
        Ok(Claim::Claimed(email)) => AfterClaim::Send(email),
        Ok(Claim::AlreadySent) => {
            metrics::counter!("oncehook_mailer_emails_total", "outcome" => "skipped").increment(1);
            tracing::info!(outbox_id = %id, "already sent; skipping the copy");
            AfterClaim::Settle(Verdict::Ack)
        }
        Ok(Claim::AlreadyFailed) => {
            tracing::info!(outbox_id = %id, "already marked failed; skipping the copy");
            AfterClaim::Settle(Verdict::Ack)
        }
        Ok(Claim::Missing) => AfterClaim::Settle(Verdict::dead_letter(
            DeadLetterKind::UnknownOutboxRow,
            format!("outbox row {id} does not exist"),
        )),
        Ok(Claim::Busy) => AfterClaim::Busy,
        Err(err) if db::is_transient(&err) => {
            tracing::warn!(outbox_id = %id, %err, "claiming the outbox row failed; holding the message and retrying");
            AfterClaim::Hold(err)
        }
        Err(err) => AfterClaim::Settle(Verdict::dead_letter(
            DeadLetterKind::Database,
            format!("claiming outbox row {id} failed: {err}"),
        )),
    }
}

#[cfg(test)]
mod tests;
