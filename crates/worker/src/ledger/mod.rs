//! The order ledger (docs/ledger.md): the worker's one effect, applied to a
//! group of new deliveries inside the pipeline's transaction.
//!
//! Every event becomes a fact (`facts`) — a payment attempt, a refund, a
//! link from a payment to its order. For a group, in a fixed number of
//! statements whatever its size:
//!
//! 1. lock the payments the group names (advisory locks, in key order) and
//!    the orders it names (by the shop's reference or a gateway's one) or
//!    its payments are linked to (in id order);
//! 2. place every event (`plan`): its order by reference, else by its
//!    payment's link (one recorded already or one the group makes), else it
//!    waits (`parking`) for its payment's link, or for its order when it
//!    names one no order has yet;
//! 3. take back the events parked for the payments the group links;
//! 4. record every link, attempt and refund (`record`), one statement;
//! 5. recompute every order a new fact touched from *all* its facts
//!    (`recompute`, with the pure `state::compute`): status, refunds,
//!    primary payment, flags, the one stock movement (`stock`);
//! 6. write the emails (`emails`: one confirmation per order, one per
//!    refund fact) and the order events for the shop (`order_events`: each
//!    derived from one fact), and park what stays unlinked;
//! 7. tell the pipeline each event's outcome (`outcome`).
//!
//! So the books depend on the set of events, not on the order or number of
//! their deliveries, nor on how they were grouped.

pub mod cancel;
mod emails;
mod facts;
pub mod order_events;
mod outcome;
pub mod parking;
mod plan;
mod recompute;
mod record;
pub mod state;
mod stock;
pub mod waiting;

pub use emails::money;

use std::collections::{BTreeMap, BTreeSet};

use oncehook_common::store::ledger::books::{self, PaymentKey};
use oncehook_common::store::order_events::{self as events_store, NewOrderEvent};
use oncehook_common::store::outbox;
use oncehook_common::store::parking as parking_store;
use sqlx::PgConnection;

use crate::pipeline::{Delivery, Effect, EffectError, Effects};
use facts::Event;
use plan::Plan;
use recompute::recompute;
use record::Recording;

/// The order ledger as the pipeline's effect.
#[derive(Debug, Default, Clone)]
pub struct Ledger;

impl Effect for Ledger {
    async fn apply(
        &self,
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
        let recomputed = recompute(conn, &recording.touched(&plan, &fresh)).await?;

        let mut recomputed = recomputed;
        let traces = traces_by_order(deliveries, &plan);
        let emails = std::mem::take(&mut recomputed.confirmations);
        write_emails(conn, emails, &plan, &recording, &fresh, &traces).await?;
        let told = std::mem::take(&mut recomputed.events);
        write_order_events(conn, told, &plan, &recording, &fresh, &traces).await?;
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
        parking_store::park_many(conn, &parked).await?;

        Ok(outcome::tell(
            &events,
            &plan,
            &adopted,
            &fresh,
            &recomputed.states,
        ))
    }
}

/// The `traceparent` of the first delivery placed on each order: the
/// emails and order events it causes join that trace.
fn traces_by_order<'d>(deliveries: &[&'d Delivery], plan: &Plan) -> BTreeMap<i64, &'d str> {
    deliveries
        .iter()
        .zip(&plan.places)
        .rev()
        .filter_map(|(d, place)| match place {
            plan::Place::Order(id) => Some((*id, d.trace_parent.as_deref()?)),
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
    traces: &BTreeMap<i64, &str>,
) -> Result<(), sqlx::Error> {
    emails.extend(recording.new_refunds(fresh).filter_map(|r| {
        plan.orders
            .get(&r.order_id)
            .map(|o| emails::Email::refund(o, r))
    }));
    let emails: Vec<emails::Email> = emails
        .into_iter()
        .map(|e| {
            let tp = traces.get(&e.order_id()).copied();
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
    traces: &BTreeMap<i64, &str>,
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
        e.trace_parent = traces.get(&e.order_id).map(|tp| (*tp).to_owned());
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
