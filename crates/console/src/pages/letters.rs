//! Dead letters: the list (filtered by gateway, kind and source, with the
//! counts behind each; the kind filter offers every known kind), one letter in full with its secrets masked, and the
//! operator's actions — replay one, replay or purge what a filter matches
//! after a count and an explicit confirmation.
//!
//! Filter values are checked first (names, a window the list offers; else
//! 400). Pages read the console's snapshot of the queue
//! ([`crate::dead_letters`]) and say how old it is. Actions go through the
//! ctl library on the queue itself, so the console has the CLI's safety:
//! peeks take turns under the peek lock (another operator's `dlq` command
//! or console waits), and a replayed letter leaves the dead-letter queue
//! only after its republish was confirmed. A bulk action acts on exactly
//! the IDs its confirmation page showed (those no longer there are reported
//! as not found). Every action is written to the audit table, and the
//! snapshot is read again before the answer.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use actix_web::{HttpRequest, HttpResponse, web};
use lapin::Connection;
use maud::{Markup, html};
use oncehook_common::config::ConsoleRole;
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_common::store::audit::NewAuditEntry;
use oncehook_ctl::broker;
use oncehook_ctl::dlq::letter::Letter;
use oncehook_ctl::dlq::purge::{self, PurgeArgs};
use oncehook_ctl::dlq::replay::{self, ReplayArgs};
use oncehook_ctl::dlq::show::ShowReport;
use oncehook_ctl::dlq::{Filter, mask, show};
use oncehook_ctl::output::{Output, Report, truncate};
use oncehook_ctl::timefmt::parse_duration;
use serde_json::Value;
use time::OffsetDateTime;

use super::events::{enc, select};
use crate::auth::{self, Who};
use crate::dead_letters::View;
use crate::form::Pairs;
use crate::html::{self, Page};
use crate::input::{self, Invalid};
use crate::state::State;

/// Rows the list shows at most.
const LIST_LIMIT: usize = 500;
/// Results are printed as JSON documents; nothing goes to a terminal.
const QUIET: Output = Output { json: true };

/// The failure-time windows the list offers.
const WINDOWS: [&str; 3] = ["1h", "24h", "7d"];

/// The list's filter, from a query string or a form: gateway, source and
/// kind are names, the window one of those the list offers.
fn filter_of(p: &Pairs) -> Result<Filter, Invalid> {
    Ok(Filter {
        gateway: input::name(p, "gateway")?,
        source: input::name(p, "source")?,
        error_kind: input::name(p, "kind")?,
        since: window_of(p)?.and_then(|w| parse_duration(w).ok()),
    })
}

/// The chosen window, if any; one the list offers.
fn window_of(p: &Pairs) -> Result<Option<&'static str>, Invalid> {
    input::one_of(p, "within", &WINDOWS)
}

/// The filter in the CLI's words (`--gateway razorpay --error-kind …`).
fn scope_text(f: &Filter, within: Option<&str>) -> String {
    let mut parts = Vec::new();
    for (flag, v) in [
        ("--gateway", &f.gateway),
        ("--source", &f.source),
        ("--error-kind", &f.error_kind),
    ] {
        if let Some(v) = v {
            parts.push(format!("{flag} {v}"));
        }
    }
    if let Some(w) = within {
        parts.push(format!("--since {w}"));
    }
    if parts.is_empty() {
        "--all".to_owned()
    } else {
        parts.join(" ")
    }
}

/// How old the snapshot a page shows is, and whether the queue moved on.
fn freshness(view: &View) -> Markup {
    html! {
        p.freshness {
            "Read from the queue at " (html::when(view.snapshot.taken_at)) "."
            @if view.stale {
                " The queue has changed since"
                @if let Some(d) = view.depth_now { " (it holds " (d) " ready now)" }
                "; a fresh read is on its way — reload in a moment."
            }
            @if view.depth_now.is_none() { " The broker does not answer now; this is the last read." }
        }
    }
}

