//! `GET /healthz` on ingest's public port: the load balancer's check, and
//! the only operational path served there. It answers 200 while this
//! instance can take webhooks (the publisher's session holds a usable
//! confirm channel) and 503 while it cannot, so a balancer sends gateways
//! elsewhere. `/metrics`, the process-alive `/healthz` and `/readyz` live on
//! the metrics listener (`ONCEHOOK_METRICS_ADDR`, loopback by default),
//! answered by [`oncehook_common::health::answer`].

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

use crate::startup::IngestState;

pub async fn answer(state: web::Data<IngestState>) -> HttpResponse {
    if state.publisher.readiness().get() {
        HttpResponse::Ok()
            .content_type("application/json")
            .body(r#"{"status":"ok"}"#)
    } else {
        HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
            .content_type("application/json")
            .body(r#"{"status":"not_ready"}"#)
    }
}
