//! `GET /v1/orders/{order_ref}` (the ledger's view of one order) and
//! `GET /v1/orders` (keyset pages by last change, oldest first: a shop
//! polls with `updated_after`, or follows `next_cursor`). The cursor is
//! opaque: the last row's change time and id, base64url.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use oncehook_ledger::store::shop;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::auth::{self, Authed};
use crate::error::{ApiError, ErrorBody};
use crate::model::{ListQuery, Order, OrderPage};
use crate::state::State;
use crate::validate;
use oncehook_ledger::view;

/// One order as the ledger sees it.
#[utoipa::path(get, path = "/v1/orders/{order_ref}", tag = "orders",
    params(("order_ref" = String, Path, description = "the shop's order reference")),
    security(("bearer" = ["orders:read"])),
    responses(
        (status = 200, description = "the order", body = Order),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn get(
    auth: Authed<auth::OrdersRead>,
    state: web::Data<State>,
    order_ref: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    validate::order_ref("order_ref", &order_ref)?;
    let mut conn = state.pool.single_in(&auth.caller.scope()).await?;
    let order = view::order(&mut conn, &order_ref).await?;
    conn.finish().await?;
    match order {
        Some(order) => Ok(HttpResponse::Ok().json(order)),
        None => Err(ApiError::not_found("order")),
    }
}

/// Orders by last change, one keyset page at a time.
#[utoipa::path(get, path = "/v1/orders", tag = "orders",
    params(ListQuery),
    security(("bearer" = ["orders:read"])),
    responses(
        (status = 200, description = "a page", body = OrderPage),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn list(
    auth: Authed<auth::OrdersRead>,
    state: web::Data<State>,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = state.page_size(query.limit)?;
    let status = query.status.as_deref().filter(|s| !s.is_empty());
    if let Some(s) = status
        && (s.len() > 32 || !s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    {
        return Err(ApiError::invalid(
            "status",
            "a status such as pending or paid",
        ));
    }
    let updated_after = match query.updated_after.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(t) => Some(OffsetDateTime::parse(t, &Rfc3339).map_err(|_| {
            ApiError::invalid(
                "updated_after",
                "an RFC 3339 instant (2026-12-01T10:00:00Z)",
            )
        })?),
    };
    let after = match query.cursor.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(c) => Some(decode_cursor(c).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_cursor",
                "not a cursor of this API",
            )
            .with_field("cursor")
        })?),
    };
    let mut conn = state.pool.single_in(&auth.caller.scope()).await?;
    let mut rows = shop::list_orders(
        &mut conn,
        auth.caller.tenant.as_str(),
        status,
        updated_after,
        after,
        i64::from(limit) + 1,
    )
    .await?;
    conn.finish().await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = more
        .then(|| rows.last().map(|r| encode_cursor(r.updated_at, r.id)))
        .flatten();
    let data = rows.into_iter().map(view::summary).collect();
    Ok(HttpResponse::Ok().json(OrderPage { data, next_cursor }))
}

fn encode_cursor(at: OffsetDateTime, id: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{id}", at.unix_timestamp_nanos()))
}

fn decode_cursor(cursor: &str) -> Option<(OffsetDateTime, i64)> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let (nanos, id) = text.split_once(':')?;
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos.parse().ok()?).ok()?;
    Some((at, id.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote() {
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_764_000_000_123_456_000).expect("t");
        assert_eq!(decode_cursor(&encode_cursor(at, 42)), Some((at, 42)));
        assert_eq!(decode_cursor("not a cursor"), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("x:1")), None);
    }
}
