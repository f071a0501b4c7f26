//! The effect seam. The pipeline owns delivery dedup and the transaction;
//! an [`Effect`] decides what a group of new, authentic, parsed deliveries
//! does to the shop's data inside that transaction. The worker's one effect
//! is the order ledger (`crate::ledger::Ledger`); the pipeline's tests run a
//! second one (`pipeline/tests.rs`), written without touching the pipeline.

use std::future::Future;

use oncehook_common::store::dedup::{self as dedup_store, DeliveryKey, Finish};
use sqlx::PgConnection;

use super::{Delivery, Rejection};

/// How a delivery ended, as recorded in `processed_webhooks.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The effect happened.
    Applied,
    /// Nothing to do (an event type not acted on, or a fact already recorded).
    Ignored,
    /// Recorded but needs a human (a second payment, an amount mismatch).
    Flagged,
    /// Kept by the effect until a later delivery completes it.
    Parked,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Ignored => "ignored",
            Outcome::Flagged => "flagged",
            Outcome::Parked => "parked",
        }
    }
}

/// What the effect did with one delivery, with a one-line explanation for
/// operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub outcome: Outcome,
    pub detail: String,
}

impl Applied {
    pub fn new(outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: detail.into(),
        }
    }
}

/// What the effect did with a group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// One per delivery handed to [`Effect::apply`], in its order.
    pub applied: Vec<Applied>,
    /// Deliveries of earlier transactions the effect kept (parked) and has
    /// now completed: their recorded outcome becomes this.
    pub settled_earlier: Vec<(DeliveryKey, Applied)>,
}

impl Effects {
    /// Records every outcome in `processed_webhooks`, one statement: those
    /// of `applied` (the deliveries `keys` names, in the order handed to
    /// [`Effect::apply`]) and of the earlier deliveries now settled.
    pub async fn record<'a>(
        &'a self,
        conn: &mut PgConnection,
        keys: impl Iterator<Item = &'a DeliveryKey>,
    ) -> Result<(), sqlx::Error> {
        let finished: Vec<Finish<'_>> = keys
            .zip(&self.applied)
            .chain(
                self.settled_earlier
                    .iter()
                    .map(|(key, applied)| (key, applied)),
            )
            .map(|(key, applied)| Finish {
                key,
                outcome: applied.outcome.as_str(),
                detail: &applied.detail,
            })
            .collect();
        if finished.is_empty() {
            return Ok(());
        }
        dedup_store::finish_many(conn, &finished).await
    }
}

/// Why an effect could not be applied to a group.
#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    /// One of the deliveries will never succeed as is (dead-letter it).
    #[error(transparent)]
    Permanent(Rejection),
    /// The database failed; retry may help.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// A business effect applied inside the pipeline's transaction. It must
/// only use `conn` (never commit, never do I/O outside the database) so
/// that everything commits or rolls back with the deliveries' claims, and
/// each statement it runs should serve the whole group.
pub trait Effect: Send + Sync + 'static {
    fn apply<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        deliveries: &'a [&'a Delivery],
    ) -> impl Future<Output = Result<Effects, EffectError>> + Send + 'a;
}
