//! `GET /letters/{id}`: one dead letter in full — what failed, its message
//! headers, the gateway's request headers and the payload, every secret
//! masked (`oncehook_ops::dlq::mask`) — with replay and purge for an
//! operator.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use oncehook_ops::broker;
use oncehook_ops::dlq::mask;
use oncehook_ops::dlq::show::{self, ShowReport};
use serde_json::Value;

use super::sees_tenant;
use crate::auth::{self, Who};
use crate::html::{self, Page};
use crate::state::State;

/// `GET /letters/{id}`
pub async fn detail(
    req: HttpRequest,
    state: web::Data<State>,
    id: web::Path<String>,
) -> HttpResponse {
    let who = match auth::page(&req, &state) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let id = id.into_inner();
    let report = match show_letter(&state, &id).await {
        // Another tenant's letter is as good as absent to a tenant's operator.
        Ok(r) if !sees_tenant(&who, r.envelope.as_ref().map(|e| e.tenant.as_str())) => {
            return not_found(&who, &id, &anyhow::anyhow!("no dead letter {id}"));
        }
        Ok(r) => r,
        Err(e) => return not_found(&who, &id, &e),
    };
    let s = &report.summary;
    let gateway_headers = report
        .envelope
        .as_ref()
        .map(|env| masked(env.headers.iter()));
    let payload = mask::json(&report.payload);
    html::ok(Page::new(&format!("Dead letter {id}"), Some(&who)).body(html! {
        p { a href="/letters" { "← Dead letters" } }
        h1 { "Dead letter " code { (s.facts.id) } }
        @if who.may_act() { (actions(&who, &s.facts.id)) }
        section { h2 { "What failed" } (html::fields(&facts(&report))) }
        section { h2 { "Message headers" } (pairs_table(&message_headers(&report))) }
        @if let Some(h) = &gateway_headers { section { h2 { "Gateway request headers" } (pairs_table(h)) } }
        section {
            h2 { "Payload" }
            @if payload.is_null() { p.none { "Not JSON or a form; see " code { "oncehookctl dlq show " (s.facts.id) } "." } }
            @else { (html::pretty(&payload)) }
            p.hint { "Signatures, hashes, tokens and other secrets are masked." }
        }
    }))
}

/// One letter in full: from the snapshot when it holds the letter with its
/// body, else read from the queue now.
async fn show_letter(state: &State, id: &str) -> anyhow::Result<ShowReport> {
    let wanted = id.trim().to_ascii_lowercase();
    if let Ok(view) = state.dead_letters.view().await
        && let Some((letter, copies)) = view.snapshot.find(&wanted)
        && letter.body.len() == letter.body_len
    {
        return Ok(ShowReport::new(
            letter.clone(),
            copies,
            state.topology.dead(),
        ));
    }
    let conn = broker::connect(&state.settings).await?;
    let shown = show::run(&conn, &state.topology, id).await;
    broker::close(conn).await;
    shown
}

fn not_found(who: &Who, id: &str, e: &anyhow::Error) -> HttpResponse {
    html::respond(
        actix_web::http::StatusCode::NOT_FOUND,
        Page::new("Dead letter", Some(who)).body(html! {
            h1 { "Dead letter " code { (id) } }
            p.error { (format!("{e:#}")) }
            p { a href="/letters" { "Back to the dead letters" } }
        }),
    )
}

/// Replay now, or purge after a confirmation.
fn actions(who: &Who, id: &str) -> Markup {
    html! {
        div.actions {
            form method="post" action="/letters/replay" {
                input type="hidden" name="csrf" value=(who.csrf);
                input type="hidden" name="ids" value=(id);
                input type="hidden" name="confirm" value="yes";
                button type="submit" class="replay" { "Replay" }
            }
            form method="post" action="/letters/preview" {
                input type="hidden" name="csrf" value=(who.csrf);
                input type="hidden" name="action" value="purge";
                input type="hidden" name="ids" value=(id);
                button type="submit" class="purge" { "Purge…" }
            }
        }
        p.hint { "Fix the cause first (e.g. create the missing order), then replay: the letter is republished with a confirm and only then removed from the dead-letter queue." }
    }
}

/// What failed, and the letter's story, as labelled fields.
fn facts(report: &ShowReport) -> Vec<(&'static str, Value)> {
    let s = &report.summary;
    let text = |v: Option<&String>| v.map_or(Value::Null, |v| Value::String(v.clone()));
    vec![
        ("gateway", Value::String(s.facts.gateway.clone())),
        ("source", text(s.facts.source.as_ref())),
        ("event", text(s.facts.event_id.as_ref())),
        ("type", text(s.facts.event_type.as_ref())),
        ("kind", Value::String(s.facts.kind.to_string())),
        ("error", Value::String(s.facts.error.clone())),
        ("failed at", text(s.failed_at.as_ref())),
        (
            "attempts",
            s.facts.attempts.map_or(Value::Null, Value::from),
        ),
        ("dead-lettered by", Value::from(s.facts.dead_lettered_by)),
        ("origin", text(s.facts.origin.as_ref())),
        ("routing key", text(s.facts.routing_key.as_ref())),
        ("message id", text(s.message_id.as_ref())),
        ("receipt", text(s.receipt_id.as_ref())),
        ("replays", Value::from(s.facts.replays)),
        ("trace", text(s.facts.trace_id.as_ref())),
        ("first trace", text(s.facts.first_trace_id.as_ref())),
        ("identical copies", Value::from(report.copies)),
        ("body bytes", Value::from(s.body_bytes)),
    ]
}

/// The AMQP headers, masked: a text header as its masked text, any other
/// value as JSON.
fn message_headers(report: &ShowReport) -> Vec<(String, String)> {
    let headers = &report.summary.headers;
    masked(headers.iter())
        .into_iter()
        .zip(headers.values())
        .map(|((k, shown), v)| match v {
            Value::String(_) => (k, shown),
            other => (k, other.to_string()),
        })
        .collect()
}

/// Headers with their secrets masked (a value that is not text as empty).
fn masked<'a>(headers: impl Iterator<Item = (&'a String, &'a Value)>) -> Vec<(String, String)> {
    mask::headers(headers.map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default())))
}

fn pairs_table(pairs: &[(String, String)]) -> Markup {
    html! {
        @if pairs.is_empty() { p.none { "none" } } @else {
            table.facts { tbody { @for (k, v) in pairs { tr { th scope="row" { (k) } td { code { (v) } } } } } }
        }
    }
}
