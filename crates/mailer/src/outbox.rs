//! The mailer's view of `email_outbox` (the table and its SQL belong to
//! `oncehook_common::store::outbox`, which the mailer calls directly to mark
//! a row sent or failed): lease a row for a short while (no transaction
//! held across the send) and tell why no lease was taken; [`Lease`] is what
//! this process can vouch for of the lease it took. A row with `sent_at`
//! is never sent again.

use std::time::{Duration, Instant};

use oncehook_common::store::{Pooled, outbox};
use uuid::Uuid;

use crate::transport::{Email, SMTP_TIMEOUT};

/// What must be left of a lease for a send to start: the longest send,
/// plus a margin for the clocks and the scheduler.
pub const SEND_NEEDS: Duration = SMTP_TIMEOUT.saturating_add(Duration::from_secs(2));

/// The lease a handler holds on a row, as this process can vouch for it:
/// it ends `lease` after the moment *before* the statement that took or
/// renewed it was sent, so never later than the database's `claimed_until`
/// (which the database set when it ran the statement). Without a renewal
/// that is known to have landed in time, the row is no longer ours to send.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    until: Instant,
    length: Duration,
}

impl Lease {
    /// A lease of `length` taken by a statement sent at `sent_at`.
    pub fn taken(sent_at: Instant, length: Duration) -> Lease {
        Lease {
            until: sent_at + length,
            length,
        }
    }

    /// Whether a whole send started at `now` ends inside the lease.
    pub fn covers_a_send(&self, now: Instant) -> bool {
        now + SEND_NEEDS <= self.until
    }

    /// A renewal sent at `sent_at` that succeeded at `done_at`: it counts
    /// only if it landed while the current lease still held (else another
    /// mailer may have leased the row in between, and the renewal moved
    /// *its* lease). `false`: the lease is lost.
    pub fn renewed(&mut self, sent_at: Instant, done_at: Instant) -> bool {
        if done_at > self.until {
            return false;
        }
        self.until = sent_at + self.length;
        true
    }
}

/// What taking a lease found.
#[derive(Debug)]
pub enum Leasing {
    /// Ours to send.
    Leased(Email),
    /// Already sent: skip.
    AlreadySent,
    /// Given up on earlier: skip.
    AlreadyFailed,
    /// Another mailer holds the lease right now.
    Busy,
    /// No such row.
    Missing,
}

/// Leases row `id` for `lease`.
pub async fn lease(db: &Pooled, id: Uuid, lease: Duration) -> Result<Leasing, sqlx::Error> {
    if let Some(row) = outbox::lease(db, id, lease).await? {
        return Ok(Leasing::Leased(Email {
            outbox_id: id,
            to: row.to_addr,
            subject: row.subject,
            body: row.body,
            from: row.from_addr,
        }));
    }
    Ok(match outbox::send_state(db, id).await? {
        None => Leasing::Missing,
        Some(s) if s.sent => Leasing::AlreadySent,
        Some(s) if s.failed => Leasing::AlreadyFailed,
        Some(_) => Leasing::Busy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LENGTH: Duration = Duration::from_secs(60);

    #[test]
    fn a_send_starts_only_with_a_whole_send_left_of_the_lease() {
        let t0 = Instant::now();
        let lease = Lease::taken(t0, LENGTH);
        assert!(lease.covers_a_send(t0));
        assert!(lease.covers_a_send(t0 + LENGTH - SEND_NEEDS));
        assert!(!lease.covers_a_send(t0 + LENGTH - SEND_NEEDS + Duration::from_millis(1)));
        assert!(!lease.covers_a_send(t0 + LENGTH));
        assert!(SEND_NEEDS < oncehook_common::config::MIN_MAIL_LEASE);
    }

    #[test]
    fn a_renewal_counts_only_if_it_landed_in_time() {
        let t0 = Instant::now();
        let mut lease = Lease::taken(t0, LENGTH);
        // Renewed 50 s in: good for 60 s from when the renewal was sent.
        let sent = t0 + Duration::from_secs(50);
        assert!(lease.renewed(sent, sent + Duration::from_secs(1)));
        assert!(lease.covers_a_send(t0 + Duration::from_secs(95)));
        assert!(!lease.covers_a_send(t0 + Duration::from_secs(100)));
        // A renewal that came back after the lease ended may have moved
        // another mailer's lease: lost, and the lease is not extended.
        let late = t0 + Duration::from_secs(105);
        assert!(!lease.renewed(late, t0 + Duration::from_secs(111)));
        assert!(!lease.covers_a_send(t0 + Duration::from_secs(100)));
    }
}
