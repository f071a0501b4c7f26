//! The mailer's view of `email_outbox` (the table and its SQL belong to
//! `oncehook_common::store::outbox`): claim a row with a short lease (no
//! transaction held across the send) and tell why a claim failed, mark it
//! sent, record a failed attempt, or mark it failed for good. A row with
//! `sent_at` is never sent again.

use std::time::Duration;

use oncehook_common::store::outbox;
use sqlx::PgPool;
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
    if let Some(row) = outbox::claim(pool, id, LEASE).await? {
        return Ok(Claim::Claimed(Email {
            outbox_id: id,
            to: row.to_addr,
            subject: row.subject,
            body: row.body,
        }));
    }
    Ok(match outbox::send_state(pool, id).await? {
        None => Claim::Missing,
        Some(s) if s.sent => Claim::AlreadySent,
        Some(s) if s.failed => Claim::AlreadyFailed,
        Some(_) => Claim::Busy,
    })
}

pub async fn mark_sent(pool: &PgPool, id: Uuid) -> Result<(), sqlx::Error> {
    outbox::mark_sent(pool, id).await
}

pub async fn record_attempt_failure(
    pool: &PgPool,
    id: Uuid,
    error: &str,
) -> Result<(), sqlx::Error> {
    outbox::record_attempt_failure(pool, id, error, LEASE).await
}

pub async fn mark_failed(pool: &PgPool, id: Uuid, error: &str) -> Result<(), sqlx::Error> {
    outbox::mark_failed(pool, id, error).await
}
