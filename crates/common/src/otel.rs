//! OpenTelemetry traces: one trace per webhook delivery, across every hop.
//! The binaries' `tracing` spans become OpenTelemetry spans (through
//! `tracing-opentelemetry`) exported over OTLP when `[telemetry]` or the
//! standard `OTEL_*` variables name an endpoint; unset, no layer is
//! installed and nothing is exported.
//!
//! The W3C trace context (`traceparent`, `tracestate`) crosses the broker
//! in the AMQP message headers ([`inject_amqp`], [`amqp_context`]) and the
//! gateway's HTTP request ([`http_context`]). Export never blocks the
//! pipeline: a bounded batch queue on a thread of its own; spans dropped
//! because the queue is full, and those a failed export loses, are counted
//! in `oncehook_telemetry_spans_dropped_total`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{OtlpProtocol, Sampler, Secret, TracesConfig};
use crate::consume::Message;

/// A replayed message's header: the `traceparent` of its first delivery,
/// which the replay's new trace links to.
pub const HEADER_FIRST_TRACEPARENT: &str = "x-oncehook-first-traceparent";

/// The most spans waiting for export; beyond it new spans are dropped.
const MAX_QUEUE: usize = 4_096;
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The installed trace pipeline; [`Traces::shutdown`] flushes it.
#[derive(Debug, Default)]
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Exports what is queued (bounded in time) and stops the exporter.
    /// Runs the blocking flush on a thread of its own, so it is safe to
    /// call from async code.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = std::thread::spawn(move || {
                let _ = provider.shutdown_with_timeout(EXPORT_TIMEOUT);
            })
            .join();
        }
    }
}

/// The layer that turns `tracing` spans into exported spans, if traces
/// are configured; the global propagator is W3C trace context either way.
pub fn layer<S>(
    config: Option<&TracesConfig>,
    binary: &str,
) -> (Option<OpenTelemetryLayer<S, SdkTracer>>, Traces)
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let Some(config) = config else {
        return (None, Traces::default());
    };
    match provider(config, binary) {
        Ok(provider) => {
            let tracer = provider.tracer(binary.to_owned());
            // Only the fields the spans declare: no source location, thread
            // or busy/idle times on every span (their cost is per span).
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                .with_target(false)
                .with_tracked_inactivity(false)
                // Nothing reads OpenTelemetry's current context (every
                // parent is the `tracing` span's, read from the span), so
                // entering a span need not attach its context each poll.
                .with_context_activation(false);
            (
                Some(layer),
                Traces {
                    provider: Some(provider),
                },
            )
        }
        Err(why) => {
            // The endpoint may carry a token: shown redacted, also where
            // the exporter's message quotes it.
            let shown = crate::redact::redact(&config.endpoint);
            eprintln!(
                "{binary}: traces are not exported: the OTLP exporter for {shown} could not be built: {}",
                why.replace(config.endpoint.as_str(), &shown)
            );
            (None, Traces::default())
        }
    }
}

fn provider(config: &TracesConfig, binary: &str) -> Result<SdkTracerProvider, String> {
    // The headers are passed even when they came from the standard
    // variables, which the exporter also reads: both sides replace a
    // header by name, so none is sent twice.
    let exporter = match config.protocol {
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(
                config
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                    .collect(),
            )
            .build(),
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(config.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_metadata(MetadataMap::from_headers(header_map(&config.headers)?))
            .build(),
    }
    .map_err(|e| e.to_string())?;
    let in_flight = Arc::new(AtomicUsize::new(0));
    // The batch processor's own queue is larger than ours, so it never
    // drops a span silently: `Bounded` drops (and counts) first.
    let batch = BatchSpanProcessor::builder(Counted {
        exporter,
        in_flight: in_flight.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUE * 2)
            .build(),
    )
    .build();
    let processor = Bounded {
        inner: batch,
        in_flight,
    };
    let mut attributes: Vec<KeyValue> = config
        .resource_attributes
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    attributes.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    let resource = Resource::builder_empty()
        .with_service_name(
            config
                .service_name
                .clone()
                .unwrap_or_else(|| binary.to_owned()),
        )
        .with_attributes(attributes)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler(config.sampler))
        .with_resource(resource)
        .build())
}

