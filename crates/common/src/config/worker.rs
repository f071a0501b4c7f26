//! `[worker]`: consuming events — its prefetch, the retries of a delivery
//! on transient database errors, group commit (`batch`), how long an event
//! for an order not linked yet stays parked, and retention of the dedup
//! rows. `oncehookctl retention --days` shares [`RETENTION_DAYS`].

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keys::{ENV_MAX_ATTEMPTS, ENV_PREFETCH, Key};
use super::values::{AtLeast, HumanDuration, Retry, Within};
use crate::retry::RetryPolicy;

pub const ENV_RETENTION_DAYS: &str = "ONCEHOOK_RETENTION_DAYS";
pub const ENV_RETENTION_INTERVAL_SECS: &str = "ONCEHOOK_RETENTION_INTERVAL_SECS";
pub const ENV_UNLINKED_TTL: &str = "ONCEHOOK_UNLINKED_TTL";
pub const ENV_WORKER_BATCH_SIZE: &str = "ONCEHOOK_WORKER_BATCH_SIZE";
pub const ENV_WORKER_COMMITTERS: &str = "ONCEHOOK_WORKER_COMMITTERS";
/// Fault injection for the chaos suite: the worker panics on events for this order.
pub const ENV_FAULT_PANIC_ORDER_REF: &str = "ONCEHOOK_FAULT_PANIC_ORDER_REF";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_PREFETCH, "worker.prefetch").legacy("prefetch"),
    Key::new(ENV_MAX_ATTEMPTS, "worker.retry.max_attempts").legacy("max_attempts"),
    Key::new(ENV_RETENTION_DAYS, "worker.retention.days").legacy("retention_days"),
    Key::new(
        ENV_RETENTION_INTERVAL_SECS,
        "worker.retention.interval_secs",
    )
    .legacy("retention_interval_secs"),
    Key::new(ENV_UNLINKED_TTL, "worker.unlinked_ttl").legacy("unlinked_ttl"),
    Key::new(ENV_WORKER_BATCH_SIZE, "worker.batch.size"),
    Key::new(ENV_WORKER_COMMITTERS, "worker.batch.committers"),
    Key::new(ENV_FAULT_PANIC_ORDER_REF, "worker.fault_panic_order_ref"),
];

/// The retention windows configuration and `oncehookctl retention --days`
/// accept: at least a day (0 would delete every dedup row on each pass), at
/// most ten years.
pub const RETENTION_DAYS: RangeInclusive<u32> = 1..=3650;
/// Group commit bounds: a batch of 1 is one transaction per delivery; more
/// than 256 deliveries would hold their locks for too long.
pub const BATCH_SIZE: RangeInclusive<u16> = 1..=256;

type RetentionDays =
    Within<u32, { *RETENTION_DAYS.start() as u64 }, { *RETENTION_DAYS.end() as u64 }>;
type BatchSize = Within<u16, { *BATCH_SIZE.start() as u64 }, { *BATCH_SIZE.end() as u64 }>;
/// How many transactions one worker keeps in flight at most: at least one,
/// and no more than a PostgreSQL server gives one client comfortably.
pub const COMMITTERS: RangeInclusive<u16> = 1..=256;
type Committers = Within<u16, { *COMMITTERS.start() as u64 }, { *COMMITTERS.end() as u64 }>;

/// `[worker]`: consuming events, retention and parked events.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub prefetch: u16,
    /// Backoff for transient database errors while a delivery stays unacked
    /// (`retry.max_attempts` before it is requeued).
    pub retry: RetryPolicy,
    pub retention_days: u32,
    pub retention_interval: Duration,
    /// Group commit: up to this many prefetched deliveries share one
    /// transaction (1 = one transaction per delivery).
    pub batch_size: u16,
    /// How many transactions (committers) the worker runs at once, each
    /// committing whatever deliveries wait when it is free, up to
    /// `batch_size`: sized to what the database can take, not derived from
    /// the prefetch, so group commit never caps the transactions in flight.
    /// Never more than the prefetch.
    pub committers: u16,
    /// How long an event whose payment is not linked to an order yet stays
    /// parked before it is dead-lettered as `unknown_order`.
    pub unlinked_ttl: Duration,
    /// Test-only fault injection (chaos suite); never set in production.
    pub fault_panic_order_ref: Option<String>,
}

/// `[worker]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct WorkerSection {
    prefetch: AtLeast<u16, 1>,
    retry: Retry,
    retention: Retention,
    batch: Batch,
    unlinked_ttl: HumanDuration,
    fault_panic_order_ref: Option<String>,
}

/// `[worker.retention]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct Retention {
    days: RetentionDays,
    /// A pass runs this often; 0 would run passes back to back.
    interval_secs: AtLeast<u64, 1>,
}

/// `[worker.batch]`: group commit.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct Batch {
    size: BatchSize,
    committers: Committers,
}

impl Default for WorkerSection {
    fn default() -> Self {
        WorkerSection {
            prefetch: AtLeast(16),
            retry: Retry::default(),
            retention: Retention::default(),
            batch: Batch::default(),
            unlinked_ttl: HumanDuration(Duration::from_secs(3_600)),
            fault_panic_order_ref: None,
        }
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            days: Within(90),
            interval_secs: AtLeast(3_600),
        }
    }
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            size: Within(8),
            committers: Within(8),
        }
    }
}

impl From<WorkerSection> for WorkerConfig {
    fn from(s: WorkerSection) -> Self {
        WorkerConfig {
            prefetch: s.prefetch.0,
            retry: RetryPolicy::DELIVERY.with_max_attempts(s.retry.max_attempts.0),
            retention_days: s.retention.days.0,
            retention_interval: Duration::from_secs(s.retention.interval_secs.0),
            batch_size: s.batch.size.0,
            // More committers than deliveries in flight would never all work.
            committers: s.batch.committers.0.min(s.prefetch.0),
            unlinked_ttl: s.unlinked_ttl.0,
            fault_panic_order_ref: s.fault_panic_order_ref.filter(|r| !r.is_empty()),
        }
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
