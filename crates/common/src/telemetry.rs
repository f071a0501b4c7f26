//! Logs, traces and metrics. Logs: `tracing` with `ONCEHOOK_LOG` as the
//! filter and text or JSON lines; a binary may divert some events away from
//! the log to a handler of its own ([`init_logging_diverting`]: ingest
//! re-levels the HTTP layer's complaints about malformed requests). Traces:
//! oncehook's own spans exported over OTLP when configured (`otel`).
//! Metrics: a Prometheus recorder whose text rendering the binaries serve
//! on `/metrics`.

use std::fmt::Write as _;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::TelemetryConfig;
use crate::otel::{self, Traces};

/// Installs the global tracing subscriber (call once, first thing in
/// `main`); shut the returned [`Traces`] down on exit to flush them.
pub fn init_logging(settings: &TelemetryConfig, binary: &str) -> Traces {
    let (otel, traces) = otel::layer(settings.traces.as_ref(), binary);
    let result = tracing_subscriber::registry()
        .with(log_writer(settings).with_filter(log_filter(settings)))
        .with(otel.map(|l| l.with_filter(filter_fn(own_spans))))
        .try_init();
    if result.is_ok() {
        tracing::debug!(binary, "logging initialised");
    }
    traces
}

/// Only oncehook's own spans are traced (never the exporter's HTTP client,
/// which would trace its own exports), and log lines are not copied into
/// them as span events: they carry the trace id in the log instead, and a
/// span costs what its fields cost.
fn own_spans(meta: &Metadata<'_>) -> bool {
    meta.is_span() && meta.target().starts_with("oncehook")
}

/// Events a binary takes out of its log to handle them itself.
pub struct Diversion {
    /// Whether events of this callsite are diverted (decided once per
    /// callsite, from its metadata alone).
    pub diverts: fn(&Metadata<'_>) -> bool,
    /// Receives each diverted event: its metadata and its message (with any
    /// other fields appended as `name=value`). It runs inside the logging
    /// call of whoever emitted the event: it must not log itself.
    pub handler: Box<dyn Fn(&'static Metadata<'static>, String) + Send + Sync>,
}

/// Like [`init_logging`], but the events `diversion` picks are not written;
/// its handler gets them instead, whatever `ONCEHOOK_LOG` says.
pub fn init_logging_diverting(
    settings: &TelemetryConfig,
    binary: &str,
    diversion: Diversion,
) -> Traces {
    let diverts = diversion.diverts;
    let (otel, traces) = otel::layer(settings.traces.as_ref(), binary);
    let result = tracing_subscriber::registry()
        .with(
            log_writer(settings)
                .with_filter(log_filter(settings).and(filter_fn(move |meta| !diverts(meta)))),
        )
        .with(Diverted(diversion).with_filter(filter_fn(diverts)))
        .with(otel.map(|l| l.with_filter(filter_fn(own_spans))))
        .try_init();
    if result.is_ok() {
        tracing::debug!(binary, "logging initialised");
    }
    traces
}

/// `ONCEHOOK_LOG` as a filter (`info` if it cannot be parsed).
fn log_filter(settings: &TelemetryConfig) -> EnvFilter {
    EnvFilter::try_new(&settings.log).unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The layer that writes log lines to stderr, as text or JSON.
fn log_writer<S>(settings: &TelemetryConfig) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_target(false)
        // A log reader that went away (a closed pipe) must not turn a log
        // line into a panic: tracing would otherwise report the failed write
        // with `eprintln!`, which panics on the same closed stderr.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    // Trace ids only when spans are exported: otherwise no line has any.
    let traced = settings.traces.is_some();
    if settings.log_json {
        layer
            .json()
            .flatten_event(true)
            .map_event_format(|inner| TraceIds {
                inner,
                json: true,
                traced,
            })
            .boxed()
    } else {
        layer
            .with_ansi(false)
            .map_event_format(|inner| TraceIds {
                inner,
                json: false,
                traced,
            })
            .boxed()
    }
}

/// A line formatter that names the trace and span of the innermost traced
/// span around an event (`trace_id`, `span_id`, as log-to-trace
/// correlation expects): at the top of a JSON line, at the end of a text
/// line. Lines outside any traced span, and every line when traces are not
/// exported (`traced` false: no span is looked at), are `inner`'s alone.
struct TraceIds<F> {
    inner: F,
    json: bool,
    traced: bool,
}

impl<S, N, F> FormatEvent<S, N> for TraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        if !self.traced {
            return self.inner.format_event(ctx, writer, event);
        }
        let ids = ctx
            .event_scope()
            .and_then(|scope| scope.into_iter().find_map(|span| otel::ids_of(&span.id())));
        let Some((trace_id, span_id)) = ids else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        if self.json
            && let Some(rest) = line.strip_prefix('{')
        {
            return write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            );
        }
        let text = line.trim_end_matches('\n');
        writeln!(writer, "{text} trace_id={trace_id} span_id={span_id}")
    }
}

/// Hands diverted events to their handler.
struct Diverted(Diversion);

impl<S: Subscriber> Layer<S> for Diverted {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut text = EventText::default();
        event.record(&mut text);
        (self.0.handler)(event.metadata(), text.0);
    }
}

/// An event's message, then its other fields as `name=value`.
#[derive(Default)]
struct EventText(String);

impl Visit for EventText {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let sep = if self.0.is_empty() { "" } else { " " };
        let _ = if field.name() == "message" {
            write!(self.0, "{sep}{value:?}")
        } else {
            write!(self.0, "{sep}{}={value:?}", field.name())
        };
    }
}

/// Latency buckets (seconds) shared by every histogram.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the global Prometheus recorder and returns the handle to render it.
pub fn init_metrics() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    // Spans a failed export lost (`otel`), at zero from the start.
    metrics::counter!("oncehook_telemetry_spans_dropped_total").absolute(0);
    // Which release (and commit, when the build was told) is running, once.
    metrics::gauge!(
        "oncehook_build_info",
        "version" => crate::build::VERSION,
        "commit" => crate::build::COMMIT,
    )
    .set(1.0);
    Ok(handle)
}
