//! `GET /notifications`: the endpoints with their state and counts, and the
//! deliveries a filter names, newest first; for an operator the replay and
//! enable buttons. The actions answer with the same page
//! ([`answer`]), what they did on top.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use oncehook_common::store::notify::{self as store, DeliveryRecord, EndpointState};
use oncehook_ops::output::truncate;
use oncehook_ops::timefmt::{human_duration, whole_secs};

use super::{PAGE_SIZE, PATH, Query, STATUSES, TITLE};
use crate::auth::Who;
use crate::html;
use crate::pages::events::{enc, select};
use crate::pages::{one_page, page_query};
use crate::said::{self, Said};
use crate::state::State;
use oncehook_common::store::scope::Scope;

/// `GET /notifications`
pub async fn show(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    match page_query(&req, &state, (TITLE, PATH), Query::parse) {
        Ok((who, query)) => answer(&who, &state, &query, None).await,
        Err(r) => *r,
    }
}

/// What the page shows: every endpoint, and a page of deliveries.
struct Book {
    endpoints: Vec<EndpointState>,
    deliveries: Vec<DeliveryRecord>,
    /// Whether more deliveries match than the page shows.
    more: bool,
}

async fn read(state: &State, scope: &Scope, query: &Query) -> Result<Book, sqlx::Error> {
    let mut conn = state.pool.single_in(scope).await?;
    let endpoints = store::endpoints(&mut conn).await?;
    let mut deliveries = store::list(&mut conn, &query.list_filter()).await?;
    conn.finish().await?;
    let more = one_page(&mut deliveries);
    Ok(Book {
        endpoints,
        deliveries,
        more,
    })
}

/// The page for `query`, with what an action did (`said`) on top.
pub(super) async fn answer(
    who: &Who,
    state: &State,
    query: &Query,
    said: Option<Said>,
) -> HttpResponse {
    let book = match read(state, &who.scope, query).await {
        Ok(b) => b,
        Err(e) => return html::failure(who, TITLE, &anyhow::Error::new(e)),
    };
    // Endpoints in the configuration no notifier has started with yet (the
    // account's tenants' only, as the database's rows are).
    let configured_only: Vec<&str> = state
        .settings
        .notify
        .endpoints
        .iter()
        .filter(|c| who.scope.includes(&c.tenant))
        .filter(|c| !book.endpoints.iter().any(|e| e.name == c.name))
        .map(|c| c.name.as_str())
        .collect();
    let disabled: Vec<&str> = book
        .endpoints
        .iter()
        .filter(|e| e.disabled_at.is_some())
        .map(|e| e.name.as_str())
        .collect();
    // The bulk replay of what the filter names, unless that is one
    // disabled endpoint (whose row offers Enable instead).
    let bulk = (query.endpoint.is_some() || query.event_id.is_some())
        && query
            .endpoint
            .as_deref()
            .is_none_or(|n| !disabled.contains(&n));
    said::page(
        who,
        TITLE,
        said,
        html! { "The order events the notifier sends to the shop's endpoints, as " code { "oncehookctl notify" } " shows them." },
        html! {
            section {
                h2 { "Endpoints" }
                (endpoints_table(who, &book.endpoints, &configured_only))
            }
            section {
                h2 { "Deliveries" }
                (filter_form(query, &book.endpoints, &configured_only))
                @if who.may_act() && bulk {
                    div.bulk { (replay_form(who, query.endpoint.as_deref(), query.event_id.as_deref(), &format!("Replay the failed deliveries of {}", query.scope_text()))) }
                }
                (deliveries_table(who, &book.deliveries, query, &disabled))
                @if book.more { p { "Showing the newest " (PAGE_SIZE) "; narrow the filter (an endpoint, a status, an event) to see others." } }
            }
        },
        "Replaying deliveries and enabling endpoints need the operator role.",
    )
}

fn endpoints_table(who: &Who, endpoints: &[EndpointState], configured_only: &[&str]) -> Markup {
    html! {
        @if endpoints.is_empty() && configured_only.is_empty() {
            p.none { "No endpoint is configured ([[notify.endpoint]]) or known to the notifier." }
        } @else {
            table.endpoints {
                thead { tr {
                    th { "Endpoint" } th { "State" } th { "Pending" } th { "Failed" } th { "Delivered" } th { "Oldest pending" }
                    @if who.may_act() { th { "Actions" } }
                } }
                tbody {
                    @for e in endpoints { tr class=[e.disabled_at.map(|_| "disabled")] {
                        td { a href=(Query::of_endpoint(&e.name).link()) { (e.name) } }
                        td { (state_cell(e)) }
                        td { (e.pending) }
                        td { (e.failed) }
                        td { (e.delivered) }
                        td { @if e.pending > 0 { (human_duration(whole_secs(e.oldest_pending_secs).unsigned_abs())) } @else { span.none { "-" } } }
                        @if who.may_act() { td { (endpoint_actions(who, e)) } }
                    } }
                    @for name in configured_only { tr {
                        td { (name) }
                        td colspan=(if who.may_act() { 6 } else { 5 }) { span.none { "configured; no notifier has started with it yet" } }
                    } }
                }
            }
        }
    }
}

