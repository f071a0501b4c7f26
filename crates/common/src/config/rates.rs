//! `[ingest.rate_limit]` and `[ingest.fairness]`: how fast one source may
//! deliver — beyond it ingest answers `429` with `Retry-After`, which every
//! gateway retries — with a default, a tenant's own for each of its
//! sources and a source's own; and how many of a tenant's webhooks per
//! second go to the main lane before the rest go to its bulk lane (the
//! topology's "Lanes", docs/tenants.md "Fairness").

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::error::invalid;
use super::keys::Key;
use crate::rate::{Limit, Rate};
use crate::tenant::TenantId;

pub const ENV_RATE_PER_SECOND: &str = "ONCEHOOK_INGEST_RATE_PER_SECOND";
pub const ENV_RATE_BURST: &str = "ONCEHOOK_INGEST_RATE_BURST";
pub const ENV_SHARE_PER_SECOND: &str = "ONCEHOOK_INGEST_SHARE_PER_SECOND";
pub const ENV_SHARE_BURST: &str = "ONCEHOOK_INGEST_SHARE_BURST";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_RATE_PER_SECOND, "ingest.rate_limit.per_second"),
    Key::new(ENV_RATE_BURST, "ingest.rate_limit.burst"),
    Key::new(ENV_SHARE_PER_SECOND, "ingest.fairness.share_per_second"),
    Key::new(ENV_SHARE_BURST, "ingest.fairness.share_burst"),
];

/// Each source's rate, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimits {
    /// Every source's, unless its tenant's or its own says otherwise;
    /// `None`: no limit.
    pub default: Option<Rate>,
    /// `[[ingest.rate_limit.tenant]]`: each of the tenant's sources'.
    pub tenants: HashMap<TenantId, Option<Rate>>,
    /// `[[ingest.rate_limit.source]]`: the source's own.
    pub sources: HashMap<String, Option<Rate>>,
}

impl RateLimits {
    /// The rate `source` (of `tenant`) is held to; `None`: none. The most
    /// particular setting wins: the source's own, then its tenant's set at
    /// runtime (`runtime`, from the sources feed), then its tenant's in
    /// the file, then the default.
    pub fn for_source(
        &self,
        source: &str,
        tenant: &TenantId,
        runtime: Option<Limit>,
    ) -> Option<Rate> {
        if let Some(own) = self.sources.get(source) {
            return *own;
        }
        if let Some(limit) = runtime {
            return limit.rate();
        }
        if let Some(tenants) = self.tenants.get(tenant) {
            return *tenants;
        }
        self.default
    }
}

/// A tenant's share of the main lane per ingest, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fairness {
    pub share: Rate,
}

/// `[ingest.rate_limit]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RateSection {
    /// Per second; 0: no limit.
    per_second: u32,
    /// 0: twice `per_second`.
    burst: u32,
    tenant: Vec<TenantRate>,
    source: Vec<SourceRate>,
}

/// `[[ingest.rate_limit.tenant]]` as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TenantRate {
    pub tenant: String,
    pub per_second: u32,
    #[serde(default)]
    pub burst: u32,
}

/// `[[ingest.rate_limit.source]]` as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SourceRate {
    pub source: String,
    pub per_second: u32,
    #[serde(default)]
    pub burst: u32,
}

impl Default for RateSection {
    fn default() -> Self {
        RateSection {
            per_second: 1000,
            // Twice the rate, whatever the rate is set to.
            burst: 0,
            tenant: Vec::new(),
            source: Vec::new(),
        }
    }
}

fn rate(per_second: u32, burst: u32) -> Option<Rate> {
    Limit::from_setting(per_second, burst).rate()
}

impl RateSection {
    /// Pushes one item in each list (for the documentation's test).
    #[cfg(test)]
    pub(super) fn with_one_of_each(mut self) -> Self {
        self.tenant.push(TenantRate::default());
        self.source.push(SourceRate::default());
        self
    }

    pub(super) fn validate(self) -> Result<RateLimits, ConfigError> {
        let mut tenants = HashMap::new();
        for entry in self.tenant {
            let id = TenantId::parse(&entry.tenant).map_err(|e| {
                invalid(
                    "ingest.rate_limit.tenant.tenant",
                    &entry.tenant,
                    &e.to_string(),
                )
            })?;
            if tenants
                .insert(id, rate(entry.per_second, entry.burst))
                .is_some()
            {
                return Err(invalid(
                    "ingest.rate_limit.tenant.tenant",
                    &entry.tenant,
                    "named twice",
                ));
            }
        }
        let mut sources = HashMap::new();
        for entry in self.source {
            if entry.source.trim().is_empty() {
                return Err(invalid(
                    "ingest.rate_limit.source.source",
                    "",
                    "names no source",
                ));
            }
            if sources
                .insert(entry.source.clone(), rate(entry.per_second, entry.burst))
                .is_some()
            {
                return Err(invalid(
                    "ingest.rate_limit.source.source",
                    &entry.source,
                    "named twice",
                ));
            }
        }
        Ok(RateLimits {
            default: rate(self.per_second, self.burst),
            tenants,
            sources,
        })
    }
}

/// `[ingest.fairness]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct FairnessSection {
    share_per_second: u32,
    share_burst: u32,
}

impl Default for FairnessSection {
    fn default() -> Self {
        FairnessSection {
            share_per_second: 20,
            share_burst: 100,
        }
    }
}

impl FairnessSection {
    pub(super) fn validate(self) -> Result<Fairness, ConfigError> {
        if self.share_per_second == 0 || self.share_burst == 0 {
            return Err(invalid(
                "ingest.fairness.share_per_second",
                "0",
                "a tenant's share of the main lane is at least 1 per second and a burst of 1",
            ));
        }
        Ok(Fairness {
            share: Rate::new(self.share_per_second, self.share_burst),
        })
    }
}

#[cfg(test)]
#[path = "rates_tests.rs"]
mod tests;
