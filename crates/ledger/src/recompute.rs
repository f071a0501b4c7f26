//! Recomputing orders, pure: from the facts of every order a group
//! touched (read with the group's facts, `store::books::record`), each
//! order's state is computed by the pure
//! [`super::state::compute`], and what changed is handed to the tail to
//! write in one statement (`store::orders::write`) — the payments' flags,
//! the stock of the orders first paid (`stock`), the orders' states — with
//! each newly paid
//! order's confirmation email returned for the outbox, with the order
//! events the new states owe (`order_events`), each a function of the
//! order's facts whatever the order they came in.

use std::collections::BTreeMap;

use crate::store::books::{FactRow, FlagChange, OrderRow, PaymentKey};
use crate::store::orders::{OrderUpdate, Writes};

use crate::store::order_events::NewOrderEvent;

use super::emails::Email;
use super::order_events;
use super::state::{
    self, Capture, FLAG_AMOUNT_MISMATCH, FLAG_NEEDS_REFUND, OrderState, RefundFact, Terms,
};
use super::stock;

/// The touched orders' new states and the confirmations they owe.
#[derive(Debug, Default)]
pub struct Recomputed {
    pub states: BTreeMap<i64, OrderState>,
    pub confirmations: Vec<Email>,
    /// The order events the states owe (some perhaps written before).
    pub events: Vec<NewOrderEvent>,
    /// The flags, stock and orders to write (`orders::write`, with the
    /// order events, by the tail).
    pub writes: Writes,
}

/// Recomputes `touched` (in the order the group first touched them);
/// `noted` are the other orders a new fact was recorded for (a failed
/// attempt): their state stays, their version grows with the others', in
/// the same statement.
pub fn recompute(touched: &[&OrderRow], noted: &[i64], read: Vec<FactRow>) -> Recomputed {
    let mut done = Recomputed::default();
    if touched.is_empty() {
        done.writes.orders = only_noted(noted, &done.states);
        return done;
    }
    let mut facts: BTreeMap<i64, Vec<FactRow>> = BTreeMap::new();
    for row in read {
        facts.entry(row.order_id).or_default().push(row);
    }
    let mut flags = Vec::new();
    let mut probed = Vec::new();
    for order in touched {
        let rows = facts.remove(&order.id).unwrap_or_default();
        let state = compute(order, &rows);
        if first_covered_while_cancelled(order, &rows, &state) {
            probed.push(*order);
        }
        flags.extend(flag_changes(order, &rows, &state));
        done.states.insert(order.id, state);
    }
    let is_paid = |o: &OrderRow| done.states.get(&o.id).is_some_and(OrderState::is_paid);
    let paid: Vec<&OrderRow> = touched
        .iter()
        .copied()
        .filter(|o| !o.stock_applied && is_paid(o))
        .collect();
    let returned: Vec<&OrderRow> = touched
        .iter()
        .copied()
        .filter(|o| o.stock_applied && !is_paid(o))
        .collect();
    let stock::Moves { moved, taken } = stock::take(&paid, &returned, &probed);
    let mut updates: Vec<OrderUpdate> = touched
        .iter()
        .filter_map(|order| {
            let state = done.states.get(&order.id)?;
            let moves = moved.get(&order.id);
            // Out of stock exactly while paid: taken when first paid, given back when cancelled.
            let stock_applied = state.is_paid();
            let changed = order.status != state.status
                || order.refunded_minor != state.refunded_minor
                || order.paid_by != state.paid_by
                || order.stock_applied != stock_applied;
            Some(OrderUpdate {
                order_id: order.id,
                changed,
                status: state.status.to_owned(),
                refunded_minor: state.refunded_minor,
                paid_by: state.paid_by.clone(),
                stock_applied,
                oversold: moves.is_some_and(|m| stock::oversold(m)),
            })
        })
        .collect();
    updates.extend(only_noted(noted, &done.states));
    done.writes = Writes {
        flags,
        stock: taken,
        orders: updates,
        events: Vec::new(),
    };
    done.events = owed_events(touched, &done.states, &moved);
    done.confirmations = paid
        .iter()
        .map(|order| Email::confirmation(order, moved.get(&order.id).map_or(&[], Vec::as_slice)))
        .collect();
    done
}

