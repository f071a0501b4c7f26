//! `oncehook-worker`: consumes envelopes and applies each exactly once — the
//! generic worker (`oncehook_pipeline`) with the order ledger as its effect
//! (`oncehook_ledger`, which brings its outbox relay and parked-event
//! sweeper). Also runs scheduled retention, the refunder (docs/refunds.md)
//! and the reconciler (which
//! asks the gateways' APIs about pending orders, on connections of its own). Stops cleanly on
//! SIGTERM/SIGINT: no new deliveries, in-flight ones commit and ack.
//!
//! Retention, the reconciler and the refunder are supervised
//! (`oncehook_common::background`): one that panics is logged, counted in
//! `oncehook_background_task_failures_total{task}` and started again; at
//! shutdown each is joined and a `JoinError` is logged.

use std::sync::Arc;

use anyhow::Context;
use oncehook_common::background::{self, supervise};
use oncehook_common::config::WorkerSettings;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{Config, health, telemetry};
use oncehook_ledger::Ledger;
use oncehook_pipeline::consumer::{self, Worker};
use oncehook_reconcile::{Reconciler, schedule};
use oncehook_refunds::Refunder;

mod retention;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `--version` / `-V` answers before any configuration is read.
    oncehook_common::build::exit_on_version_flag(env!("CARGO_BIN_NAME"));
    let config = Config::load().context("reading configuration")?;
    // The sources ingest publishes for: their counters start at zero.
    let sources: Vec<String> = config
        .ingest
        .sources
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let reconcile_config = config.clone();
    let settings = config.into_worker();
    let traces = telemetry::init_logging(&settings.telemetry, "oncehook-worker");
    let metrics = telemetry::init_metrics().map_err(anyhow::Error::msg)?;
    consumer::zero_counters(sources.iter().map(String::as_str));
    let shutdown = Shutdown::on_signals();
    let pool = database(&settings)?;
    let worker = Worker::new(
        pool.clone(),
        Ledger::default(),
        settings.clone(),
        shutdown.clone(),
    );
    if let Some(addr) = settings.metrics_addr {
        let bound = health::serve(addr, metrics, worker.readiness.clone(), shutdown.clone())
            .await
            .with_context(|| {
                format!("binding the metrics listener {addr} (set ONCEHOOK_METRICS_ADDR to another address, or `off`)")
            })?;
        tracing::info!(addr = %bound, "metrics listener up");
    }
    let (retention_pool, days, every, stop) = (
        pool.clone(),
        settings.worker.retention_days,
        settings.worker.retention_interval,
        shutdown.clone(),
    );
    let retention = supervise("retention", &shutdown, move || {
        retention::run_scheduled(retention_pool.clone(), days, every, stop.clone())
    });
    // The reconciler's own two connections (the lock's and its queries'),
    // so a pass never takes one a delivery is waiting for.
    let reconcile_pool = Pooled::open(&settings.database, 2).context("database URL")?;
    let reconciler = Reconciler::new(&reconcile_config, reconcile_pool.clone())
        .context("starting the reconciler")?;
    let stop = shutdown.clone();
    let reconciling = supervise("reconciler", &shutdown, move || {
        schedule::run_scheduled(reconciler.clone(), stop.clone())
    });
    // The refunder's own two connections too (docs/refunds.md); it runs
    // only where some source's `[refunds] mode` is not `off`.
    let refund_pool = Pooled::open(&settings.database, 2).context("database URL")?;
    let refunder = Arc::new(
        Refunder::new(&reconcile_config, refund_pool.clone()).context("starting the refunder")?,
    );
    let stop = shutdown.clone();
    let refunding = supervise("refunder", &shutdown, move || {
        oncehook_refunds::run::run_scheduled(refunder.clone(), stop.clone())
    });
    tracing::info!(prefix = %settings.broker.prefix, "oncehook-worker starting");
    worker.run().await;
    background::join_all([retention, reconciling, refunding]).await;
    reconcile_pool.close().await;
    refund_pool.close().await;
    pool.close().await;
    tracing::info!("oncehook-worker stopped");
    traces.shutdown();
    Ok(())
}

/// The worker's pool: one connection per transaction in flight (the
/// committers, no more than the deliveries in flight), plus the relay, the
/// sweepers, retention and the gauges — unless the budget says otherwise.
fn database(settings: &WorkerSettings) -> anyhow::Result<Pooled> {
    let committers = settings.worker.committers;
    let pool_size = settings.database.pool_size(u32::from(committers) + 4);
    if pool_size < u32::from(committers) + 2 {
        tracing::warn!(
            pool_size,
            committers,
            "the database connection budget is below the committers: transactions will wait for connections"
        );
    }
    Pooled::open(&settings.database, pool_size).context("database URL")
}
