//! `PUT /v1/products/{sku}` (create, or rename: the stock is set only when
//! the product is new), `POST /v1/products/{sku}/stock` (a delta, so a
//! restock never overwrites a paid order's concurrent decrement) and
//! `GET /v1/products/{sku}`. Every write is audited.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use oncehook_ledger::store::shop::{self, ProductRow};

use crate::audit::{self, Write};
use crate::auth::{self, Authed};
use crate::error::{ApiError, ErrorBody};
use crate::model::{Product, ProductPut, StockDelta};
use crate::state::State;
use crate::validate;

fn product(p: ProductRow) -> Product {
    Product {
        sku: p.sku,
        name: p.name,
        stock: p.stock,
    }
}

/// Creates or renames a product.
#[utoipa::path(put, path = "/v1/products/{sku}", tag = "products",
    params(("sku" = String, Path, description = "[A-Za-z0-9._-], 1 to 64 characters")),
    request_body = ProductPut,
    security(("bearer" = ["products:write"])),
    responses(
        (status = 201, description = "created", body = Product),
        (status = 200, description = "renamed (stock unchanged)", body = Product),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn put(
    auth: Authed<auth::ProductsWrite>,
    state: web::Data<State>,
    sku: web::Path<String>,
    body: web::Json<ProductPut>,
) -> Result<HttpResponse, ApiError> {
    let caller = auth.caller;
    let write = Write::product(&caller, "product.put", &sku);
    let done = async {
        validate::sku("sku", &sku)?;
        let stock = validate::product(&body)?;
        let mut tx = state.pool.begin_in(&caller.scope()).await?;
        let row = shop::put_product(&mut tx, &sku, body.name.trim(), stock).await?;
        let result = if row.created { "created" } else { "renamed" };
        audit::ok(&mut tx, &write, result).await?;
        tx.commit().await?;
        let status = if row.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok(HttpResponse::build(status).json(product(row)))
    }
    .await;
    audit::on_failure(&state, &write, done).await
}

/// Moves a product's stock by a delta.
#[utoipa::path(post, path = "/v1/products/{sku}/stock", tag = "products",
    params(("sku" = String, Path, description = "the product")),
    request_body = StockDelta,
    security(("bearer" = ["products:write"])),
    responses(
        (status = 200, description = "the stock after the delta", body = Product),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn stock(
    auth: Authed<auth::ProductsWrite>,
    state: web::Data<State>,
    sku: web::Path<String>,
    body: web::Json<StockDelta>,
) -> Result<HttpResponse, ApiError> {
    let caller = auth.caller;
    let write = Write::product(&caller, "product.stock", &sku);
    let done = async {
        validate::sku("sku", &sku)?;
        validate::delta(&body)?;
        let mut tx = state.pool.begin_in(&caller.scope()).await?;
        let reason = body.reason.as_deref().unwrap_or("");
        let row = match shop::adjust_stock(&mut tx, &sku, body.delta, reason, &caller.name).await {
            Ok(Some(row)) => row,
            Ok(None) => return Err(ApiError::not_found("product")),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("22003") => {
                return Err(ApiError::invalid(
                    "delta",
                    "the stock would leave its range",
                ));
            }
            Err(e) => return Err(e.into()),
        };
        audit::ok(
            &mut tx,
            &write,
            &format!("delta {:+} → {}", body.delta, row.stock),
        )
        .await?;
        tx.commit().await?;
        Ok(HttpResponse::Ok().json(product(row)))
    }
    .await;
    audit::on_failure(&state, &write, done).await
}

/// A product and its stock now.
#[utoipa::path(get, path = "/v1/products/{sku}", tag = "products",
    params(("sku" = String, Path, description = "the product")),
    security(("bearer" = ["products:write"]), ("bearer" = ["orders:read"])),
    responses(
        (status = 200, description = "the product", body = Product),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn get(
    auth: Authed<auth::ProductsRead>,
    state: web::Data<State>,
    sku: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    validate::sku("sku", &sku)?;
    let mut conn = state.pool.single_in(&auth.caller.scope()).await?;
    let found = shop::product(&mut conn, &sku).await?;
    conn.finish().await?;
    match found {
        Some(row) => Ok(HttpResponse::Ok().json(product(row))),
        None => Err(ApiError::not_found("product")),
    }
}
