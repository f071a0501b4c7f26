//! The console's two static files, compiled in: its stylesheet and one
//! small script for progressive enhancement (every page works without it).

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpResponse, web};
use maud::html;

const CSS: &str = include_str!("../static/console.css");
const JS: &str = include_str!("../static/console.js");

pub async fn css() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "max-age=300"))
        .body(CSS)
}

pub async fn js() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "max-age=300"))
        .body(JS)
}

pub async fn not_found(_: web::Payload) -> HttpResponse {
    crate::html::respond(
        StatusCode::NOT_FOUND,
        crate::html::Page::new("Not found", None).body(html! {
            h1 { "Not found" }
            p { a href="/" { "To the overview" } }
        }),
    )
}
