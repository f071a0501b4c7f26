//! What an operator's action did, said on top of the page that answers it,
//! the frame of such a page, and the audit row every action writes: one
//! shape for every page with actions (notifications, refunds), so an action
//! is recorded and shown the same way wherever it is taken.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use maud::{Markup, html};
use oncehook_ops::output::truncate;
use oncehook_ops::store::audit::NewAuditEntry;

use crate::auth::Who;
use crate::html::{self, Page};
use crate::state::State;

/// What an action did.
pub struct Said {
    pub status: StatusCode,
    pub ok: bool,
    pub lines: Vec<String>,
    /// Whether its audit row was written.
    pub recorded: bool,
}

impl Said {
    /// Done, in these words (200).
    pub fn done(lines: Vec<String>) -> Said {
        Said {
            status: StatusCode::OK,
            ok: true,
            lines,
            recorded: false,
        }
    }

    /// Refused with `status`, in these words.
    pub fn refused(status: StatusCode, line: String) -> Said {
        Said {
            status,
            ok: false,
            lines: vec![line],
            recorded: false,
        }
    }

    /// The block on top of the page, with a warning if the audit row is
    /// missing.
    pub fn block(&self) -> Markup {
        html! {
            div class=(if self.ok { "result ok" } else { "result error" }) role="status" {
                @for line in &self.lines { p { (line) } }
            }
            @if !self.recorded { p.error { "Warning: the audit row could not be written; see the console's log." } }
        }
    }
}

/// A page with actions, as shown (200) or answering an action (its status,
/// what it did on top): `title` as the heading with `summary` under it,
/// then `content`, and for a viewer the `hint` of what needs the operator
/// role.
pub fn page(
    who: &Who,
    title: &str,
    said: Option<Said>,
    summary: Markup,
    content: Markup,
    hint: &str,
) -> HttpResponse {
    let status = said.as_ref().map_or(StatusCode::OK, |s| s.status);
    html::respond(
        status,
        Page::new(title, Some(who)).body(html! {
            h1 { (title) }
            p.summary { (summary) }
            @if let Some(s) = &said { (s.block()) }
            (content)
            @if !who.may_act() { p.hint { (hint) } }
        }),
    )
}

/// Writes the audit row of an action; `said` with whether it was written.
pub async fn audited(
    req: &HttpRequest,
    state: &State,
    who: &Who,
    action: &str,
    scope: &str,
    mut said: Said,
) -> Said {
    let address = req.peer_addr().map(|a| a.ip().to_string());
    let result = truncate(&said.lines.join(" "), 2_000);
    said.recorded = state
        .audit(&NewAuditEntry {
            actor: &who.session.user,
            role: who.role.as_str(),
            action,
            letters: &[],
            scope: Some(scope),
            ok: said.ok,
            result: &result,
            address: address.as_deref(),
        })
        .await;
    tracing::info!(user = %who.session.user, action, scope, ok = said.ok, "console action");
    said
}

/// An action the database did not answer: audited as failed (the details
/// go to the log, not the trail), answered with the failure page titled
/// `title`.
pub async fn failed(
    req: &HttpRequest,
    state: &State,
    who: &Who,
    title: &str,
    (action, scope): (&str, &str),
    e: sqlx::Error,
) -> HttpResponse {
    let said = Said::refused(
        StatusCode::BAD_GATEWAY,
        "The database did not answer; the details are in the console's log.".to_owned(),
    );
    audited(req, state, who, action, scope, said).await;
    html::failure(who, title, &anyhow::Error::new(e))
}
