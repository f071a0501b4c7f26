//! The business-effect seam. The worker owns delivery dedup and the
//! transaction; an [`Effect`] decides what a (new, authentic, parsed) event
//! does to the shop's data inside that transaction. The built-in one is
//! [`crate::commerce::CommerceEffect`]; a shop can plug in its own.

use std::future::Future;

use oncehook_gateways::NormalizedEvent;
use sqlx::PgConnection;

/// How an event ended, as recorded in `processed_webhooks.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The effect happened.
    Applied,
    /// Nothing to do (unknown event type, or a second event for an already-recorded payment).
    Ignored,
    /// Recorded but needs a human (second payment for a paid order, amount mismatch).
    Flagged,
    /// Kept until an event links its payment to an order (see `parking`).
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

/// The result of applying an event, with a one-line explanation for operators.
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

/// Why an effect could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    /// Will never succeed as is (dead-letter it): `kind` is machine readable.
    #[error("{message}")]
    Permanent { kind: &'static str, message: String },
    /// The database failed; retry may help.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl EffectError {
    pub fn permanent(kind: &'static str, message: impl Into<String>) -> Self {
        EffectError::Permanent {
            kind,
            message: message.into(),
        }
    }
}

/// A business effect applied inside the worker's transaction. It must only
/// use `conn` (never commit, never do I/O outside the database) so the whole
/// thing commits or rolls back with the dedup row.
pub trait Effect: Send + Sync + 'static {
    /// Work an event may leave for the end of a batch (group commit), so
    /// that hot rows are locked only for the batch's last statements.
    type Deferred: Default + Send;

    fn apply<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        event: &'a NormalizedEvent,
    ) -> impl Future<Output = Result<Applied, EffectError>> + Send + 'a;

    /// [`Effect::apply`] inside a batch: the effect may leave part of its
    /// work in `deferred`, done by [`Effect::finish_batch`] in the same
    /// transaction after the batch's last event. By default nothing is
    /// deferred.
    fn apply_batched<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        event: &'a NormalizedEvent,
        deferred: &'a mut Self::Deferred,
    ) -> impl Future<Output = Result<Applied, EffectError>> + Send + 'a {
        let _ = deferred;
        self.apply(conn, event)
    }

    /// Does a batch's deferred work, last in its transaction.
    fn finish_batch<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        deferred: Self::Deferred,
    ) -> impl Future<Output = Result<(), EffectError>> + Send + 'a {
        let _ = (conn, deferred);
        async { Ok(()) }
    }
}