/// The orders of `noted` that were not recomputed: only their version and
/// `updated_at` move.
fn only_noted(noted: &[i64], recomputed: &BTreeMap<i64, OrderState>) -> Vec<OrderUpdate> {
    noted
        .iter()
        .filter(|id| !recomputed.contains_key(id))
        .map(|id| OrderUpdate::noted(*id))
        .collect()
}

/// The order events of the recomputed orders, each a function of the
/// order's facts (docs/ledger.md, Order events): paid (a capture covers
/// it, cancelled or not), oversold (covering it took, or for a cancelled
/// order would have taken, a product below zero: `moved` has the moves of
/// the orders first covered now), cancelled, and one per capture that is
/// not the primary payment. Those written before are skipped when written.
fn owed_events(
    touched: &[&OrderRow],
    states: &BTreeMap<i64, OrderState>,
    moved: &BTreeMap<i64, Vec<stock::StockMove>>,
) -> Vec<NewOrderEvent> {
    let mut events = Vec::new();
    for order in touched {
        let Some(state) = states.get(&order.id) else {
            continue;
        };
        if state.covered {
            events.push(order_events::paid(order));
        }
        if moved.get(&order.id).is_some_and(|m| stock::oversold(m)) {
            events.push(order_events::oversold(order));
        }
        if order.cancelled {
            events.push(order_events::cancelled(order));
        }
        events.extend(order_events::owed(order, state));
    }
    events
}

/// Whether `order`, cancelled before any capture covered it, is covered
/// for the first time now: it holds no stock, and every covering capture
/// is new (none carries the flag a recompute gives it). Its items are then
/// weighed against the stock as if it had been paid just before the
/// cancellation, so that `order.oversold` does not depend on which came
/// first.
fn first_covered_while_cancelled(order: &OrderRow, rows: &[FactRow], state: &OrderState) -> bool {
    order.cancelled
        && !order.stock_applied
        && state.covered
        && rows
            .iter()
            .filter(|f| f.capture)
            .filter(|f| {
                let key = (f.provider.clone(), f.payment_id.clone().unwrap_or_default());
                state.owed.get(&key) == Some(&FLAG_NEEDS_REFUND)
            })
            .all(|f| f.flag.is_none())
}

/// The state of `order` with these facts.
fn compute(order: &OrderRow, rows: &[FactRow]) -> OrderState {
    let captures: Vec<Capture> = rows
        .iter()
        .filter(|f| f.capture)
        .map(|f| Capture {
            provider: f.provider.clone(),
            payment_id: f.payment_id.clone().unwrap_or_default(),
            amount_minor: f.amount_minor,
            currency: f.currency.clone(),
        })
        .collect();
    let refunds: Vec<RefundFact> = rows
        .iter()
        .filter(|f| !f.capture)
        .map(|f| RefundFact {
            provider: f.provider.clone(),
            payment_id: f.payment_id.clone(),
            amount_minor: f.amount_minor.unwrap_or(0),
            cumulative: f.cumulative,
        })
        .collect();
    let terms = Terms {
        amount_minor: order.amount_minor,
        currency: order.currency.clone(),
        cancelled: order.cancelled,
    };
    state::compute(&terms, &captures, &refunds)
}

/// The captures whose flag the new state changes (counted and logged when
/// a payment now needs a human).
fn flag_changes(order: &OrderRow, rows: &[FactRow], state: &OrderState) -> Vec<FlagChange> {
    let mut changes = Vec::new();
    for row in rows.iter().filter(|f| f.capture) {
        let payment_id = row.payment_id.clone().unwrap_or_default();
        let wanted = state
            .flags
            .get(&(row.provider.clone(), payment_id.clone()))
            .copied()
            .flatten();
        if row.flag.as_deref() == wanted {
            continue;
        }
        if let Some(flag @ (FLAG_NEEDS_REFUND | FLAG_AMOUNT_MISMATCH)) = wanted {
            tracing::warn!(order_ref = %order.order_ref, provider = %row.provider, %payment_id, flag, "payment flagged for a human");
            metrics::counter!("oncehook_worker_payments_flagged_total", "flag" => flag)
                .increment(1);
        }
        changes.push(FlagChange {
            order_id: order.id,
            payment: PaymentKey {
                provider: row.provider.clone(),
                payment_id,
            },
            flag: wanted.map(str::to_owned),
        });
    }
    changes
}
