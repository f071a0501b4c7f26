//! `POST /webhooks/{source}`: the one thing ingest exists for.
//!
//! Order of checks: known source (404) → content type (415) → body size
//! (413, checked against Content-Length before reading and again while
//! reading) → signature and timestamp window (401 / 400) → the source's
//! rate (429 with `Retry-After`; only authentic deliveries spend it, so a
//! flood of forgeries cannot shut a source out) → publish with confirm to
//! the tenant's lane (200 only on a clean broker ack, else 503).
//!
//! A refusal of the sender's making is logged at WARN within the refusal
//! log's limit (`crate::refusals`); a 503 is the operator's trouble and is
//! logged at ERROR where the publish failed.

use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, web};
use futures_lite::StreamExt;
use oncehook_common::{Envelope, otel};
use oncehook_gateways::{Gateway, Headers};
use time::OffsetDateTime;
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::admission::Lane;
use crate::error::IngestError;
use crate::refusals;
use crate::sources::Lookup;

/// How long a sender may take to deliver the body once the headers arrived.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Total size of all request headers; gateways send a few hundred bytes.
const HEADER_LIMIT: usize = 16 * 1024;
use crate::startup::IngestState;

pub async fn receive(
    req: HttpRequest,
    source: web::Path<String>,
    payload: web::Payload,
    state: web::Data<IngestState>,
) -> Result<HttpResponse, IngestError> {
    let started = Instant::now();
    let source = source.into_inner();
    // One server span per request, a child of the gateway's span when it
    // sent a `traceparent`: the root of the delivery's trace.
    let span = tracing::info_span!(
        "POST /webhooks/{source}",
        otel.kind = "server",
        http.request.method = "POST",
        http.route = "/webhooks/{source}",
        http.response.status_code = Empty,
        oncehook.source = %source,
        oncehook.gateway = Empty,
        oncehook.event_id = Empty,
        oncehook.receipt_id = Empty,
        oncehook.outcome = Empty,
    );
    otel::set_parent(
        &span,
        otel::http_context(|name| req.headers().get(name).and_then(|v| v.to_str().ok())),
    );
    let result = handle(&req, &source, payload, &state)
        .instrument(span.clone())
        .await;
    let outcome = match &result {
        Ok(_) => "accepted",
        Err(e) => e.code(),
    };
    span.record("oncehook.outcome", outcome);
    span.record(
        "http.response.status_code",
        match &result {
            Ok(r) => r.status().as_u16(),
            Err(e) => actix_web::ResponseError::status_code(e).as_u16(),
        },
    );
    // Unknown sources are attacker-controlled, and runtime ones are many:
    // neither mints label values (`Sources::label`).
    let source_label = match state.sources.label(&source) {
        "file" => source.clone(),
        other => other.to_owned(),
    };
    if let Err(err) = &result
        && err.is_senders_fault()
    {
        let gateway = state.sources.gateway(&source).map(|g| g.as_str());
        refusals::refused(&source, gateway, err.code(), err, req.peer_addr());
    }
    if let Err(IngestError::RateLimited { .. }) = &result {
        // Each source that went over its rate, by name, runtime ones too:
        // a series only for a source that was refused.
        metrics::counter!("oncehook_ingest_rate_limited_total", "source" => source.clone())
            .increment(1);
    }
    count(source_label.clone(), outcome, 1);
    metrics::histogram!("oncehook_ingest_request_duration_seconds", "source" => source_label, "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
    result
}

/// Counts one answered request of `source` by outcome (`accepted` or the
/// refusal's code).
fn count(source: String, outcome: &'static str, n: u64) {
    metrics::counter!("oncehook_ingest_requests_total", "source" => source, "outcome" => outcome)
        .increment(n);
}

/// Makes every source's counters exist at zero before its first request:
/// Prometheus' `increase()` cannot count a series' first sample, so a
/// counter born at 1 would hide the first webhook of each kind.
pub fn zero_counters<'a>(sources: impl IntoIterator<Item = &'a str>) {
    for source in sources {
        for outcome in std::iter::once("accepted").chain(IngestError::CODES) {
            count(source.to_owned(), outcome, 0);
        }
    }
}

