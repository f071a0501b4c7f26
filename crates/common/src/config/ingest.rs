//! `[ingest]`: the webhook edge — its listener, its HTTP worker threads,
//! the largest body it reads, and where it reads the sources made at
//! runtime (`[ingest.sources_feed]`: the admin API's URL, an admin key with
//! the `sources:feed` scope, how often). Its file sources are the
//! top-level `[[source]]` tables (`sources.rs`), joined in here once they
//! are checked. Its rates (`[ingest.rate_limit]`, `[ingest.fairness]`)
//! are in `rates.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::invalid;
use super::keys::Key;
use super::rates::{Fairness, FairnessSection, RateLimits, RateSection};
use super::values::{Addr, AtLeast, HumanDuration};
use super::{ConfigError, SourceConfig};
use crate::secret::Secret;

pub const ENV_INGEST_ADDR: &str = "ONCEHOOK_INGEST_ADDR";
pub const ENV_INGEST_WORKERS: &str = "ONCEHOOK_INGEST_WORKERS";
pub const ENV_BODY_LIMIT: &str = "ONCEHOOK_BODY_LIMIT_BYTES";
pub const ENV_SOURCES_FEED_URL: &str = "ONCEHOOK_INGEST_SOURCES_FEED_URL";
pub const ENV_SOURCES_FEED_KEY: &str = "ONCEHOOK_INGEST_SOURCES_FEED_KEY";
pub const ENV_SOURCES_FEED_EVERY: &str = "ONCEHOOK_INGEST_SOURCES_FEED_EVERY";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_INGEST_ADDR, "ingest.addr").legacy("ingest_addr"),
    Key::new(ENV_INGEST_WORKERS, "ingest.workers"),
    Key::new(ENV_BODY_LIMIT, "ingest.limits.body_limit_bytes").legacy("body_limit_bytes"),
    Key::new(ENV_SOURCES_FEED_URL, "ingest.sources_feed.url"),
    Key::new(ENV_SOURCES_FEED_KEY, "ingest.sources_feed.key").secret(),
    Key::new(ENV_SOURCES_FEED_EVERY, "ingest.sources_feed.every"),
];

/// `[ingest.sources_feed]`: where ingest reads the sources made at runtime
/// (docs/tenants.md).
#[derive(Debug, Clone)]
pub struct SourcesFeed {
    /// The admin API's base URL (`http://oncehook-api:8082`).
    pub url: String,
    /// An admin key with the `sources:feed` scope.
    pub key: Secret,
    /// How often the changes are asked for (1 s: a new, rotated or
    /// disabled source is served within about that).
    pub every: Duration,
}

/// `[ingest]`: the webhook edge.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    pub addr: SocketAddr,
    /// HTTP worker threads (`workers`, `ONCEHOOK_INGEST_WORKERS`); unset,
    /// one per CPU (actix's default).
    pub workers: Option<u16>,
    pub body_limit_bytes: usize,
    pub sources: Vec<SourceConfig>,
    /// `None`: the file's sources only.
    pub sources_feed: Option<SourcesFeed>,
    /// `[ingest.rate_limit]`: each source's rate (429 beyond it).
    pub rate_limits: RateLimits,
    /// `[ingest.fairness]`: a tenant's share of the main lane.
    pub fairness: Fairness,
}

/// `[ingest]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct IngestSection {
    addr: Addr,
    workers: Option<AtLeast<u16, 1>>,
    limits: Limits,
    sources_feed: FeedSection,
    pub(super) rate_limit: RateSection,
    fairness: FairnessSection,
}

/// `[ingest.sources_feed]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct FeedSection {
    url: Option<String>,
    key: Option<String>,
    every: HumanDuration,
}

impl Default for FeedSection {
    fn default() -> Self {
        FeedSection {
            url: None,
            key: None,
            every: HumanDuration(Duration::from_secs(1)),
        }
    }
}

impl FeedSection {
    fn validate(self) -> Result<Option<SourcesFeed>, ConfigError> {
        let url = self.url.map(|u| u.trim().trim_end_matches('/').to_owned());
        let key = self.key.filter(|k| !k.trim().is_empty());
        match (url, key) {
            (None, None) => Ok(None),
            (Some(url), Some(key)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(
                        "ingest.sources_feed.url",
                        &url,
                        "must be the admin API's http:// or https:// URL",
                    ));
                }
                if self.every.0 > Duration::from_secs(60) {
                    return Err(invalid(
                        "ingest.sources_feed.every",
                        "",
                        "at most 60s: a source disabled must be refused soon",
                    ));
                }
                Ok(Some(SourcesFeed {
                    url,
                    key: Secret::new(key.trim()),
                    every: self.every.0,
                }))
            }
            (Some(_), None) => Err(invalid(
                "ingest.sources_feed.key",
                "",
                "the feed needs an admin key with the sources:feed scope",
            )),
            (None, Some(_)) => Err(invalid(
                "ingest.sources_feed.url",
                "",
                "a feed key without the feed's URL",
            )),
        }
    }
}

/// `[ingest.limits]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct Limits {
    body_limit_bytes: usize,
}

impl Default for IngestSection {
    fn default() -> Self {
        IngestSection {
            addr: Addr(SocketAddr::from(([127, 0, 0, 1], 8080))),
            workers: None,
            limits: Limits::default(),
            sources_feed: FeedSection::default(),
            rate_limit: RateSection::default(),
            fairness: FairnessSection::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_limit_bytes: 256 * 1024,
        }
    }
}

impl IngestSection {
    /// The section with its (checked) sources.
    pub(super) fn with_sources(
        self,
        sources: Vec<SourceConfig>,
    ) -> Result<IngestConfig, ConfigError> {
        Ok(IngestConfig {
            addr: self.addr.0,
            workers: self.workers.map(|n| n.0),
            body_limit_bytes: self.limits.body_limit_bytes,
            sources,
            sources_feed: self.sources_feed.validate()?,
            rate_limits: self.rate_limit.validate()?,
            fairness: self.fairness.validate()?,
        })
    }
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;
