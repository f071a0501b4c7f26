//! The sources feed (docs/tenants.md): how the sources made at runtime
//! travel from the database, through the admin API
//! (`GET /v1/admin/feed/sources?since=N`), to ingest, which has no
//! database. A page holds the sources changed since a version, each with
//! its live signing secrets still sealed; only ingest opens them, with the
//! deployment's key ring, for the one place each was sealed for.

use serde::{Deserialize, Serialize};

use crate::config::{SourceConfig, SourceFacts};
use crate::rate::Limit;
use crate::sealed::KeyRing;
use crate::tenant::TenantId;

/// The place a source's signing secret `no` is sealed for: it opens for
/// that source and slot only.
pub fn secret_place(name: &str, no: i32) -> String {
    format!("source:{name}:signing:{no}")
}

/// One answer of the feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedPage {
    /// Ask again with `since` = this.
    pub version: i64,
    pub sources: Vec<FeedSource>,
}

/// A source as ingest must know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedSource {
    pub name: String,
    pub tenant: String,
    pub gateway: String,
    /// `active` only when the source and its tenant both are.
    pub status: String,
    pub tolerance_secs: i32,
    pub merchant_key: Option<String>,
    pub secrets: Vec<SealedSecret>,
    /// Its tenant's rate as set at runtime (`oncehookctl tenants limits`);
    /// absent: the configuration file's (and from an API of a release
    /// before rates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<FeedRate>,
}

/// A tenant's rate in the feed: per second (0: no limit) and the burst (0:
/// twice the rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedRate {
    pub per_second: u32,
    pub burst: u32,
}

/// A live signing secret, sealed for [`secret_place`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedSecret {
    pub no: i32,
    pub sealed: String,
}

/// What ingest does with a source of the feed.
#[derive(Debug, Clone)]
pub enum Served {
    /// Verified and published as any file source's webhook.
    Active(Box<SourceConfig>),
    /// Answered 503 with `Retry-After`: the source or its tenant is
    /// disabled.
    Disabled { tenant: TenantId },
}

impl FeedSource {
    /// The source opened with `ring` and checked as a `[[source]]` is;
    /// the error names the source and what failed, never a secret.
    pub fn open(&self, ring: &KeyRing) -> Result<Served, String> {
        let tenant = TenantId::parse(&self.tenant)
            .map_err(|e| format!("source {}: tenant: {e}", self.name))?;
        if self.status != "active" {
            return Ok(Served::Disabled { tenant });
        }
        let mut secrets = Vec::with_capacity(self.secrets.len());
        for s in &self.secrets {
            let plain = ring
                .open(&s.sealed, &secret_place(&self.name, s.no))
                .map_err(|e| format!("source {}: secret {}: {e}", self.name, s.no))?;
            let text = plain
                .expose_str()
                .ok_or_else(|| format!("source {}: secret {} is not text", self.name, s.no))?;
            secrets.push(text.to_owned());
        }
        let facts = SourceFacts {
            name: &self.name,
            gateway: &self.gateway,
            tolerance_secs: u64::try_from(self.tolerance_secs).ok(),
            merchant_key: self.merchant_key.clone(),
            tenant,
        };
        SourceConfig::checked(facts, secrets)
            .map(|mut s| {
                s.limit = self
                    .rate
                    .map(|r| Limit::from_setting(r.per_second, r.burst));
                Served::Active(Box::new(s))
            })
            .map_err(|reason| format!("source {}: {reason}", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> KeyRing {
        KeyRing::generate_key_line("k1")
            .expect("a key line")
            .parse()
            .expect("a ring")
    }

    fn source(ring: &KeyRing, status: &str, secret: &str, place_no: i32) -> FeedSource {
        FeedSource {
            name: "acme-rzp".into(),
            tenant: "acme".into(),
            gateway: "razorpay".into(),
            status: status.into(),
            tolerance_secs: 300,
            merchant_key: None,
            rate: None,
            secrets: vec![SealedSecret {
                no: 1,
                sealed: ring.seal(secret.as_bytes(), &secret_place("acme-rzp", place_no)),
            }],
        }
    }

    #[test]
    fn an_active_source_opens_to_its_secrets() {
        let ring = ring();
        match source(&ring, "active", "whsec_runtime_secret_1", 1).open(&ring) {
            Ok(Served::Active(s)) => {
                assert_eq!(s.secrets, vec!["whsec_runtime_secret_1".to_owned()]);
                assert_eq!(s.tenant.as_str(), "acme");
            }
            other => panic!("expected an active source, got {other:?}"),
        }
    }

    #[test]
    fn a_disabled_source_is_served_disabled_without_opening_anything() {
        let ring = ring();
        let s = source(&ring, "disabled", "whsec_runtime_secret_1", 1);
        assert!(matches!(s.open(&ring), Ok(Served::Disabled { .. })));
    }

    #[test]
    fn a_secret_sealed_for_another_place_or_ring_does_not_open_and_is_not_shown() {
        let ring = ring();
        let moved = source(&ring, "active", "whsec_runtime_secret_1", 2);
        let err = moved
            .open(&ring)
            .expect_err("sealed for slot 2, read as slot 1");
        assert!(!err.contains("whsec_runtime_secret_1"), "{err}");
        let other = self::ring();
        let err = source(&ring, "active", "whsec_runtime_secret_1", 1)
            .open(&other)
            .expect_err("another ring");
        assert!(err.contains("acme-rzp"), "{err}");
    }
}