/// Enabled, or disabled since when and why.
fn state_cell(e: &EndpointState) -> Markup {
    html! {
        @match e.disabled_at {
            None => span.state.enabled { "enabled" },
            Some(at) => {
                span.state.disabled { "disabled" } " since " (html::when(at))
                @if let Some(why) = &e.disabled_reason { ": " span title=(why) { (truncate(why, 80)) } }
            }
        }
    }
}

/// Enable a disabled endpoint; replay an enabled one's failed deliveries.
fn endpoint_actions(who: &Who, e: &EndpointState) -> Markup {
    html! {
        @if e.disabled_at.is_some() {
            (enable_form(who, &e.name))
            @if e.failed > 0 { p.hint { "Not replayed while it is disabled (" (e.failed) " failed): enable it first, then replay." } }
        } @else if e.failed > 0 {
            (replay_form(who, Some(&e.name), None, &format!("Replay {} failed", e.failed)))
        }
    }
}

fn filter_form(query: &Query, endpoints: &[EndpointState], configured_only: &[&str]) -> Markup {
    let mut names: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
    names.extend(configured_only);
    if let Some(n) = query.endpoint.as_deref().filter(|n| !names.contains(n)) {
        names.push(n);
    }
    html! {
        form.filters method="get" action=(PATH) {
            (select("endpoint", "any endpoint", &names, query.endpoint.as_deref()))
            (select("status", "any status", &STATUSES, query.status))
            label.visually-hidden for="event" { "event" }
            input id="event" name="event" placeholder="event id (evt_…)" value=[query.event_id.as_deref()];
            button type="submit" { "Filter" }
            @if !query.is_empty() { a href=(PATH) { "clear" } }
        }
    }
}

/// The deliveries; for an operator a Replay on each failed one (of an
/// enabled endpoint: `disabled` names the others).
fn deliveries_table(
    who: &Who,
    rows: &[DeliveryRecord],
    query: &Query,
    disabled: &[&str],
) -> Markup {
    let of_event = |id: &str| {
        Query {
            event_id: Some(id.to_owned()),
            ..Query::default()
        }
        .link()
    };
    html! {
        @if rows.is_empty() { p.none { "No deliveries" @if !query.is_empty() { " match the filter" } "." } } @else {
            table.deliveries {
                thead { tr {
                    th { "Event" } th { "Type" } th { "Order" } th { "Endpoint" } th { "Status" } th { "Attempts" }
                    th { "Next attempt" } th { "Last answer" } th { "Created" } th { "Delivered" }
                    @if who.may_act() { th { "Replay" } }
                } }
                tbody { @for d in rows { tr {
                    td { a href=(of_event(&d.event_id)) { code { (d.event_id) } } }
                    td { (d.event_type) }
                    td { a href=(format!("/trace?q={}", enc(&d.order_ref))) { (d.order_ref) } }
                    td { (d.endpoint) }
                    td class=(format!("status {}", d.status)) { (d.status) }
                    td { (d.attempts) }
                    td { @if d.status == "pending" { (html::when(d.next_attempt_at)) } @else { span.none { "-" } } }
                    td title=(last_in_full(d)) { (truncate(&last(d), 80)) }
                    td { (html::when(d.created_at)) }
                    td { @if let Some(t) = d.delivered_at { (html::when(t)) } @else { span.none { "-" } } }
                    @if who.may_act() { td { @if d.status == "failed" {
                        @if disabled.contains(&d.endpoint.as_str()) { span.hint { "enable " (d.endpoint) " first" } }
                        @else { (replay_form(who, Some(&d.endpoint), Some(&d.event_id), "Replay")) }
                    } } }
                } } }
            }
        }
    }
}

/// How the last attempt ended, as the CLI's list says it: the HTTP status
/// of a delivered row, else the error (or the status without one).
fn last(d: &DeliveryRecord) -> String {
    match (d.last_status, &d.last_error) {
        (Some(s), _) if d.status == "delivered" => s.to_string(),
        (_, Some(e)) => e.clone(),
        (Some(s), None) => s.to_string(),
        (None, None) => String::new(),
    }
}

/// The last attempt in full, with the start of the endpoint's answer.
fn last_in_full(d: &DeliveryRecord) -> String {
    let mut text = match (d.last_status, &d.last_error) {
        (Some(s), Some(e)) => format!("{s}: {e}"),
        _ => last(d),
    };
    if let Some(answer) = &d.last_answer {
        text.push_str(&format!(" — answered: {}", truncate(answer, 200)));
    }
    text
}

/// Replays the failed deliveries of `endpoint` and/or `event`.
fn replay_form(who: &Who, endpoint: Option<&str>, event: Option<&str>, label: &str) -> Markup {
    html! {
        form.inline method="post" action="/notifications/replay" {
            input type="hidden" name="csrf" value=(who.csrf);
            @if let Some(v) = endpoint { input type="hidden" name="endpoint" value=(v); }
            @if let Some(v) = event { input type="hidden" name="event" value=(v); }
            button type="submit" class="replay" { (label) }
        }
    }
}

/// Enables `name` (its failed deliveries wait for a replay).
fn enable_form(who: &Who, name: &str) -> Markup {
    html! {
        form.inline method="post" action="/notifications/enable" {
            input type="hidden" name="csrf" value=(who.csrf);
            input type="hidden" name="endpoint" value=(name);
            button type="submit" class="enable" { "Enable" }
        }
    }
}
