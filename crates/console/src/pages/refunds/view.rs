//! `GET /refunds`: whether refunds are paused, and the refund intents a
//! filter names, newest first; for an operator the approve, cancel, pause
//! and resume buttons. The actions answer with the same page ([`answer`]),
//! what they did on top.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use oncehook_common::refund::{STATE_APPROVED, STATE_FAILED, STATE_OWED, STATES};
use oncehook_ledger::money;
use oncehook_ledger::store::refund_intents::{self as store, Intent};
use oncehook_ops::output::truncate;

use super::{MAX_TERM, PAGE_SIZE, PATH, Query, TITLE};
use crate::auth::Who;
use crate::html;
use crate::pages::events::{enc, select};
use crate::pages::{one_page, page_query};
use crate::said::{self, Said};
use crate::state::State;
use oncehook_common::store::scope::Scope;

/// `GET /refunds`
pub async fn show(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    match page_query(&req, &state, (TITLE, PATH), Query::parse) {
        Ok((who, query)) => answer(&who, &state, &query, None).await,
        Err(r) => *r,
    }
}

/// What the page shows: the kill switch and a page of intents.
struct Book {
    paused: bool,
    intents: Vec<Intent>,
    /// Whether more intents match than the page shows.
    more: bool,
}

/// The intents `query` names: one intent or an order's (newest first,
/// in its state if one is given), else a page of the newest.
async fn read(state: &State, scope: &Scope, query: &Query) -> Result<Book, sqlx::Error> {
    let mut conn = state.pool.single_in(scope).await?;
    let mut intents = match &query.term {
        Some(term) => {
            let mut found: Vec<Intent> = store::find(&mut conn, term)
                .await?
                .into_iter()
                .filter(|i| query.state.is_none_or(|s| i.state == s))
                .collect();
            found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
            found
        }
        None => store::list(&mut conn, query.state, PAGE_SIZE + 1).await?,
    };
    conn.finish().await?;
    // The kill switch is the platform's, whatever the account's tenants:
    // read in the platform's scope (a tenant's operator sees it, and may
    // not change it).
    let mut platform = state.pool.single_in(&Scope::Platform).await?;
    let paused = store::paused(&mut platform).await?;
    platform.finish().await?;
    let more = one_page(&mut intents);
    Ok(Book {
        paused,
        intents,
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
    let any_on = state.settings.refunds.any_on();
    said::page(
        who,
        TITLE,
        said,
        html! { "Money the books say is owed back to customers, one intent per owed payment, as " code { "oncehookctl refunds" } " shows it." },
        html! {
            (switch(who, book.paused, any_on))
            section {
                h2 { "Intents" }
                (filter_form(query))
                (intents_table(who, &book.intents, query))
                @if book.more { p { "Showing the newest " (PAGE_SIZE) "; narrow by state, intent or order to see others." } }
            }
        },
        "Approving, cancelling, pausing and resuming refunds need the operator role.",
    )
}

/// The kill switch: paused or running, and for an operator the way to the
/// other; whether any source sends refunds at all.
fn switch(who: &Who, paused: bool, any_on: bool) -> Markup {
    html! {
        div.switch {
            @if paused {
                p.error role="status" { strong { "Refunds are paused" } ": no refunder sends anything until an operator resumes them; intents are still minted and decided." }
                @if who.may_act() { (switch_form(who, "/refunds/resume", "Resume refunds")) }
            } @else {
                p { "Refunds are running: the refunder sends the approved intents." }
                @if who.may_act() { (switch_form(who, "/refunds/pause", "Pause refunds")) }
            }
        }
        @if !any_on { p.hint { "Refunds are off for every source (" code { "[refunds] mode" } "): intents are minted and shown, nothing is sent." } }
    }
}

fn switch_form(who: &Who, action: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(who.csrf);
            button type="submit" class="switch" { (label) }
        }
    }
}

fn filter_form(query: &Query) -> Markup {
    html! {
        form.filters method="get" action=(PATH) {
            (select("state", "any state", STATES, query.state))
            label.visually-hidden for="q" { "intent or order" }
            input id="q" name="q" maxlength=(MAX_TERM) placeholder="intent id (ri_…) or order ref" value=[query.term.as_deref()];
            button type="submit" { "Filter" }
            @if !query.is_empty() { a href=(PATH) { "clear" } }
        }
    }
}

/// The intents; for an operator the changes each one's state allows.
fn intents_table(who: &Who, rows: &[Intent], query: &Query) -> Markup {
    html! {
        @if rows.is_empty() { p.none { "No refund intents" @if !query.is_empty() { " match the filter" } "." } } @else {
            table.refunds {
                thead { tr {
                    th { "Intent" } th { "Created" } th { "Order" } th { "Payment" } th { "Amount" }
                    th { "Reason" } th { "State" } th { "Why it waits / the gateway's words" }
                    @if who.may_act() { th { "Actions" } }
                } }
                tbody { @for i in rows { tr {
                    td { a href=(format!("{PATH}?q={}", enc(&i.id))) { code { (i.id) } } }
                    td { (html::when(i.created_at)) }
                    td { a href=(format!("/trace?q={}", enc(&i.order_ref))) { (i.order_ref) } }
                    td { code { (i.provider) ":" (i.payment_id) } }
                    td { (money(i.amount_minor, &i.currency))
                        @if i.refunded_minor > 0 { br; small { "refunded " (money(i.refunded_minor, &i.currency)) } } }
                    td { (i.reason) }
                    td class=(format!("state {}", i.state)) { (i.state) }
                    td { (note(i)) }
                    @if who.may_act() { td { (actions(who, i)) } }
                } } }
            }
        }
    }
}

/// Why it waits, what the gateway said, who approved it, the refund's id.
fn note(i: &Intent) -> Markup {
    let gateway = i.gateway_message.as_deref().map(|m| match &i.gateway_code {
        Some(c) => format!("{c}: {m}"),
        None => m.to_owned(),
    });
    html! {
        @if let Some(h) = &i.held_because { span.held title=(h) { (truncate(h, 120)) } br; }
        @if let Some(g) = &gateway { span.gateway title=(g) { (truncate(g, 120)) } br; }
        @if let Some(by) = &i.approved_by { small { "by " (by) } " " }
        @if let Some(r) = &i.gateway_refund_id { small { "refund " code { (r) } } " " }
        @if i.attempts > 0 { small { (i.attempts) " attempt(s)" } }
    }
}

/// Approve (`owed`, `failed`) and cancel (`owed`, `approved`, `failed`).
fn actions(who: &Who, i: &Intent) -> Markup {
    let state = i.state.as_str();
    html! {
        @if [STATE_OWED, STATE_FAILED].contains(&state) {
            (intent_form(who, "/refunds/approve", &i.id, "Approve", "approve"))
        }
        @if [STATE_OWED, STATE_APPROVED, STATE_FAILED].contains(&state) {
            (intent_form(who, "/refunds/cancel", &i.id, "Cancel", "purge"))
        }
    }
}

fn intent_form(who: &Who, action: &str, id: &str, label: &str, class: &str) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(who.csrf);
            input type="hidden" name="intent" value=(id);
            button type="submit" class=(class) { (label) }
        }
    }
}
