//! The operator's actions on refunds: approve an intent that waits (`owed`)
//! or that the gateway refused (`failed`), so the refunder's next pass
//! sends it; cancel one nothing was sent for; pause and resume every
//! refunder (the kill switch). Each is audited and answered with the page,
//! what it did on top; a change the intent's state does not allow is 409.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use oncehook_common::config::ConsoleRole;
use oncehook_ledger::money;
use oncehook_ledger::store::refund_intents::{self as store, Intent};
use sqlx::PgConnection;

use super::view::answer;
use super::{PATH, Query, TITLE};
use crate::auth::{self};
use crate::form::Pairs;
use crate::input::{self, Invalid};
use crate::said::{Said, audited};
use crate::state::State;
use oncehook_common::store::scope::Scope;

/// The audit trail's names of the actions.
const APPROVE: &str = "refund approve";
const CANCEL: &str = "refund cancel";
const PAUSE: &str = "refunds pause";
const RESUME: &str = "refunds resume";

/// The audit scope of the kill switch.
const EVERY_REFUNDER: &str = "every refunder";

/// A change of one intent's state.
#[derive(Debug, Clone, Copy)]
enum Change {
    Approve,
    Cancel,
}

impl Change {
    fn action(self) -> &'static str {
        match self {
            Change::Approve => APPROVE,
            Change::Cancel => CANCEL,
        }
    }

    /// The states it takes an intent from, and the one it leaves it in.
    fn rule(self) -> (&'static str, &'static str) {
        match self {
            Change::Approve => ("owed or failed", "approved"),
            Change::Cancel => ("owed, approved or failed", "cancelled"),
        }
    }
}

/// `POST /refunds/approve`: the form's intent approved (from `owed` or
/// `failed`); the refunder's next pass sends it.
pub async fn approve(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    change(req, state, body, Change::Approve).await
}

/// `POST /refunds/cancel`: the form's intent cancelled (from `owed`,
/// `approved` or `failed`); nothing is sent for it.
pub async fn cancel(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    change(req, state, body, Change::Cancel).await
}

async fn change(
    req: HttpRequest,
    state: web::Data<State>,
    body: web::Bytes,
    change: Change,
) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let id = match input::refund_intent(&form, "intent").and_then(|i| {
        i.ok_or_else(|| Invalid("Approving or cancelling names a refund intent.".to_owned()))
    }) {
        Ok(i) => i,
        Err(why) => return input::bad_request(&who, TITLE, PATH, &why),
    };
    let by = format!("{}@console", who.session.user);
    let done = async {
        let mut conn = state.pool.single_in(&who.scope).await?;
        let done = change_in(&mut conn, &id, change, &by).await?;
        conn.finish().await?;
        Ok::<_, sqlx::Error>(done)
    }
    .await;
    let said = match done {
        Ok(o) => o.said(&id, change),
        Err(e) => {
            return crate::said::failed(&req, &state, &who, TITLE, (change.action(), &id), e).await;
        }
    };
    let said = audited(&req, &state, &who, change.action(), &id, said).await;
    answer(&who, &state, &Query::of(&id), Some(said)).await
}

/// What a change found: no such intent, the intent changed (as it was
/// before), or refused (as it is now).
enum Outcome {
    Missing,
    Done(Intent),
    Refused(Intent),
}

async fn find_one(conn: &mut PgConnection, id: &str) -> Result<Option<Intent>, sqlx::Error> {
    Ok(store::find(conn, id)
        .await?
        .into_iter()
        .find(|i| i.id == id))
}

/// Approves (recording the payment's source, as the CLI does) or cancels
/// `id` as `by`; the store changes it only from the states the rule allows.
async fn change_in(
    conn: &mut PgConnection,
    id: &str,
    change: Change,
    by: &str,
) -> Result<Outcome, sqlx::Error> {
    let Some(before) = find_one(conn, id).await? else {
        return Ok(Outcome::Missing);
    };
    let done = match change {
        Change::Approve => store::approve(conn, id, before.source.as_deref(), by).await?,
        Change::Cancel => store::cancel(conn, id, by).await?,
    };
    if done {
        return Ok(Outcome::Done(before));
    }
    // Its state now: it may have moved since it was read.
    Ok(match find_one(conn, id).await? {
        Some(now) => Outcome::Refused(now),
        None => Outcome::Missing,
    })
}

/// Why an intent in `state` can no longer be changed, in words.
fn why(state: &str) -> &'static str {
    match state {
        "sending" => "a refunder is sending it to the gateway now",
        "sent" => "the gateway already holds the refund; its fact settles the intent",
        "settled" => "the books show the payment refunded",
        "cancelled" => "it was cancelled; nothing is sent for it",
        "approved" => "it is approved already; the refunder sends it",
        _ => "its state does not allow it",
    }
}

impl Outcome {
    fn said(&self, id: &str, change: Change) -> Said {
        let (allowed, verb) = change.rule();
        match self {
            Outcome::Missing => Said::refused(
                StatusCode::NOT_FOUND,
                format!("No refund intent has the id {id}; nothing was changed."),
            ),
            Outcome::Refused(now) => Said::refused(
                StatusCode::CONFLICT,
                format!(
                    "{id} is {} ({}): only an intent that is {allowed} can be {verb}. Nothing was changed.",
                    now.state,
                    why(&now.state)
                ),
            ),
            Outcome::Done(i) => {
                let amount = money(i.outstanding(), &i.currency);
                Said::done(vec![match change {
                    Change::Approve => format!(
                        "{id} approved: the refunder's next pass sends {amount} back for order {} (payment {}:{}), while refunds are running and on for its source.",
                        i.order_ref, i.provider, i.payment_id
                    ),
                    Change::Cancel => format!(
                        "{id} cancelled (it was {}): oncehook sends nothing for order {} (payment {}:{}); {amount} is not refunded by oncehook.",
                        i.state, i.order_ref, i.provider, i.payment_id
                    ),
                }])
            }
        }
    }
}

/// `POST /refunds/pause`: the kill switch; no refunder sends anything.
pub async fn pause(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    switch(req, state, body, true).await
}

/// `POST /refunds/resume`: the refunders send again.
pub async fn resume(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    switch(req, state, body, false).await
}

async fn switch(
    req: HttpRequest,
    state: web::Data<State>,
    body: web::Bytes,
    paused: bool,
) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    if !who.is_platform() {
        return auth::forbidden(
            Some(&who),
            "the refunds' kill switch stops every tenant's refunder: a platform operator's",
        );
    }
    let action = if paused { PAUSE } else { RESUME };
    let by = format!("{}@console", who.session.user);
    let done = async {
        let mut conn = state.pool.single_in(&Scope::Platform).await?;
        store::set_paused(&mut conn, paused, &by).await?;
        conn.finish().await?;
        Ok::<_, sqlx::Error>(())
    }
    .await;
    if let Err(e) = done {
        return crate::said::failed(&req, &state, &who, TITLE, (action, EVERY_REFUNDER), e).await;
    }
    let line = if paused {
        "Refunds paused: no refunder sends anything until they are resumed (a send already in flight finishes); intents are still minted and decided."
    } else {
        "Refunds resumed: the refunders send approved intents again."
    };
    let said = Said::done(vec![line.to_owned()]);
    let said = audited(&req, &state, &who, action, EVERY_REFUNDER, said).await;
    answer(&who, &state, &Query::default(), Some(said)).await
}
