//! The ledger's one tail, whatever road a fact took: recompute every order
//! a new fact touched from all its facts (status, refunds, stock, flags),
//! write it with the order events that owes in one statement, then the
//! refund intents, park what waits, and hand the road the emails owed
//! (written with its outcomes).

use std::collections::{BTreeMap, BTreeSet};

use oncehook_common::store::outbox::NewEmail;
use oncehook_pipeline::Effects;
use sqlx::PgConnection;

use crate::plan::Plan;
use crate::recompute::recompute;
use crate::record::{self, Recording};
use crate::store::books::{self, FactRow, OrderRow};
use crate::store::order_events::NewOrderEvent;
use crate::store::orders;
use crate::store::parking as parking_store;
use crate::{emails, order_events, refund_intents, state};

/// What a road hands the tail: the orders its new facts touched, what it
/// recorded (and which of it was new), the trace each order's
/// consequences join, and the events that wait.
pub(crate) struct Intake<'p> {
    pub(crate) touched: Vec<&'p OrderRow>,
    pub(crate) traces: BTreeMap<i64, String>,
    pub(crate) plan: &'p Plan,
    pub(crate) recording: &'p Recording,
    pub(crate) fresh: &'p record::Fresh,
    pub(crate) parked: Vec<parking_store::Parked>,
    /// Every fact of the orders the road locked, read with its own
    /// (`store::books::record`).
    pub(crate) facts: Vec<FactRow>,
}

/// What the tail leaves its road: the touched orders' new states, and the
/// emails they owe, which the road queues with its outcomes
/// ([`oncehook_pipeline::Effects::emails`], written in the transaction's
/// last statement).
pub(crate) struct Followed {
    pub(crate) states: BTreeMap<i64, state::OrderState>,
    pub(crate) emails: Vec<NewEmail>,
}

/// The one tail: recompute, order events, refund intents, parking, and
/// the emails owed.
pub(crate) async fn follow_through(
    conn: &mut PgConnection,
    intake: Intake<'_>,
) -> Result<Followed, sqlx::Error> {
    let Intake {
        touched,
        traces,
        plan,
        recording,
        fresh,
        parked,
        facts,
    } = intake;
    let noted = recording.orders_of_new_facts(fresh);
    let recomputed = recompute(&touched, &noted, facts);
    let mut writes = recomputed.writes;
    writes.events = order_events_owed(recomputed.events, plan, recording, fresh, &traces);
    for (_, kind) in orders::write(conn, &writes).await? {
        metrics::counter!("oncehook_order_events_written_total", "type" => kind).increment(1);
    }
    let emails = emails_owed(recomputed.confirmations, plan, recording, fresh, &traces);
    refund_intents::write(conn, &touched, &recomputed.states, &traces).await?;
    parking_store::park_many(conn, &parked).await?;
    Ok(Followed {
        states: recomputed.states,
        emails,
    })
}

/// Sends orders a road has locked down the tail with no new fact (a
/// cancellation recorded on them, a rollout's catch-up): their facts are
/// read, they are recomputed and written, and the emails they owe are
/// queued in the same transaction.
pub(crate) async fn follow_locked(
    conn: &mut PgConnection,
    plan: &Plan,
    traces: BTreeMap<i64, String>,
) -> Result<(), sqlx::Error> {
    let recording = Recording::default();
    let ids: Vec<i64> = plan.orders.keys().copied().collect();
    let (_, facts) = books::record(conn, &recording.facts, &ids).await?;
    let intake = Intake {
        touched: plan.orders.values().collect(),
        traces,
        plan,
        recording: &recording,
        fresh: &record::Fresh::default(),
        parked: Vec::new(),
        facts,
    };
    let followed = follow_through(conn, intake).await?;
    Effects {
        emails: followed.emails,
        ..Effects::default()
    }
    .record(conn, std::iter::empty())
    .await
}

/// The confirmations and one email per new refund fact, each in its
/// order's trace.
fn emails_owed(
    mut emails: Vec<emails::Email>,
    plan: &Plan,
    recording: &Recording,
    fresh: &record::Fresh,
    traces: &BTreeMap<i64, String>,
) -> Vec<NewEmail> {
    emails.extend(recording.new_refunds(fresh).filter_map(|r| {
        plan.orders
            .get(&r.order_id)
            .map(|o| emails::Email::refund(o, r))
    }));
    emails
        .into_iter()
        .map(|e| {
            let tp = traces.get(&e.order_id()).map(String::as_str);
            e.traced(tp).row()
        })
        .collect()
}

/// The order events the recomputed states owe, one per new refund fact and
/// one per new failed attempt (those already written are skipped when
/// written), each in its order's trace.
fn order_events_owed(
    mut events: Vec<NewOrderEvent>,
    plan: &Plan,
    recording: &Recording,
    fresh: &record::Fresh,
    traces: &BTreeMap<i64, String>,
) -> Vec<NewOrderEvent> {
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
    events
}

/// The distinct items, sorted (the order locks are taken in).
pub(crate) fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    items.collect::<BTreeSet<T>>().into_iter().collect()
}
