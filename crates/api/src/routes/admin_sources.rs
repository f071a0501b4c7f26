//! The platform's admin API for sources (docs/tenants.md, "Onboarding a
//! merchant" and "Rotating a signing secret"): add a tenant's gateway
//! account, list and show sources, add a signing secret and retire an old
//! one, disable and enable a source — and the feed ingest reads every
//! second (`GET /v1/admin/feed/sources?since=N`, the admin scope
//! `sources:feed`), whose secrets stay sealed. No answer of these carries a
//! secret in the clear; every change is logged with the admin key's name.

use actix_web::{HttpResponse, web};
use oncehook_common::config::SourceFacts;
use oncehook_tenants::Status;
use oncehook_tenants::store::sources::{self, NewSource};

use crate::admin_model::{
    FeedQuery, SecretAdd, SourceChangeView, SourceCreate, SourceView, SourcesFeedPage, SourcesQuery,
};
use crate::auth::{Admin, Administers, ReadsFeed};
use crate::error::{ApiError, ErrorBody};
use crate::routes::admin::tenant_id;
use crate::state::State;

/// Adds a source for a tenant; its webhooks are taken within about two
/// seconds.
#[utoipa::path(post, path = "/v1/admin/sources", tag = "admin",
    request_body = SourceCreate,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "created", body = SourceView),
        (status = "4XX", description = "refused (422: the source's checks; 409: the name is taken)", body = ErrorBody),
        (status = 503, description = "database unavailable, or no key ring to seal with", body = ErrorBody)))]
pub async fn create(
    admin: Admin<Administers>,
    state: web::Data<State>,
    body: web::Json<SourceCreate>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let tenant = tenant_id("tenant", &body.tenant)?;
    let source = sources::create(
        &state.pool,
        state.ring.as_ref(),
        NewSource {
            facts: SourceFacts {
                name: &body.name,
                gateway: &body.gateway,
                tolerance_secs: body.tolerance_secs,
                merchant_key: body.merchant_key.filter(|k| !k.trim().is_empty()),
                tenant,
            },
            secret: body.secret,
        },
    )
    .await?;
    tracing::info!(admin = %admin.caller.name, source = %source.name, tenant = %source.tenant,
        gateway = %source.gateway, "source created");
    Ok(HttpResponse::Created().json(SourceView::from(source)))
}

/// The sources made at runtime, or one tenant's.
#[utoipa::path(get, path = "/v1/admin/sources", tag = "admin",
    params(SourcesQuery),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "the sources", body = [SourceView]),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn list(
    _admin: Admin<Administers>,
    state: web::Data<State>,
    query: web::Query<SourcesQuery>,
) -> Result<HttpResponse, ApiError> {
    let tenant = match query.tenant.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => Some(tenant_id("tenant", t)?),
        None => None,
    };
    let all: Vec<SourceView> = sources::list(&state.pool, tenant.as_ref())
        .await?
        .into_iter()
        .map(SourceView::from)
        .collect();
    Ok(HttpResponse::Ok().json(all))
}

/// One source.
#[utoipa::path(get, path = "/v1/admin/sources/{name}", tag = "admin",
    params(("name" = String, Path, description = "the source's name")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "the source", body = SourceView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn get(
    _admin: Admin<Administers>,
    state: web::Data<State>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    match sources::get(&state.pool, &name).await? {
        Some(s) => Ok(HttpResponse::Ok().json(SourceView::from(s))),
        None => Err(ApiError::not_found("source")),
    }
}

/// Adds a signing secret (rotation): the old and the new both verify
/// until the old is retired.
#[utoipa::path(post, path = "/v1/admin/sources/{name}/secrets", tag = "admin",
    params(("name" = String, Path, description = "the source's name")),
    request_body = SecretAdd,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "added; verifies within about two seconds", body = SourceView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable, or no key ring to seal with", body = ErrorBody)))]
pub async fn add_secret(
    admin: Admin<Administers>,
    state: web::Data<State>,
    name: web::Path<String>,
    body: web::Json<SecretAdd>,
) -> Result<HttpResponse, ApiError> {
    let source = sources::add_secret(&state.pool, state.ring.as_ref(), &name, &body.secret).await?;
    let newest = source.secrets.last().map_or(0, |s| s.no);
    tracing::info!(admin = %admin.caller.name, source = %source.name, secret = newest, "signing secret added");
    Ok(HttpResponse::Created().json(SourceView::from(source)))
}

/// Retires a signing secret: it verifies nothing from then on. The last
/// live one cannot be retired (409).
#[utoipa::path(post, path = "/v1/admin/sources/{name}/secrets/{no}/retire", tag = "admin",
    params(("name" = String, Path, description = "the source's name"),
        ("no" = i32, Path, description = "the secret's number")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "retired", body = SourceView),
        (status = "4XX", description = "refused, not found, or its last secret (409)", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn retire_secret(
    admin: Admin<Administers>,
    state: web::Data<State>,
    path: web::Path<(String, i32)>,
) -> Result<HttpResponse, ApiError> {
    let (name, no) = path.into_inner();
    let source = sources::retire_secret(&state.pool, &name, no).await?;
    tracing::info!(admin = %admin.caller.name, source = %source.name, secret = no, "signing secret retired");
    Ok(HttpResponse::Ok().json(SourceView::from(source)))
}

/// Disables a source: its webhooks are answered 503 with `Retry-After`
/// within about two seconds (the gateway retries; nothing is accepted).
#[utoipa::path(post, path = "/v1/admin/sources/{name}/disable", tag = "admin",
    params(("name" = String, Path, description = "the source's name")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "disabled", body = SourceView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn disable(
    admin: Admin<Administers>,
    state: web::Data<State>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    set(admin, &state, &name, Status::Disabled).await
}

/// Enables a source again.
#[utoipa::path(post, path = "/v1/admin/sources/{name}/enable", tag = "admin",
    params(("name" = String, Path, description = "the source's name")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "enabled", body = SourceView),
        (status = "4XX", description = "refused or not found", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn enable(
    admin: Admin<Administers>,
    state: web::Data<State>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    set(admin, &state, &name, Status::Active).await
}

async fn set(
    admin: Admin<Administers>,
    state: &State,
    name: &str,
    status: Status,
) -> Result<HttpResponse, ApiError> {
    let source = sources::set_status(&state.pool, name, status).await?;
    tracing::info!(admin = %admin.caller.name, source = %source.name, status = status.as_str(), "source status set");
    Ok(HttpResponse::Ok().json(SourceView::from(source)))
}

/// The sources changed since `since` (ingest's feed), secrets sealed.
#[utoipa::path(get, path = "/v1/admin/feed/sources", tag = "admin",
    params(FeedQuery),
    security(("bearer" = ["sources:feed"])),
    responses(
        (status = 200, description = "the changes and the version to ask from next", body = SourcesFeedPage),
        (status = "4XX", description = "refused", body = ErrorBody),
        (status = 503, description = "database unavailable", body = ErrorBody)))]
pub async fn feed(
    _admin: Admin<ReadsFeed>,
    state: web::Data<State>,
    query: web::Query<FeedQuery>,
) -> Result<HttpResponse, ApiError> {
    let since = query.since.unwrap_or(0);
    if since < 0 {
        return Err(ApiError::invalid("since", "0 or a version the feed gave"));
    }
    let page = sources::changes(&state.pool, since).await?;
    Ok(HttpResponse::Ok().json(SourcesFeedPage {
        version: page.version,
        sources: page
            .sources
            .into_iter()
            .map(SourceChangeView::from)
            .collect(),
    }))
}
