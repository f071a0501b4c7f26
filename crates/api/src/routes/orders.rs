//! `POST /v1/orders`: an order with its items and gateway references, in
//! one transaction with its `Idempotency-Key` (required). The key is
//! taken first (insert first, per API key): a concurrent post with the
//! same key waits for that transaction and then answers what it stored, so
//! twenty parallel posts make one order. The same key with another body →
//! 422 `idempotency_key_reused`; an existing `order_ref` with the same
//! content → 200 with the order, with other content → 409
//! `order_ref_conflict`. Only a created order is stored under the key: a
//! refusal rolls back, and a retry is checked again. An answer repeated
//! from the key says so in `Idempotent-Replayed: true`. A transaction that
//! lost to another (a deadlock) runs again from its start (`oncehook_common::contended`).

use crate::store::{self, KeyUse};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use oncehook_common::contended;
use oncehook_ledger::store::shop::{self, ShopOrder};
use oncehook_ledger::{Create, Creation, Ledger, view};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::audit::{self, Write};
use crate::auth::{self, Authed, Caller};
use crate::error::{ApiError, ErrorBody};
use crate::model::{Order, OrderCreate};
use crate::state::State;
use crate::validate;

/// The longest `Idempotency-Key`.
const MAX_KEY: usize = 255;
/// On an answer repeated from its `Idempotency-Key`.
const REPLAYED: &str = "Idempotent-Replayed";

/// The answer to a create: its status and body, and whether the key had
/// given it before.
struct Answer {
    status: StatusCode,
    body: Value,
    replayed: bool,
}

/// Creates an order.
#[utoipa::path(post, path = "/v1/orders", tag = "orders",
    params(("Idempotency-Key" = String, Header, description = "required; the same key and body answer the same")),
    request_body = OrderCreate,
    security(("bearer" = ["orders:write"])),
    responses(
        (status = 201, description = "created (`Idempotent-Replayed: true` when repeated from the key)", body = Order,
            headers(("Idempotent-Replayed" = String, description = "`true` on an answer repeated from its Idempotency-Key"))),
        (status = 200, description = "the order exists with this content", body = Order,
            headers(("Idempotent-Replayed" = String, description = "`true` on an answer repeated from its Idempotency-Key"))),
        (status = "4XX", description = "refused: validation_failed, malformed_json, idempotency_key_reused, order_ref_conflict, …", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn create(
    auth: Authed<auth::OrdersWrite>,
    req: HttpRequest,
    state: web::Data<State>,
    body: web::Json<OrderCreate>,
) -> Result<HttpResponse, ApiError> {
    let caller = auth.caller;
    let write = Write::order(&caller, "order.create", &body.order_ref);
    let done = async {
        let key = idempotency_key(&req)?;
        let order = validate::order(&body, state.max_items)?;
        let digest = hex::encode(Sha256::digest(
            serde_json::to_vec(&body.0).map_err(|_| ApiError::invalid("body", "not JSON"))?,
        ));
        let answer = contended::transaction("order.create", || {
            create_once(&state, &caller, &write, &key, &digest, &order)
        })
        .await?;
        let mut response = HttpResponse::build(answer.status);
        if answer.replayed {
            response.insert_header((REPLAYED, "true"));
        }
        Ok(response.json(answer.body))
    }
    .await;
    audit::on_failure(&state, &write, done).await
}

fn idempotency_key(req: &HttpRequest) -> Result<String, ApiError> {
    let field = "Idempotency-Key";
    let Some(value) = req.headers().get(field) else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "idempotency_key_required",
            "POST /v1/orders needs an Idempotency-Key header",
        )
        .with_field(field));
    };
    match value.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= MAX_KEY && k.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(k.to_owned())
        }
        _ => Err(ApiError::invalid(
            field,
            format!("1 to {MAX_KEY} printable ASCII characters"),
        )),
    }
}

/// The order's creation under its key, or the answer the key already has.
async fn create_once(
    state: &State,
    caller: &Caller,
    write: &Write,
    key: &str,
    digest: &str,
    order: &ShopOrder,
) -> Result<Answer, ApiError> {
    let mut tx = state.pool.begin_in(&caller.scope()).await?;
    let key_use = store::take_idempotency_key(&mut tx, &caller.name, key, digest).await?;
    if let Some((status, body)) = answered_before(key_use, digest)? {
        return Ok(Answer {
            status,
            body,
            replayed: true,
        });
    }
    let skus: Vec<String> = order.items.iter().map(|i| i.sku.clone()).collect();
    if let Some(missing) = shop::missing_skus(&mut tx, &skus).await?.first() {
        let at = order_index(order, missing);
        return Err(ApiError::invalid(
            &format!("items[{at}].sku"),
            format!("no product {missing:?}: create it with PUT /v1/products/{{sku}}"),
        ));
    }
    // One road: the references locked (webhooks that came before the
    // order wait for them), the order, the webhooks that waited applied.
    let (status, result) = match Ledger::default().apply(&mut tx, Create { order }).await? {
        Creation::Created { applied } => {
            if applied > 0 {
                tracing::info!(order_ref = %order.order_ref, applied, "order created with the webhooks that waited for it");
            }
            (StatusCode::CREATED, "created")
        }
        Creation::RefTaken => same_content(&mut tx, order).await?,
        Creation::GatewayRefTaken(g) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "gateway_ref_conflict",
                "this gateway reference belongs to another order",
            )
            .with_field(format!("gateway_refs.{}", g.gateway)));
        }
    };
    let view: Order = view::order(&mut tx, &order.order_ref)
        .await?
        .ok_or_else(|| ApiError::not_found("order"))?;
    let json = serde_json::to_value(&view).unwrap_or(Value::Null);
    store::finish_idempotency(
        &mut tx,
        &caller.name,
        key,
        i32::from(status.as_u16()),
        &json,
    )
    .await?;
    audit::ok(&mut tx, write, result).await?;
    tx.commit().await?;
    Ok(Answer {
        status,
        body: json,
        replayed: false,
    })
}

/// The position of `sku` in the request (items are validated by sku).
fn order_index(order: &ShopOrder, sku: &str) -> usize {
    order.items.iter().position(|i| i.sku == sku).unwrap_or(0)
}

async fn same_content(
    conn: &mut sqlx::PgConnection,
    order: &ShopOrder,
) -> Result<(StatusCode, &'static str), ApiError> {
    match shop::shop_order(conn, &order.order_ref).await? {
        Some((_, existing)) if existing == *order => Ok((StatusCode::OK, "exists")),
        _ => Err(ApiError::new(
            StatusCode::CONFLICT,
            "order_ref_conflict",
            "an order with this order_ref exists with other content",
        )
        .with_field("order_ref")),
    }
}

/// The answer a key already gave (`Some`), a refusal, or `None` for a key
/// taken now.
fn answered_before(key_use: KeyUse, digest: &str) -> Result<Option<(StatusCode, Value)>, ApiError> {
    match key_use {
        KeyUse::Fresh => Ok(None),
        KeyUse::Used { request_sha256, .. } if request_sha256 != digest => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this Idempotency-Key was used with another request body",
        )
        .with_field("Idempotency-Key")),
        KeyUse::Used {
            status_code: Some(code),
            response: Some(response),
            ..
        } => {
            let status = u16::try_from(code)
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::OK);
            Ok(Some((status, response)))
        }
        KeyUse::Used { .. } => Err(ApiError::new(
            StatusCode::CONFLICT,
            "idempotency_key_in_use",
            "a request with this Idempotency-Key is still being answered; retry",
        )),
    }
}
