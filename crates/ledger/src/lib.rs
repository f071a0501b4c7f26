//! The order ledger (docs/ledger.md) as a library: the worker's one
//! effect, applied to a group of new deliveries inside the pipeline's
//! transaction; the API's order creation (`waiting`) and cancellation
//! (`cancel`); its tables (`store`); the order as the shop sees it (`view`,
//! `render`); and its own background work (`relay` publishes the emails it
//! wrote, `parking`'s sweeper dead-letters what waited too long).
//!
//! Every event becomes a fact (`facts`) — a payment attempt, a refund, a
//! link from a payment to its order. For a group, in a fixed number of
//! statements whatever its size:
//!
//! 1. lock the order references and then the payments the group names
//!    (advisory locks, each in key order) and the orders it names (by the
//!    shop's reference or a gateway's one) or its payments are linked to
//!    (in id order) — the one lock order of every road (docs/ledger.md);
//! 2. place every event (`plan`): its order by reference, else by its
//!    payment's link (one recorded already or one the group makes), else it
//!    waits (`parking`) for its payment's link, or for its order when it
//!    names one no order has yet;
//! 3. take back the events parked for the payments the group links;
//! 4. record every link, attempt and refund (`record`), one statement;
//! 5. recompute every order a new fact touched from *all* its facts
//!    (`recompute`, with the pure `state::compute`): status, refunds,
//!    primary payment, flags, the one stock movement (`stock`), and the
//!    refund intents the orders owe (`refund_intents`);
//! 6. write the emails (`emails`: one confirmation per order, one per
//!    refund fact) and the order events for the shop (`order_events`: each
//!    derived from one fact), and park what stays unlinked;
//! 7. tell the pipeline each event's outcome (`outcome`).
//!
//! So the books depend on the set of events, not on the order or number of
//! their deliveries, nor on how they were grouped.

pub mod cancel;
pub mod catch_up;
mod emails;
mod facts;
pub mod order_events;
mod outcome;
pub mod parking;
mod plan;
mod recompute;
mod record;
pub mod refund_intents;
pub mod relay;
pub mod render;
pub mod state;
mod stock;
pub mod store;
pub mod view;
pub mod waiting;

pub use emails::money;
/// Why the ledger could not take an input in (a database error, or for a
/// delivery, one that will never succeed as is).
pub use oncehook_pipeline::EffectError;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::store::books::{self, GatewayRef, OrderRow, PaymentKey};
use crate::store::order_events::{self as events_store, NewOrderEvent};
use crate::store::parking as parking_store;
use cancel::Cancelled;
use oncehook_common::background::{Supervised, supervise};
use oncehook_common::store::outbox;
use oncehook_pipeline::{Applied, Delivery, Effect, Effects, Session};
use sqlx::PgConnection;
use tokio::sync::Notify;

use facts::Event;
use plan::Plan;
use recompute::recompute;
use record::Recording;

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
            catch_up::run_sweep(pool.clone(), stop.clone())
        });
        vec![relay, sweeper, gauges, intents]
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

/// What comes into the ledger: every road a fact takes, each with what the
/// ledger answers for it. The roads are [`Deliveries`], [`Created`],
/// [`Known`], [`Cancel`] and [`CatchUp`]; [`Ledger::apply`] is the one entry.
pub trait Input: sealed::Road {}

mod sealed {
    use std::future::Future;

    use oncehook_pipeline::EffectError;
    use sqlx::PgConnection;

    /// How an input takes its road: its own head (what it locks and
    /// records), then the ledger's one tail.
    pub trait Road {
        type Answer;
        fn take(
            self,
            conn: &mut PgConnection,
        ) -> impl Future<Output = Result<Self::Answer, EffectError>> + Send;
    }
}

/// New deliveries: the pipeline's group. The answer is each one's outcome,
/// for the pipeline to record.
#[derive(Debug, Clone, Copy)]
pub struct Deliveries<'a>(pub &'a [&'a Delivery]);

/// The shop created this order (with these gateway references) just now,
/// in the caller's transaction, after [`waiting::lock_refs`]: the events
/// that waited for it come in, with their outcomes recorded. The answer is
/// how many.
#[derive(Debug, Clone, Copy)]
pub struct Created<'a> {
    pub order_ref: &'a str,
    pub gateway_refs: &'a [GatewayRef],
}

