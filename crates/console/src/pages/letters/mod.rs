//! Dead letters: the list (filtered by gateway, kind and source, with the
//! counts behind each; the kind filter offers every known kind), one letter
//! in full with its secrets masked, and the operator's actions — replay one,
//! replay or purge what a filter matches after a count and an explicit
//! confirmation.
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
//!
//! - `list`: `GET /letters`, the counts, the filter and the bulk buttons.
//! - `detail`: `GET /letters/{id}`, one letter masked.
//! - `actions`: the dry run before a bulk action, replay and purge.
//!
//! What they share is here: the filter, the snapshot's freshness and the
//! table of letters.

mod actions;
mod detail;
mod list;

use actix_web::HttpResponse;
use maud::{Markup, html};
use oncehook_common::store::scope::Scope;
use oncehook_ops::dlq::Filter;
use oncehook_ops::dlq::letter::Letter;
use oncehook_ops::output::truncate;
use oncehook_ops::timefmt::parse_duration;

use crate::auth::Who;
use crate::dead_letters::View;
use crate::form::Pairs;
use crate::html;
use crate::input::{self, Invalid};
use crate::state::State;

pub use actions::{preview, purge, replay};
pub use detail::detail;
pub use list::list;

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
        // Which letters an account sees is `sees`' to say.
        tenants: Vec::new(),
    })
}

/// The chosen window, if any; one the list offers.
fn window_of(p: &Pairs) -> Result<Option<&'static str>, Invalid> {
    input::one_of(p, "within", &WINDOWS)
}

/// What a list or a dry run shows: the filter it names, its window as
/// written, and the snapshot of the queue it applies to.
struct Filtered {
    filter: Filter,
    within: Option<&'static str>,
    view: View,
}

impl Filtered {
    /// The filter in `p` and the current snapshot, or the page that says
    /// why not (a 400 for a bad filter, the failure of the read).
    async fn read(who: &Who, state: &State, p: &Pairs) -> Result<Filtered, HttpResponse> {
        let (filter, within) = filter_of(p)
            .and_then(|f| Ok((f, window_of(p)?)))
            .map_err(|why| input::bad_request(who, "Dead letters", "/letters", &why))?;
        let view = state
            .dead_letters
            .view()
            .await
            .map_err(|e| html::failure(who, "Dead letters", &e))?;
        Ok(Filtered {
            filter,
            within,
            view,
        })
    }
}

/// Whether `who` sees `letter`: a platform operator every one, a tenant's
/// operator those of its tenants' events only (docs/tenants.md).
fn sees(who: &Who, letter: &Letter) -> bool {
    sees_tenant(who, letter.tenant())
}

/// Whether `who` sees what belongs to `tenant` (`None`: to no tenant).
fn sees_tenant(who: &Who, tenant: Option<&str>) -> bool {
    match &who.scope {
        Scope::Platform => true,
        Scope::Tenants(ids) => tenant.is_some_and(|t| ids.iter().any(|id| id.as_str() == t)),
    }
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
