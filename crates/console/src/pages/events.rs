//! Events: recently processed webhook deliveries, newest first, filtered by
//! gateway, source, outcome and age, one page at a time (keyset pages: the
//! "older" link carries the last row shown, so a deep page costs what the
//! first one does); each row links to its trace. A filter value that is not
//! one the page could offer is refused (400) before the query is made.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::html;
use oncehook_common::store::dedup::{self, OUTCOMES, RecentCursor, RecentFilter};
use oncehook_ops::timefmt::{parse_duration, parse_rfc3339, rfc3339};
use time::OffsetDateTime;

use super::{PAGE_SIZE, one_page, page_query};
use crate::form::Pairs;
use crate::html::{self, Page};
use crate::input::{self, Invalid};
use crate::state::State;

/// The windows the age filter offers.
const WINDOWS: [&str; 4] = ["1h", "24h", "7d", "30d"];

/// The filters of the page, as given in its query string.
struct Query {
    gateway: Option<String>,
    source: Option<String>,
    outcome: Option<String>,
    within: Option<String>,
    after: Option<RecentCursor>,
}

/// The longest event ID an "older" link may carry.
const MAX_EVENT_ID: usize = 512;

impl Query {
    /// The filters, each checked against what it may be: a gateway or
    /// source is a name, an outcome one of the table's outcomes, a window
    /// one of those offered, and the "older" link's cursor all three of its
    /// parts, well-formed.
    fn parse(q: &Pairs) -> Result<Query, Invalid> {
        let after = match (
            q.get("at"),
            input::name(q, "src")?,
            input::text(q, "id", MAX_EVENT_ID)?,
        ) {
            (None, None, None) => None,
            (Some(at), Some(source), Some(event_id)) => Some(RecentCursor {
                processed_at: parse_rfc3339(&at).ok_or_else(damaged_cursor)?,
                source,
                event_id,
            }),
            _ => return Err(damaged_cursor()),
        };
        Ok(Query {
            gateway: input::name(q, "gateway")?,
            source: input::name(q, "source")?,
            outcome: input::one_of(q, "outcome", &OUTCOMES)?.map(str::to_owned),
            // Only the windows offered (a made-up one could overflow the clock).
            within: input::one_of(q, "within", &WINDOWS)?.map(str::to_owned),
            after,
        })
    }

    /// This page's link with the filters kept, continuing after `after`.
    fn link(&self, after: Option<&RecentCursor>) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("gateway", &self.gateway),
            ("source", &self.source),
            ("outcome", &self.outcome),
            ("within", &self.within),
        ] {
            if let Some(v) = v {
                s.append_pair(k, v);
            }
        }
        if let Some(c) = after {
            s.append_pair("at", &rfc3339(c.processed_at).unwrap_or_default());
            s.append_pair("src", &c.source);
            s.append_pair("id", &c.event_id);
        }
        format!("/events?{}", s.finish())
    }
}

fn damaged_cursor() -> Invalid {
    Invalid(
        "The \"older\" link is incomplete or damaged (it needs at, src and id); start from the newest events.".to_owned(),
    )
}

pub async fn show(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    let (who, query) = match page_query(&req, &state, ("Events", "/events"), Query::parse) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let since = query
        .within
        .as_deref()
        .and_then(|w| parse_duration(w).ok())
        .map(|d| OffsetDateTime::now_utc() - d);
    let filter = RecentFilter {
        provider: query.gateway.as_deref(),
        source: query.source.as_deref(),
        outcome: query.outcome.as_deref(),
        since,
        after: query.after.as_ref(),
    };
    let rows = async {
        let mut conn = state.pool.single_in(&who.scope).await?;
        let done = dedup::recent(&mut conn, filter, PAGE_SIZE + 1).await?;
        conn.finish().await?;
        Ok::<_, sqlx::Error>(done)
    }
    .await;
    let mut rows = match rows {
        Ok(r) => r,
        Err(e) => return html::failure(&who, "Events", &anyhow::Error::new(e)),
    };
    let more = one_page(&mut rows);
    let next = more.then(|| rows.last().map(RecentCursor::after)).flatten();
    let gateways: Vec<&str> = oncehook_gateways::names();
    let sources: Vec<&str> = state
        .settings
        .ingest
        .sources
        .iter()
        .filter(|s| who.scope.includes(&s.tenant))
        .map(|s| s.name.as_str())
        .collect();
    html::ok(Page::new("Events", Some(&who)).body(html! {
        h1 { "Events" }
        form.filters method="get" action="/events" {
            (select("gateway", "any gateway", &gateways, query.gateway.as_deref()))
            (select("source", "any source", &sources, query.source.as_deref()))
            (select("outcome", "any outcome", &OUTCOMES, query.outcome.as_deref()))
            (select("within", "any time", &WINDOWS, query.within.as_deref()))
            button type="submit" { "Filter" }
        }
        @if query.after.is_some() { p.summary { "Older events, from " (html::when(query.after.as_ref().map_or(OffsetDateTime::UNIX_EPOCH, |c| c.processed_at))) " back." } }
        @if rows.is_empty() { p.none { "No processed events match." } } @else {
            table.events {
                thead { tr { th { "Processed" } th { "Gateway" } th { "Source" } th { "Event" } th { "Type" } th { "Order" } th { "Outcome" } th { "Origin" } th { "Copies" } th { "Detail" } } }
                tbody { @for r in &rows { tr {
                    td { (html::when(r.processed_at)) }
                    td { (r.provider) }
                    td { (r.source) }
                    td { a href=(format!("/trace?q={}", enc(&r.event_id))) { code { (r.event_id) } } }
                    td { (r.event_type) }
                    td { @if let Some(o) = &r.order_ref { a href=(format!("/trace?q={}", enc(o))) { (o) } } @else { "-" } }
                    td class=(format!("outcome {}", r.outcome)) { (r.outcome) }
                    td class=(format!("origin {}", r.origin)) { (r.origin) }
                    td { (r.deliveries) }
                    td { (r.detail.as_deref().unwrap_or("")) }
                } } }
            }
        }
        nav.pages {
            @if query.after.is_some() { a href=(query.link(None)) { "← newest" } }
            @if let Some(c) = &next { a href=(query.link(Some(c))) { "older →" } }
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
