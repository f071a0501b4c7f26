//! `/healthz`, `/readyz` and `/metrics` on ingest's public port: the
//! answers come from [`oncehook_common::health::answer`], the same code the
//! listener on `ONCEHOOK_METRICS_ADDR` uses, with the same readiness (the
//! publisher's session holds a usable confirm channel).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use oncehook_common::health;

use crate::startup::IngestState;

pub async fn answer(req: HttpRequest, state: web::Data<IngestState>) -> HttpResponse {
    let ready = state.publisher.readiness().get();
    let health::Answer {
        status,
        content_type,
        body,
    } = health::answer(req.path(), ready, &state.metrics);
    HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_FOUND))
        .content_type(content_type)
        .body(body)
}
