//! A stand-in OpenTelemetry collector for the trace tests: an OTLP
//! http/protobuf receiver on 127.0.0.1 (`POST /v1/traces`) that decodes
//! every export with the collector's own protobuf messages and keeps the
//! spans, with the service that sent each. It can be stopped (the port
//! then refuses connections, like a collector that went away).
//!
//! Two more modes: [`OtlpReceiver::start_grpc`] speaks OTLP over gRPC
//! (HTTP/2 without TLS, `TraceService/Export`, one length-prefixed message
//! per call) and decodes the same way; [`OtlpReceiver::start_sink`] takes
//! http/protobuf exports and answers 200 without keeping their spans,
//! counting requests, bytes and spans (a protobuf decode, no more) — for
//! the bench, where a collector runs on another machine and its work is
//! not the pipeline's. Every mode counts the spans of the exports it
//! accepted ([`OtlpReceiver::spans_received`]). [`OtlpReceiver::requiring`]
//! makes either protocol behave like a hosted backend: an export without
//! the one expected header value is refused (401, or gRPC's
//! UNAUTHENTICATED) and counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    /// The exporting process's resource attributes (`service.name` too).
    pub resource: HashMap<String, String>,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    pub attributes: HashMap<String, String>,
    /// `(trace id, span id)` of each link.
    pub links: Vec<(String, String)>,
}

/// The receiver and what it got.
pub struct OtlpReceiver {
    /// `http://127.0.0.1:PORT`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// Export requests and their bytes (every mode counts them).
    counts: Arc<Counts>,
    task: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    bytes: AtomicU64,
    /// Spans in the exports accepted.
    spans: AtomicU64,
    /// Exports refused for a missing or wrong header.
    refused: AtomicU64,
    /// `(name, value)` every export must carry exactly once, if any.
    required: Mutex<Option<(String, String)>>,
}

impl Counts {
    /// Whether an export with these header values may pass.
    fn admits<'a>(&self, values_of: impl Fn(&str) -> Vec<&'a str>) -> bool {
        let required = self.required.lock().expect("required").clone();
        let ok = required.is_none_or(|(name, value)| values_of(&name) == [value.as_str()]);
        if !ok {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

/// How a receiver treats an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Decode,
    Sink,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        OtlpReceiver::listen(|stream, kept, counts| async move {
            let _ = serve(stream, kept, counts, Mode::Decode).await;
        })
        .await
    }

    /// A receiver that answers every http/protobuf export 200 unread.
    pub async fn start_sink() -> OtlpReceiver {
        OtlpReceiver::listen(|stream, kept, counts| async move {
            let _ = serve(stream, kept, counts, Mode::Sink).await;
        })
        .await
    }

    /// A receiver that speaks OTLP over gRPC.
    pub async fn start_grpc() -> OtlpReceiver {
        OtlpReceiver::listen(|stream, kept, counts| async move {
            let _ = serve_grpc(stream, kept, counts).await;
        })
        .await
    }

    async fn listen<F, Fut>(serve_one: F) -> OtlpReceiver
    where
        F: Fn(tokio::net::TcpStream, Arc<Mutex<Vec<ReceivedSpan>>>, Arc<Counts>) -> Fut
            + Send
            + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the OTLP receiver");
        let endpoint = format!(
            "http://127.0.0.1:{}",
            listener.local_addr().expect("addr").port()
        );
        let spans = Arc::new(Mutex::new(Vec::new()));
        let counts = Arc::new(Counts::default());
        let (kept, counted) = (spans.clone(), counts.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_one(stream, kept.clone(), counted.clone()));
            }
        });
        OtlpReceiver {
            endpoint,
            spans,
            counts,
            task,
        }
    }

    /// From now on, refuses every export that does not carry `name: value`
    /// exactly once.
    pub fn requiring(self, name: &str, value: &str) -> Self {
        *self.counts.required.lock().expect("required") =
            Some((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// Exports refused for a missing or wrong header.
    pub fn refused(&self) -> u64 {
        self.counts.refused.load(Ordering::Relaxed)
    }

    /// Export requests received so far, and their bytes.
    pub fn received(&self) -> (u64, u64) {
        (
            self.counts.requests.load(Ordering::Relaxed),
            self.counts.bytes.load(Ordering::Relaxed),
        )
    }

    /// Spans in the exports accepted so far (the sink's too).
    pub fn spans_received(&self) -> u64 {
        self.counts.spans.load(Ordering::Relaxed)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().expect("spans").clone()
    }

    /// The spans of one trace.
    pub fn trace(&self, trace_id: &str) -> Vec<ReceivedSpan> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }
}

/// Serves requests on one connection until the client closes it.
async fn serve(
    stream: tokio::net::TcpStream,
    kept: Arc<Mutex<Vec<ReceivedSpan>>>,
    counts: Arc<Counts>,
    mode: Mode,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut len = 0usize;
        let mut headers: Vec<(String, String)> = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).await? == 0 || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
                if k == "content-length" {
                    len = v.parse().unwrap_or(0);
                }
                headers.push((k, v));
            }
        }
        let mut body = vec![0; len.min(64 << 20)];
        reader.read_exact(&mut body).await?;
        counts.requests.fetch_add(1, Ordering::Relaxed);
        counts.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
        let admitted = counts.admits(|name| {
            headers
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .collect()
        });
        let status = match ExportTraceServiceRequest::decode(body.as_slice()) {
            _ if !admitted => "401 Unauthorized",
            Ok(request) if mode == Mode::Sink && line.starts_with("POST /v1/traces") => {
                counts
                    .spans
                    .fetch_add(span_count(&request), Ordering::Relaxed);
                "200 OK"
            }
            _ if mode == Mode::Sink && line.starts_with("POST /v1/traces") => "200 OK",
            Ok(request) if line.starts_with("POST /v1/traces") => {
                counts
                    .spans
                    .fetch_add(span_count(&request), Ordering::Relaxed);
                kept.lock().expect("spans").extend(spans_of(request));
                "200 OK"
            }
            _ => "400 Bad Request",
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
        );
        write.write_all(head.as_bytes()).await?;
    }
}

