//! Scheduled retention of the dedup table, of sent or failed outbox rows
//! (customer addresses) and of the notifier's finished deliveries (the
//! shop's answers). The SQL lives in
//! [`oncehook_common::store::retention`] (shared with `oncehookctl
//! retention`); this module only runs it every so often (on the common periodic
//! helper), in one worker at a time.

use std::time::Duration;

use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::store::retention;

/// Runs retention every `every` (plus up to a tenth of it at random, so
/// the workers do not all try at once) until shutdown, in one worker at a
/// time; the first pass after one interval.
pub async fn run_scheduled(pool: Pooled, days: u32, every: Duration, shutdown: Shutdown) {
    Periodic::every("retention", every)
        .jitter(every / 10)
        .first_after_a_pause()
        .logs(
            "retention pass failed; will try next time",
            "retention passes work again",
        )
        .run(&shutdown, || async {
            match retention::delete_older_locked(&pool, days).await? {
                Some(n) => tracing::info!(
                    processed_webhooks = n.processed_webhooks,
                    email_outbox = n.email_outbox,
                    notify_deliveries = n.notify_deliveries,
                    days,
                    "retention pass done"
                ),
                None => tracing::debug!("retention already running in another worker"),
            }
            Ok::<_, sqlx::Error>(Next::Pause)
        })
        .await;
}
