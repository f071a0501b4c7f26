//! The operator's actions on dead letters: the dry run that counts and
//! lists what a bulk replay or purge would touch and asks to confirm
//! exactly those IDs, and the confirmed replay and purge, run by the ctl
//! library on the queue, audited, and answered after the snapshot was read
//! again.

use actix_web::{HttpRequest, HttpResponse, web};
use lapin::Connection;
use maud::html;
use oncehook_common::config::ConsoleRole;
use oncehook_ops::broker;
use oncehook_ops::dlq::Filter;
use oncehook_ops::dlq::letter::Letter;
use oncehook_ops::dlq::purge::{self, PurgeArgs};
use oncehook_ops::dlq::replay::{self, ReplayArgs};
use oncehook_ops::output::{Caution, Output, Report, truncate};
use oncehook_ops::store::audit::NewAuditEntry;
use serde_json::Value;
use time::OffsetDateTime;

use super::{Filtered, freshness, letter_table, scope_text, sees};
use crate::auth::{self, Who};
use crate::form::Pairs;
use crate::html::{self, Page};
use crate::state::State;

/// Results are printed as JSON documents; nothing goes to a terminal.
const QUIET: Output = Output { json: true };

/// `POST /letters/preview`: how many dead letters a replay or purge would
/// touch, which ones, and the confirmation form for exactly those.
pub async fn preview(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let verb = match form.get("action").as_deref() {
        Some("purge") => Verb::Purge,
        _ => Verb::Replay,
    };
    let (action, title) = (verb.action(), verb.title());
    let ids = form.all("ids");
    let Filtered {
        filter,
        within,
        view,
    } = match Filtered::read(&who, &state, &form).await {
        Ok(f) => f,
        Err(page) => return page,
    };
    let now = OffsetDateTime::now_utc();
    let chosen: Vec<&Letter> = view
        .snapshot
        .letters
        .iter()
        .filter(|l| sees(&who, l))
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
    html::ok(Page::new(&format!("{title} dead letters"), Some(&who)).body(html! {
        h1 { (title) " dead letters" }
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
                    @if let Verb::Purge = verb { " Delete these " (chosen.len()) " dead letter(s) for good" }
                    @else { " Replay these " (chosen.len()) " dead letter(s) to the queue they came from" }
                }
                button type="submit" class=(action) { (title) " " (chosen.len()) }
                " " a href="/letters" { "Cancel" }
            }
        }
    }))
}

/// `POST /letters/replay`: replays the given IDs (confirmed), audited.
pub async fn replay(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    act(req, state, body, Verb::Replay).await
}

/// `POST /letters/purge`: deletes the given IDs for good (confirmed), audited.
pub async fn purge(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    act(req, state, body, Verb::Purge).await
}

/// What a ctl verb's report says: whether it all went well, its text, its JSON.
type Outcome = (bool, String, Value);

/// The ctl verb behind a confirmed action.
#[derive(Debug, Clone, Copy)]
enum Verb {
    Replay,
    Purge,
}

impl Verb {
    /// The action's name: its path, and the audit trail's word.
    fn action(self) -> &'static str {
        match self {
            Verb::Replay => "replay",
            Verb::Purge => "purge",
        }
    }

    /// The action as a heading.
    fn title(self) -> &'static str {
        match self {
            Verb::Replay => "Replay",
            Verb::Purge => "Purge",
        }
    }

    /// Runs the verb on the queue over exactly `ids`, confirmed.
    async fn run(
        self,
        state: &State,
        conn: &Connection,
        ids: Vec<String>,
    ) -> anyhow::Result<Outcome> {
        Ok(match self {
            Verb::Replay => {
                let args = ReplayArgs {
                    ids,
                    all: false,
                    filter: Filter::default(),
                    caution: Caution {
                        dry_run: false,
                        yes: true,
                    },
                };
                outcome_of(
                    &replay::run(&state.settings, conn, &state.topology, args, &QUIET).await?,
                )
            }
            Verb::Purge => {
                let args = PurgeArgs {
                    ids,
                    all: false,
                    yes: true,
                };
                outcome_of(&purge::run(conn, &state.topology, args, &QUIET).await?)
            }
        })
    }
}

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
    verb: Verb,
) -> HttpResponse {
    let action = verb.action();
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let Some(ids) = confirmed_ids(&form) else {
        return unconfirmed(&who);
    };
    // A tenant's operator acts on its tenants' letters only: every id must
    // be one it sees in the current snapshot.
    if !who.is_platform() {
        let seen = match state.dead_letters.view().await {
            Ok(view) => ids.iter().all(|id| {
                view.snapshot
                    .find(&id.to_ascii_lowercase())
                    .is_some_and(|(letter, _)| sees(&who, letter))
            }),
            Err(_) => false,
        };
        if !seen {
            return auth::forbidden(Some(&who), "these dead letters are not all your tenants'");
        }
    }
    let done = async {
        let conn = broker::connect(&state.settings).await?;
        let done = verb.run(&state, &conn, ids.clone()).await;
        broker::close(conn).await;
        done
    }
    .await;
    if let Err(e) = state.dead_letters.refresh().await {
        tracing::warn!(error = %format!("{e:#}"), action, "could not read the dead letters again after the action");
    }
    finish(&req, &state, &who, verb, &ids, form.get("scope"), done).await
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
    verb: Verb,
    ids: &[String],
    scope: Option<String>,
    outcome: anyhow::Result<(bool, String, Value)>,
) -> HttpResponse {
    let (ok, text, doc) = match outcome {
        Ok(o) => o,
        Err(e) => (false, format!("{e:#}"), Value::Null),
    };
    let action = verb.action();
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
            h1 { (verb.title()) }
            p class=(if ok { "result ok" } else { "result error" }) role="status" { pre { (text) } }
            @if !results.is_null() { (html::value(&results)) }
            @if !recorded { p.error { "Warning: the audit row could not be written; see the console's log." } }
            p { a href="/letters" { "Back to the dead letters" } " · " a href="/audit" { "Audit" } }
        }),
    )
}
