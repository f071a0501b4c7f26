//! `oncehook-notifier`: delivers the order events to the shop's endpoints
//! and publishes them to `P.order-events`. Stops cleanly on SIGTERM/SIGINT:
//! no new leases, the attempts in flight end and are written.

use anyhow::Context;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{Config, health, telemetry};
use oncehook_notifier::Notifier;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `--version` / `-V` answers before any configuration is read.
    oncehook_common::build::exit_on_version_flag(env!("CARGO_BIN_NAME"));
    let settings = Config::load()
        .context("reading configuration")?
        .into_notifier();
    let traces = telemetry::init_logging(&settings.telemetry, "oncehook-notifier");
    let metrics = telemetry::init_metrics().map_err(anyhow::Error::msg)?;
    let shutdown = Shutdown::on_signals();
    // The fan-out's prefetch, every endpoint's attempts, the relay and the gauges.
    let attempts: u32 =
        settings.notify.endpoints.len() as u32 * u32::from(settings.notify.concurrency);
    let pool_size = settings.database.pool_size(attempts.min(32) + 20);
    let pool = Pooled::open(&settings.database, pool_size).context("database URL")?;
    let endpoints: Vec<&str> = settings
        .notify
        .endpoints
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    if endpoints.is_empty() {
        tracing::warn!(
            "no [[notify.endpoint]] configured: order events are published to the broker only"
        );
    }
    tracing::info!(endpoints = ?endpoints, prefix = %settings.broker.prefix, "oncehook-notifier starting");
    let notifier = Notifier::new(pool.clone(), settings.clone(), shutdown.clone())
        .context("starting the notifier")?;
    if let Some(addr) = settings.metrics_addr {
        let bound = health::serve(addr, metrics, notifier.readiness.clone(), shutdown.clone())
            .await
            .with_context(|| {
                format!("binding the metrics listener {addr} (set ONCEHOOK_METRICS_ADDR to another address, or `off`)")
            })?;
        tracing::info!(addr = %bound, "metrics listener up");
    }
    notifier.run().await;
    pool.close().await;
    tracing::info!("oncehook-notifier stopped");
    traces.shutdown();
    Ok(())
}