/// A gateway told us its own references for an existing order (the
/// reconciler found Razorpay orders whose `receipt` is the order's
/// reference): they are registered with the order, after their advisory
/// locks, and the events that waited for them come in, as for a creation.
/// A reference another order has already stays with it. The answer is what
/// became of each reference, and how many waiting events were applied.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    pub order_ref: &'a str,
    pub gateway_refs: &'a [GatewayRef],
}

/// What [`Known`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub refs: Vec<crate::store::gateway_refs::RefRegistration>,
    /// Waiting events applied to the order.
    pub applied: usize,
}

/// The shop cancels this order, on behalf of `by`; what it causes joins
/// the trace `trace_parent` (the caller's request). The answer is what
/// cancelling did.
#[derive(Debug, Clone, Copy)]
pub struct Cancel<'a> {
    pub order_ref: &'a str,
    pub by: &'a str,
    pub reason: &'a str,
    pub trace_parent: Option<&'a str>,
}

/// Orders whose facts an older release's binary recorded (while a release
/// rolled out): each is recomputed from all its facts through the one
/// tail, as if a fact had just come for it (`catch_up`). The answer is how
/// many of the orders it found.
#[derive(Debug, Clone, Copy)]
pub struct CatchUp<'a> {
    pub order_refs: &'a [String],
}

impl Input for CatchUp<'_> {}
impl Input for Deliveries<'_> {}
impl Input for Created<'_> {}
impl Input for Cancel<'_> {}
impl Input for Known<'_> {}

impl sealed::Road for Deliveries<'_> {
    type Answer = Effects;
    async fn take(self, conn: &mut PgConnection) -> Result<Effects, EffectError> {
        deliveries_in(conn, self.0).await
    }
}

impl sealed::Road for Created<'_> {
    type Answer = usize;
    async fn take(self, conn: &mut PgConnection) -> Result<usize, EffectError> {
        Ok(waiting::apply_waiting(conn, self.order_ref, self.gateway_refs).await?)
    }
}

impl sealed::Road for Known<'_> {
    type Answer = Registered;
    async fn take(self, conn: &mut PgConnection) -> Result<Registered, EffectError> {
        waiting::lock_refs(conn, self.order_ref, self.gateway_refs).await?;
        let refs = crate::store::gateway_refs::add(conn, self.order_ref, self.gateway_refs).await?;
        let added: Vec<GatewayRef> = refs
            .iter()
            .filter(|r| r.added)
            .map(|r| r.gateway_ref.clone())
            .collect();
        let applied = if added.is_empty() {
            0
        } else {
            waiting::apply_waiting(conn, self.order_ref, &added).await?
        };
        Ok(Registered { refs, applied })
    }
}

impl sealed::Road for CatchUp<'_> {
    type Answer = usize;
    async fn take(self, conn: &mut PgConnection) -> Result<usize, EffectError> {
        Ok(catch_up::catch_up(conn, self).await?)
    }
}

impl sealed::Road for Cancel<'_> {
    type Answer = Cancelled;
    async fn take(self, conn: &mut PgConnection) -> Result<Cancelled, EffectError> {
        Ok(cancel::cancel(conn, self).await?)
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
        input.take(conn).await
    }
}

/// New deliveries: lock, place, record, then the tail; each one's outcome.
async fn deliveries_in(
    conn: &mut PgConnection,
    deliveries: &[&Delivery],
) -> Result<Effects, EffectError> {
    let events: Vec<Event<'_>> = deliveries
        .iter()
        .map(|d| Event::read(&d.event))
        .collect::<Result<_, _>>()
        .map_err(EffectError::Permanent)?;
    let payments: Vec<PaymentKey> = sorted(events.iter().filter_map(|e| e.payment.clone()));
    let refs: Vec<String> = sorted(
        events
            .iter()
            .filter_map(|e| e.order_ref().map(str::to_owned)),
    );
    books::lock_keys(conn, &payments, &refs).await?;
    let named = sorted(events.iter().filter_map(plan::gateway_ref));
    let locked = books::lock_orders(conn, &refs, &named, &payments).await?;
    let plan = Plan::new(&events, locked);
    let linked: Vec<&PaymentKey> = plan.links.iter().map(|l| &l.payment).collect();
    let (adopted, unreadable) = parking::adopt(conn, &linked).await?;

    let recording = Recording::new(&events, &plan, &adopted);
    let written = books::record(conn, &recording.facts).await?;
    let fresh = recording.fresh(&written);
    let mut parked: Vec<_> = deliveries
        .iter()
        .zip(&plan.places)
        .filter_map(|(d, place)| match place {
            plan::Place::Parked => Some(parking::parked(d, None)),
            plan::Place::AwaitingOrder => Some(parking::parked(d, d.event.order_ref.clone())),
            _ => None,
        })
        .collect();
    parked.extend(unreadable);
    let intake = Intake {
        touched: recording.touched(&plan, &fresh),
        traces: traces_by_order(deliveries, &plan),
        plan: &plan,
        recording: &recording,
        fresh: &fresh,
        parked,
    };
    let states = follow_through(conn, intake).await?;
    Ok(outcome::tell(&events, &plan, &adopted, &fresh, &states))
}

