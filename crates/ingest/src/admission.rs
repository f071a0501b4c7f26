//! Admission: whether an authentic webhook is let in now, and into which
//! lane. Each source is held to its rate (`[ingest.rate_limit]`: a
//! default, its tenant's, its own); beyond it the answer is `429` with
//! `Retry-After`, which every gateway retries, and nothing is kept. Each
//! tenant has a share of the main lane per second (`[ingest.fairness]`);
//! what it sends beyond that goes to its bulk lane, so one tenant's storm
//! queues behind itself, not in front of another tenant's lone payment
//! (`oncehook_common::topology`, "Lanes").
//!
//! Memory, not the database: one token bucket per source and per tenant,
//! made on a known source's first delivery (an unknown name never gets
//! here), so what this holds is bounded by the sources served. One short
//! lock per request.

use std::time::{Duration, Instant};

use oncehook_common::SourceConfig;
use oncehook_common::config::{Fairness, RateLimits};
use oncehook_common::rate::{Buckets, Limit, Rate};
use oncehook_common::tenant::TenantId;

/// Where an admitted delivery goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The main lane: within the tenant's share.
    Main,
    /// The tenant's bulk lane: beyond its share.
    Bulk,
}

/// A delivery refused for its source's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverRate {
    pub rate: Rate,
    /// Whole seconds until the source may deliver again (at least 1).
    pub retry_after_secs: u64,
}

/// The buckets of every source and tenant served.
pub struct Admission {
    limits: RateLimits,
    share: Rate,
    sources: Buckets<String>,
    tenants: Buckets<TenantId>,
    /// When each source's refusals were last logged (once a second).
    logged: Buckets<String>,
}

impl Admission {
    pub fn new(limits: RateLimits, fairness: Fairness) -> Admission {
        Admission {
            limits,
            share: fairness.share,
            sources: Buckets::default(),
            tenants: Buckets::default(),
            logged: Buckets::default(),
        }
    }

    /// Lets one delivery of `source` in, and says its lane; or refuses it
    /// for the source's rate.
    pub fn admit(&self, source: &SourceConfig) -> Result<Lane, OverRate> {
        self.admit_at(&source.name, &source.tenant, source.limit, Instant::now())
    }

    fn admit_at(
        &self,
        source: &str,
        tenant: &TenantId,
        runtime: Option<Limit>,
        now: Instant,
    ) -> Result<Lane, OverRate> {
        if let Some(rate) = self.limits.for_source(source, tenant, runtime)
            && let Err(wait) = self.sources.take(source, rate, now)
        {
            let over = OverRate {
                rate,
                retry_after_secs: whole_seconds(wait),
            };
            if self.logged.take(source, Rate::new(1, 1), now).is_ok() {
                tracing::warn!(
                    source,
                    %tenant,
                    %rate,
                    retry_after_secs = over.retry_after_secs,
                    "source over its rate: answering 429 (logged once a second; oncehook_ingest_requests_total{{outcome=\"rate_limited\"}} counts each)"
                );
            }
            return Err(over);
        }
        Ok(match self.tenants.take(tenant, self.share, now) {
            Ok(()) => Lane::Main,
            Err(_) => Lane::Bulk,
        })
    }
}

/// `wait` rounded up to whole seconds, at least one.
fn whole_seconds(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::{Duration, Instant};

    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).expect("tenant")
    }

    fn admission(default: Option<Rate>, share: Rate) -> Admission {
        let limits = RateLimits {
            default,
            tenants: HashMap::from([(tenant("globex"), None)]),
            sources: HashMap::new(),
        };
        Admission::new(limits, Fairness { share })
    }

    #[test]
    fn a_source_over_its_rate_is_refused_while_another_goes_on() {
        let a = admission(Some(Rate::new(2, 2)), Rate::new(100, 100));
        let (acme, t0) = (tenant("acme"), Instant::now());
        assert!(a.admit_at("acme-razorpay", &acme, None, t0).is_ok());
        assert!(a.admit_at("acme-razorpay", &acme, None, t0).is_ok());
        let over = a
            .admit_at("acme-razorpay", &acme, None, t0)
            .expect_err("over the rate");
        assert_eq!(over.retry_after_secs, 1);
        assert!(
            a.admit_at("acme-stripe", &acme, None, t0).is_ok(),
            "its own bucket"
        );
        // A tenant with no limit is never refused.
        for _ in 0..1000 {
            assert!(
                a.admit_at("globex-payu", &tenant("globex"), None, t0)
                    .is_ok()
            );
        }
        // A tenant's rate set at runtime holds its source to it.
        let runtime = Some(Limit::At(Rate::new(1, 1)));
        assert!(
            a.admit_at("globex-x", &tenant("globex"), runtime, t0)
                .is_ok()
        );
        assert!(
            a.admit_at("globex-x", &tenant("globex"), runtime, t0)
                .is_err()
        );
        // Half a second later one token is back.
        let t1 = t0 + Duration::from_millis(500);
        assert!(a.admit_at("acme-razorpay", &acme, None, t1).is_ok());
    }

    #[test]
    fn a_tenant_beyond_its_share_goes_to_its_bulk_lane_and_another_stays_on_the_main() {
        let a = admission(None, Rate::new(1, 3));
        let t0 = Instant::now();
        let lanes: Vec<Lane> = (0..5)
            .map(|_| {
                a.admit_at("acme-razorpay", &tenant("acme"), None, t0)
                    .expect("no limit")
            })
            .collect();
        assert_eq!(
            lanes,
            [Lane::Main, Lane::Main, Lane::Main, Lane::Bulk, Lane::Bulk]
        );
        assert_eq!(
            a.admit_at("quiet", &tenant("quiet"), None, t0),
            Ok(Lane::Main)
        );
        assert_eq!(a.tenants.len(), 2);
    }

    #[test]
    fn retry_after_is_rounded_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
    }
}
