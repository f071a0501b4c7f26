//! The mailer's view of `email_outbox`: claim a row (a short lease, no
//! transaction held across the send), mark it sent, record a failed attempt,
//! or mark it failed for good. A row with `sent_at` is never sent again.

use std::time::Duration;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::transport::Email;

/// How long a claim keeps other mailers off a row.
pub const LEASE: Duration = Duration::from_secs(120);

/// What claiming found.
#[derive(Debug)]
pub enum Claim {
    /// Ours to send.
    Claimed(Email),
    /// Already sent: skip.
    AlreadySent,
    /// Given up on earlier: skip.
    AlreadyFailed,
    /// Another mailer holds the lease right now.
    Busy,
    /// No such row.
    Missing,
}

pub async fn claim(pool: &PgPool, id: Uuid) -> Result<Claim, sqlx::Error> {
    let row = sqlx::query(
        "UPDATE email_outbox SET claimed_until = now() + make_interval(secs => $2)
         WHERE id = $1 AND sent_at IS NULL AND failed_at IS NULL
           AND (claimed_until IS NULL OR claimed_until < now())
         RETURNING to_addr, subject, body",
    )
    .bind(id)
    .bind(LEASE.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    if let Some(row) = row {
        return Ok(Claim::Claimed(Email {
            outbox_id: id,
            to: row.try_get("to_addr")?,
            subject: row.try_get("subject")?,
            body: row.try_get("body")?,
        }));
    }
    let state = sqlx::query("SELECT sent_at IS NOT NULL AS sent, failed_at IS NOT NULL AS failed FROM email_outbox WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Ok(match state {
        None => Claim::Missing,
        Some(r) if r.try_get::<bool, _>("sent")? => Claim::AlreadySent,
        Some(r) if r.try_get::<bool, _>("failed")? => Claim::AlreadyFailed,
        Some(_) => Claim::Busy,
    })
}

pub async fn mark_sent(pool: &PgPool, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE email_outbox SET sent_at = now(), claimed_until = NULL, attempts = attempts + 1 WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn record_attempt_failure(
    pool: &PgPool,
    id: Uuid,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE email_outbox SET attempts = attempts + 1, last_error = $2,
                claimed_until = now() + make_interval(secs => $3)
         WHERE id = $1",
    )
    .bind(id)
    .bind(error)
    .bind(LEASE.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn mark_failed(pool: &PgPool, id: Uuid, error: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE email_outbox SET failed_at = now(), last_error = $2, claimed_until = NULL, attempts = attempts + 1 WHERE id = $1")
        .bind(id)
        .bind(error)
        .execute(pool)
        .await?;
    Ok(())
}
