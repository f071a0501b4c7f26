//! The console's pages, one module each. Every handler starts with
//! [`crate::auth::page`] (reads) or [`crate::auth::action`] (changes), asks
//! the ctl library or the store for its report, and renders it. What the
//! readers share is here: the page size, the user with a checked query
//! ([`page_query`]) and one page of rows ([`one_page`]).
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

use actix_web::{HttpRequest, HttpResponse};

use crate::auth::{self, Who};
use crate::form::Pairs;
use crate::input::{self, Invalid};
use crate::state::State;

/// Rows per page of the paginated lists.
pub const PAGE_SIZE: i64 = 50;
/// The deepest page a list offers (keeps `OFFSET` bounded).
pub const MAX_PAGE: i64 = 200;

/// The 1-based page number of a query, bounded.
pub fn page_number(q: &Pairs) -> i64 {
    q.get("page")
        .and_then(|p| p.parse::<i64>().ok())
        .unwrap_or(1)
        .clamp(1, MAX_PAGE)
}

/// A page read with a query string: the user and what `parse` makes of
/// the query, or the answer instead — the way to the login, or a `400`
/// titled `title` that links back to `path` without the filter.
pub fn page_query<Q>(
    req: &HttpRequest,
    state: &State,
    (title, path): (&str, &str),
    parse: impl FnOnce(&Pairs) -> Result<Q, Invalid>,
) -> Result<(Who, Q), Box<HttpResponse>> {
    let who = auth::page(req, state)?;
    match parse(&Pairs::parse(req.query_string().as_bytes())) {
        Ok(q) => Ok((who, q)),
        Err(why) => Err(Box::new(input::bad_request(&who, title, path, &why))),
    }
}

/// Keeps the first [`PAGE_SIZE`] of `rows` (read one more than a page
/// shows); whether there were more.
pub fn one_page<T>(rows: &mut Vec<T>) -> bool {
    let more = rows.len() as i64 > PAGE_SIZE;
    rows.truncate(PAGE_SIZE as usize);
    more
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_keeps_a_page_and_says_whether_there_were_more() {
        let mut rows: Vec<i64> = (0..=PAGE_SIZE).collect();
        assert!(one_page(&mut rows));
        assert_eq!(rows.len() as i64, PAGE_SIZE);
        assert!(!one_page(&mut rows));
        assert_eq!(rows.len() as i64, PAGE_SIZE);
        let mut few = vec![1, 2];
        assert!(!one_page(&mut few));
        assert_eq!(few, [1, 2]);
    }
}
