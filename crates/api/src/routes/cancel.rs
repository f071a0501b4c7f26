//! `POST /v1/orders/{order_ref}/cancel`: the shop gives up on an order. One
//! more fact in the ledger (`oncehook_ledger::cancel`): the order
//! is `cancelled`, a payment it had or gets is owed back (`needs_refund`),
//! its stock is not taken (or given back). Cancelling twice answers the
//! same order again. A transaction that lost to another (a deadlock) runs
//! again from its start (`oncehook_common::contended`).

use actix_web::{HttpResponse, web};
use oncehook_common::{contended, otel};
use oncehook_ledger::cancel::Cancelled;
use oncehook_ledger::{Cancel, Ledger};

use crate::audit::{self, Write};
use crate::auth::{self, Authed};
use crate::error::{ApiError, ErrorBody};
use crate::model::{Order, OrderCancel};
use crate::state::State;
use oncehook_ledger::view;

/// The longest reason kept.
const MAX_REASON: usize = 500;

/// Cancels an order.
#[utoipa::path(post, path = "/v1/orders/{order_ref}/cancel", tag = "orders",
    params(("order_ref" = String, Path, description = "the shop's reference")),
    request_body = OrderCancel,
    security(("bearer" = ["orders:write"])),
    responses(
        (status = 200, description = "the order, cancelled", body = Order),
        (status = "4XX", description = "refused: not_found, validation_failed, malformed_json, …", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn cancel(
    auth: Authed<auth::OrdersWrite>,
    state: web::Data<State>,
    order_ref: web::Path<String>,
    body: web::Json<OrderCancel>,
) -> Result<HttpResponse, ApiError> {
    let caller = auth.caller;
    let write = Write::order(&caller, "order.cancel", &order_ref);
    let done = async {
        let reason = body.reason.as_deref().unwrap_or("").trim();
        if reason.chars().count() > MAX_REASON {
            return Err(ApiError::invalid(
                "reason",
                format!("at most {MAX_REASON} characters"),
            ));
        }
        let trace = otel::current_traceparent();
        let cancel = Cancel {
            order_ref: &order_ref,
            by: &caller.name,
            reason,
            trace_parent: trace.as_deref(),
        };
        let view = contended::transaction("order.cancel", || {
            cancel_once(&state, &write, &order_ref, cancel)
        })
        .await?;
        Ok(HttpResponse::Ok().json(view))
    }
    .await;
    audit::on_failure(&state, &write, done).await
}

/// The cancellation in one transaction; the order as it is then.
async fn cancel_once(
    state: &State,
    write: &Write,
    order_ref: &str,
    cancel: Cancel<'_>,
) -> Result<Order, ApiError> {
    let mut tx = state.pool.begin_in(&write.scope).await?;
    let result = match Ledger::default().apply(&mut tx, cancel).await? {
        Cancelled::Unknown => return Err(ApiError::not_found("order")),
        Cancelled::Now => "cancelled",
        Cancelled::Already => "already cancelled",
    };
    let view: Order = view::order(&mut tx, order_ref)
        .await?
        .ok_or_else(|| ApiError::not_found("order"))?;
    audit::ok(&mut tx, write, result).await?;
    tx.commit().await?;
    Ok(view)
}
