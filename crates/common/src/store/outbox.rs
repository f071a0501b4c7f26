//! `email_outbox`: emails written in the same transaction as the effect
//! that causes them (so "order committed" and "email due" are one fact),
//! published by the worker's relay and sent by the mailer. `dedup_key`
//! makes "one confirmation per order" a constraint.

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

/// An email to write.
#[derive(Debug, Clone, Copy)]
pub struct NewEmail<'a> {
    pub order_id: i64,
    pub kind: &'a str,
    pub dedup_key: &'a str,
    pub to: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
}

/// Writes an email; a second write with the same `dedup_key` is a no-op
/// (`false`).
pub async fn write(conn: &mut PgConnection, e: NewEmail<'_>) -> Result<bool, sqlx::Error> {
    let row = sqlx::query_scalar!(
        "INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (dedup_key) DO NOTHING
         RETURNING id",
        Uuid::new_v4(),
        e.order_id,
        e.kind,
        e.dedup_key,
        e.to,
        e.subject,
        e.body
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
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

/// Clears an unsent email's failure mark (and claim), so the mailer sends
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
