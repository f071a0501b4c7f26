//! `email_outbox`: emails written in the same transaction as the effect
//! that causes them (so "order committed" and "email due" are one fact),
//! published by the worker's relay and sent by the mailer, which leases a
//! row with a short lease (no transaction is held across the SMTP call) and
//! marks it sent or failed. `dedup_key` makes "one confirmation per order" a
//! constraint; a row with `sent_at` is never sent again. The functions that
//! take a [`Pooled`] run their one statement on a connection of their own,
//! in a transaction of its own only behind a transaction-mode pooler
//! ([`Pooled::single`]).

use std::time::Duration;

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

use super::Pooled;

/// An email to write, in the transaction of the effect that causes it,
/// with the deliveries' outcomes (`dedup::finish_many`): a second write
/// with the same `dedup_key` is a no-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEmail {
    pub order_id: i64,
    pub kind: String,
    pub dedup_key: String,
    pub to: String,
    pub subject: String,
    pub body: String,
    /// The `traceparent` of the delivery that caused it, if traced.
    pub trace_parent: Option<String>,
}

/// The relay: locks up to `limit` unpublished rows, oldest first, skipping
/// rows another relay holds; each with the `traceparent` it keeps.
pub async fn lock_unpublished(
    conn: &mut PgConnection,
    limit: i64,
) -> Result<Vec<(Uuid, Option<String>)>, sqlx::Error> {
    let rows = sqlx::query!(
        "SELECT id, trace_parent FROM email_outbox WHERE published_at IS NULL
         ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED",
        limit
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.trace_parent)).collect())
}

/// The relay: the rows are in the email queue.
pub async fn mark_published(conn: &mut PgConnection, ids: &[Uuid]) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE email_outbox SET published_at = now() WHERE id = ANY($1)",
        ids
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Emails neither sent nor given up on, and the age of the oldest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    pub rows: i64,
    pub oldest_age_secs: f64,
}

pub async fn backlog(db: &Pooled) -> Result<Backlog, sqlx::Error> {
    let mut conn = db.single().await?;
    let row = sqlx::query!(
        r#"SELECT count(*) AS "rows!",
                  COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 AS "oldest!"
           FROM email_outbox WHERE sent_at IS NULL AND failed_at IS NULL"#
    )
    .fetch_one(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(Backlog {
        rows: row.rows,
        oldest_age_secs: row.oldest,
    })
}

/// An email the mailer leased: its lease keeps other mailers off it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedEmail {
    pub to_addr: String,
    pub subject: String,
    pub body: String,
    /// Its tenant's sender (`tenants.mail_from`); `None`: `mail.from`.
    pub from_addr: Option<String>,
}

/// The mailer: takes a lease of `lease` on a row that is neither sent, nor
/// failed, nor leased by another mailer.
pub async fn lease(
    db: &Pooled,
    id: Uuid,
    lease: Duration,
) -> Result<Option<LeasedEmail>, sqlx::Error> {
    let mut conn = db.single().await?;
    let result = sqlx::query_as!(
        LeasedEmail,
        "UPDATE email_outbox SET claimed_until = now() + make_interval(secs => $2)
         WHERE id = $1 AND sent_at IS NULL AND failed_at IS NULL
           AND (claimed_until IS NULL OR claimed_until < now())
         RETURNING to_addr, subject, body,
                   (SELECT t.mail_from FROM tenants t WHERE t.id = email_outbox.tenant_id) AS from_addr",
        id,
        lease.as_secs_f64()
    )
    .fetch_optional(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(result)
}

/// Whether a row was sent or given up on; `None` if there is no such row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendState {
    pub sent: bool,
    pub failed: bool,
}