/// `GET /letters`
pub async fn list(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    let who = match auth::page(&req, &state) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let q = Pairs::parse(req.query_string().as_bytes());
    let (filter, within) = match filter_of(&q).and_then(|f| Ok((f, window_of(&q)?))) {
        Ok(f) => f,
        Err(why) => return input::bad_request(&who, "Dead letters", "/letters", &why),
    };
    let view = match state.dead_letters.view().await {
        Ok(v) => v,
        Err(e) => return html::failure(&who, "Dead letters", &e),
    };
    let (letters, truncated) = (&view.snapshot.letters, view.snapshot.truncated);
    let now = OffsetDateTime::now_utc();
    let matching: Vec<&Letter> = letters.iter().filter(|l| filter.matches(l, now)).collect();
    let count = |key: fn(&Letter) -> String| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for l in letters {
            *m.entry(key(l)).or_default() += 1;
        }
        m
    };
    let by_gateway = count(|l| l.facts.gateway.clone());
    let by_kind = count(|l| l.facts.kind.to_string());
    let by_source = count(|l| l.facts.source.clone().unwrap_or_else(|| "-".into()));
    let names = |m: &BTreeMap<String, usize>| m.keys().cloned().collect::<Vec<_>>();
    let (gateways, kinds, sources) = (
        names(&by_gateway),
        kind_options(&by_kind),
        names(&by_source),
    );
    let mut page = Page::new("Dead letters", Some(&who));
    if view.stale {
        page = page.live(3);
    }
    html::ok(page.body(html! {
        h1 { "Dead letters" }
        p.summary {
            @if truncated { "at least " }
            (letters.len()) " dead letter(s) in " code { (state.topology.dead()) }
            @if !filter.is_empty() { "; " (matching.len()) " match the filter" }
        }
        (freshness(&view))
        div.counts {
            (counts("By gateway", "gateway", &by_gateway))
            (counts("By kind", "kind", &by_kind))
            (counts("By source", "source", &by_source))
        }
        form.filters method="get" action="/letters" {
            (select("gateway", "any gateway", &refs(&gateways), filter.gateway.as_deref()))
            (select("kind", "any kind", &refs(&kinds), filter.error_kind.as_deref()))
            (select("source", "any source", &refs(&sources), filter.source.as_deref()))
            (select("within", "failed any time", &WINDOWS, within))
            button type="submit" { "Filter" }
            @if !filter.is_empty() { a href="/letters" { "clear" } }
        }
        @if who.may_act() && !matching.is_empty() {
            div.bulk {
                (bulk_form(&who, "replay", &filter, within, &format!("Replay the {} matching…", matching.len())))
                (bulk_form(&who, "purge", &filter, within, &format!("Purge the {} matching…", matching.len())))
            }
        }
        @if matching.is_empty() { p.none { "No dead letters" @if !filter.is_empty() { " match the filter" } "." } } @else {
            (letter_table(&matching[..matching.len().min(LIST_LIMIT)]))
            @if matching.len() > LIST_LIMIT { p { "Showing the oldest " (LIST_LIMIT) "; narrow the filter to see the rest." } }
        }
    }))
}

