//! The effect seam. The pipeline owns delivery dedup and the transaction;
//! an [`Effect`] decides what a group of new, authentic, parsed deliveries
//! does to the shop's data inside that transaction, and brings its own
//! background work (tasks per broker session, counters to zero, a nudge
//! after each commit). The worker's one effect is the order ledger
//! (`oncehook_ledger::Ledger`); the pipeline's tests run a second one
//! (`tests.rs`), written without touching the pipeline.

use std::future::Future;

use lapin::Channel;
use oncehook_common::background::Supervised;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::store::advisory::LockName;
use oncehook_common::store::dedup::{self as dedup_store, DeliveryKey, Finish};
use oncehook_common::store::outbox::NewEmail;
use oncehook_common::{Topology, WorkerSettings};
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
    pub completed_earlier: Vec<(DeliveryKey, Applied)>,
    /// The emails the effect queued: written with the outcomes, in the
    /// transaction's last statement.
    pub emails: Vec<NewEmail>,
}

impl Effects {
    /// Records every outcome in `processed_webhooks` and writes the queued
    /// emails, one statement: the outcomes of `applied` (the deliveries
    /// `keys` names, in the order handed to [`Effect::apply`]) and of the
    /// earlier deliveries now completed.
    pub async fn record<'a>(
        &'a self,
        conn: &mut PgConnection,
        keys: impl Iterator<Item = &'a DeliveryKey>,
    ) -> Result<(), sqlx::Error> {
        let finished: Vec<Finish<'_>> = keys
            .zip(&self.applied)
            .chain(
                self.completed_earlier
                    .iter()
                    .map(|(key, applied)| (key, applied)),
            )
            .map(|(key, applied)| Finish {
                key,
                outcome: applied.outcome.as_str(),
                detail: &applied.detail,
            })
            .collect();
        dedup_store::finish_many(conn, &finished, &self.emails).await?;
        Ok(())
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

impl oncehook_common::contended::Contention for EffectError {
    fn contention(&self) -> Option<String> {
        match self {
            EffectError::Database(e) => e.contention(),
            EffectError::Permanent(_) => None,
        }
    }
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

    /// The advisory locks applying `delivery` takes (`advisory::LockName`):
    /// the pipeline takes those of the fresh deliveries with their claim,
    /// in the claim's statement, before [`Effect::apply`]. None by default.
    fn locks(&self, _delivery: &Delivery) -> Vec<LockName> {
        Vec::new()
    }

    /// The effect's own background tasks for one broker session (they may
    /// publish over its confirm channel), each started with
    /// `background::supervise` under the session's stop; started with each
    /// session and stopped with it. None by default.
    fn session_tasks(&self, _session: Session<'_>) -> Vec<Supervised> {
        Vec::new()
    }

    /// A delivery's transaction committed with this outcome (for example,
    /// to wake a relay for what the effect wrote).
    fn committed(&self, _applied: &Applied) {}

    /// Sets the effect's counters to zero when the worker starts, so that
    /// every series exists before its first count.
    fn zero_counters(&self) {}
}

/// What an effect's session tasks are given: the database, the session's
/// confirm channel, the names, the worker's settings and the session's stop.
pub struct Session<'a> {
    pub pool: &'a Pooled,
    pub channel: &'a Channel,
    pub topology: &'a Topology,
    pub settings: &'a WorkerSettings,
    pub stop: &'a Shutdown,
}
