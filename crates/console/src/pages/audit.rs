//! Audit: every replay and purge done through the console — who, what,
//! which dead letters (or which endpoint and event, or refund intent),
//! when, and how it ended — and every login (failed ones too) and logout,
//! newest first.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::html;
use oncehook_ops::store::audit;

use super::{PAGE_SIZE, one_page, page_number};
use crate::auth;
use crate::form::Pairs;
use crate::html::{self, Page};
use crate::state::State;

pub async fn show(req: HttpRequest, state: web::Data<State>) -> HttpResponse {
    let who = match auth::page(&req, &state) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let page = page_number(&Pairs::parse(req.query_string().as_bytes()));
    let rows = async {
        let mut conn = state.pool.single_in(&who.scope).await?;
        let done = audit::recent(&mut conn, PAGE_SIZE + 1, (page - 1) * PAGE_SIZE).await?;
        conn.finish().await?;
        Ok::<_, sqlx::Error>(done)
    }
    .await;
    let mut rows = match rows {
        Ok(r) => r,
        Err(e) => return html::failure(&who, "Audit", &anyhow::Error::new(e)),
    };
    let more = one_page(&mut rows);
    html::ok(Page::new("Audit", Some(&who)).body(html! {
        h1 { "Audit" }
        p { "Every replay and purge of dead letters, every replay of notifications, every endpoint enabled and every refund approved, cancelled, paused or resumed through the console." }
        @if rows.is_empty() { p.none { "No operator actions yet." } } @else {
            table.audit {
                thead { tr { th { "When" } th { "Who" } th { "Action" } th { "Dead letters" } th { "Scope" } th { "Result" } } }
                tbody { @for r in &rows { tr class=(if r.ok { "ok" } else { "failed" }) {
                    td { (html::when(r.at)) }
                    td { (r.actor) " (" (r.role) ")" @if let Some(a) = &r.address { br; small { (a) } } }
                    td { (r.action) }
                    td { @for id in &r.letters { code { (id) } " " } }
                    td { (r.scope.as_deref().unwrap_or("-")) }
                    td { (if r.ok { "ok: " } else { "failed: " }) (r.result) }
                } } }
            }
        }
        nav.pages {
            @if page > 1 { a href=(format!("/audit?page={}", page - 1)) { "← newer" } }
            @if more { a href=(format!("/audit?page={}", page + 1)) { "older →" } }
        }
    }))
}
