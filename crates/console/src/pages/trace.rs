//! Trace: what `oncehookctl trace order` prints, found by order ref,
//! payment id or event id — the order, its items, every payment attempt,
//! every webhook delivery that touched it, refunds, emails and the shop
//! API's writes about it. The term is
//! checked first (at most 256 characters, no control characters; else 400).

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use oncehook_ledger::store as ledger;
use oncehook_ops::trace::{self, TraceReport};
use serde_json::Value;

use super::page_query;
use crate::html::{self, Page};
use crate::input;
use crate::state::State;
use oncehook_common::store::scope::Scope;

/// The longest order ref, payment id or event id looked for.
const MAX_TERM: usize = 256;

/// The sections of an order's story, in the order `trace order` prints them.
const SECTIONS: [(&str, &str); 7] = [
    ("order", "Order"),
    ("items", "Items"),
    ("payments", "Payments"),
    ("webhooks", "Webhook deliveries"),
    ("refunds", "Refunds"),
    ("emails", "Emails"),
    ("api", "Shop API"),
];

pub async fn show(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    let (who, q) = match page_query(&req, &state, ("Trace", "/trace"), |p| {
        input::text(p, "q", MAX_TERM)
    }) {
        Ok((who, q)) => (who, q.unwrap_or_default()),
        Err(r) => return *r,
    };
    let found = if q.is_empty() {
        Ok(None)
    } else {
        find(&state, &who.scope, &q).await
    };
    let report = match found {
        Ok(r) => r,
        Err(e) => return html::failure(&who, "Trace", &e),
    };
    html::ok(Page::new("Trace", Some(&who)).body(html! {
        h1 { "Trace" }
        form.filters method="get" action="/trace" {
            label { "Order ref, payment id or event id " input name="q" value=(q) required; }
            button type="submit" { "Trace" }
        }
        @match &report {
            None if q.is_empty() => {},
            None => p.none { "No order, payment or processed event is known as " code { (q) } "." },
            Some((how, report)) => {
                p.found { (how) }
                (story(report))
            }
        }
    }))
}

/// The report for `q`, tried as an order ref, a payment id, then an event
/// id of each gateway; with how it was found.
async fn find(
    state: &State,
    scope: &Scope,
    q: &str,
) -> anyhow::Result<Option<(String, TraceReport)>> {
    let mut conn = state.pool.single_in(scope).await?;
    let found = find_in(&mut conn, q).await?;
    conn.finish().await?;
    Ok(found)
}

/// [`find`] on one connection.
async fn find_in(
    conn: &mut sqlx::PgConnection,
    q: &str,
) -> anyhow::Result<Option<(String, TraceReport)>> {
    if let r @ TraceReport::Order(_) = trace::trace_order(conn, q).await? {
        return Ok(Some((format!("Order {q}:"), r)));
    }
    if let Some(order_ref) = ledger::order_ref_of_payment(conn, q).await?
        && let r @ TraceReport::Order(_) = trace::trace_order(conn, &order_ref).await?
    {
        return Ok(Some((
            format!("Payment {q} belongs to order {order_ref}:"),
            r,
        )));
    }
    for gateway in oncehook_gateways::registered() {
        let provider = gateway.as_str().to_owned();
        if let r @ TraceReport::Event(_) = trace::trace_event(conn, provider, q.to_owned()).await? {
            return Ok(Some((format!("{gateway} event {q}:"), r)));
        }
    }
    Ok(None)
}

fn story(report: &TraceReport) -> Markup {
    let doc = serde_json::to_value(report).unwrap_or_default();
    let order_story = |doc: &Value| {
        html! {
            @for (key, title) in SECTIONS {
                @if let Some(v) = doc.get(key) {
                    section id=(key) { h2 { (title) } (html::value(v)) }
                }
            }
        }
    };
    html! {
        @if let Some(event) = doc.get("event") {
            section id="event" { h2 { "Event" } (html::value(event)) }
            @if let Some(order) = doc.get("order").filter(|o| !o.is_null()) { (order_story(order)) }
        } @else {
            (order_story(&doc))
        }
        details open {
            summary { "As " code { "oncehookctl trace" } " prints it" }
            pre { (report.to_string()) }
        }
    }
}
