//! `oncehook-api`: reads configuration, starts logging and metrics, and
//! serves the shop's API until SIGTERM/SIGINT.

use anyhow::Context;
use oncehook_api::startup::Application;
use oncehook_common::{Config, telemetry};

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    // `--version` / `-V` answers before any configuration is read.
    oncehook_common::build::exit_on_version_flag(env!("CARGO_BIN_NAME"));
    let settings = Config::load().context("reading configuration")?.into_api();
    let traces = telemetry::init_logging(&settings.telemetry, "oncehook-api");
    let metrics = telemetry::init_metrics().map_err(anyhow::Error::msg)?;
    let app = Application::build(settings, metrics)
        .await
        .context("starting the API")?;
    tracing::info!(addr = %app.addr(), metrics = ?app.metrics_addr(), "oncehook-api listening");
    app.run_until_stopped().await.context("serving the API")?;
    tracing::info!("oncehook-api stopped");
    traces.shutdown();
    Ok(())
}
