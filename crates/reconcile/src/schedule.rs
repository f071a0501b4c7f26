//! The worker's reconciler: a task of its own (its own connections, so it
//! never holds up consuming) that runs a pass right after start-up and then
//! every `[reconcile] interval` (on the common periodic helper). One worker at a time runs it: each takes
//! the advisory lock first, and one that gets it soon after another's run
//! finished skips, so the workers make one pass per interval between them.
//! A pass that fails (database or broker down) is logged and counted; the
//! next interval tries again. Nothing here can stop the worker.

use std::time::Duration;

use crate::store::{self, RunLock};
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use time::OffsetDateTime;
use tracing::Instrument as _;

use crate::report::Found;
use crate::run::{Reconciler, Scope};

/// What a scheduled pass did (the `outcome` label of `oncehook_reconcile_runs_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    /// Another worker holds the lock, or ran less than an interval ago.
    Skipped,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Skipped => "skipped",
            Outcome::Failed => "failed",
        }
    }
}

/// Registers the reconciler's series at zero, so a dashboard and the
/// alerts see every source before its first finding or failure.
pub fn zero_counters(reconciler: &Reconciler) {
    for s in reconciler.sources() {
        for found in [Found::MissingWebhook, Found::AlreadyRecorded] {
            metrics::counter!("oncehook_reconcile_facts_total", "source" => s.name.clone(), "found" => found.as_str())
                .increment(0);
        }
        metrics::counter!("oncehook_reconcile_api_calls_total", "source" => s.name.clone())
            .increment(0);
        metrics::gauge!("oncehook_reconcile_last_success_timestamp_seconds", "source" => s.name.clone())
            .set(0.0);
    }
    for o in [Outcome::Completed, Outcome::Skipped, Outcome::Failed] {
        metrics::counter!("oncehook_reconcile_runs_total", "outcome" => o.as_str()).increment(0);
    }
}

/// Runs passes until shutdown (returns at once when no source has a
/// `[source.api]`).
pub async fn run_scheduled(reconciler: Reconciler, shutdown: Shutdown) {
    if reconciler.sources().is_empty() {
        tracing::info!("no source has a [source.api]: reconciliation is off");
        return;
    }
    zero_counters(&reconciler);
    let interval = reconciler.config().interval;
    tracing::info!(
        ?interval,
        sources = reconciler.sources().len(),
        "reconciler started"
    );
    Periodic::every("reconciliation", interval)
        .run(&shutdown, || async {
            let outcome = tokio::select! {
                o = pass(&reconciler, interval) => o,
                () = shutdown.wait() => return Ok(Next::Stop),
            };
            metrics::counter!("oncehook_reconcile_runs_total", "outcome" => outcome.as_str())
                .increment(1);
            // A pass logs its own failures (`pass`); the next interval tries again.
            Ok::<_, std::convert::Infallible>(Next::Pause)
        })
        .await;
}

/// One scheduled pass, if this worker gets the lock and no other worker
/// ran within the interval.
pub async fn pass(reconciler: &Reconciler, interval: Duration) -> Outcome {
    let pool = reconciler.pool();
    let lock = match RunLock::try_take(pool).await {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            tracing::debug!("another worker is reconciling");
            return Outcome::Skipped;
        }
        Err(err) => {
            tracing::warn!(%err, "reconciliation skipped: the database is unavailable");
            return Outcome::Failed;
        }
    };
    // Waking up within 10 % of the interval after another worker's run
    // counts as the same interval.
    let slack = interval.mul_f64(0.9);
    match store::last_run(pool).await {
        Ok(Some(at)) if OffsetDateTime::now_utc() - at < slack => {
            let _ = lock.release().await;
            tracing::debug!("another worker reconciled within the interval");
            return Outcome::Skipped;
        }
        Ok(_) => {}
        Err(err) => {
            tracing::warn!(%err, "reconciliation skipped: the database is unavailable");
            return Outcome::Failed;
        }
    }
    // One trace per pass: the facts it publishes are applied in it.
    let span = tracing::info_span!("reconcile", otel.name = "reconciliation pass");
    let outcome = match reconciler
        .run(&Scope::Scheduled, None, false)
        .instrument(span)
        .await
    {
        Ok(report) => {
            let failing = report.failing();
            if failing.is_empty() {
                tracing::info!(
                    orders = report.orders.len(),
                    facts = report.facts().count(),
                    missing = report.missing(),
                    published = report.published,
                    "reconciliation pass done"
                );
            } else {
                tracing::warn!(orders = report.orders.len(), facts = report.facts().count(), missing = report.missing(), published = report.published, failing = %failing.join(", "), "reconciliation pass done; some gateway calls failed (they are asked again next run)");
            }
            if report.missing() > 0 {
                tracing::warn!(
                    missing = report.missing(),
                    "reconciliation found payment states no webhook delivered: are the gateways' webhooks reaching ingest?"
                );
            }
            Outcome::Completed
        }
        Err(err) => {
            tracing::warn!(%err, "reconciliation pass failed; the next interval tries again");
            Outcome::Failed
        }
    };
    if outcome == Outcome::Completed
        && let Err(err) = store::finish_run(pool).await
    {
        tracing::warn!(%err, "recording the reconciliation run failed");
    }
    let _ = lock.release().await;
    outcome
}
