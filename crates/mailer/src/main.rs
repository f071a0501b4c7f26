//! `oncehook-mailer`: sends the emails the worker wrote to the outbox.
//! Stops cleanly on SIGTERM/SIGINT.

use anyhow::Context;
use oncehook_common::dead_letter::{self, Writer};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{Config, health, telemetry};
use oncehook_mailer::service::Mailer;
use oncehook_mailer::transport::Transport;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `--version` / `-V` answers before any configuration is read.
    oncehook_common::build::exit_on_version_flag(env!("CARGO_BIN_NAME"));
    let settings = Config::load()
        .context("reading configuration")?
        .into_mailer();
    let traces = telemetry::init_logging(&settings.telemetry, "oncehook-mailer");
    let metrics = telemetry::init_metrics().map_err(anyhow::Error::msg)?;
    // Every kind the mailer dead-letters with exists at zero from its start.
    dead_letter::zero_counters(Writer::Mailer);
    let shutdown = Shutdown::on_signals();
    let transport = Transport::from_config(&settings.mail)?;
    let pool_size = settings
        .database
        .pool_size(u32::from(settings.mail.prefetch) + 2);
    let pool = Pooled::open(&settings.database, pool_size).context("database URL")?;
    tracing::info!(transport = %transport.describe(), concurrency = settings.mail.concurrency, prefix = %settings.broker.prefix, "oncehook-mailer starting");
    let mailer = Mailer::new(pool.clone(), transport, settings.clone(), shutdown.clone());
    if let Some(addr) = settings.metrics_addr {
        let bound = health::serve(addr, metrics, mailer.readiness.clone(), shutdown.clone())
            .await
            .with_context(|| {
                format!("binding the metrics listener {addr} (set ONCEHOOK_METRICS_ADDR to another address, or `off`)")
            })?;
        tracing::info!(addr = %bound, "metrics listener up");
    }
    mailer.clone().run().await;
    mailer.transport.close().await;
    pool.close().await;
    tracing::info!("oncehook-mailer stopped");
    traces.shutdown();
    Ok(())
}
