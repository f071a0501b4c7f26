//! Events: recently processed webhook deliveries, newest first, filtered by
//! gateway, source and outcome, one page at a time; each links to its trace.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::html;
use oncehook_common::store::dedup::{self, RecentFilter};

use super::{PAGE_SIZE, page_number};
use crate::auth;
use crate::form::Pairs;
use crate::html::{self, Page};
use crate::state::State;

/// The outcomes a processed delivery can have.
const OUTCOMES: [&str; 4] = ["applied", "ignored", "flagged", "parked"];

pub async fn show(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    let who = match auth::page(&req, &state) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let q = Pairs::parse(req.query_string().as_bytes());
    let (gateway, source, outcome) = (q.get("gateway"), q.get("source"), q.get("outcome"));
    let page = page_number(&q);
    let filter = RecentFilter {
        provider: gateway.as_deref(),
        source: source.as_deref(),
        outcome: outcome.as_deref(),
    };
    let rows = async {
        let mut conn = state.pool.acquire().await?;
        dedup::recent(&mut conn, filter, PAGE_SIZE + 1, (page - 1) * PAGE_SIZE).await
    }
    .await;
    let mut rows = match rows {
        Ok(r) => r,
        Err(e) => return html::failure(&who, "Events", &anyhow::Error::new(e)),
    };
    let more = rows.len() as i64 > PAGE_SIZE;
    rows.truncate(PAGE_SIZE as usize);
    let link = |p: i64| {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("gateway", &gateway),
            ("source", &source),
            ("outcome", &outcome),
        ] {
            if let Some(v) = v {
                s.append_pair(k, v);
            }
        }
        s.append_pair("page", &p.to_string());
        format!("/events?{}", s.finish())
    };
    let gateways: Vec<&str> = oncehook_gateways::Gateway::ALL
        .iter()
        .map(|g| g.as_str())
        .collect();
    let sources: Vec<&str> = state
        .settings
        .ingest
        .sources
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    html::ok(Page::new("Events", Some(&who)).body(html! {
        h1 { "Events" }
        form.filters method="get" action="/events" {
            (select("gateway", "any gateway", &gateways, gateway.as_deref()))
            (select("source", "any source", &sources, source.as_deref()))
            (select("outcome", "any outcome", &OUTCOMES, outcome.as_deref()))
            button type="submit" { "Filter" }
        }
        @if rows.is_empty() { p.none { "No processed events match." } } @else {
            table.events {
                thead { tr { th { "Processed" } th { "Gateway" } th { "Source" } th { "Event" } th { "Type" } th { "Order" } th { "Outcome" } th { "Copies" } th { "Detail" } } }
                tbody { @for r in &rows { tr {
                    td { (html::when(r.processed_at)) }
                    td { (r.provider) }
                    td { (r.source) }
                    td { a href=(format!("/trace?q={}", enc(&r.event_id))) { code { (r.event_id) } } }
                    td { (r.event_type) }
                    td { @if let Some(o) = &r.order_ref { a href=(format!("/trace?q={}", enc(o))) { (o) } } @else { "-" } }
                    td class=(format!("outcome {}", r.outcome)) { (r.outcome) }
                    td { (r.deliveries) }
                    td { (r.detail.as_deref().unwrap_or("")) }
                } } }
            }
        }
        nav.pages {
            @if page > 1 { a href=(link(page - 1)) { "← newer" } }
            @if more { a href=(link(page + 1)) { "older →" } }
        }
    }))
}

/// A `<select>` that submits `name`, with "any" first.
pub fn select(name: &str, any: &str, options: &[&str], chosen: Option<&str>) -> maud::Markup {
    html! {
        label.visually-hidden for=(name) { (name) }
        select id=(name) name=(name) {
            option value="" { (any) }
            @for o in options { option value=(o) selected[chosen == Some(*o)] { (o) } }
        }
    }
}

/// Percent-encoded for a query string.
pub fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