pub async fn send_state(db: &Pooled, id: Uuid) -> Result<Option<SendState>, sqlx::Error> {
    let mut conn = db.single().await?;
    let result = sqlx::query_as!(
        SendState,
        r#"SELECT sent_at IS NOT NULL AS "sent!", failed_at IS NOT NULL AS "failed!"
           FROM email_outbox WHERE id = $1"#,
        id
    )
    .fetch_optional(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(result)
}

/// The mailer: sent (counted as an attempt); never sent again.
pub async fn mark_sent(db: &Pooled, id: Uuid) -> Result<(), sqlx::Error> {
    let mut conn = db.single().await?;
    sqlx::query!(
        "UPDATE email_outbox SET sent_at = now(), claimed_until = NULL, attempts = attempts + 1 WHERE id = $1",
        id
    )
    .execute(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(())
}

/// The mailer: a send failed; the lease is renewed while it retries.
pub async fn record_attempt_failure(
    db: &Pooled,
    id: Uuid,
    error: &str,
    lease: Duration,
) -> Result<(), sqlx::Error> {
    let mut conn = db.single().await?;
    sqlx::query!(
        "UPDATE email_outbox SET attempts = attempts + 1, last_error = $2,
                claimed_until = now() + make_interval(secs => $3)
         WHERE id = $1",
        id,
        error,
        lease.as_secs_f64()
    )
    .execute(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(())
}

/// The mailer: given up on (the message goes to the dead-letter queue).
pub async fn mark_failed(db: &Pooled, id: Uuid, error: &str) -> Result<(), sqlx::Error> {
    let mut conn = db.single().await?;
    sqlx::query!(
        "UPDATE email_outbox SET failed_at = now(), last_error = $2, claimed_until = NULL, attempts = attempts + 1 WHERE id = $1",
        id,
        error
    )
    .execute(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(())
}

/// An email as operators read it (`oncehookctl trace`); `status` is
/// `sent`, `failed`, `queued` (published to the mailer) or `pending`.
#[derive(Debug, Clone, Serialize)]
pub struct EmailRecord {
    pub id: Uuid,
    pub kind: String,
    pub to_addr: String,
    pub subject: String,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub published_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub sent_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub failed_at: Option<OffsetDateTime>,
}

/// The order's emails, oldest first.
pub async fn emails_of(
    conn: &mut PgConnection,
    order_id: i64,
) -> Result<Vec<EmailRecord>, sqlx::Error> {
    sqlx::query_as!(
        EmailRecord,
        r#"SELECT id, kind, to_addr, subject, attempts, last_error, created_at, published_at, sent_at, failed_at,
                  CASE WHEN sent_at IS NOT NULL THEN 'sent' WHEN failed_at IS NOT NULL THEN 'failed'
                       WHEN published_at IS NOT NULL THEN 'queued' ELSE 'pending' END AS "status!"
           FROM email_outbox WHERE order_id = $1 ORDER BY created_at"#,
        order_id
    )
    .fetch_all(conn)
    .await
}

/// The outbox's backlog (emails neither sent nor failed) and failures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counts {
    pub backlog: i64,
    /// Part of the backlog the relay has not published yet.
    pub unpublished: i64,
    pub failed: i64,
    /// Seconds since the oldest backlog email was written.
    pub oldest_age_secs: Option<f64>,
}

/// Counts the outbox (`oncehookctl stats`).
pub async fn counts(conn: &mut PgConnection) -> Result<Counts, sqlx::Error> {
    sqlx::query_as!(
        Counts,
        r#"SELECT count(*) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL) AS "backlog!",
                  count(*) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL AND published_at IS NULL) AS "unpublished!",
                  count(*) FILTER (WHERE failed_at IS NOT NULL) AS "failed!",
                  EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL))::float8
                      AS "oldest_age_secs?"
           FROM email_outbox"#
    )
    .fetch_one(conn)
    .await
}

/// Clears an unsent email's failure mark (and lease), so the mailer sends
/// it again when it is replayed from the dead-letter queue.
pub async fn clear_failure(conn: &mut PgConnection, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE email_outbox SET failed_at = NULL, claimed_until = NULL WHERE id = $1 AND sent_at IS NULL",
        id
    )
    .execute(conn)
    .await?;
    Ok(())
}
