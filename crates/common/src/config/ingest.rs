//! `[ingest]`: the webhook edge — its listener, its HTTP worker threads and
//! the largest body it reads. Its sources are the top-level `[[source]]`
//! tables (`sources.rs`), joined in here once they are checked.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::SourceConfig;
use super::keys::Key;
use super::values::{Addr, AtLeast};

pub const ENV_INGEST_ADDR: &str = "ONCEHOOK_INGEST_ADDR";
pub const ENV_INGEST_WORKERS: &str = "ONCEHOOK_INGEST_WORKERS";
pub const ENV_BODY_LIMIT: &str = "ONCEHOOK_BODY_LIMIT_BYTES";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_INGEST_ADDR, "ingest.addr").legacy("ingest_addr"),
    Key::new(ENV_INGEST_WORKERS, "ingest.workers"),
    Key::new(ENV_BODY_LIMIT, "ingest.limits.body_limit_bytes").legacy("body_limit_bytes"),
];

/// `[ingest]`: the webhook edge.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    pub addr: SocketAddr,
    /// HTTP worker threads (`workers`, `ONCEHOOK_INGEST_WORKERS`); unset,
    /// one per CPU (actix's default).
    pub workers: Option<u16>,
    pub body_limit_bytes: usize,
    pub sources: Vec<SourceConfig>,
}

/// `[ingest]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct IngestSection {
    addr: Addr,
    workers: Option<AtLeast<u16, 1>>,
    limits: Limits,
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
    pub(super) fn with_sources(self, sources: Vec<SourceConfig>) -> IngestConfig {
        IngestConfig {
            addr: self.addr.0,
            workers: self.workers.map(|n| n.0),
            body_limit_bytes: self.limits.body_limit_bytes,
            sources,
        }
    }
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;
