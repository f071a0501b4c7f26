//! `GET /v1/events`: the order events in commit order, a page at a time,
//! for a shop that was away (or prefers to pull): the same events the
//! notifier delivers, each with the order's current snapshot. The cursor
//! never skips an event committed after it was handed out.

use actix_web::{HttpResponse, web};
use oncehook_ledger::store::order_events::{self, Cursor};

use crate::auth::{self, Authed};
use crate::error::{ApiError, ErrorBody};
use crate::model::{EventPage, EventsQuery};
use crate::state::State;
use oncehook_ledger::render as events;

/// The most types one query may name.
const MAX_TYPES: usize = 16;

/// Order events after a cursor.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(EventsQuery),
    security(("bearer" = ["events:read"])),
    responses(
        (status = 200, description = "a page", body = EventPage),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn list(
    auth: Authed<auth::EventsRead>,
    state: web::Data<State>,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = state.page_size(query.limit)?;
    let after = match query.after.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(
            Cursor::decode(text)
                .ok_or_else(|| ApiError::invalid("after", "the next_cursor of an earlier page"))?,
        ),
    };
    let types = types(query.kind.as_deref())?;
    let mut conn = state.pool.single_in(&auth.caller.scope()).await?;
    // One more than asked: whether more follow.
    let mut rows = order_events::page(&mut conn, after, &types, i64::from(limit) + 1).await?;
    let has_more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = rows
        .last()
        .map(|r| Cursor {
            txid: r.txid,
            seq: r.seq,
        })
        .or(after)
        .unwrap_or(Cursor { txid: 0, seq: 0 });
    let mut data = Vec::with_capacity(rows.len());
    for row in &rows {
        if let Some(event) = events::render(&mut conn, row).await? {
            data.push(event);
        }
    }
    conn.finish().await?;
    Ok(HttpResponse::Ok().json(EventPage {
        data,
        next_cursor: next.encode(),
        has_more,
    }))
}

/// `type=order.paid,order.refunded`, checked.
fn types(raw: Option<&str>) -> Result<Vec<String>, ApiError> {
    let Some(raw) = raw.filter(|s| !s.is_empty()) else {
        return Ok(Vec::new());
    };
    let types: Vec<String> = raw.split(',').map(|t| t.trim().to_owned()).collect();
    let well_formed = |t: &String| {
        !t.is_empty()
            && t.len() <= 64
            && t.bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_')
    };
    if types.len() > MAX_TYPES || !types.iter().all(well_formed) {
        return Err(ApiError::invalid(
            "type",
            format!("up to {MAX_TYPES} comma-separated event types such as order.paid"),
        ));
    }
    Ok(types)
}
