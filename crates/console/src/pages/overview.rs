//! Overview: what `oncehookctl stats` prints — queues and consumers, dead
//! letters by gateway and kind, the outbox backlog, the reconciler's last
//! run and what it found, outcomes per gateway —
//! over a window (`?since=24h`, at most 366 days; anything else is 400).
//! The page refreshes itself every 15 s while open, and its dead-letter
//! counts come from the console's snapshot.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use maud::html;
use oncehook_ops::stats::{self, Looked, StatsArgs};
use oncehook_ops::timefmt::parse_duration;

use crate::auth;
use crate::form::Pairs;
use crate::html::{self, Page};
use crate::input::{self, Invalid};
use crate::state::State;

/// The longest window the outcomes are counted over.
const MAX_SINCE: Duration = Duration::from_secs(366 * 86_400);

/// The sections of the stats report, in the order `stats` prints them.
const SECTIONS: [(&str, &str); 9] = [
    ("received", "Webhooks received per source"),
    ("queues", "Queues"),
    ("dead_letters", "Dead letters"),
    ("outbox", "Email outbox"),
    ("ledger", "Ledger flags"),
    ("reconciliation", "Reconciliation"),
    ("gateways", "Outcomes per gateway"),
    ("broker", "Broker"),
    ("database", "Database"),
];

pub async fn show(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    let who = match auth::page(&req, &state) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    // The stats are every tenant's: a tenant's operator starts at the
    // events instead.
    if !who.is_platform() {
        return HttpResponse::SeeOther()
            .insert_header((actix_web::http::header::LOCATION, "/events"))
            .finish();
    }
    let q = Pairs::parse(req.query_string().as_bytes());
    let since_text = q.get("since").unwrap_or_else(|| "24h".to_owned());
    let since = match parse_duration(&since_text) {
        Ok(d) if !d.is_zero() && d <= MAX_SINCE => d,
        _ => {
            let why =
                Invalid("\"since\" is a duration such as 30m, 24h or 7d, at most 366d.".to_owned());
            return input::bad_request(&who, "Overview", "/", &why);
        }
    };
    // The dead letters from the console's snapshot: counting them does not
    // take another read of the whole queue.
    let view = state.dead_letters.view().await;
    let looked = view.as_ref().ok().map(|v| Looked {
        letters: &v.snapshot.letters,
        truncated: v.snapshot.truncated,
    });
    let report = match stats::run_with(
        &state.settings,
        StatsArgs {
            since,
            tenant: None,
        },
        looked,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return html::failure(&who, "Overview", &e),
    };
    let doc = serde_json::to_value(&report).unwrap_or_default();
    html::ok(Page::new("Overview", Some(&who)).live(15).body(html! {
        h1 { "Overview" }
        form.filters method="get" action="/" {
            label { "Outcomes over the last " input name="since" value=(since_text) size="5"; }
            button type="submit" { "Show" }
        }
        @for (key, title) in SECTIONS {
            section id=(key) {
                h2 { (title) }
                (html::value(doc.get(key).unwrap_or(&serde_json::Value::Null)))
            }
        }
        details {
            summary { "As " code { "oncehookctl stats" } " prints it" }
            pre { (report.to_string()) }
        }
    }))
}
