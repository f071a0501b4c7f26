//! `oncehook-ingest`: the webhook edge. Reads configuration, starts logging
//! and metrics, and runs the HTTP server until SIGTERM/SIGINT.

use anyhow::Context;
use oncehook_common::{Settings, telemetry};
use oncehook_ingest::startup::Application;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let settings = Settings::load().context("reading configuration")?;
    telemetry::init_logging(&settings, "oncehook-ingest");
    settings.require_sources().context("starting ingest")?;
    let metrics = telemetry::init_metrics().map_err(anyhow::Error::msg)?;
    let app = Application::build(settings, metrics)
        .await
        .context("starting ingest")?;
    tracing::info!(addr = %app.addr(), "oncehook-ingest listening");
    app.run_until_stopped().await.context("ingest server")?;
    tracing::info!("oncehook-ingest stopped");
    Ok(())
}