/// The kinds the filter offers: every kind this version knows, then any
/// other the queue holds (written by another version).
fn kind_options(by_kind: &BTreeMap<String, usize>) -> Vec<String> {
    let known = DeadLetterKind::KNOWN.iter().map(|k| k.as_str().to_owned());
    let others = by_kind
        .keys()
        .filter(|k| DeadLetterKind::from_known(k).is_none())
        .cloned();
    known.chain(others).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn counts(title: &str, param: &str, m: &BTreeMap<String, usize>) -> Markup {
    html! {
        section.count {
            h2 { (title) }
            @if m.is_empty() { p.none { "none" } }
            ul { @for (k, n) in m { li { a href=(format!("/letters?{param}={}", enc(k))) { (k) } " " span.n { (n) } } } }
        }
    }
}

fn bulk_form(who: &Who, action: &str, f: &Filter, within: Option<&str>, label: &str) -> Markup {
    html! {
        form method="post" action="/letters/preview" {
            input type="hidden" name="csrf" value=(who.csrf);
            input type="hidden" name="action" value=(action);
            @if let Some(v) = &f.gateway { input type="hidden" name="gateway" value=(v); }
            @if let Some(v) = &f.error_kind { input type="hidden" name="kind" value=(v); }
            @if let Some(v) = &f.source { input type="hidden" name="source" value=(v); }
            @if let Some(v) = within { input type="hidden" name="within" value=(v); }
            button type="submit" class=(action) { (label) }
        }
    }
}

fn letter_table(letters: &[&Letter]) -> Markup {
    html! {
        table.letters {
            thead { tr { th { "ID" } th { "Gateway" } th { "Source" } th { "Event" } th { "Type" } th { "Kind" } th { "Error" } th { "Failed at" } th { "Attempts" } } }
            tbody { @for l in letters { tr {
                td { a href=(format!("/letters/{}", l.facts.id)) { code { (l.facts.id) } } }
                td { (l.facts.gateway) }
                td { (l.facts.source.as_deref().unwrap_or("-")) }
                td { (l.facts.event_id.as_deref().unwrap_or("-")) }
                td { (l.facts.event_type.as_deref().unwrap_or("-")) }
                td { span.kind { (l.facts.kind) } }
                td title=(l.facts.error) { (truncate(&l.facts.error, 80)) }
                td { @if let Some(t) = l.failed_at { (html::when(t)) } @else { "-" } }
                td { (l.facts.attempts.map(|a| a.to_string()).unwrap_or_else(|| "-".into())) }
            } } }
        }
    }
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
    let shown = show_letter(&state, &id).await;
    let report = match shown {
        Ok(r) => r,
        Err(e) => {
            return html::respond(
                actix_web::http::StatusCode::NOT_FOUND,
                Page::new("Dead letter", Some(&who)).body(html! {
                    h1 { "Dead letter " code { (id) } }
                    p.error { (format!("{e:#}")) }
                    p { a href="/letters" { "Back to the dead letters" } }
                }),
            );
        }
    };
    let s = &report.summary;
    let text = |v: Option<&String>| v.map_or(Value::Null, |v| Value::String(v.clone()));
    let facts: Vec<(&str, Value)> = vec![
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
        ("identical copies", Value::from(report.copies)),
        ("body bytes", Value::from(s.body_bytes)),
    ];
    let amqp_headers: Vec<(String, String)> = mask::headers(
        s.headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default())),
    )
    .into_iter()
    .zip(s.headers.values())
    .map(|((k, shown), v)| match v {
        Value::String(_) => (k, shown),
        other => (k, other.to_string()),
    })
    .collect();
    let gateway_headers = report.envelope.as_ref().map(|env| {
        mask::headers(
            env.headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default())),
        )
    });
    let payload = mask::json(&report.payload);
    html::ok(Page::new(&format!("Dead letter {id}"), Some(&who)).body(html! {
        p { a href="/letters" { "← Dead letters" } }
        h1 { "Dead letter " code { (s.facts.id) } }
        @if who.may_act() {
            div.actions {
                form method="post" action="/letters/replay" {
                    input type="hidden" name="csrf" value=(who.csrf);
                    input type="hidden" name="ids" value=(s.facts.id);
                    input type="hidden" name="confirm" value="yes";
                    button type="submit" class="replay" { "Replay" }
                }
                form method="post" action="/letters/preview" {
                    input type="hidden" name="csrf" value=(who.csrf);
                    input type="hidden" name="action" value="purge";
                    input type="hidden" name="ids" value=(s.facts.id);
                    button type="submit" class="purge" { "Purge…" }
                }
            }
            p.hint { "Fix the cause first (e.g. create the missing order), then replay: the letter is republished with a confirm and only then removed from the dead-letter queue." }
        }
        section { h2 { "What failed" } (html::fields(&facts)) }
        section { h2 { "Message headers" } (pairs_table(&amqp_headers)) }
        @if let Some(h) = &gateway_headers { section { h2 { "Gateway request headers" } (pairs_table(h)) } }
        section {
            h2 { "Payload" }
            @if payload.is_null() { p.none { "Not JSON or a form; see " code { "oncehookctl dlq show " (s.facts.id) } "." } }
            @else { (html::pretty(&payload)) }
            p.hint { "Signatures, hashes, tokens and other secrets are masked." }
        }
    }))
}