/// The export headers as gRPC metadata wants them (checked when the
/// configuration was read; an error here names the header only).
fn header_map(headers: &[(String, Secret)]) -> Result<http::HeaderMap, String> {
    headers
        .iter()
        .map(|(name, value)| {
            let n = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a header name"))?;
            let v = http::HeaderValue::from_str(value.expose())
                .map_err(|_| format!("the value of {name} is not a header value"))?;
            Ok((n, v))
        })
        .collect()
}

fn sampler(s: Sampler) -> opentelemetry_sdk::trace::Sampler {
    use opentelemetry_sdk::trace::Sampler as S;
    match s {
        Sampler::AlwaysOn => S::AlwaysOn,
        Sampler::AlwaysOff => S::AlwaysOff,
        Sampler::TraceIdRatio(r) => S::TraceIdRatioBased(r),
        Sampler::ParentBasedAlwaysOn => S::ParentBased(Box::new(S::AlwaysOn)),
        Sampler::ParentBasedAlwaysOff => S::ParentBased(Box::new(S::AlwaysOff)),
        Sampler::ParentBasedTraceIdRatio(r) => S::ParentBased(Box::new(S::TraceIdRatioBased(r))),
    }
}

/// The export thread's scheduling priority (Linux `nice`): below the
/// pipeline's threads, so on a busy machine requests and deliveries go
/// first and the spans wait (a queue that fills drops, and counts, them).
const EXPORT_NICE: libc::c_int = 10;

/// Lowers the calling thread's priority to [`EXPORT_NICE`] (never raises
/// it), once per thread (the batch processor exports from one thread of
/// its own).
fn yield_the_cpu() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    DONE.with(|done| {
        if !done.replace(true) {
            // SAFETY: getpriority and setpriority only read their
            // arguments; on Linux, PRIO_PROCESS with 0 names the calling
            // thread alone. A process started nicer than this stays so.
            unsafe {
                if libc::getpriority(libc::PRIO_PROCESS, 0) < EXPORT_NICE {
                    let _ = libc::setpriority(libc::PRIO_PROCESS, 0, EXPORT_NICE);
                }
            }
        }
    });
}

/// Counts one dropped span, or `n`.
fn dropped(n: u64) {
    metrics::counter!("oncehook_telemetry_spans_dropped_total").increment(n);
}

/// The batch processor behind a bound of its own: at most [`MAX_QUEUE`]
/// sampled spans ended and not yet exported; past it a span is dropped
/// and counted instead of queued.
#[derive(Debug)]
struct Bounded<P> {
    inner: P,
    in_flight: Arc<AtomicUsize>,
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if span.span_context.is_sampled()
            && self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUE
        {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            dropped(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that counts the spans of every batch it failed to export,
/// and lets [`Bounded`] know they left the queue.
#[derive(Debug)]
struct Counted<E> {
    exporter: E,
    in_flight: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        yield_the_cpu();
        let n = batch.len();
        let export = self.exporter.export(batch);
        let in_flight = self.in_flight.clone();
        async move {
            let result = export.await;
            let _ = in_flight.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_sub(n))
            });
            if result.is_err() {
                dropped(n as u64);
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

/// A producer span for publishing one message (the OpenTelemetry
/// messaging conventions for RabbitMQ); publish inside it so the message
/// carries its context.
pub fn producer_span(exchange: &str, routing_key: &str, message_id: &str) -> tracing::Span {
    tracing::info_span!(
        "publish",
        otel.name = %format!("publish {exchange}"),
        otel.kind = "producer",
        messaging.system = "rabbitmq",
        messaging.operation.type = "send",
        messaging.operation.name = "publish",
        messaging.destination.name = %exchange,
        messaging.rabbitmq.destination.routing_key = %routing_key,
        messaging.message.id = %message_id,
    )
}

/// A consumer span for processing one message of `queue` (the messaging
/// conventions for RabbitMQ), a child of the context the message carries.
/// A replayed message's span is linked to the handling that gave up on it.
pub fn consumer_span(queue: &str, message: &dyn Message) -> tracing::Span {
    let headers = message.properties().headers().as_ref();
    let span = tracing::info_span!(
        "process",
        otel.name = %format!("process {queue}"),
        otel.kind = "consumer",
        messaging.system = "rabbitmq",
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %queue,
        messaging.rabbitmq.destination.routing_key = %message.routing_key(),
        messaging.message.id = %message.message_id(),
        oncehook.event_id = tracing::field::Empty,
        oncehook.order_ref = tracing::field::Empty,
        oncehook.outcome = tracing::field::Empty,
    );
    set_parent(&span, amqp_context(headers));
    if let Some(first) = crate::amqp::header_string(headers, HEADER_FIRST_TRACEPARENT) {
        link(&span, &first);
    }
    span
}

/// The trace and span ids (hex) of the traced span `id`, if it is traced
/// (a span the exporter leaves out, or any span when nothing is exported,
/// has none): what every log line inside it names (`telemetry`). Must not
/// be called while holding the span's extensions.
pub fn ids_of(id: &tracing::span::Id) -> Option<(String, String)> {
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let cx = tracing_opentelemetry::get_otel_context(id, &dispatch)?;
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// The current span's trace context into AMQP message headers.
pub fn inject_amqp(headers: &mut FieldTable) {
    let cx = tracing::Span::current().context();
    inject_context(&cx, headers);
}

/// `cx` into AMQP message headers (`traceparent`, `tracestate`).
pub fn inject_context(cx: &Context, headers: &mut FieldTable) {
    let mut fields = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut Fields(&mut fields));
    for (k, v) in fields {
        headers.insert(k.into(), AMQPValue::LongString(v.into()));
    }
}

/// The trace context a message carries (empty when it carries none).
pub fn amqp_context(headers: Option<&FieldTable>) -> Context {
    extract(|name| crate::amqp::header_string(headers, name))
}

/// The trace context of an HTTP request's `traceparent` / `tracestate`.
pub fn http_context<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Context {
    extract(|name| header(name).map(str::to_owned))
}

/// The (remote) context a `traceparent` names.
pub fn from_traceparent(traceparent: &str) -> Context {
    http_context(|name| (name == "traceparent").then_some(traceparent))
}

/// The W3C context of whatever `get` finds for `traceparent` / `tracestate`.
fn extract(get: impl Fn(&str) -> Option<String>) -> Context {
    let mut fields: HashMap<String, String> = ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), get(name)?)))
        .collect();
    TraceContextPropagator::new().extract(&Fields(&mut fields))
}

