//! The platform's admin API for tenants and their API keys
//! (docs/tenants.md, "Onboarding a merchant"): create, list, show, disable
//! and enable a tenant; issue, list and revoke its keys. Every route needs a
//! platform admin key (`[[api.admin_key]]`, scope `admin`); a tenant's key
//! gets 401. Every change is logged with the admin key's name.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use oncehook_common::tenant::TenantId;
use oncehook_tenants::store::{keys, tenants};
use oncehook_tenants::{Status, TenantError};

use crate::admin_model::{KeyIssue, KeyIssued, KeyView, TenantCreate, TenantMailFrom, TenantView};
use crate::auth::{Admin, Administers};
use crate::error::{ApiError, ErrorBody};
use crate::state::State;

/// A tenant id from a path or a body, refused as the API refuses any
/// field.
pub(crate) fn tenant_id(field: &str, raw: &str) -> Result<TenantId, ApiError> {
    TenantId::parse(raw).map_err(|e| ApiError::invalid(field, e.to_string()))
}

/// Creates a tenant.
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "admin",
    request_body = TenantCreate,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "created", body = TenantView),
        (status = "4XX", description = "refused, or the id is taken (409)", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn create_tenant(
    admin: Admin<Administers>,
    state: web::Data<State>,
    body: web::Json<TenantCreate>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id("id", &body.id)?;
    let tenant = tenants::create(&state.pool, &id, &body.name).await?;
    tracing::info!(admin = %admin.caller.name, tenant = %id, "tenant created");
    Ok(HttpResponse::Created().json(TenantView::from(tenant)))
}

/// Every tenant, by id.
#[utoipa::path(get, path = "/v1/admin/tenants", tag = "admin",
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "the tenants", body = [TenantView]),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn list_tenants(
    _admin: Admin<Administers>,
    state: web::Data<State>,
) -> Result<HttpResponse, ApiError> {
    let all: Vec<TenantView> = tenants::list(&state.pool)
        .await?
        .into_iter()
        .map(TenantView::from)
        .collect();
    Ok(HttpResponse::Ok().json(all))
}

/// One tenant.
#[utoipa::path(get, path = "/v1/admin/tenants/{tenant}", tag = "admin",
    params(("tenant" = String, Path, description = "the tenant's id")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "the tenant", body = TenantView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn get_tenant(
    _admin: Admin<Administers>,
    state: web::Data<State>,
    tenant: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id("tenant", &tenant)?;
    match tenants::get(&state.pool, &id).await? {
        Some(t) => Ok(HttpResponse::Ok().json(TenantView::from(t))),
        None => Err(ApiError::not_found("tenant")),
    }
}

/// Disables a tenant: its sources answer 503 within about a second, its
/// keys are refused; its rows stay.
#[utoipa::path(post, path = "/v1/admin/tenants/{tenant}/disable", tag = "admin",
    params(("tenant" = String, Path, description = "the tenant's id")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "disabled", body = TenantView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn disable_tenant(
    admin: Admin<Administers>,
    state: web::Data<State>,
    tenant: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    set_tenant(admin, &state, &tenant, Status::Disabled).await
}

/// Enables a tenant again.
#[utoipa::path(post, path = "/v1/admin/tenants/{tenant}/enable", tag = "admin",
    params(("tenant" = String, Path, description = "the tenant's id")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "enabled", body = TenantView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn enable_tenant(
    admin: Admin<Administers>,
    state: web::Data<State>,
    tenant: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    set_tenant(admin, &state, &tenant, Status::Active).await
}

async fn set_tenant(
    admin: Admin<Administers>,
    state: &State,
    tenant: &str,
    status: Status,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id("tenant", tenant)?;
    let t = tenants::set_status(&state.pool, &id, status).await?;
    tracing::info!(admin = %admin.caller.name, tenant = %id, status = status.as_str(), "tenant status set");
    Ok(HttpResponse::Ok().json(TenantView::from(t)))
}

/// Sets the sender of a tenant's customers' emails (`null`: the
/// deployment's again); the next email the mailer sends uses it.
#[utoipa::path(put, path = "/v1/admin/tenants/{tenant}/mail-from", tag = "admin",
    params(("tenant" = String, Path, description = "the tenant's id")),
    request_body = TenantMailFrom,
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "set", body = TenantView),
        (status = "4XX", description = "refused (422: not one mailbox) or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn set_mail_from(
    admin: Admin<Administers>,
    state: web::Data<State>,
    tenant: web::Path<String>,
    body: web::Json<TenantMailFrom>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id("tenant", &tenant)?;
    let t = tenants::set_mail_from(&state.pool, &id, body.mail_from.as_deref()).await?;
    tracing::info!(admin = %admin.caller.name, tenant = %id, mail_from = ?t.mail_from, "tenant sender set");
    Ok(HttpResponse::Ok().json(TenantView::from(t)))
}

/// Issues an API key for a tenant: the key is in this answer only.
#[utoipa::path(post, path = "/v1/admin/tenants/{tenant}/keys", tag = "admin",
    params(("tenant" = String, Path, description = "the tenant's id")),
    request_body = KeyIssue,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "issued; works within about a second", body = KeyIssued),
        (status = "4XX", description = "refused or no such tenant", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn issue_key(
    admin: Admin<Administers>,
    state: web::Data<State>,
    tenant: web::Path<String>,
    body: web::Json<KeyIssue>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id("tenant", &tenant)?;
    let issued = keys::issue(&state.pool, &id, &body.name, &body.scopes).await?;
    tracing::info!(admin = %admin.caller.name, tenant = %id, key = %issued.key.id, "API key issued");
    Ok(HttpResponse::build(StatusCode::CREATED).json(KeyIssued::from(issued)))
}

/// A tenant's keys, revoked ones included: never a key itself.
#[utoipa::path(get, path = "/v1/admin/tenants/{tenant}/keys", tag = "admin",
    params(("tenant" = String, Path, description = "the tenant's id")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "the keys", body = [KeyView]),
        (status = "4XX", description = "refused or no such tenant", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn list_keys(
    _admin: Admin<Administers>,
    state: web::Data<State>,
    tenant: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id("tenant", &tenant)?;
    if tenants::get(&state.pool, &id).await?.is_none() {
        return Err(TenantError::NotFound(id).into());
    }
    let all: Vec<KeyView> = keys::list(&state.pool, &id)
        .await?
        .into_iter()
        .map(KeyView::from)
        .collect();
    Ok(HttpResponse::Ok().json(all))
}

/// Revokes a key: refused within about a second.
#[utoipa::path(post, path = "/v1/admin/keys/{id}/revoke", tag = "admin",
    params(("id" = String, Path, description = "the key's id (`key_…`)")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "revoked", body = KeyView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn revoke_key(
    admin: Admin<Administers>,
    state: web::Data<State>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    if id.len() > 64 {
        return Err(ApiError::not_found("key"));
    }
    let key = keys::revoke(&state.pool, &id).await?;
    tracing::info!(admin = %admin.caller.name, tenant = %key.tenant, key = %key.id, "API key revoked");
    Ok(HttpResponse::Ok().json(KeyView::from(key)))
}
