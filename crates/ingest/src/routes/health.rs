//! `/healthz` (the process answers), `/readyz` (a broker confirm channel is
//! usable, so a webhook would be accepted) and `/metrics`.

use actix_web::{HttpResponse, web};

use crate::startup::IngestState;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

pub async fn readyz(state: web::Data<IngestState>) -> HttpResponse {
    if state.publisher.is_ready().await {
        HttpResponse::Ok().json(serde_json::json!({ "status": "ready", "broker": "connected" }))
    } else {
        HttpResponse::ServiceUnavailable()
            .json(serde_json::json!({ "status": "not_ready", "broker": "disconnected" }))
    }
}

pub async fn metrics(state: web::Data<IngestState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}
