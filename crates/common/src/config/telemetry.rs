//! `[telemetry]`: the log filter and format, where each binary serves
//! `/metrics`, `/healthz` and `/readyz` (never on the public ingest port),
//! the Prometheus server the operators' tools read ingest's counters
//! from, and where traces go (OTLP, set by the standard `OTEL_*`
//! variables or the same keys here; unset: no traces, no cost).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ConfigError;
use super::Secret;
use super::error::invalid;
use super::keys::Key;

pub const ENV_LOG: &str = "ONCEHOOK_LOG";
pub const ENV_LOG_FORMAT: &str = "ONCEHOOK_LOG_FORMAT";
pub const ENV_METRICS_ADDR: &str = "ONCEHOOK_METRICS_ADDR";
pub const ENV_PROMETHEUS_URL: &str = "ONCEHOOK_PROMETHEUS_URL";
pub const ENV_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const ENV_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
pub const ENV_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub const ENV_OTLP_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
pub const ENV_OTLP_TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
pub const ENV_OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
pub const ENV_OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
pub const ENV_OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
pub const ENV_OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_LOG, "telemetry.log").legacy("log"),
    Key::new(ENV_LOG_FORMAT, "telemetry.log_format").legacy("log_format"),
    Key::new(ENV_METRICS_ADDR, "telemetry.metrics_addr").legacy("metrics_addr"),
    Key::new(ENV_PROMETHEUS_URL, "telemetry.prometheus_url"),
    Key::new(ENV_OTLP_ENDPOINT, "telemetry.otlp_endpoint"),
    Key::new(ENV_OTLP_TRACES_ENDPOINT, "telemetry.otlp_traces_endpoint"),
    Key::new(ENV_OTLP_PROTOCOL, "telemetry.otlp_protocol"),
    Key::new(ENV_OTLP_HEADERS, "telemetry.otlp_headers").secret(),
    Key::new(ENV_OTLP_TRACES_HEADERS, "telemetry.otlp_traces_headers").secret(),
    Key::new(ENV_OTEL_SERVICE_NAME, "telemetry.service_name"),
    Key::new(ENV_OTEL_TRACES_SAMPLER, "telemetry.traces_sampler"),
    Key::new(ENV_OTEL_TRACES_SAMPLER_ARG, "telemetry.traces_sampler_arg"),
    Key::new(
        ENV_OTEL_RESOURCE_ATTRIBUTES,
        "telemetry.resource_attributes",
    ),
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
    /// Where traces are exported; `None`: nowhere (no span is exported and
    /// none costs more than a `tracing` span).
    pub traces: Option<TracesConfig>,
}

/// OTLP trace export, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesConfig {
    /// The traces URL: `…/v1/traces` for http/protobuf, the collector's
    /// address for gRPC.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Headers sent with every export (a hosted backend's API key):
    /// lower-case names, %-decoded values, never printed.
    pub headers: Vec<(String, Secret)>,
    /// `service.name`; `None`: the binary's own name.
    pub service_name: Option<String>,
    pub sampler: Sampler,
    /// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs.
    pub resource_attributes: Vec<(String, String)>,
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    HttpProtobuf,
    Grpc,
}

/// `OTEL_TRACES_SAMPLER` (+ `_ARG` for the ratio ones).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    TraceIdRatio(f64),
    ParentBasedAlwaysOn,
    ParentBasedAlwaysOff,
    ParentBasedTraceIdRatio(f64),
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
/// The notifier's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const NOTIFIER_METRICS_ADDR: SocketAddr = loopback(9104);

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
            Some(h) if !h.is_empty() && !h.contains(char::is_whitespace) && http_url(url) => {
                Ok(PrometheusUrl(Some(url.to_owned())))
            }
            // Never the value: a URL may carry a password.
            _ => Err(D::Error::custom(
                "expected the Prometheus server's base URL, such as http://prometheus:9090",
            )),
        }
    }
}

/// Whether `text` is written as an `http://` or `https://` URL and parses
/// as one with a host, and no `@` or `#` after it (`https:token@collector`
/// and `https://user:12/token@collector` are not: the parser would take a
/// token for a user name or a path).
fn http_url(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    (lower.starts_with("http://") || lower.starts_with("https://"))
        && url::Url::parse(text).is_ok_and(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some_and(|h| !h.is_empty())
                && !u.path().contains('@')
                && u.fragment().is_none()
        })
}

/// `[telemetry]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct TelemetrySection {
    log: String,
    log_format: LogFormat,
    metrics_addr: MetricsListener,
    prometheus_url: PrometheusUrl,
    otlp_endpoint: String,
    otlp_traces_endpoint: String,
    otlp_protocol: String,
    otlp_headers: String,
    otlp_traces_headers: String,
    service_name: String,
    traces_sampler: String,
    traces_sampler_arg: String,
    resource_attributes: String,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        TelemetrySection {
            log: "info".into(),
            log_format: LogFormat::Text,
            metrics_addr: MetricsListener::Default,
            prometheus_url: PrometheusUrl(None),
            otlp_endpoint: String::new(),
            otlp_traces_endpoint: String::new(),
            otlp_protocol: "http/protobuf".into(),
            otlp_headers: String::new(),
            otlp_traces_headers: String::new(),
            service_name: String::new(),
            traces_sampler: "parentbased_always_on".into(),
            traces_sampler_arg: String::new(),
            resource_attributes: String::new(),
        }
    }
}

