//! `oncehook-ingest`: the webhook edge. Reads configuration, starts logging
//! and metrics, and runs the HTTP server until SIGTERM/SIGINT.

use anyhow::Context;
use oncehook_common::{Config, telemetry};
use oncehook_ingest::refusals;
use oncehook_ingest::startup::Application;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    // `--version` / `-V` answers before any configuration is read.
    oncehook_common::build::exit_on_version_flag(env!("CARGO_BIN_NAME"));
    let settings = Config::load()
        .context("reading configuration")?
        .into_ingest()
        .context("starting ingest")?;
    let traces = refusals::init_logging(&settings.telemetry);
    let metrics = telemetry::init_metrics().map_err(anyhow::Error::msg)?;
    let app = Application::build(settings, metrics)
        .await
        .context("starting ingest")?;
    match app.metrics_addr() {
        Some(metrics) => {
            tracing::info!(addr = %app.addr(), %metrics, "oncehook-ingest listening")
        }
        None => {
            tracing::info!(addr = %app.addr(), "oncehook-ingest listening (metrics listener off)")
        }
    }
    app.run_until_stopped().await.context("ingest server")?;
    tracing::info!("oncehook-ingest stopped");
    traces.shutdown();
    Ok(())
}
