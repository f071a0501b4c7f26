//! `[refunds]`: whether oncehook refunds what the books owe back through the
//! gateway (docs/refunds.md). Off by default. `mode` is the default of every
//! source, and `[refunds.source.<name>]` overrides it per source: `off`
//! (intents are kept, nothing is sent), `propose` (an operator approves
//! each one) or `auto` (an intent whose reason is in `auto_reasons` and
//! whose amount is within `max_refund_minor`, and within `max_daily_minor`
//! of what went automatically that day, is approved by the policy; the
//! rest wait for an operator). The ceilings are in minor units of the
//! intent's currency and count each currency on its own: `max_refund_minor`
//! and `max_daily_minor` hold for every currency, and a table
//! `[refunds.currency.<ISO 4217>]` (or `[refunds.source.<name>.currency.<…>]`)
//! sets one currency's own. `interval` is how often the worker's
//! refunder looks for approved intents; `lease` how long one refunder holds
//! an intent while it sends it (a killed one's intent is taken over after),
//! longer than one send ([`REFUND_CALLS_PER_SEND`] calls of up to
//! `reconcile.limits.timeout` each), or refused at start-up.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::error::invalid;
use super::keys::Key;
use super::reconcile::ENV_RECONCILE_TIMEOUT;
use super::values::HumanDuration;
use crate::refund::REASONS;
use crate::retry::REFUND_CALLS_PER_SEND;

pub const ENV_REFUNDS_MODE: &str = "ONCEHOOK_REFUNDS_MODE";
pub const ENV_REFUNDS_INTERVAL: &str = "ONCEHOOK_REFUNDS_INTERVAL";
pub const ENV_REFUNDS_LEASE: &str = "ONCEHOOK_REFUNDS_LEASE";
pub const ENV_REFUNDS_MAX_REFUND_MINOR: &str = "ONCEHOOK_REFUNDS_MAX_REFUND_MINOR";
pub const ENV_REFUNDS_MAX_DAILY_MINOR: &str = "ONCEHOOK_REFUNDS_MAX_DAILY_MINOR";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_REFUNDS_MODE, "refunds.mode"),
    Key::new(ENV_REFUNDS_INTERVAL, "refunds.interval"),
    Key::new(ENV_REFUNDS_LEASE, "refunds.lease"),
    Key::new(ENV_REFUNDS_MAX_REFUND_MINOR, "refunds.max_refund_minor"),
    Key::new(ENV_REFUNDS_MAX_DAILY_MINOR, "refunds.max_daily_minor"),
];

/// What the refunder does with a source's intents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RefundMode {
    /// Nothing is sent; intents are kept for people to see.
    #[default]
    Off,
    /// An operator approves each intent.
    Propose,
    /// The policy approves what its ceilings and reasons allow.
    Auto,
}

impl RefundMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RefundMode::Off => "off",
            RefundMode::Propose => "propose",
            RefundMode::Auto => "auto",
        }
    }
}

/// The `auto` ceilings of one currency, in its minor units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// The largest refund approved without a person.
    pub max_refund_minor: i64,
    /// The most refunded without a person per UTC day, in this currency.
    pub max_daily_minor: i64,
}

/// One source's refund policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundPolicy {
    pub mode: RefundMode,
    /// The ceilings of every currency not in `currencies`.
    pub ceilings: Ceilings,
    /// Ceilings of their own, by ISO 4217 code (upper case).
    pub currencies: BTreeMap<String, Ceilings>,
    /// The reasons that may go without a person.
    pub auto_reasons: Vec<String>,
}

impl RefundPolicy {
    /// The ceilings of `currency` (its own, else every currency's).
    pub fn ceilings(&self, currency: &str) -> Ceilings {
        self.currencies
            .get(&currency.to_ascii_uppercase())
            .copied()
            .unwrap_or(self.ceilings)
    }
}

/// `[refunds]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundsConfig {
    pub interval: Duration,
    pub lease: Duration,
    /// The policy of every source not named below.
    pub default: RefundPolicy,
    /// `[refunds.source.<name>]`.
    pub sources: BTreeMap<String, RefundPolicy>,
}

impl RefundsConfig {
    /// The policy of `source`.
    pub fn policy(&self, source: &str) -> &RefundPolicy {
        self.sources.get(source).unwrap_or(&self.default)
    }

    /// Whether any source may refund at all.
    pub fn any_on(&self) -> bool {
        self.default.mode != RefundMode::Off
            || self.sources.values().any(|p| p.mode != RefundMode::Off)
    }

