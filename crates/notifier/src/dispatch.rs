//! The dispatchers: one periodic task per configured endpoint (woken when
//! rows are made for it or an attempt ends) leases the rows that
//! are due (`store::notify::lease_due`, with a lease) as long as the
//! endpoint has room under its concurrency limit, and runs one attempt per
//! row (`attempt`), writing how it ended. So a slow or dead endpoint holds
//! only its own permits, and memory per endpoint is bounded by them.
//! A 410 disables the endpoint: its loop then leases nothing until
//! `oncehookctl notify enable`. On shutdown a loop stops leasing and
//! waits for its attempts in flight (each bounded by the timeout).

use std::sync::Arc;
use std::time::Duration;

use oncehook_common::config::NotifyEndpoint;
use oncehook_common::otel;
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::store::notify::{self as store, Answer, AttemptEnd, Due};
use oncehook_ledger::render;
use oncehook_ledger::store::order_events;
use tokio::sync::{Notify, Semaphore};
use tracing::Instrument as _;

use crate::Notifier;
use crate::attempt::{self, Reply};

/// How often a loop looks for due rows when nothing woke it.
const POLL: Duration = Duration::from_secs(1);

/// How long a leased row is held beyond the request's timeout.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// Runs the loop of `endpoint` until shutdown.
pub async fn run(n: Arc<Notifier>, endpoint: Arc<NotifyEndpoint>, wake: Arc<Notify>) {
    let limit = usize::from(n.settings.notify.concurrency);
    let permits = Arc::new(Semaphore::new(limit));
    let lease = n.settings.notify.timeout + LEASE_MARGIN;
    let cadence = Periodic::every("notify dispatcher", POLL)
        .woken_by(wake.clone())
        .logs(
            "could not lease due order events; will retry",
            "due order events are leased again",
        );
    cadence
        .run(&n.shutdown, || async {
            let free = permits.available_permits();
            if free == 0 {
                return Ok::<_, String>(Next::Pause);
            }
            let due = store::lease_due(&n.db, &endpoint.name, free as i64, lease)
                .await
                .map_err(|err| format!("endpoint {}: {err}", endpoint.name))?;
            for row in due {
                // Never more rows than permits; waiting here keeps a
                // leased row from idling until its lease ends.
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return Ok(Next::Stop);
                };
                let (n, endpoint, wake) = (n.clone(), endpoint.clone(), wake.clone());
                tokio::spawn(async move {
                    deliver(&n, &endpoint, row).await;
                    drop(permit);
                    wake.notify_one();
                });
            }
            Ok(Next::Pause)
        })
        .await;
    // Let the attempts in flight end (each within its timeout).
    let _ = tokio::time::timeout(
        n.settings.notify.timeout + LEASE_MARGIN,
        permits.acquire_many(limit as u32),
    )
    .await;
}

/// One attempt at `row`, and its end written.
async fn deliver(n: &Notifier, endpoint: &NotifyEndpoint, row: Due) {
    let span = tracing::info_span!(
        "deliver",
        otel.name = %format!("POST {}", endpoint.name),
        otel.kind = "client",
        oncehook.event_id = %row.event_id,
        oncehook.endpoint = %endpoint.name,
        oncehook.attempt = row.attempts + 1,
        http.response.status_code = tracing::field::Empty,
        oncehook.outcome = tracing::field::Empty,
    );
    let body = match render(n, &row.event_id).await {
        Ok(Some((body, event_trace))) => {
            // The fan-out that made the row; rows made before it kept its
            // trace follow the order event's.
            if let Some(tp) = row.trace_parent.as_ref().or(event_trace.as_ref()) {
                otel::set_parent(&span, otel::from_traceparent(tp));
            }
            body
        }
        Ok(None) => {
            let answer = Answer {
                error: Some(format!(
                    "order event {} or its order no longer exists",
                    row.event_id
                )),
                ..Answer::default()
            };
            finish(n, endpoint, &row, &AttemptEnd::Failed, &answer).await;
            return;
        }
        Err(err) => {
            // The lease ends and the row comes due again.
            tracing::warn!(event_id = %row.event_id, endpoint = %endpoint.name, %err, "could not read the order event; will retry");
            return;
        }
    };
    attempt_and_record(n, endpoint, &row, body)
        .instrument(span)
        .await;
}

