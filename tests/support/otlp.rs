//! A stand-in OpenTelemetry collector for the trace tests: an OTLP
//! http/protobuf receiver on 127.0.0.1 (`POST /v1/traces`) that decodes
//! every export with the collector's own protobuf messages and keeps the
//! spans, with the service that sent each. It can be stopped (the port
//! then refuses connections, like a collector that went away).

use std::collections::HashMap;
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
    task: JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the OTLP receiver");
        let endpoint = format!(
            "http://127.0.0.1:{}",
            listener.local_addr().expect("addr").port()
        );
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, kept).await;
                });
            }
        });
        OtlpReceiver {
            endpoint,
            spans,
            task,
        }
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
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).await? == 0 || h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.trim().eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len.min(64 << 20)];
        reader.read_exact(&mut body).await?;
        let status = match ExportTraceServiceRequest::decode(body.as_slice()) {
            Ok(request) if line.starts_with("POST /v1/traces") => {
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

fn spans_of(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(ReceivedSpan {
                    service: service.clone(),
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