    /// Refuses a lease one send may outlast: a send makes up to
    /// [`REFUND_CALLS_PER_SEND`] gateway calls in a row, each allowed
    /// `call_timeout` (`reconcile.limits.timeout`), and a lease that ran out
    /// mid-send lets another refunder send the same intent. Checked where
    /// any source may refund.
    pub(super) fn check_lease(&self, call_timeout: Duration) -> Result<(), ConfigError> {
        let send = call_timeout.saturating_mul(REFUND_CALLS_PER_SEND);
        if !self.any_on() || self.lease > send {
            return Ok(());
        }
        Err(invalid(
            &format!("refunds.lease ({ENV_REFUNDS_LEASE})"),
            &humantime::format_duration(self.lease).to_string(),
            &format!(
                "must be longer than one refund send: {REFUND_CALLS_PER_SEND} gateway calls of up to \
                 reconcile.limits.timeout ({ENV_RECONCILE_TIMEOUT}) = {} each, {} in all; \
                 raise refunds.lease or lower reconcile.limits.timeout",
                humantime::format_duration(call_timeout),
                humantime::format_duration(send),
            ),
        ))
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RefundsSection {
    mode: RefundMode,
    interval: HumanDuration,
    lease: HumanDuration,
    max_refund_minor: u64,
    max_daily_minor: u64,
    auto_reasons: Vec<String>,
    currency: BTreeMap<String, CurrencySection>,
    source: BTreeMap<String, SourceSection>,
}

/// `[refunds.currency.<code>]`: one currency's ceilings; what it leaves
/// out is the flat keys'.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CurrencySection {
    max_refund_minor: Option<u64>,
    max_daily_minor: Option<u64>,
}

/// `[refunds.source.<name>]`: what it leaves out is the section's.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct SourceSection {
    mode: Option<RefundMode>,
    max_refund_minor: Option<u64>,
    max_daily_minor: Option<u64>,
    auto_reasons: Option<Vec<String>>,
    #[serde(default)]
    currency: BTreeMap<String, CurrencySection>,
}

impl Default for RefundsSection {
    fn default() -> Self {
        RefundsSection {
            mode: RefundMode::Off,
            interval: HumanDuration(Duration::from_secs(10)),
            lease: HumanDuration(Duration::from_secs(60)),
            max_refund_minor: 1_000_000,
            max_daily_minor: 10_000_000,
            auto_reasons: vec!["duplicate_capture".into(), "cancelled_order".into()],
            currency: BTreeMap::new(),
            source: BTreeMap::new(),
        }
    }
}

impl RefundsSection {
    /// The section, every ceiling positive, every reason known and every
    /// named source configured (`sources`).
    pub(super) fn validate(self, sources: &[&str]) -> Result<RefundsConfig, ConfigError> {
        let flat = (self.max_refund_minor, self.max_daily_minor);
        let default = policy(
            "refunds",
            self.mode,
            flat,
            &currencies("refunds", &self.currency, &BTreeMap::new(), flat)?,
            self.auto_reasons,
        )?;
        let mut named = BTreeMap::new();
        for (name, s) in self.source {
            let at = format!("refunds.source.{name}");
            if !sources.contains(&name.as_str()) {
                return Err(invalid(
                    &at,
                    &name,
                    &format!("names no [[source]] (configured: {})", sources.join(", ")),
                ));
            }
            let own = (
                s.max_refund_minor.unwrap_or(self.max_refund_minor),
                s.max_daily_minor.unwrap_or(self.max_daily_minor),
            );
            let p = policy(
                &at,
                s.mode.unwrap_or(default.mode),
                own,
                &currencies(&at, &s.currency, &self.currency, own)?,
                s.auto_reasons
                    .unwrap_or_else(|| default.auto_reasons.clone()),
            )?;
            named.insert(name, p);
        }
        Ok(RefundsConfig {
            interval: self.interval.0,
            lease: self.lease.0,
            default,
            sources: named,
        })
    }
}

/// A ceiling as the policy compares it.
fn minor(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The currencies with ceilings of their own: `own` (a source's tables, or
/// `[refunds]`'), then `inherited` (`[refunds]`' for a source) for a
/// currency `own` does not name or a key it leaves out, then `flat` (the
/// scope's flat keys). Codes are three capital letters.
fn currencies(
    at: &str,
    own: &BTreeMap<String, CurrencySection>,
    inherited: &BTreeMap<String, CurrencySection>,
    flat: (u64, u64),
) -> Result<BTreeMap<String, Ceilings>, ConfigError> {
    let mut out = BTreeMap::new();
    for code in own.keys().chain(inherited.keys()) {
        if code.len() != 3 || !code.chars().all(|c| c.is_ascii_uppercase()) {
            return Err(invalid(
                &format!("{at}.currency"),
                code,
                "is not a currency: an ISO 4217 code of three capital letters (INR, USD)",
            ));
        }
        let pick = |key: fn(&CurrencySection) -> Option<u64>| {
            own.get(code)
                .and_then(key)
                .or_else(|| inherited.get(code).and_then(key))
        };
        let ceilings = Ceilings {
            max_refund_minor: minor(pick(|c| c.max_refund_minor).unwrap_or(flat.0)),
            max_daily_minor: minor(pick(|c| c.max_daily_minor).unwrap_or(flat.1)),
        };
        out.insert(code.clone(), ceilings);
    }
    Ok(out)
}

fn policy(
    at: &str,
    mode: RefundMode,
    (max_refund_minor, max_daily_minor): (u64, u64),
    currencies: &BTreeMap<String, Ceilings>,
    auto_reasons: Vec<String>,
) -> Result<RefundPolicy, ConfigError> {
    if let Some(bad) = auto_reasons.iter().find(|r| !REASONS.contains(&r.as_str())) {
        return Err(invalid(
            &format!("{at}.auto_reasons"),
            bad,
            &format!("is not a reason; the reasons are {}", REASONS.join(", ")),
        ));
    }
    Ok(RefundPolicy {
        mode,
        ceilings: Ceilings {
            max_refund_minor: minor(max_refund_minor),
            max_daily_minor: minor(max_daily_minor),
        },
        currencies: currencies.clone(),
        auto_reasons,
    })
}

#[cfg(test)]
#[path = "refunds_tests.rs"]
mod tests;