/// What a road hands the tail: the orders its new facts touched, what it
/// recorded (and which of it was new), the trace each order's
/// consequences join, and the events that wait.
struct Intake<'p> {
    touched: Vec<&'p OrderRow>,
    traces: BTreeMap<i64, String>,
    plan: &'p Plan,
    recording: &'p Recording,
    fresh: &'p record::Fresh,
    parked: Vec<parking_store::Parked>,
}

/// The one tail: recompute, emails, order events, refund intents, parking. The touched
/// orders' new states.
async fn follow_through(
    conn: &mut PgConnection,
    intake: Intake<'_>,
) -> Result<BTreeMap<i64, state::OrderState>, sqlx::Error> {
    let Intake {
        touched,
        traces,
        plan,
        recording,
        fresh,
        parked,
    } = intake;
    let noted = recording.orders_of_new_facts(fresh);
    let recomputed = recompute(conn, &touched, &noted).await?;
    write_emails(
        conn,
        recomputed.confirmations,
        plan,
        recording,
        fresh,
        &traces,
    )
    .await?;
    write_order_events(conn, recomputed.events, plan, recording, fresh, &traces).await?;
    refund_intents::write(conn, &touched, &recomputed.states, &traces).await?;
    parking_store::park_many(conn, &parked).await?;
    Ok(recomputed.states)
}

/// The `traceparent` of the first delivery placed on each order: the
/// emails and order events it causes join that trace.
fn traces_by_order(deliveries: &[&Delivery], plan: &Plan) -> BTreeMap<i64, String> {
    deliveries
        .iter()
        .zip(&plan.places)
        .rev()
        .filter_map(|(d, place)| match place {
            plan::Place::Order(id) => Some((*id, d.trace_parent.clone()?)),
            _ => None,
        })
        .collect()
}

/// Writes the confirmations and one email per new refund fact.
async fn write_emails(
    conn: &mut PgConnection,
    mut emails: Vec<emails::Email>,
    plan: &Plan,
    recording: &Recording,
    fresh: &record::Fresh,
    traces: &BTreeMap<i64, String>,
) -> Result<(), sqlx::Error> {
    emails.extend(recording.new_refunds(fresh).filter_map(|r| {
        plan.orders
            .get(&r.order_id)
            .map(|o| emails::Email::refund(o, r))
    }));
    let emails: Vec<emails::Email> = emails
        .into_iter()
        .map(|e| {
            let tp = traces.get(&e.order_id()).map(String::as_str);
            e.traced(tp)
        })
        .collect();
    let rows: Vec<_> = emails.iter().map(emails::Email::row).collect();
    if !rows.is_empty() {
        outbox::write_many(conn, &rows).await?;
    }
    Ok(())
}

/// Writes the order events the recomputed states owe, one per new refund
/// fact and one per new failed attempt (those already written are skipped).
async fn write_order_events(
    conn: &mut PgConnection,
    mut events: Vec<NewOrderEvent>,
    plan: &Plan,
    recording: &Recording,
    fresh: &record::Fresh,
    traces: &BTreeMap<i64, String>,
) -> Result<(), sqlx::Error> {
    let order = |id: &i64| plan.orders.get(id);
    events.extend(
        recording
            .new_refunds(fresh)
            .filter_map(|r| order(&r.order_id).map(|o| order_events::refunded(o, r))),
    );
    events.extend(
        recording
            .new_failures(fresh)
            .filter_map(|a| order(&a.order_id).map(|o| order_events::payment_failed(o, a))),
    );
    for e in &mut events {
        e.trace_parent = traces.get(&e.order_id).cloned();
    }
    for (_, kind) in events_store::write_many(conn, &events).await? {
        metrics::counter!("oncehook_order_events_written_total", "type" => kind).increment(1);
    }
    Ok(())
}

/// The distinct items, sorted (the order locks are taken in).
fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    items.collect::<BTreeSet<T>>().into_iter().collect()
}
