//! Forgetting old `Idempotency-Key`s: every API process deletes keys older
//! than `api.idempotency_ttl` (24 h by default) in small batches, at start
//! and then every `ttl / 4` (between 1 s and 10 min, plus up to a tenth
//! of it at random), on the common periodic helper. Several replicas may
//! prune at once: a row two of them pick is deleted by one, skipped by the
//! other. A failed pass is tried again at the next tick (logged once per spell
//! of failures); the API answers meanwhile.

use std::time::Duration;

use crate::store;
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::store::scope::Scope;

/// Keys deleted per transaction (short transactions, no long locks).
const BATCH: i64 = 1_000;

/// How often keys older than `ttl` are looked for.
pub fn interval(ttl: Duration) -> Duration {
    (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(600))
}

/// Prunes until `shutdown`, at start and then every [`interval`] (plus up
/// to a tenth of it at random, so replicas spread out).
pub async fn run(pool: Pooled, ttl: Duration, shutdown: Shutdown) {
    metrics::counter!("oncehook_api_idempotency_keys_pruned_total").increment(0);
    let every = interval(ttl);
    Periodic::every("idempotency key pruning", every)
        .jitter(every / 10)
        .logs(
            "deleting old idempotency keys failed; trying again later",
            "deleting old idempotency keys works again",
        )
        .run(&shutdown, || async {
            let deleted = prune_once(&pool, ttl).await?;
            if deleted > 0 {
                metrics::counter!("oncehook_api_idempotency_keys_pruned_total").increment(deleted);
                tracing::info!(deleted, ttl = ?ttl, "idempotency keys older than api.idempotency_ttl deleted");
            }
            Ok::<_, sqlx::Error>(Next::Pause)
        })
        .await;
}

/// One pass: batch after batch until a batch is not full.
async fn prune_once(pool: &Pooled, ttl: Duration) -> Result<u64, sqlx::Error> {
    let mut total = 0;
    loop {
        let mut tx = pool.begin_in(&Scope::Platform).await?;
        let deleted = store::prune_idempotency(&mut tx, ttl, BATCH).await?;
        tx.commit().await?;
        total += deleted;
        if deleted < BATCH as u64 {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_a_quarter_of_the_ttl_within_bounds() {
        assert_eq!(interval(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(interval(Duration::from_secs(40)), Duration::from_secs(10));
        assert_eq!(
            interval(Duration::from_secs(86_400)),
            Duration::from_secs(600)
        );
    }
}
