//! The console's pages, one module each. Every handler starts with
//! [`crate::auth::page`] (reads) or [`crate::auth::action`] (changes), asks
//! the ctl library or the store for its report, and renders it.
//!
//! - [`overview`]: the numbers of `oncehookctl stats`.
//! - [`letters`]: the dead letters: list, detail, replay, purge.
//! - [`trace`]: an order's story, by order ref, payment id or event id.
//! - [`events`]: recent processed events, filtered and paginated.
//! - [`notifications`]: the shop's endpoints and the order events owed to
//!   them; replay failed deliveries, enable an endpoint.
//! - [`refunds`]: the refund intents and the kill switch; approve or
//!   cancel an intent, pause or resume the refunders.
//! - [`audit`]: what operators did through the console.

pub mod audit;
pub mod events;
pub mod letters;
pub mod notifications;
pub mod overview;
pub mod refunds;
pub mod trace;

/// Rows per page of the paginated lists.
pub const PAGE_SIZE: i64 = 50;
/// The deepest page a list offers (keeps `OFFSET` bounded).
pub const MAX_PAGE: i64 = 200;

/// The 1-based page number of a query, bounded.
pub fn page_number(q: &crate::form::Pairs) -> i64 {
    q.get("page")
        .and_then(|p| p.parse::<i64>().ok())
        .unwrap_or(1)
        .clamp(1, MAX_PAGE)
}
