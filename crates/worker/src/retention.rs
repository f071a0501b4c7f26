//! Scheduled retention of the dedup table, of sent or failed outbox rows
//! (customer addresses) and of the notifier's finished deliveries (the
//! shop's answers). The SQL lives in
//! [`oncehook_common::store::retention`] (shared with `oncehookctl
//! retention`); this module only runs it every so often, in one worker at a
//! time.

use std::time::Duration;

use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::store::retention;

/// Runs retention every `every` until shutdown, in one worker at a time.
pub async fn run_scheduled(pool: Pooled, days: u32, every: Duration, shutdown: Shutdown) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = shutdown.wait() => return,
        }
        match retention::delete_older_locked(&pool, days).await {
            Ok(Some(n)) => tracing::info!(
                processed_webhooks = n.processed_webhooks,
                email_outbox = n.email_outbox,
                notify_deliveries = n.notify_deliveries,
                days,
                "retention pass done"
            ),
            Ok(None) => tracing::debug!("retention already running in another worker"),
            Err(err) => tracing::warn!(%err, "retention pass failed; will try next time"),
        }
    }
}
