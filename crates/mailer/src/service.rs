//! The mailer's handler: the life of one email message, from message to
//! verdict. The consume loop in `oncehook_common::consume` owns the session
//! and settles every delivery by the verdict returned here.
//!
//! Lease the outbox row → send (retried by [`RetryPolicy::EMAIL_SEND`]) →
//! mark sent → `Ack`. Already-sent rows are skipped, so a redelivered or
//! doubly-relayed message never mails twice. After the retry limit (or a
//! permanent SMTP refusal) the row is marked failed and the message
//! dead-lettered; the order it belongs to is never touched. Transient
//! database trouble (leasing, marking sent) never settles a message: it is
//! held and retried for as long as it lasts (so it never counts toward the
//! queue's delivery limit); only shutdown gives it back.
//!
//! A send happens only under a lease this mailer can vouch for
//! ([`outbox::Lease`]): with a whole send's time left of it. A failed send
//! is recorded, which renews the lease; when that write fails (or lands
//! too late) the lease may lapse while we wait, so the handler stops
//! working the row — logged with the outbox id — waits until the lease has
//! run out and leases the row afresh, like any other mailer would. The one
//! edge left is at-least-once: an email whose send succeeded but whose
//! mark could not be written before its lease ran out may be leased and
//! sent again by a mailer holding another copy of its message
//! (docs/operations.md, "Emails sent twice").

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