async fn attempt_and_record(n: &Notifier, endpoint: &NotifyEndpoint, row: &Due, body: Vec<u8>) {
    let sent = attempt::post(
        &n.http,
        endpoint,
        &row.event_id,
        body,
        otel::current_traceparent(),
    )
    .await;
    let attempts = u32::try_from(row.attempts).unwrap_or(0) + 1;
    let (end, disable) = attempt::judge(&n.settings.notify, attempts, &sent.reply);
    let span = tracing::Span::current();
    if let Reply::Status { status, .. } = &sent.reply {
        span.record("http.response.status_code", status);
    }
    metrics::counter!("oncehook_notify_attempts_total", "endpoint" => endpoint.name.clone(), "result" => sent.reply.label())
        .increment(1);
    metrics::histogram!("oncehook_notify_delivery_duration_seconds", "endpoint" => endpoint.name.clone())
        .record(sent.took.as_secs_f64());
    if disable {
        let reason = format!("answered 410 Gone to event {}", row.event_id);
        let reason = &reason;
        match n
            .with_db(|db| async move { store::disable(&db, &endpoint.name, reason).await })
            .await
        {
            Some(failed) => {
                tracing::error!(endpoint = %endpoint.name, event_id = %row.event_id, failed_pending = failed, "endpoint answered 410 Gone: disabled until `oncehookctl notify enable`");
            }
            None => return,
        }
    }
    let mut answer = sent.answer;
    if disable {
        answer.error = Some(format!(
            "answered 410 Gone: {} until `oncehookctl notify enable {}`",
            store::DISABLED_ERROR,
            endpoint.name
        ));
    }
    finish(n, endpoint, row, &end, &answer).await;
}

/// Writes the attempt's end (waiting out database trouble; on shutdown the
/// lease ends and the row is sent again by the next notifier).
async fn finish(
    n: &Notifier,
    endpoint: &NotifyEndpoint,
    row: &Due,
    end: &AttemptEnd,
    answer: &Answer,
) {
    let outcome = match end {
        AttemptEnd::Delivered => "delivered",
        AttemptEnd::Retry { .. } => "retry",
        AttemptEnd::Failed => "failed",
    };
    tracing::Span::current().record("oncehook.outcome", outcome);
    let written = n
        .with_db(|db| async move {
            store::record_attempt(&db, &row.event_id, &endpoint.name, end, answer).await
        })
        .await;
    if written.is_none() {
        return;
    }
    metrics::counter!("oncehook_notify_deliveries_total", "endpoint" => endpoint.name.clone(), "outcome" => outcome)
        .increment(1);
    let error = answer.error.as_deref().unwrap_or("");
    match end {
        AttemptEnd::Delivered => {
            tracing::info!(event_id = %row.event_id, endpoint = %endpoint.name, attempt = row.attempts + 1, "order event delivered");
        }
        AttemptEnd::Retry { after } => {
            tracing::warn!(event_id = %row.event_id, endpoint = %endpoint.name, attempt = row.attempts + 1, error, retry_in_secs = after.as_secs(), "order event not delivered; will retry");
        }
        AttemptEnd::Failed => {
            tracing::error!(event_id = %row.event_id, endpoint = %endpoint.name, attempt = row.attempts + 1, error, "order event failed; kept for `oncehookctl notify replay`");
        }
    }
}

/// The event's body with the order's current snapshot, and its trace.
async fn render(n: &Notifier, id: &str) -> Result<Option<(Vec<u8>, Option<String>)>, sqlx::Error> {
    // A transaction: the order is read in the event's tenant's scope.
    let mut conn = n.db.begin().await?;
    let Some(row) = order_events::by_id(&mut conn, id).await? else {
        return Ok(None);
    };
    let body = render::render_bytes(&mut conn, &row).await?;
    conn.commit().await?;
    Ok(body.map(|body| (body, row.trace_parent)))
}

/// Sets the endpoints' gauges every few seconds until shutdown.
pub async fn gauges(n: Arc<Notifier>) {
    let names = n.endpoint_names();
    Periodic::every("notify gauges", Duration::from_secs(5))
        .logs(
            "could not read the endpoints' state for the notify gauges; retrying every 5 s",
            "the notify gauges are read again",
        )
        .run(&n.shutdown, || async {
            let mut conn = n.db.single().await?;
            let states = store::endpoints(&mut conn).await?;
            conn.finish().await?;
            for s in states.iter().filter(|s| names.contains(&s.name)) {
                let e = s.name.clone();
                metrics::gauge!("oncehook_notify_pending", "endpoint" => e.clone())
                    .set(s.pending as f64);
                metrics::gauge!("oncehook_notify_oldest_undelivered_age_seconds", "endpoint" => e.clone())
                    .set(s.oldest_pending_secs);
                metrics::gauge!("oncehook_notify_endpoint_disabled", "endpoint" => e)
                    .set(if s.disabled_at.is_some() { 1.0 } else { 0.0 });
            }
            Ok::<_, sqlx::Error>(Next::Pause)
        })
        .await;
}
