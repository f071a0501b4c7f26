//! Refunds: the refund intents the ledger minted (docs/refunds.md), what
//! `oncehookctl refunds` shows and does. The page lists the intents newest
//! first, [`PAGE_SIZE`] at most, by state (`?state=`) or for one intent or
//! order (`?q=` an intent id or an order reference): the order (linking to
//! its trace), the payment, the amount, why it is owed, its state and why
//! it waits or what the gateway said; and whether refunds are paused (the
//! kill switch).
//!
//! An operator approves an intent that is `owed` or `failed`
//! (`POST /refunds/approve`), cancels one nothing was sent for
//! (`POST /refunds/cancel`), and pauses or resumes every refunder
//! (`POST /refunds/pause`, `POST /refunds/resume`). All go through
//! `refund_intents`, as the CLI does, are written to the audit table and
//! are answered with the page again, saying what happened on top; a change
//! the intent's state does not allow is `409` with why. Values are checked
//! first (else 400).
//!
//! - `view`: `GET /refunds`, the switch and the intents.
//! - `actions`: approve, cancel, pause and resume.

mod actions;
mod view;

use oncehook_common::refund::STATES;

use super::PAGE_SIZE;
use crate::form::Pairs;
use crate::input::{self, Invalid};

pub use actions::{approve, cancel, pause, resume};
pub use view::show;

/// The page's title, and its path.
const TITLE: &str = "Refunds";
const PATH: &str = "/refunds";

/// The longest intent id or order reference looked for.
const MAX_TERM: usize = 256;

/// What a query string names: a state, an intent or an order.
#[derive(Debug, Clone, Default)]
struct Query {
    state: Option<&'static str>,
    term: Option<String>,
}

impl Query {
    /// The values, each checked: a state one of [`STATES`], the term short
    /// text without control characters.
    fn parse(p: &Pairs) -> Result<Query, Invalid> {
        Ok(Query {
            state: input::one_of(p, "state", STATES)?,
            term: input::text(p, "q", MAX_TERM)?,
        })
    }

    /// Only the intent (or order) `term` (as after an action on it).
    fn of(term: &str) -> Query {
        Query {
            term: Some(term.to_owned()),
            ..Query::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.state.is_none() && self.term.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_keep_to_their_rules() {
        let q = Query::parse(&Pairs::parse(b"state=owed&q=order_1")).unwrap();
        assert_eq!(
            (q.state, q.term.as_deref()),
            (Some("owed"), Some("order_1"))
        );
        assert!(Query::parse(&Pairs::parse(b"state=gone")).is_err());
        assert!(Query::parse(&Pairs::parse(b"q=a%0Ab")).is_err());
        assert!(Query::parse(&Pairs::parse(b"")).unwrap().is_empty());
        assert!(!Query::of("ri_1").is_empty());
    }
}
