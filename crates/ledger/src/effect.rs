//! The order ledger as the pipeline's effect: [`Ledger`], its one entry
//! ([`Ledger::apply`], every road), and the background work a worker's
//! broker session runs for it (the email relay, the parked-event sweeper,
//! the outbox gauges, the refund-intent sweep of a rollout).

use std::sync::Arc;

use oncehook_common::background::{Supervised, supervise};
use oncehook_common::store::advisory::LockName;
use oncehook_pipeline::{Applied, Delivery, Effect, EffectError, Effects, Session};

use crate::input::Deliveries;
use crate::roads::Input;
use crate::{parking, relay, rollout};
use sqlx::PgConnection;
use tokio::sync::Notify;

/// The order ledger as the pipeline's effect.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// Wakes the email relay after a commit (it also polls).
    relay: Arc<Notify>,
}

impl Effect for Ledger {
    /// The email relay and the parked-event sweeper, both publishing over
    /// the session's confirm channel, and the outbox gauges.
    /// Each supervised (`background::supervise`: restarted after a panic).
    fn session_tasks(&self, s: Session<'_>) -> Vec<Supervised> {
        let timeout = s.settings.broker.publish_timeout;
        let ttl = s.settings.worker.unlinked_ttl;
        let owned = || {
            (
                s.pool.clone(),
                s.channel.clone(),
                s.topology.clone(),
                s.stop.clone(),
            )
        };
        let ((pool, ch, topology, stop), wake) = (owned(), self.relay.clone());
        let relay = supervise("email relay", s.stop, move || {
            let (pool, ch, topology) = (pool.clone(), ch.clone(), topology.clone());
            relay::run(pool, ch, topology, timeout, wake.clone(), stop.clone())
        });
        let (pool, ch, topology, stop) = owned();
        let sweeper = supervise("parked-event sweeper", s.stop, move || {
            let (pool, ch, topology) = (pool.clone(), ch.clone(), topology.clone());
            parking::run_sweeper(pool, ch, topology, ttl, timeout, stop.clone())
        });
        let (pool, _, _, stop) = owned();
        let gauges = supervise("outbox gauges", s.stop, move || {
            relay::gauges(pool.clone(), stop.clone())
        });
        let (pool, _, _, stop) = owned();
        let intents = supervise("refund-intent sweep", s.stop, move || {
            rollout::run_sweep(pool.clone(), stop.clone())
        });
        vec![relay, sweeper, gauges, intents]
    }

    fn locks(&self, delivery: &Delivery) -> Vec<LockName> {
        crate::deliveries::keys_of(delivery)
    }

    fn committed(&self, _applied: &Applied) {
        self.relay.notify_one();
    }

    fn zero_counters(&self) {
        parking::zero_dead_letter_counters();
    }

    async fn apply(
        &self,
        conn: &mut PgConnection,
        deliveries: &[&Delivery],
    ) -> Result<Effects, EffectError> {
        Ledger::apply(self, conn, Deliveries(deliveries)).await
    }
}

impl Ledger {
    /// The one entry: takes `input` in, in `conn`'s transaction. Whatever
    /// the road, the same tail follows (`follow_through`): recompute every
    /// order a new fact touched from all its facts, with its stock; write
    /// the emails and the order events they owe (counted, joined to the
    /// trace that caused them); park what waits.
    pub async fn apply<I: Input>(
        &self,
        conn: &mut PgConnection,
        input: I,
    ) -> Result<I::Answer, EffectError> {
        crate::roads::take(conn, input).await
    }
}