/// The gRPC path of the trace export.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Serves gRPC calls on one HTTP/2 connection: each a length-prefixed
/// `ExportTraceServiceRequest`, answered with an empty response and
/// `grpc-status` 0 (or 12 for another method, 13 for a body that does not
/// decode, 16 for a call without the required header).
async fn serve_grpc(
    stream: tokio::net::TcpStream,
    kept: Arc<Mutex<Vec<ReceivedSpan>>>,
    counts: Arc<Counts>,
) -> Result<(), h2::Error> {
    let mut conn = h2::server::handshake(stream).await?;
    while let Some(call) = conn.accept().await {
        let (request, mut respond) = call?;
        let (kept, counts) = (kept.clone(), counts.clone());
        tokio::spawn(async move {
            let path = request.uri().path().to_owned();
            let admitted = counts.admits(|name| {
                request
                    .headers()
                    .get_all(name)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .collect()
            });
            let mut body = request.into_body();
            let mut bytes = Vec::new();
            while let Some(chunk) = body.data().await {
                let Ok(chunk) = chunk else { return };
                let _ = body.flow_control().release_capacity(chunk.len());
                bytes.extend_from_slice(&chunk);
            }
            counts.requests.fetch_add(1, Ordering::Relaxed);
            counts
                .bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            // A compression flag (0: none) and a 4-byte length, then the message.
            let status = match bytes.get(5..) {
                _ if !admitted => "16",
                _ if path != GRPC_EXPORT => "12",
                Some(message) if bytes[0] == 0 => {
                    match ExportTraceServiceRequest::decode(message) {
                        Ok(export) => {
                            counts
                                .spans
                                .fetch_add(span_count(&export), Ordering::Relaxed);
                            kept.lock().expect("spans").extend(spans_of(export));
                            "0"
                        }
                        Err(_) => "13",
                    }
                }
                _ => "13",
            };
            let head = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .body(())
                .expect("a response head");
            let Ok(mut send) = respond.send_response(head, false) else {
                return;
            };
            if status == "0" {
                // An empty ExportTraceServiceResponse.
                let _ = send.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), false);
            }
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static(status));
            let _ = send.send_trailers(trailers);
        });
    }
    Ok(())
}

fn span_count(request: &ExportTraceServiceRequest) -> u64 {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len() as u64)
        .sum()
}

fn spans_of(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let resource: HashMap<String, String> = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .filter_map(|kv| Some((kv.key.clone(), text(kv.value.as_ref()?.value.as_ref()?)?)))
            .collect();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(ReceivedSpan {
                    service: service.clone(),
                    resource: resource.clone(),
                    name: s.name,
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent_span_id: hex::encode(&s.parent_span_id),
                    kind: s.kind,
                    attributes: s
                        .attributes
                        .iter()
                        .filter_map(|kv| {
                            Some((kv.key.clone(), text(kv.value.as_ref()?.value.as_ref()?)?))
                        })
                        .collect(),
                    links: s
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                });
            }
        }
    }
    out
}

fn text(v: &AnyValue) -> Option<String> {
    Some(match v {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        _ => return None,
    })
}
