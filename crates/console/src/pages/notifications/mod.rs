//! Notifications: the order events the notifier owes the shop's endpoints
//! (what `oncehookctl notify` shows and does). The page lists each
//! endpoint — enabled, or disabled by a 410 Gone with why and since when;
//! its pending, failed and delivered counts; how old its oldest pending
//! delivery is — and below them the deliveries a filter names (endpoint,
//! status, event id), newest first, [`PAGE_SIZE`] at most; each links to
//! its order's trace.
//!
//! An operator replays failed deliveries (`POST /notifications/replay`, of
//! an endpoint, an event or both) and enables an endpoint a 410 Gone
//! disabled (`POST /notifications/enable`). A disabled endpoint's rows are
//! never replayed — enable it first; enabling sends nothing by itself
//! either, its failed rows wait for a replay. Both go through
//! `store::notify`, as the CLI does, are written to the audit table and are
//! answered with the page again, saying what happened on top. Filter values
//! are checked first (else 400).
//!
//! - `view`: `GET /notifications`, the endpoints and the deliveries.
//! - `actions`: replay and enable.

mod actions;
mod view;

use oncehook_common::store::notify::Filter;

use super::PAGE_SIZE;
use crate::form::Pairs;
use crate::input::{self, Invalid};

pub use actions::{enable, replay};
pub use view::show;

/// The page's title, and its path.
const TITLE: &str = "Notifications";
const PATH: &str = "/notifications";

/// The states a delivery can be in.
const STATUSES: [&str; 3] = ["pending", "delivered", "failed"];

/// The longest event ID a filter takes.
const MAX_EVENT_ID: usize = 256;

/// What a query string or a form names: an endpoint, a status, an event.
#[derive(Debug, Clone, Default)]
struct Query {
    endpoint: Option<String>,
    status: Option<&'static str>,
    event_id: Option<String>,
}

impl Query {
    /// The values, each checked: an endpoint is a name, a status one of
    /// [`STATUSES`], an event ID short text without control characters.
    fn parse(p: &Pairs) -> Result<Query, Invalid> {
        Ok(Query {
            endpoint: input::name(p, "endpoint")?,
            status: input::one_of(p, "status", &STATUSES)?,
            event_id: input::text(p, "event", MAX_EVENT_ID)?,
        })
    }

    /// Only `endpoint` (as after enabling it).
    fn of_endpoint(name: &str) -> Query {
        Query {
            endpoint: Some(name.to_owned()),
            ..Query::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.endpoint.is_none() && self.status.is_none() && self.event_id.is_none()
    }

    /// The store's filter: the rows one page lists (one more than it shows,
    /// to know whether there are more).
    fn list_filter(&self) -> Filter {
        Filter {
            endpoint: self.endpoint.clone(),
            event_id: self.event_id.clone(),
            status: self.status.map(str::to_owned),
            since: None,
            limit: PAGE_SIZE + 1,
        }
    }

    /// The store's filter for a replay: the endpoint and the event only
    /// (a replay takes failed rows whatever the page's status filter).
    fn replay_filter(&self) -> Filter {
        Filter {
            endpoint: self.endpoint.clone(),
            event_id: self.event_id.clone(),
            ..Filter::default()
        }
    }

    /// The replay's scope in the CLI's words (`evt_… --endpoint shop`).
    fn scope_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = &self.event_id {
            parts.push(e.clone());
        }
        if let Some(n) = &self.endpoint {
            parts.push(format!("--endpoint {n}"));
        }
        parts.join(" ")
    }

    /// This page's link with these values.
    fn link(&self) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("endpoint", self.endpoint.as_deref()),
            ("status", self.status),
            ("event", self.event_id.as_deref()),
        ] {
            if let Some(v) = v {
                s.append_pair(k, v);
            }
        }
        let q = s.finish();
        if q.is_empty() {
            PATH.to_owned()
        } else {
            format!("{PATH}?{q}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_keep_to_their_rules_and_read_as_the_cli() {
        let q = Query::parse(&Pairs::parse(b"endpoint=shop&status=failed&event=evt_1")).unwrap();
        assert_eq!(q.scope_text(), "evt_1 --endpoint shop");
        assert_eq!(
            q.link(),
            "/notifications?endpoint=shop&status=failed&event=evt_1"
        );
        assert_eq!(q.replay_filter().status, None);
        assert_eq!(q.list_filter().limit, PAGE_SIZE + 1);
        assert!(Query::parse(&Pairs::parse(b"status=gone")).is_err());
        assert!(Query::parse(&Pairs::parse(b"endpoint=a%20b")).is_err());
        assert!(Query::parse(&Pairs::parse(b"event=evt%0A1")).is_err());
        assert!(Query::parse(&Pairs::parse(b"")).unwrap().is_empty());
        assert_eq!(Query::default().link(), "/notifications");
    }
}