fn pairs_table(pairs: &[(String, String)]) -> Markup {
    html! {
        @if pairs.is_empty() { p.none { "none" } } @else {
            table.facts { tbody { @for (k, v) in pairs { tr { th scope="row" { (k) } td { code { (v) } } } } } }
        }
    }
}

/// `POST /letters/preview`: how many dead letters a replay or purge would
/// touch, which ones, and the confirmation form for exactly those.
pub async fn preview(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let action = match form.get("action").as_deref() {
        Some("purge") => "purge",
        _ => "replay",
    };
    let ids = form.all("ids");
    let (filter, within) = match filter_of(&form).and_then(|f| Ok((f, window_of(&form)?))) {
        Ok(f) => f,
        Err(why) => return input::bad_request(&who, "Dead letters", "/letters", &why),
    };
    let view = match state.dead_letters.view().await {
        Ok(v) => v,
        Err(e) => return html::failure(&who, "Dead letters", &e),
    };
    let now = OffsetDateTime::now_utc();
    let chosen: Vec<&Letter> = view
        .snapshot
        .letters
        .iter()
        .filter(|l| {
            if ids.is_empty() {
                filter.matches(l, now)
            } else {
                ids.contains(&l.facts.id)
            }
        })
        .collect();
    let scope = if ids.is_empty() {
        scope_text(&filter, within)
    } else {
        ids.join(" ")
    };
    let verb = if action == "purge" { "Purge" } else { "Replay" };
    html::ok(Page::new(&format!("{verb} dead letters"), Some(&who)).body(html! {
        h1 { (verb) " dead letters" }
        p.dry-run { "Dry run: " strong { (chosen.len()) } " dead letter(s) match " code { (scope) } ". Nothing has changed yet." }
        (freshness(&view))
        @if chosen.is_empty() { p { a href="/letters" { "Back to the dead letters" } } } @else {
            (letter_table(&chosen))
            form.confirm method="post" action=(format!("/letters/{action}")) {
                input type="hidden" name="csrf" value=(who.csrf);
                @if ids.is_empty() { input type="hidden" name="scope" value=(scope); }
                @for l in &chosen { input type="hidden" name="ids" value=(l.facts.id); }
                label {
                    input type="checkbox" name="confirm" value="yes" required;
                    @if action == "purge" { " Delete these " (chosen.len()) " dead letter(s) for good" }
                    @else { " Replay these " (chosen.len()) " dead letter(s) to the queue they came from" }
                }
                button type="submit" class=(action) { (verb) " " (chosen.len()) }
                " " a href="/letters" { "Cancel" }
            }
        }
    }))
}

/// `POST /letters/replay`: replays the given IDs (confirmed), audited.
pub async fn replay(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    act(req, state, body, "replay", |state, conn, ids| {
        Box::pin(async move {
            let args = ReplayArgs {
                ids,
                all: false,
                filter: Filter::default(),
                dry_run: false,
                yes: true,
            };
            let r = replay::run(&state.settings, conn, &state.topology, args, &QUIET).await?;
            Ok(outcome_of(&r))
        })
    })
    .await
}

/// `POST /letters/purge`: deletes the given IDs for good (confirmed), audited.
pub async fn purge(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    act(req, state, body, "purge", |state, conn, ids| {
        Box::pin(async move {
            let args = PurgeArgs {
                ids,
                all: false,
                yes: true,
            };
            let r = purge::run(conn, &state.topology, args, &QUIET).await?;
            Ok(outcome_of(&r))
        })
    })
    .await
}