use crate::outbox::{self, Lease, Leasing};
use crate::transport::{Email, SendError, Transport};

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

    /// Sends a leased email under `lease`, retrying failures (drawing on
    /// `backoff`, the delivery's retry budget), until it has a verdict or
    /// the lease can no longer be vouched for.
    async fn send(
        &self,
        email: Email,
        lease: &mut Lease,
        backoff: &mut impl Iterator<Item = Duration>,
    ) -> Sent {
        let id = email.outbox_id;
        loop {
            if !lease.covers_a_send(Instant::now()) {
                tracing::warn!(outbox_id = %id, "too little of the lease is left for a send; leaving the email to a fresh lease");
                return Sent::LeaseLost;
            }
            let started = Instant::now();
            let span = tracing::info_span!(
                "send email",
                otel.kind = "client",
                oncehook.outbox_id = %id,
                oncehook.transport = %self.transport.describe(),
            );
            let result = self
                .transport
                .send(
                    email.from.as_deref().unwrap_or(&self.settings.mail.from),
                    &email,
                )
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
                    return Sent::Settled(Verdict::Ack);
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
                return Sent::Settled(Verdict::dead_letter(DeadLetterKind::SmtpFailed, error));
            };
            if !self.record_failure(id, &error, &err, lease).await {
                return Sent::LeaseLost;
            }
            if self.shutdown.is_triggered() {
                // Stopping: leave the row for the next mailer.
                return Sent::Settled(Verdict::Retry);
            }
            metrics::counter!("oncehook_mailer_retries_total").increment(1);
            tracing::warn!(outbox_id = %id, %err, retry_in_ms = delay.as_millis() as u64, "send failed; retrying");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.wait() => {}
            }
        }
    }

    /// Records a failed send, which renews `lease`; `false` when the lease
    /// can no longer be vouched for: the write failed (logged at error with
    /// the outbox id: the lease may lapse while we wait, and another mailer
    /// lease the row) or landed after the lease had run out.
    async fn record_failure(
        &self,
        id: Uuid,
        error: &str,
        send_error: &SendError,
        lease: &mut Lease,
    ) -> bool {
        let sent_at = Instant::now();
        let lease_length = self.settings.mail.lease;
        match store::record_attempt_failure(&self.db, id, error, lease_length).await {
            Err(db_err) => {
                tracing::error!(
                    outbox_id = %id,
                    %db_err,
                    %send_error,
                    "could not record the failed send (which renews the lease): stopping work on this email until its lease has run out and it is leased afresh"
                );
                false
            }
            Ok(()) if !lease.renewed(sent_at, Instant::now()) => {
                tracing::warn!(outbox_id = %id, "the failed send was recorded after the lease had run out: leaving the email to a fresh lease");
                false
            }
            Ok(()) => true,
        }
    }

    /// The email left: record that, waiting out database trouble if need be
    /// (until then the lease keeps other mailers off the row; a redelivery
    /// after it would send the email again). On shutdown with the mark
    /// still unwritten the message is acked all the same: the email did
    /// leave, and acking is what keeps this mailer from sending it again;
    /// the row stays unsent in the outbox (logged at error, with its id).
    async fn mark_sent(&self, id: Uuid) {
        let mut last_error = None;
        let marked = db::Hold::new(&self.db, &self.shutdown)
            .retry(
                || store::mark_sent(&self.db, id),
                |err| {
                    tracing::warn!(outbox_id = %id, %err, "email sent but not yet marked; retrying");
                    last_error = Some(err.to_string());
                },
            )
            .await;
        if marked.is_none() {
            tracing::error!(
                outbox_id = %id,
                err = last_error.as_deref().unwrap_or("-"),
                "email sent but never marked sent (shutting down): its row stays unsent; another copy of its message may send it again once the lease has run out"
            );
        }
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
        let lease_length = self.settings.mail.lease;
        let mut busy_since = Instant::now();
        let mut hold = db::Hold::new(&self.db, &self.shutdown);
        // The send retries of this delivery, across leases.
        let mut backoff = self.retry.backoff();
        loop {
            let sent_at = Instant::now();
            match after_lease(id, outbox::lease(&self.db, id, lease_length).await) {
                AfterLease::Send(email) => {
                    let mut lease = Lease::taken(sent_at, lease_length);
                    match self.send(email, &mut lease, &mut backoff).await {
                        Sent::Settled(verdict) => return verdict,
                        // Our lease (or what is left of it) must run out
                        // before the row can be leased again, by us or
                        // another mailer: wait for it as for a busy row.
                        Sent::LeaseLost => busy_since = Instant::now(),
                    }
                }
                AfterLease::Settle(verdict) => return verdict,
                AfterLease::Busy => {
                    // Another mailer is sending it; hold this copy until its lease
                    // ends, so a crash there does not lose the email.
                    if busy_since.elapsed() > lease_length + Duration::from_secs(5)
                        || self.shutdown.is_triggered()
                    {
                        return Verdict::Retry;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                AfterLease::Hold(err) => {
                    if !hold.pause(&err).await {
                        return Verdict::Retry;
                    }
                }
            }
        }
    }
}

/// How sending under a lease ended.
#[derive(Debug)]
enum Sent {
    /// With this verdict.
    Settled(Verdict),
    /// The lease can no longer be vouched for: the row is not ours to send.
    LeaseLost,
}

/// What leasing an outbox row leads to.
#[derive(Debug)]
enum AfterLease {
    /// Ours: send it.
    Send(Email),
    /// Nothing to send: settle the message so.
    Settle(Verdict),
    /// Another mailer holds the lease.
    Busy,
    /// Taking the lease failed transiently: hold the message, then try again.
    Hold(sqlx::Error),
}

/// The decision table for a lease (counting and logging the skips).
fn after_lease(id: Uuid, leasing: Result<Leasing, sqlx::Error>) -> AfterLease {
    match leasing {
        Ok(Leasing::Leased(email)) => AfterLease::Send(email),
        Ok(Leasing::AlreadySent) => {
            metrics::counter!("oncehook_mailer_emails_total", "outcome" => "skipped").increment(1);
            tracing::info!(outbox_id = %id, "already sent; skipping the copy");
            AfterLease::Settle(Verdict::Ack)
        }
        Ok(Leasing::AlreadyFailed) => {
            tracing::info!(outbox_id = %id, "already marked failed; skipping the copy");
            AfterLease::Settle(Verdict::Ack)
        }
        Ok(Leasing::Missing) => AfterLease::Settle(Verdict::dead_letter(
            DeadLetterKind::UnknownOutboxRow,
            format!("outbox row {id} does not exist"),
        )),
        Ok(Leasing::Busy) => AfterLease::Busy,
        Err(err) if db::is_transient(&err) => {
            tracing::warn!(outbox_id = %id, %err, "leasing the outbox row failed; holding the message and retrying");
            AfterLease::Hold(err)
        }
        Err(err) => AfterLease::Settle(Verdict::dead_letter(
            DeadLetterKind::Database,
            format!("leasing outbox row {id} failed: {err}"),
        )),
    }
}

#[cfg(test)]
mod tests;
