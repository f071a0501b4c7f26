//! The road of new deliveries (the worker's group): read each event as a
//! fact, lock the order references and payments it names and the orders
//! they lead to (the one lock order), place every event, take back what
//! waited for the links the group makes, record, then the one tail; each
//! event's outcome for the pipeline.

use std::collections::BTreeMap;

use oncehook_pipeline::{Delivery, EffectError, Effects};
use sqlx::PgConnection;

use crate::facts::Event;
use crate::plan::{self, Plan};
use crate::record::Recording;
use crate::store::books::{self, PaymentKey};
use crate::tail::{Intake, follow_through, sorted};
use crate::{outcome, parking};

/// Whether a road's advisory locks are taken already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// The pipeline took them with the deliveries' claim (`Effect::locks`).
    Held,
    /// The road takes them here (`books::lock_keys`).
    Take,
}

/// The advisory locks a delivery's event takes (`books::lock_names`);
/// none for an event that cannot be read (it fails in [`deliveries_in`]).
pub(crate) fn keys_of(delivery: &Delivery) -> Vec<oncehook_common::store::advisory::LockName> {
    let Ok(event) = Event::read(&delivery.event) else {
        return Vec::new();
    };
    let refs: Vec<String> = event.order_ref().map(str::to_owned).into_iter().collect();
    books::lock_names(event.payment.as_slice(), &refs)
}

/// New deliveries: lock, place, record, then the tail; each one's outcome.
pub(crate) async fn deliveries_in(
    conn: &mut PgConnection,
    deliveries: &[&Delivery],
    keys: Keys,
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
    if keys == Keys::Take {
        books::lock_keys(conn, &payments, &refs).await?;
    }
    let named = sorted(events.iter().filter_map(plan::gateway_ref));
    let locked = books::lock_orders(conn, &refs, &named, &payments).await?;
    let plan = Plan::new(&events, locked.orders);
    let linked: Vec<&PaymentKey> = plan.links.iter().map(|l| &l.payment).collect();
    let (adopted, unlinked) = parking::adopt(locked.taken, &linked);

    let recording = Recording::new(&events, &plan, &adopted);
    let ids: Vec<i64> = plan.orders.keys().copied().collect();
    let (written, facts) = books::record(conn, &recording.facts, &ids).await?;
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
    parked.extend(unlinked);
    let intake = Intake {
        touched: recording.touched(&plan, &fresh),
        traces: traces_by_order(deliveries, &plan),
        plan: &plan,
        recording: &recording,
        fresh: &fresh,
        parked,
        facts,
    };
    let followed = follow_through(conn, intake).await?;
    let mut effects = outcome::tell(&events, &plan, &adopted, &fresh, &followed.states);
    effects.emails = followed.emails;
    Ok(effects)
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
