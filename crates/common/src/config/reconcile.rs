//! `[reconcile]`: when the worker asks the gateways' APIs about orders the
//! webhooks may have missed (every `interval`, orders still `pending`
//! whose age is between `after` and `horizon`; and, for refunds whose
//! webhook was lost, orders paid within `paid_horizon`, each at most once
//! per `paid_interval`), and the limits that keep a
//! backlog from flooding a gateway (API calls per run, per second per
//! source, and each call's timeout). Which sources are asked, and with
//! which credentials, is `[source.api]` (`source_api.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::error::invalid;
use super::keys::Key;
use super::values::{HumanDuration, Within};

pub const ENV_RECONCILE_INTERVAL: &str = "ONCEHOOK_RECONCILE_INTERVAL";
pub const ENV_RECONCILE_AFTER: &str = "ONCEHOOK_RECONCILE_AFTER";
pub const ENV_RECONCILE_HORIZON: &str = "ONCEHOOK_RECONCILE_HORIZON";
pub const ENV_RECONCILE_CALLS_PER_RUN: &str = "ONCEHOOK_RECONCILE_CALLS_PER_RUN";
pub const ENV_RECONCILE_CALLS_PER_SECOND: &str = "ONCEHOOK_RECONCILE_CALLS_PER_SECOND";
pub const ENV_RECONCILE_TIMEOUT: &str = "ONCEHOOK_RECONCILE_TIMEOUT";
pub const ENV_RECONCILE_PAID_INTERVAL: &str = "ONCEHOOK_RECONCILE_PAID_INTERVAL";
pub const ENV_RECONCILE_PAID_HORIZON: &str = "ONCEHOOK_RECONCILE_PAID_HORIZON";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_RECONCILE_INTERVAL, "reconcile.interval"),
    Key::new(ENV_RECONCILE_AFTER, "reconcile.after"),
    Key::new(ENV_RECONCILE_HORIZON, "reconcile.horizon"),
    Key::new(ENV_RECONCILE_PAID_INTERVAL, "reconcile.paid_interval"),
    Key::new(ENV_RECONCILE_PAID_HORIZON, "reconcile.paid_horizon"),
    Key::new(
        ENV_RECONCILE_CALLS_PER_RUN,
        "reconcile.limits.calls_per_run",
    ),
    Key::new(
        ENV_RECONCILE_CALLS_PER_SECOND,
        "reconcile.limits.calls_per_second",
    ),
    Key::new(ENV_RECONCILE_TIMEOUT, "reconcile.limits.timeout"),
];

/// `[reconcile]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// How often the reconciler runs (one worker at a time).
    pub interval: Duration,
    /// An order younger than this is left to its webhooks.
    pub after: Duration,
    /// An order older than this is no longer asked about.
    pub horizon: Duration,
    /// How often an order already paid is asked about again (for refunds
    /// whose webhook was lost).
    pub paid_interval: Duration,
    /// An order paid longer ago than this is no longer asked about.
    pub paid_horizon: Duration,
    /// The most API calls one run makes, over every source.
    pub calls_per_run: u32,
    /// The most API calls per second to one source.
    pub calls_per_second: u32,
    /// How long one API call may take before it counts as failed.
    pub timeout: Duration,
}

type CallsPerRun = Within<u32, 1, 1_000_000>;
type CallsPerSecond = Within<u32, 1, 1_000>;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ReconcileSection {
    interval: HumanDuration,
    after: HumanDuration,
    horizon: HumanDuration,
    paid_interval: HumanDuration,
    paid_horizon: HumanDuration,
    limits: Limits,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct Limits {
    calls_per_run: CallsPerRun,
    calls_per_second: CallsPerSecond,
    timeout: HumanDuration,
}

impl Default for ReconcileSection {
    fn default() -> Self {
        ReconcileSection {
            interval: HumanDuration(Duration::from_secs(5 * 60)),
            after: HumanDuration(Duration::from_secs(10 * 60)),
            horizon: HumanDuration(Duration::from_secs(7 * 24 * 3_600)),
            paid_interval: HumanDuration(Duration::from_secs(3_600)),
            paid_horizon: HumanDuration(Duration::from_secs(7 * 24 * 3_600)),
            limits: Limits::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            calls_per_run: Within(1_000),
            calls_per_second: Within(5),
            timeout: HumanDuration(Duration::from_secs(10)),
        }
    }
}

impl ReconcileSection {
    /// The section, with `after` below `horizon`.
    pub(super) fn validate(self) -> Result<ReconcileConfig, ConfigError> {
        if self.after.0 >= self.horizon.0 {
            return Err(invalid(
                &format!("reconcile.after ({ENV_RECONCILE_AFTER})"),
                &format!("{:?}", self.after.0),
                &format!(
                    "must be shorter than reconcile.horizon ({:?}): no order would be asked about",
                    self.horizon.0
                ),
            ));
        }
        Ok(ReconcileConfig {
            interval: self.interval.0,
            after: self.after.0,
            horizon: self.horizon.0,
            paid_interval: self.paid_interval.0,
            paid_horizon: self.paid_horizon.0,
            calls_per_run: self.limits.calls_per_run.0,
            calls_per_second: self.limits.calls_per_second.0,
            timeout: self.limits.timeout.0,
        })
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
