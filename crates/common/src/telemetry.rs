//! Logs and metrics. Logs: `tracing` with `ONCEHOOK_LOG` as the filter and
//! text or JSON lines. Metrics: a Prometheus recorder whose text rendering
//! the binaries serve on `/metrics`.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::TelemetryConfig;

/// Installs the global tracing subscriber (call once, first thing in `main`).
pub fn init_logging(settings: &TelemetryConfig, binary: &str) {
    let filter = EnvFilter::try_new(&settings.log).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        // A log reader that went away (a closed pipe) must not turn a log
        // line into a panic: tracing would otherwise report the failed write
        // with `eprintln!`, which panics on the same closed stderr.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    let result = if settings.log_json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.with_ansi(false).try_init()
    };
    if result.is_ok() {
        tracing::debug!(binary, "logging initialised");
    }
}

/// Latency buckets (seconds) shared by every histogram.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the global Prometheus recorder and returns the handle to render it.
pub fn init_metrics() -> Result<PrometheusHandle, String> {
    PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())
}