/// `traceparent` of `cx`, if it is a valid context.
pub fn traceparent(cx: &Context) -> Option<String> {
    let mut fields = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut Fields(&mut fields));
    fields.remove("traceparent")
}

/// The current span's `traceparent`, if it is being traced.
pub fn current_traceparent() -> Option<String> {
    traceparent(&tracing::Span::current().context())
}

/// The trace id (32 hex digits) of a `traceparent`.
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// The current span's trace id (32 hex digits), if it is being traced.
pub fn current_trace_id() -> Option<String> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// Links `span` to the span a `traceparent` names (a batch to each of its
/// deliveries, a replay to the first delivery).
pub fn link(span: &tracing::Span, traceparent: &str) {
    let sc = from_traceparent(traceparent).span().span_context().clone();
    if sc.is_valid() {
        span.add_link(sc);
    }
}

/// Makes `span` a child of `parent` (a remote context), when it is one;
/// call before the span is entered.
pub fn set_parent(span: &tracing::Span, parent: Context) {
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Injector for Fields<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

impl Extractor for Fields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_thread_yields_the_cpu_and_no_other_does() {
        let before = unsafe_priority();
        let exporter = std::thread::spawn(|| {
            yield_the_cpu();
            yield_the_cpu();
            unsafe_priority()
        })
        .join()
        .expect("the thread ends");
        assert_eq!(exporter, before.max(EXPORT_NICE));
        assert_eq!(unsafe_priority(), before, "only the exporting thread");
    }

    /// The calling thread's nice value.
    fn unsafe_priority() -> libc::c_int {
        // SAFETY: getpriority only reads its arguments (errno is not
        // checked: every value is valid here).
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    #[test]
    fn a_traceparent_survives_the_message_headers() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = http_context(|name| (name == "traceparent").then_some(tp));
        assert!(cx.span().span_context().is_remote());
        let mut headers = FieldTable::default();
        inject_context(&cx, &mut headers);
        let back = amqp_context(Some(&headers));
        assert_eq!(traceparent(&back).as_deref(), Some(tp));
        assert_eq!(traceparent(&amqp_context(None)), None);
        let garbage = http_context(|_| Some("not a traceparent"));
        assert_eq!(traceparent(&garbage), None);
    }
}
