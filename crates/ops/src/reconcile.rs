//! `oncehookctl reconcile`: one reconciliation pass now, with the worker's
//! own code (`oncehook_reconcile`): asks the gateways' APIs about pending
//! orders (or `--order REF`, or those created `--since` ago), prints what
//! each gateway answered and which facts were missing, and publishes those
//! for the worker to apply (`--dry-run` publishes and records nothing). It
//! takes the reconciler's lock, so it never runs beside a worker's pass.

use std::fmt;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use oncehook_common::Config;
use oncehook_common::store::Pooled;
use oncehook_reconcile::store::RunLock;
use oncehook_reconcile::{Reconciler, Report, Scope};
use serde::Serialize;

use crate::timefmt::parse_duration;

#[derive(Args)]
pub struct ReconcileArgs {
    /// Ask only this source (one with a [source.api]).
    #[arg(long)]
    pub source: Option<String>,
    /// Ask about this one order (by the shop's reference), whatever its status and age.
    #[arg(long, conflicts_with = "since")]
    pub order: Option<String>,
    /// Pending orders created within this long ago (e.g. 2h, 30m) instead of the
    /// [reconcile] after..horizon window.
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<Duration>,
    /// Ask and report, but publish and record nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The pass's report, as the tool prints it.
#[derive(Serialize)]
#[serde(transparent)]
pub struct ReconcileReport(pub Report);

impl fmt::Display for ReconcileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl crate::output::Report for ReconcileReport {
    /// Every call answered.
    fn ok(&self) -> bool {
        self.0.failing().is_empty()
    }
}

pub async fn run(settings: &Config, args: ReconcileArgs) -> anyhow::Result<ReconcileReport> {
    let pool = Pooled::connect(&settings.database, 3, 3)
        .await
        .context("connecting to the database")?;
    let reconciler = Reconciler::new(settings, pool.clone())?;
    if reconciler.sources().is_empty() {
        bail!(
            "no source has a [source.api]: there is no gateway API to ask (docs/reconciliation.md)"
        );
    }
    let scope = match (args.order, args.since) {
        (Some(order), _) => Scope::Order(order),
        (None, Some(since)) => Scope::Since(since),
        (None, None) => Scope::Scheduled,
    };
    let Some(lock) = RunLock::try_take(&pool)
        .await
        .context("taking the reconciler's lock")?
    else {
        bail!("a worker is reconciling right now; try again in a moment");
    };
    let report = reconciler
        .run(&scope, args.source.as_deref(), args.dry_run)
        .await;
    let _ = lock.release().await;
    pool.close().await;
    Ok(ReconcileReport(report?))
}
