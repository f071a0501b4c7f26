//! The generic worker: what happens to a delivery between the consume loop
//! and its verdict, knowing nothing of orders. `consumer` is the consume
//! loop's handler (decode, hand to the grouper, turn the result into a
//! verdict) with the worker's session tasks; `decode` turns message bytes
//! into a [`Delivery`]; `group` gathers the deliveries in flight into
//! groups (never waiting for company: a lone delivery is a group of one);
//! `commit` runs one transaction for a group — claim every delivery
//! (insert-first dedup), hand the fresh ones to the [`Effect`], record
//! every outcome, commit — and is the only place a delivery's transaction
//! commits. The effect (the order ledger, `oncehook_ledger::Ledger`)
//! decides what a new delivery does to the shop's data, inside that
//! transaction, and brings its own background tasks.
//!
//! A delivery's result is [`Processed`]; the consumer turns it (or a
//! [`ProcessError`]) into the consume loop's verdict.

mod commit;
pub mod consumer;
mod decode;
mod effect;
mod group;

pub use commit::commit;
pub use decode::{Delivery, decode, key};
pub use effect::{Applied, Effect, EffectError, Effects, Outcome, Session};
pub use group::Grouper;

use oncehook_common::db::is_transient;
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_common::store::dedup::{self as dedup_store, Claimed};

/// What became of a delivery once its transaction committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// The effect ran with this outcome.
    Done(Applied),
    /// Another copy of this delivery was processed already; only the
    /// sighting was recorded. `same_body_as` is the event id the signed body
    /// was first delivered under, when this copy came under another one.
    Duplicate { same_body_as: Option<String> },
}

impl Processed {
    /// The answer for a claim that found the delivery claimed already
    /// (`None` for a fresh claim: the effect is still to be applied).
    fn duplicate(claimed: Claimed) -> Option<Processed> {
        match claimed {
            Claimed::Fresh => None,
            Claimed::Duplicate => Some(Processed::Duplicate { same_body_as: None }),
            Claimed::SameBodyAs(first) => Some(Processed::Duplicate {
                same_body_as: Some(first),
            }),
        }
    }
}

/// A message that will never succeed as is: dead-letter it with `kind`
/// and `message` (what failed, for which event).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    pub kind: DeadLetterKind,
    pub message: String,
}

impl Rejection {
    pub fn new(kind: DeadLetterKind, message: impl Into<String>) -> Self {
        Rejection {
            kind,
            message: message.into(),
        }
    }
}

/// Why a group's transaction did not commit.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Permanent(#[from] Rejection),
    /// The database failed in a way a retry may fix.
    #[error("transient database error: {0}")]
    Transient(sqlx::Error),
}

impl From<EffectError> for ProcessError {
    fn from(err: EffectError) -> Self {
        match err {
            EffectError::Permanent(rejection) => rejection.into(),
            EffectError::Database(err) => err.into(),
        }
    }
}

impl From<sqlx::Error> for ProcessError {
    fn from(err: sqlx::Error) -> Self {
        // A claim that lost a race with a copy of itself succeeds when made
        // again (see `dedup_store::lost_claim_race`).
        if is_transient(&err) || dedup_store::lost_claim_race(&err) {
            ProcessError::Transient(err)
        } else {
            ProcessError::Permanent(Rejection::new(
                DeadLetterKind::Database,
                format!("database rejected the effect: {err}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests;
