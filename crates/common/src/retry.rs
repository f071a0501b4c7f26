//! `RetryPolicy`: the one description of "try again later" that every
//! backoff site reads — reconnecting to the broker, opening and waiting for the
//! database, retrying a delivery's transaction, resending an email. Each
//! site takes a policy value instead of building a backoff inline; the named
//! constants hold today's numbers, and a site whose limit is configured
//! (`max_attempts`) overrides it with [`RetryPolicy::with_max_attempts`].

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Exponential backoff (factor 2) from `min_delay` up to `max_delay`, for at
/// most `max_attempts` attempts in all (the first included), optionally
/// with jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// Attempts in all, the first one included; `None` retries until the
    /// caller gives up (e.g. on shutdown).
    pub max_attempts: Option<u32>,
    /// Randomise each delay (so many clients do not retry in lockstep).
    pub jitter: bool,
}

/// The gateway calls one refund send makes at most, one after the other,
/// each within the gateway API's timeout: the payment's id where the
/// gateway refunds by another (PayU's `verify_payment`), the lookup of what
/// an earlier try may have made, and the refund itself. (A lookup that
/// pages asks for further pages only while the lease leaves room for the
/// refund.)
pub const REFUND_CALLS_PER_SEND: u32 = 3;

impl RetryPolicy {
    /// A broker session (`broker::session`): the pause after a refused
    /// connection or a failed session, forever, 200 ms → 5 s, with jitter;
    /// back to 200 ms once a session opened.
    pub const BROKER_CONNECT: Self = Self::new(200, 5_000, None, true);
    /// Opening the Postgres pool at start: 200 ms → 5 s, with jitter; the
    /// caller sets the number of attempts.
    pub const DATABASE_CONNECT: Self = Self::new(200, 5_000, None, true);
    /// Polling an unreachable Postgres while consumption is paused: forever,
    /// 200 ms → 5 s, no jitter.
    pub const DATABASE_WAIT: Self = Self::new(200, 5_000, None, false);
    /// A delivery's transaction failing transiently (contention): 50 ms → 2 s
    /// with jitter; once the attempts are used up the delivery is still held
    /// and retried every `max_delay` (never requeued for database trouble).
    /// The attempts come from `[worker] retry.max_attempts` /
    /// `ONCEHOOK_MAX_ATTEMPTS` (default 5).
    pub const DELIVERY: Self = Self::new(50, 2_000, Some(5), true);
    /// A request's transaction that lost to another (a deadlock or a
    /// serialization failure, `db::is_contention`): run again from its
    /// start after 20 ms → 1 s with jitter, 5 attempts in all; then the
    /// request fails as the database's (the shop API's create and cancel
    /// answer 503). Postgres finds a deadlock only after its
    /// `deadlock_timeout` (1 s), so the attempts take seconds, not the delays.
    pub const TRANSACTION: Self = Self::new(20, 1_000, Some(5), true);
    /// An email send failing: 1 s → 30 s with jitter, then the email is
    /// dead-lettered. The attempts come from `[mail] retry.max_attempts`.
    pub const EMAIL_SEND: Self = Self::new(1_000, 30_000, Some(5), true);

    /// A gateway API call of the reconciler failing with a 5xx, a timeout
    /// or a lost connection: 500 ms → 8 s with jitter, 4 attempts in all;
    /// then the call is given up for this run (the next run asks again).
    pub const GATEWAY_API: Self = Self::new(500, 8_000, Some(4), true);

    const fn new(min_ms: u64, max_ms: u64, max_attempts: Option<u32>, jitter: bool) -> Self {
        Self {
            min_delay: Duration::from_millis(min_ms),
            max_delay: Duration::from_millis(max_ms),
            max_attempts,
            jitter,
        }
    }

    /// Sending a refund the gateway has not confirmed (the refunder): the
    /// intent is tried again under the same key after 2 s, 4 s, … up to
    /// 5 minutes, forever (an operator sees it in `sending`). Each try is
    /// one send under a lease of its own; within a send nothing is retried:
    /// it makes at most [`REFUND_CALLS_PER_SEND`] gateway calls, one after
    /// the other, so `refunds.lease` must outlast that many call timeouts
    /// (checked at start-up).
    pub const REFUND_SEND: Self = Self::new(1_000, 300_000, None, false);

    /// A background task that panicked (`background::supervise`): started
    /// again after 1 s, 2 s, … up to 60 s, with jitter, forever; back to
    /// 1 s once a run lasted longer than 60 s.
    pub const TASK_RESTART: Self = Self::new(1_000, 60_000, None, true);

    /// The same policy with `attempts` attempts in all (the first included).
    #[must_use]
    pub const fn with_max_attempts(self, attempts: u32) -> Self {
        Self {
            max_attempts: Some(attempts),
            ..self
        }
    }

    /// The policy as a `backon` builder (for `Retryable::retry`).
    pub fn builder(&self) -> ExponentialBuilder {
        let builder = ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay);
        let builder = match self.max_attempts {
            Some(attempts) => builder.with_max_times(attempts.saturating_sub(1) as usize),
            None => builder.without_max_times(),
        };
        if self.jitter {
            builder.with_jitter()
        } else {
            builder
        }
    }

    /// The delay after `attempts` attempts, for a caller that keeps its
    /// count elsewhere (a database row): `min_delay` · 2^`attempts`, at
    /// most `max_delay`, without jitter.
    pub fn delay_after(&self, attempts: u32) -> Duration {
        self.min_delay
            .saturating_mul(2u32.saturating_pow(attempts.min(31)))
            .min(self.max_delay)
    }

    /// The delays to sleep between attempts; `None` once the attempts are used up.
    pub fn backoff(&self) -> ExponentialBackoff {
        self.builder().build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_count_the_first_one() {
        let delays: Vec<_> = RetryPolicy::DELIVERY
            .with_max_attempts(3)
            .backoff()
            .collect();
        assert_eq!(delays.len(), 2, "three attempts leave two delays");
        assert_eq!(
            RetryPolicy::DELIVERY.with_max_attempts(1).backoff().count(),
            0
        );
        assert_eq!(
            RetryPolicy::DELIVERY.with_max_attempts(0).backoff().count(),
            0
        );
    }

    #[test]
    fn without_jitter_delays_double_up_to_the_maximum() {
        let delays: Vec<_> = RetryPolicy::DATABASE_WAIT.backoff().take(7).collect();
        let ms: Vec<_> = delays.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, [200, 400, 800, 1600, 3200, 5000, 5000]);
    }

    #[test]
    fn jittered_delays_stay_near_the_policy() {
        for delay in RetryPolicy::EMAIL_SEND.backoff() {
            assert!(delay >= Duration::from_secs(1), "{delay:?}");
            assert!(delay <= Duration::from_secs(60), "{delay:?}");
        }
    }
}
