//! The routes, in one table ([`routes!`]) that both registers them and
//! lists them (`ROUTES`, which the OpenAPI test holds to the document), and
//! the extractors' failures as JSON errors: malformed JSON, a wrong content
//! type, an oversized body, a bad query or path, an unknown route, a wrong
//! method.

pub mod admin;
pub mod admin_sources;
pub mod cancel;
pub mod events;
pub mod orders;
pub mod products;
pub mod read;

use actix_web::error::{JsonPayloadError, QueryPayloadError};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::error::{ApiError, field_of};

/// Registers each route and lists it as `(method, path)`.
macro_rules! routes {
    ($($method:ident $path:literal => $handler:path;)+) => {
        /// Every route the API serves, as `(METHOD, path)`.
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),+];

        fn register(cfg: &mut web::ServiceConfig) {
            $(cfg.route($path, routes!(@method $method).to($handler));)+
        }
    };
    (@method GET) => { web::get() };
    (@method PUT) => { web::put() };
    (@method POST) => { web::post() };
}

routes! {
    PUT "/v1/products/{sku}" => products::put;
    GET "/v1/products/{sku}" => products::get;
    POST "/v1/products/{sku}/stock" => products::stock;
    POST "/v1/orders" => orders::create;
    GET "/v1/orders" => read::list;
    GET "/v1/orders/{order_ref}" => read::get;
    POST "/v1/orders/{order_ref}/cancel" => cancel::cancel;
    GET "/v1/events" => events::list;
    POST "/v1/admin/tenants" => admin::create_tenant;
    GET "/v1/admin/tenants" => admin::list_tenants;
    GET "/v1/admin/tenants/{tenant}" => admin::get_tenant;
    POST "/v1/admin/tenants/{tenant}/disable" => admin::disable_tenant;
    POST "/v1/admin/tenants/{tenant}/enable" => admin::enable_tenant;
    PUT "/v1/admin/tenants/{tenant}/mail-from" => admin::set_mail_from;
    POST "/v1/admin/tenants/{tenant}/keys" => admin::issue_key;
    GET "/v1/admin/tenants/{tenant}/keys" => admin::list_keys;
    POST "/v1/admin/keys/{id}/revoke" => admin::revoke_key;
    POST "/v1/admin/sources" => admin_sources::create;
    GET "/v1/admin/sources" => admin_sources::list;
    GET "/v1/admin/sources/{name}" => admin_sources::get;
    POST "/v1/admin/sources/{name}/secrets" => admin_sources::add_secret;
    POST "/v1/admin/sources/{name}/secrets/{no}/retire" => admin_sources::retire_secret;
    POST "/v1/admin/sources/{name}/disable" => admin_sources::disable;
    POST "/v1/admin/sources/{name}/enable" => admin_sources::enable;
    GET "/v1/admin/feed/sources" => admin_sources::feed;
    GET "/v1/openapi.json" => crate::openapi::serve;
}

/// The routes, the extractors' JSON errors and the fallback.
pub fn configure(cfg: &mut web::ServiceConfig, body_limit: usize) {
    cfg.app_data(
        web::JsonConfig::default()
            .limit(body_limit)
            .content_type_required(true)
            .error_handler(json_error),
    )
    .app_data(web::QueryConfig::default().error_handler(query_error))
    .app_data(web::PathConfig::default().error_handler(|e, _| {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()).into()
    }));
    register(cfg);
    cfg.default_service(web::to(fallback));
}

fn json_error(err: JsonPayloadError, _req: &HttpRequest) -> actix_web::Error {
    let e = match &err {
        JsonPayloadError::OverflowKnownLength { .. } | JsonPayloadError::Overflow { .. } => {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                err.to_string(),
            )
        }
        JsonPayloadError::ContentType => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as Content-Type: application/json",
        ),
        JsonPayloadError::Deserialize(de) => {
            let message = de.to_string();
            let e = ApiError::new(StatusCode::BAD_REQUEST, "malformed_json", message.clone());
            match field_of(&message) {
                Some(field) => e.with_field(field),
                None => e,
            }
        }
        _ => ApiError::new(StatusCode::BAD_REQUEST, "malformed_json", err.to_string()),
    };
    e.into()
}

fn query_error(err: QueryPayloadError, _req: &HttpRequest) -> actix_web::Error {
    let message = err.to_string();
    let e = ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", message.clone());
    match field_of(&message) {
        Some(field) => e.with_field(field),
        None => e,
    }
    .into()
}

/// An unknown route is 404; a known path with another method is 405.
async fn fallback(req: HttpRequest) -> HttpResponse {
    let path = req.path();
    let known = ROUTES.iter().any(|(_, p)| matches(p, path));
    let e = if known {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{} is not served on {path}", req.method()),
        )
    } else {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
    };
    actix_web::ResponseError::error_response(&e)
}

/// Whether `path` fits the pattern (`{x}` is one segment).
fn matches(pattern: &str, path: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), path.split('/').collect());
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(p, s)| (p.starts_with('{') && !s.is_empty()) || p == s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn patterns_match_one_segment_per_parameter() {
        assert!(super::matches("/v1/orders/{order_ref}", "/v1/orders/o1"));
        assert!(!super::matches("/v1/orders/{order_ref}", "/v1/orders/o1/x"));
        assert!(!super::matches("/v1/orders/{order_ref}", "/v1/orders/"));
    }
}
