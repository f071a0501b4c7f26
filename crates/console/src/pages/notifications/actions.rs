//! The operator's actions on notifications: replay the failed deliveries of
//! an endpoint, an event or both (never those of a disabled endpoint), and
//! enable an endpoint a 410 Gone disabled (its failed deliveries wait for a
//! replay). Each is audited and answered with the page, what it did on top.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use oncehook_common::config::ConsoleRole;
use oncehook_common::store::notify::{self as store, EndpointState, Filter};
use oncehook_ops::timefmt::short_time;
use sqlx::PgConnection;

use super::view::answer;
use super::{PATH, Query, TITLE};
use crate::auth::{self};
use crate::form::Pairs;
use crate::input::{self, Invalid};
use crate::said::{Said, audited};
use crate::state::State;

/// The audit trail's names of the actions.
const REPLAY: &str = "notify replay";
const ENABLE: &str = "notify enable";

/// `POST /notifications/replay`: the failed deliveries of the form's
/// endpoint and/or event due again now, with a fresh retry schedule.
pub async fn replay(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let query = match Query::parse(&form).and_then(scoped) {
        Ok(q) => q,
        Err(why) => return input::bad_request(&who, TITLE, PATH, &why),
    };
    let scope = query.scope_text();
    let done = async {
        let mut conn = state.pool.single_in(&who.scope).await?;
        let done = replay_in(&mut conn, &query).await?;
        conn.finish().await?;
        Ok::<_, sqlx::Error>(done)
    }
    .await;
    let said = match done {
        Ok(r) => r.said(&scope),
        Err(e) => return crate::said::failed(&req, &state, &who, TITLE, (REPLAY, &scope), e).await,
    };
    let said = audited(&req, &state, &who, REPLAY, &scope, said).await;
    answer(&who, &state, &query, Some(said)).await
}

/// A replay's scope: an endpoint, an event or both (the page's status
/// filter does not apply: only failed deliveries are replayed).
fn scoped(q: Query) -> Result<Query, Invalid> {
    if q.endpoint.is_none() && q.event_id.is_none() {
        return Err(Invalid(
            "A replay names an endpoint, an event or both.".to_owned(),
        ));
    }
    Ok(Query { status: None, ..q })
}

/// What a replay did: the failed deliveries due again, and the disabled
/// endpoints (with their failed deliveries in the scope) it left.
struct Replayed {
    replayed: u64,
    left: Vec<(i64, EndpointState)>,
}

/// Replays what `q` names; first notes the disabled endpoints in its
/// scope, whose failed rows the store leaves.
async fn replay_in(conn: &mut PgConnection, q: &Query) -> Result<Replayed, sqlx::Error> {
    let disabled: Vec<EndpointState> = store::endpoints(conn)
        .await?
        .into_iter()
        .filter(|e| e.disabled_at.is_some())
        .filter(|e| q.endpoint.as_ref().is_none_or(|n| *n == e.name))
        .collect();
    let of_event = match &q.event_id {
        Some(_) if !disabled.is_empty() => {
            let failed = Filter {
                status: Some("failed".to_owned()),
                limit: 1_000,
                ..q.replay_filter()
            };
            Some(store::list(conn, &failed).await?)
        }
        _ => None,
    };
    let left = disabled
        .into_iter()
        .filter_map(|e| {
            let failed = match &of_event {
                Some(rows) => rows.iter().filter(|r| r.endpoint == e.name).count() as i64,
                None => e.failed,
            };
            // A disabled endpoint named by the form is always said.
            (failed > 0 || q.endpoint.is_some()).then_some((failed, e))
        })
        .collect();
    let replayed = store::replay(conn, &q.replay_filter()).await?;
    Ok(Replayed { replayed, left })
}

impl Replayed {
    /// In words; a conflict (409) when only disabled endpoints' rows were
    /// in the scope.
    fn said(&self, scope: &str) -> Said {
        let mut lines = vec![if self.replayed > 0 {
            format!(
                "{} failed delivery(ies) of {scope} due again now, with a fresh retry schedule; the notifier sends them within a second.",
                self.replayed
            )
        } else {
            format!("No failed delivery of {scope} was made due again.")
        }];
        for (failed, e) in &self.left {
            let why = e
                .disabled_reason
                .as_deref()
                .unwrap_or("it answered 410 Gone");
            let since = e.disabled_at.map(short_time).unwrap_or_default();
            lines.push(format!(
                "Left {failed} failed delivery(ies) of {}: the endpoint is disabled ({why}, since {since}). Enable it first, then replay: a replay alone enables nothing.",
                e.name
            ));
        }
        let refused = self.replayed == 0 && !self.left.is_empty();
        Said {
            status: if refused {
                StatusCode::CONFLICT
            } else {
                StatusCode::OK
            },
            ok: !refused,
            lines,
            recorded: false,
        }
    }
}

/// `POST /notifications/enable`: the form's endpoint enabled again; its
/// failed deliveries stay failed until a replay.
pub async fn enable(req: HttpRequest, state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    let form = Pairs::parse(&body);
    let who = match auth::action(&req, &state, &form, ConsoleRole::Operator) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let name = match input::name(&form, "endpoint")
        .and_then(|n| n.ok_or_else(|| Invalid("Enabling names an endpoint.".to_owned())))
    {
        Ok(n) => n,
        Err(why) => return input::bad_request(&who, TITLE, PATH, &why),
    };
    let done = async {
        let mut conn = state.pool.single_in(&who.scope).await?;
        let done = store::enable(&mut conn, &name).await?;
        conn.finish().await?;
        Ok::<_, sqlx::Error>(done)
    }
    .await;
    let said = match done {
        Ok(true) => Said {
            status: StatusCode::OK,
            ok: true,
            lines: vec![
                format!("{name} enabled: the notifier sends it new events again."),
                format!(
                    "Its failed deliveries stay failed until you replay them: that is a separate step (Replay below, or `oncehookctl notify replay --endpoint {name}`)."
                ),
            ],
            recorded: false,
        },
        Ok(false) => Said {
            status: StatusCode::NOT_FOUND,
            ok: false,
            lines: vec![format!("No endpoint is named {name}; nothing was enabled.")],
            recorded: false,
        },
        Err(e) => return crate::said::failed(&req, &state, &who, TITLE, (ENABLE, &name), e).await,
    };
    let said = audited(&req, &state, &who, ENABLE, &name, said).await;
    answer(&who, &state, &Query::of_endpoint(&name), Some(said)).await
}