impl TelemetrySection {
    /// The section, with the trace export settings checked.
    pub(super) fn validate(self) -> Result<TelemetryConfig, ConfigError> {
        let traces = self.traces()?;
        Ok(TelemetryConfig {
            log: self.log,
            log_json: self.log_format == LogFormat::Json,
            metrics: self.metrics_addr,
            prometheus_url: self.prometheus_url.0,
            traces,
        })
    }

    fn traces(&self) -> Result<Option<TracesConfig>, ConfigError> {
        let protocol = match self.otlp_protocol.trim() {
            "" | "http/protobuf" => OtlpProtocol::HttpProtobuf,
            "grpc" => OtlpProtocol::Grpc,
            other => {
                return Err(invalid(
                    &format!("telemetry.otlp_protocol ({ENV_OTLP_PROTOCOL})"),
                    other,
                    "expected http/protobuf or grpc",
                ));
            }
        };
        let endpoint = match (self.otlp_traces_endpoint.trim(), self.otlp_endpoint.trim()) {
            ("", "") => return Ok(None),
            ("", base) => match protocol {
                // The signal's path is added to the base endpoint (the spec).
                OtlpProtocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
                OtlpProtocol::Grpc => base.to_owned(),
            },
            (traces, _) => traces.to_owned(),
        };
        if !http_url(&endpoint) {
            let key = if self.otlp_traces_endpoint.trim().is_empty() {
                format!("telemetry.otlp_endpoint ({ENV_OTLP_ENDPOINT})")
            } else {
                format!("telemetry.otlp_traces_endpoint ({ENV_OTLP_TRACES_ENDPOINT})")
            };
            // Never the value: an endpoint may carry a token.
            return Err(invalid(
                &key,
                "[redacted]",
                "expected an http:// or https:// URL with a host, such as http://collector:4318",
            ));
        }
        Ok(Some(TracesConfig {
            endpoint,
            protocol,
            headers: self.headers()?,
            service_name: Some(self.service_name.trim().to_owned()).filter(|s| !s.is_empty()),
            sampler: self.sampler()?,
            resource_attributes: self.resource_attributes()?,
        }))
    }

    fn sampler(&self) -> Result<Sampler, ConfigError> {
        let key = format!("telemetry.traces_sampler_arg ({ENV_OTEL_TRACES_SAMPLER_ARG})");
        let ratio = || -> Result<f64, ConfigError> {
            match self.traces_sampler_arg.trim() {
                "" => Ok(1.0),
                arg => match arg.parse::<f64>() {
                    Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                    _ => Err(invalid(&key, arg, "expected a ratio from 0 to 1")),
                },
            }
        };
        Ok(match self.traces_sampler.trim() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => Sampler::TraceIdRatio(ratio()?),
            "" | "parentbased_always_on" => Sampler::ParentBasedAlwaysOn,
            "parentbased_always_off" => Sampler::ParentBasedAlwaysOff,
            "parentbased_traceidratio" => Sampler::ParentBasedTraceIdRatio(ratio()?),
            other => {
                return Err(invalid(
                    &format!("telemetry.traces_sampler ({ENV_OTEL_TRACES_SAMPLER})"),
                    other,
                    "expected always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio",
                ));
            }
        })
    }

    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` if set, else
    /// `OTEL_EXPORTER_OTLP_HEADERS` (the spec's order): comma-separated
    /// `name=value` pairs, values %-encoded. An error names the key and
    /// the header, never a value (they hold API keys).
    fn headers(&self) -> Result<Vec<(String, Secret)>, ConfigError> {
        let (key, raw) = if self.otlp_traces_headers.trim().is_empty() {
            (
                format!("telemetry.otlp_headers ({ENV_OTLP_HEADERS})"),
                &self.otlp_headers,
            )
        } else {
            (
                format!("telemetry.otlp_traces_headers ({ENV_OTLP_TRACES_HEADERS})"),
                &self.otlp_traces_headers,
            )
        };
        let refused = |why: String| invalid(&key, "[redacted]", &why);
        raw.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let Some((name, value)) = pair.split_once('=') else {
                    return Err(refused(
                        "expected comma-separated name=value pairs, such as x-honeycomb-team=KEY"
                            .into(),
                    ));
                };
                let name = name.trim();
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(refused(format!("{name:?} is not an HTTP header name")));
                }
                let value = percent_encoding::percent_decode_str(value.trim())
                    .decode_utf8()
                    .map_err(|_| {
                        refused(format!("the value of {name} is not UTF-8 once %-decoded"))
                    })?;
                if http::HeaderValue::from_str(&value).is_err() {
                    return Err(refused(format!(
                        "the value of {name} holds a character a header cannot carry (%-encode it)"
                    )));
                }
                Ok((name.to_ascii_lowercase(), Secret::new(value)))
            })
            .collect()
    }

    fn resource_attributes(&self) -> Result<Vec<(String, String)>, ConfigError> {
        self.resource_attributes
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    Ok((k.trim().to_owned(), v.trim().to_owned()))
                }
                _ => Err(invalid(
                    &format!("telemetry.resource_attributes ({ENV_OTEL_RESOURCE_ATTRIBUTES})"),
                    pair,
                    "expected comma-separated key=value pairs",
                )),
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "telemetry_tests.rs"]
mod tests;
