//! `[telemetry]`: the log filter and format, where each binary serves
//! `/metrics`, `/healthz` and `/readyz` (never on the public ingest port),
//! and the Prometheus server the operators' tools read ingest's counters
//! from.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::keys::Key;

pub const ENV_LOG: &str = "ONCEHOOK_LOG";
pub const ENV_LOG_FORMAT: &str = "ONCEHOOK_LOG_FORMAT";
pub const ENV_METRICS_ADDR: &str = "ONCEHOOK_METRICS_ADDR";
pub const ENV_PROMETHEUS_URL: &str = "ONCEHOOK_PROMETHEUS_URL";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_LOG, "telemetry.log").legacy("log"),
    Key::new(ENV_LOG_FORMAT, "telemetry.log_format").legacy("log_format"),
    Key::new(ENV_METRICS_ADDR, "telemetry.metrics_addr").legacy("metrics_addr"),
    Key::new(ENV_PROMETHEUS_URL, "telemetry.prometheus_url"),
];

/// `[telemetry]`: logs and the metrics/health listener.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    pub log: String,
    pub log_json: bool,
    pub metrics: MetricsListener,
    /// The Prometheus server that scrapes the binaries, for the operators'
    /// tools (`stats`, the console's Overview) to read ingest's counters of
    /// accepted and refused webhooks; `None`: those numbers are not shown.
    pub prometheus_url: Option<String>,
}

/// Where a binary serves `/metrics`, `/healthz` and `/readyz`: never on the
/// public ingest port. Unset means each binary's own loopback default (ports
/// 9100, 9101, 9102 for ingest, worker, mailer, so the three share a host);
/// `off` turns the listener off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListener {
    Default,
    Off,
    At(SocketAddr),
}

const fn loopback(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

/// Ingest's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const INGEST_METRICS_ADDR: SocketAddr = loopback(9100);
/// The worker's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const WORKER_METRICS_ADDR: SocketAddr = loopback(9101);
/// The mailer's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const MAILER_METRICS_ADDR: SocketAddr = loopback(9102);
/// The shop API's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const API_METRICS_ADDR: SocketAddr = loopback(9103);

impl MetricsListener {
    /// The address to bind, given the binary's default; `None` when off.
    pub fn resolve(self, default: SocketAddr) -> Option<SocketAddr> {
        match self {
            MetricsListener::Default => Some(default),
            MetricsListener::Off => None,
            MetricsListener::At(addr) => Some(addr),
        }
    }
}

/// Unset or empty: the binary's default; `off`; or `host:port`.
impl<'de> Deserialize<'de> for MetricsListener {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Option::<String>::deserialize(d)?;
        match value.as_deref().map(str::trim) {
            None | Some("") => Ok(MetricsListener::Default),
            Some("off") => Ok(MetricsListener::Off),
            Some(other) => other.parse().map(MetricsListener::At).map_err(|e| {
                D::Error::custom(format!(
                    "expected `host:port` or `off`, found {other:?}: {e}"
                ))
            }),
        }
    }
}

impl Serialize for MetricsListener {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MetricsListener::Default => s.serialize_none(),
            MetricsListener::Off => s.serialize_str("off"),
            MetricsListener::At(addr) => s.collect_str(addr),
        }
    }
}

/// `log_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
enum LogFormat {
    Text,
    /// One JSON object per line.
    Json,
}

/// `prometheus_url`: an http(s) base URL (trailing slash dropped); empty
/// means unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
struct PrometheusUrl(Option<String>);

impl<'de> Deserialize<'de> for PrometheusUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Some(value) = Option::<String>::deserialize(d)? else {
            return Ok(PrometheusUrl(None));
        };
        let url = value.trim().trim_end_matches('/');
        if url.is_empty() {
            return Ok(PrometheusUrl(None));
        }
        let host = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        match host {
            Some(h) if !h.is_empty() && !h.contains(char::is_whitespace) => {
                Ok(PrometheusUrl(Some(url.to_owned())))
            }
            _ => Err(D::Error::custom(format!(
                "expected the Prometheus server's base URL, such as http://prometheus:9090, found {url:?}"
            ))),
        }
    }
}

/// `[telemetry]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct TelemetrySection {
    log: String,
    log_format: LogFormat,
    metrics_addr: MetricsListener,
    prometheus_url: PrometheusUrl,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        TelemetrySection {
            log: "info".into(),
            log_format: LogFormat::Text,
            metrics_addr: MetricsListener::Default,
            prometheus_url: PrometheusUrl(None),
        }
    }
}

impl From<TelemetrySection> for TelemetryConfig {
    fn from(s: TelemetrySection) -> Self {
        TelemetryConfig {
            log: s.log,
            log_json: s.log_format == LogFormat::Json,
            metrics: s.metrics_addr,
            prometheus_url: s.prometheus_url.0,
        }
    }
}

#[cfg(test)]
#[path = "telemetry_tests.rs"]
mod tests;