async fn handle(
    req: &HttpRequest,
    source_name: &str,
    payload: web::Payload,
    state: &IngestState,
) -> Result<HttpResponse, IngestError> {
    let source = match state.sources.lookup(source_name) {
        Lookup::Active(source) => source,
        Lookup::Disabled => return Err(IngestError::SourceDisabled(source_name.to_owned())),
        Lookup::NotYet => return Err(IngestError::SourcesNotYet),
        Lookup::Unknown => return Err(IngestError::UnknownSource(source_name.to_owned())),
    };
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if header_bytes > HEADER_LIMIT {
        return Err(IngestError::HeadersTooLarge {
            limit: HEADER_LIMIT,
        });
    }
    check_content_type(req, source.gateway)?;
    // Headers have their own deadline (the server's client request timeout);
    // the body gets one too, so a stalled sender cannot hold a worker.
    let body = tokio::time::timeout(BODY_TIMEOUT, read_body(req, payload, state.body_limit))
        .await
        .map_err(|_| IngestError::BodyTimeout(BODY_TIMEOUT))??;

    let headers = relevant_headers(req, source.gateway);
    let received_at = OffsetDateTime::now_utc();
    let verification = oncehook_gateways::verify(
        source.gateway,
        source.credentials(),
        &headers,
        &body,
        received_at.unix_timestamp(),
        source.tolerance_secs,
    )
    .map_err(IngestError::Signature)?;

    // The one parse of the body: it names the message (routing key, message
    // id) and travels in the envelope so the worker does not parse again. An
    // authentic payload we cannot parse is still accepted (`event: None`) and
    // dead-lettered by the worker with the reason.
    let envelope = Envelope::verified(
        source_name,
        source.gateway,
        headers,
        &body,
        received_at,
        verification.signed_at,
    )
    .for_tenant(&source.tenant);
    let span = tracing::Span::current();
    span.record("oncehook.gateway", source.gateway.as_str());
    span.record("oncehook.receipt_id", envelope.receipt_id.to_string());
    if let Some(id) = envelope.identity() {
        span.record("oncehook.event_id", id);
    }

    let lane = state
        .admission
        .admit(&source)
        .map_err(|over| IngestError::RateLimited {
            source_name: source_name.to_owned(),
            rate: over.rate,
            retry_after_secs: over.retry_after_secs,
        })?;
    publish(state, &envelope, lane, verification.secret_index).await
}

/// Publishes with confirm: `200` with the receipt only on a clean broker ack.
async fn publish(
    state: &IngestState,
    envelope: &Envelope,
    lane: Lane,
    secret_index: usize,
) -> Result<HttpResponse, IngestError> {
    let (source_name, receipt_id) = (envelope.source.as_str(), envelope.receipt_id);
    let published = Instant::now();
    let result = state.publisher.publish(envelope, lane).await;
    metrics::histogram!("oncehook_ingest_publish_duration_seconds")
        .record(published.elapsed().as_secs_f64());
    match result {
        Ok(()) => {
            tracing::info!(
                source = source_name,
                receipt = %receipt_id,
                event_id = envelope.identity().unwrap_or("-"),
                event_type = envelope.kind_name().unwrap_or("-"),
                secret_index,
                lane = ?lane,
                "webhook accepted"
            );
            Ok(HttpResponse::Ok().json(serde_json::json!({
                "status": "accepted",
                "receipt": receipt_id.to_string(),
            })))
        }
        Err(err) => {
            tracing::error!(
                source = source_name,
                receipt = %receipt_id,
                event_id = envelope.identity().unwrap_or("-"),
                %err,
                "publish failed; answering 503 so the gateway retries"
            );
            Err(IngestError::BrokerUnavailable)
        }
    }
}

/// The request headers `gateway`'s scheme needs, as the envelope carries them.
fn relevant_headers(req: &HttpRequest, gateway: Gateway) -> Headers {
    gateway
        .relevant_headers()
        .iter()
        .filter_map(|name| {
            req.headers()
                .get(*name)
                .and_then(|v| v.to_str().ok())
                .map(|v| (*name, v.to_owned()))
        })
        .collect()
}

fn check_content_type(req: &HttpRequest, gateway: Gateway) -> Result<(), IngestError> {
    let Some(value) = req.headers().get("content-type") else {
        return Ok(());
    };
    let got = value.to_str().unwrap_or("").to_ascii_lowercase();
    let expected = gateway.content_type();
    if expected.accepts(&got) {
        Ok(())
    } else {
        Err(IngestError::UnsupportedMediaType {
            got,
            expected: expected.as_str(),
        })
    }
}

async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Vec<u8>, IngestError> {
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(IngestError::TooLarge { limit });
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0).min(limit as u64) as usize);
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| IngestError::BadBody(e.to_string()))?;
        if body.len() + chunk.len() > limit {
            return Err(IngestError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
