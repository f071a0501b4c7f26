//! The mailer's view of `email_outbox` (the table and its SQL belong to
//! `oncehook_common::store::outbox`, which the mailer calls directly to mark
//! a row sent or failed): claim a row with a short lease (no transaction
//! held across the send) and tell why a claim failed. A row with `sent_at`
//! is never sent again.

use std::time::Duration;

use oncehook_common::store::{Pooled, outbox};
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

pub async fn claim(db: &Pooled, id: Uuid) -> Result<Claim, sqlx::Error> {
    if let Some(row) = outbox::claim(db, id, LEASE).await? {
        return Ok(Claim::Claimed(Email {
            outbox_id: id,
            to: row.to_addr,
            subject: row.subject,
            body: row.body,
        }));
    }
    Ok(match outbox::send_state(db, id).await? {
        None => Claim::Missing,
        Some(s) if s.sent => Claim::AlreadySent,
        Some(s) if s.failed => Claim::AlreadyFailed,
        Some(_) => Claim::Busy,
    })
}