/// What a ctl verb's report says: whether it all went well, its text, its JSON.
type Outcome = (bool, String, Value);

/// The ctl verb behind an action, run on a broker connection with the IDs.
type Verb = for<'a> fn(
    &'a State,
    &'a Connection,
    Vec<String>,
) -> Pin<Box<dyn Future<Output = anyhow::Result<Outcome>> + 'a>>;

fn outcome_of<R: Report + serde::Serialize>(r: &R) -> Outcome {
    (
        r.ok(),
        r.to_string(),
        serde_json::to_value(r).unwrap_or_default(),
    )
}

/// A confirmed operator action: checks the role and CSRF token, runs `verb`
/// on the queue, reads the snapshot again, audits and shows what happened.
async fn act(
    req: HttpRequest,
    state: web::Data<State>,
    body: web::Bytes,
    action: &str,
    verb: Verb,
) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let Some(ids) = confirmed_ids(&form) else {
        return unconfirmed(&who);
    };
    let done = async {
        let conn = broker::connect(&state.settings).await?;
        let done = verb(&state, &conn, ids.clone()).await;
        broker::close(conn).await;
        done
    }
    .await;
    if let Err(e) = state.dead_letters.refresh().await {
        tracing::warn!(error = %format!("{e:#}"), action, "could not read the dead letters again after the action");
    }
    finish(&req, &state, &who, action, &ids, form.get("scope"), done).await
}

/// The IDs of a confirmed action; `None` without `confirm=yes` or IDs.
fn confirmed_ids(form: &Pairs) -> Option<Vec<String>> {
    let ids = form.all("ids");
    (form.get("confirm").as_deref() == Some("yes") && !ids.is_empty()).then_some(ids)
}

fn unconfirmed(who: &Who) -> HttpResponse {
    html::respond(
        actix_web::http::StatusCode::BAD_REQUEST,
        Page::new("Not confirmed", Some(who)).body(html! {
            h1 { "Nothing was done" }
            p.error { "The action was not confirmed, or named no dead letters." }
            p { a href="/letters" { "Back to the dead letters" } }
        }),
    )
}

/// Writes the audit row and shows what happened.
async fn finish(
    req: &HttpRequest,
    state: &State,
    who: &Who,
    action: &str,
    ids: &[String],
    scope: Option<String>,
    outcome: anyhow::Result<(bool, String, Value)>,
) -> HttpResponse {
    let (ok, text, doc) = match outcome {
        Ok(o) => o,
        Err(e) => (false, format!("{e:#}"), Value::Null),
    };
    let address = req.peer_addr().map(|a| a.ip().to_string());
    let entry = NewAuditEntry {
        actor: &who.session.user,
        role: who.role.as_str(),
        action,
        letters: ids,
        scope: scope.as_deref(),
        ok,
        result: &truncate(&text, 2_000),
        address: address.as_deref(),
    };
    let recorded = state.audit(&entry).await;
    tracing::info!(user = %who.session.user, action, letters = ids.len(), ok, "console action");
    let status = if ok {
        actix_web::http::StatusCode::OK
    } else {
        actix_web::http::StatusCode::BAD_GATEWAY
    };
    let results = doc.get("results").cloned().unwrap_or(Value::Null);
    html::respond(
        status,
        Page::new(action, Some(who)).body(html! {
            h1 { (if action == "purge" { "Purge" } else { "Replay" }) }
            p class=(if ok { "result ok" } else { "result error" }) role="status" { pre { (text) } }
            @if !results.is_null() { (html::value(&results)) }
            @if !recorded { p.error { "Warning: the audit row could not be written; see the console's log." } }
            p { a href="/letters" { "Back to the dead letters" } " · " a href="/audit" { "Audit" } }
        }),
    )
}
