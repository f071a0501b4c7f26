//! HTTP routes of ingest's public port: the webhook endpoint and the load
//! balancer's `/healthz`; nothing else (metrics and readiness are served on
//! the metrics listener, see `oncehook_common::health`).

mod health;
mod webhooks;

pub use webhooks::zero_counters;

use actix_web::http::StatusCode;
use actix_web::web;

use crate::error::json_error;

/// Registers every route on an actix `App`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/webhooks/{source}")
            .route(web::post().to(webhooks::receive))
            .default_service(web::to(|| async {
                json_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    "webhooks are delivered with POST",
                )
            })),
    )
    .route("/healthz", web::get().to(health::answer))
    .default_service(web::to(|| async {
        json_error(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
    }));
}
