//! Settling an order: recompute its state from all its facts with the pure
//! [`crate::ledger::compute`] and write what changed — status, refunds,
//! primary payment, the payments' flags, the one stock movement (an
//! oversell is recorded on the order) and the confirmation email (written
//! with the order's state, in one statement).

use std::collections::BTreeMap;

use oncehook_common::store::ledger::{self as store, OrderRow as Order};
use oncehook_common::store::outbox;
use sqlx::PgConnection;

use super::emails::Confirmation;
use crate::ledger::{
    self, Capture, FLAG_AMOUNT_MISMATCH, FLAG_NEEDS_REFUND, OrderState, RefundFact, Terms,
};

/// Recomputes the order from all its facts and writes the result: status,
/// refunds, primary payment, payment flags, the one stock movement and the
/// confirmation email. `known` are the order's facts when the caller has
/// them, read after the order's lock was taken (they are read here otherwise).
/// With `defer` (inside a batch) the stock movement and the confirmation are
/// left to [`StockMoves::apply`] at the end of the batch; the order is
/// marked as moved here, so a later event of the batch does not move it again.
pub(super) async fn settle(
    conn: &mut PgConnection,
    order: &Order,
    known: Option<Vec<store::FactRow>>,
    defer: Option<&mut StockMoves>,
) -> Result<OrderState, sqlx::Error> {
    let facts = match known {
        Some(facts) => facts,
        None => store::facts(conn, order.id).await?,
    };
    let (capture_rows, refund_rows): (Vec<_>, Vec<_>) = facts.into_iter().partition(|f| f.capture);
    let captures: Vec<Capture> = capture_rows
        .iter()
        .map(|f| Capture {
            provider: f.provider.clone(),
            payment_id: f.payment_id.clone().unwrap_or_default(),
            amount_minor: f.amount_minor,
            currency: f.currency.clone(),
        })
        .collect();
    let refunds: Vec<RefundFact> = refund_rows
        .into_iter()
        .map(|f| RefundFact {
            provider: f.provider,
            payment_id: f.payment_id,
            amount_minor: f.amount_minor.unwrap_or(0),
            cumulative: f.cumulative,
        })
        .collect();
    let terms = Terms {
        amount_minor: order.amount_minor,
        currency: order.currency.clone(),
    };
    let state = ledger::compute(&terms, &captures, &refunds);
    for (capture, row) in captures.iter().zip(&capture_rows) {
        let wanted = state
            .flags
            .get(&(capture.provider.clone(), capture.payment_id.clone()))
            .copied()
            .flatten();
        if row.flag.as_deref() != wanted {
            update_flag(conn, order, capture, wanted).await?;
        }
    }

    let move_stock = state.is_paid() && !order.stock_applied;
    let deferred = match defer {
        Some(later) if move_stock => {
            later.orders.push(order.clone());
            true
        }
        _ => false,
    };
    let moves = if move_stock && !deferred {
        decrement_stock(conn, order).await?
    } else {
        Vec::new()
    };
    let oversold = moves.iter().any(|m| m.stock < 0);
    let changed = order.status != state.status
        || order.refunded_minor != state.refunded_minor
        || order.paid_by != state.paid_by
        || move_stock;
    if changed {
        let written = store::OrderState {
            status: state.status,
            refunded_minor: state.refunded_minor,
            paid_by: state.paid_by.as_deref(),
            stock_moved: move_stock,
            oversold,
        };
        // The first payment's confirmation goes into the outbox with the
        // order's new state, in one statement.
        let confirmation = (move_stock && !deferred).then(|| Confirmation::new(order, &moves));
        store::write_order(
            conn,
            order.id,
            written,
            confirmation.as_ref().map(Confirmation::email),
        )
        .await?;
    }
    Ok(state)
}

/// Orders first paid in a batch, whose stock moves at its end: their
/// products are locked then, in sku order, in one statement for the whole
/// batch, so concurrent batches hold these hot rows only for their last
/// statements and commit.
#[derive(Debug, Default)]
pub struct StockMoves {
    orders: Vec<Order>,
}

impl StockMoves {
    /// Moves the stock of every deferred order (in the order they were
    /// paid within the batch: an oversell is the order whose decrement
    /// took a product below zero, as when they come one by one), marks the
    /// oversold ones and writes their confirmations.
    pub(super) async fn apply(self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        if self.orders.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = self.orders.iter().map(|o| o.id).collect();
        let items = store::lock_stock(conn, &ids).await?;
        let mut stock: BTreeMap<String, i32> = BTreeMap::new();
        let mut taken: BTreeMap<String, i32> = BTreeMap::new();
        for item in &items {
            stock.entry(item.sku.clone()).or_insert(item.stock);
        }
        let mut oversold = Vec::new();
        let mut confirmations = Vec::new();
        for order in &self.orders {
            let mut moves: Vec<store::StockMove> = Vec::new();
            for item in items.iter().filter(|i| i.order_id == order.id) {
                let left = stock.entry(item.sku.clone()).or_insert(item.stock);
                *left = left.saturating_sub(item.qty);
                *taken.entry(item.sku.clone()).or_insert(0) += item.qty;
                moves.push(store::StockMove {
                    sku: item.sku.clone(),
                    qty: item.qty,
                    stock: *left,
                });
            }
            moves.sort();
            if moves.iter().any(|m| m.stock < 0) {
                warn_negative(order, &moves);
                oversold.push(order.id);
            }
            confirmations.push(Confirmation::new(order, &moves));
        }
        let (skus, qtys): (Vec<String>, Vec<i32>) = taken.into_iter().unzip();
        store::take_stock(conn, &skus, &qtys).await?;
        if !oversold.is_empty() {
            store::mark_oversold(conn, &oversold).await?;
        }
        let emails: Vec<_> = confirmations.iter().map(Confirmation::email).collect();
        outbox::write_many(conn, &emails).await?;
        Ok(())
    }
}

fn warn_negative(order: &Order, moves: &[store::StockMove]) {
    for m in moves.iter().filter(|m| m.stock < 0) {
        tracing::warn!(order_ref = %order.order_ref, sku = %m.sku, stock = m.stock, "stock went negative; order marked oversold (the payment stands: restock or refund)");
        metrics::counter!("oncehook_worker_stock_negative_total").increment(1);
    }
}

async fn update_flag(
    conn: &mut PgConnection,
    order: &Order,
    capture: &Capture,
    flag: Option<&'static str>,
) -> Result<(), sqlx::Error> {
    store::set_capture_flag(conn, &capture.provider, &capture.payment_id, order.id, flag).await?;
    if let Some(flag @ (FLAG_NEEDS_REFUND | FLAG_AMOUNT_MISMATCH)) = flag {
        tracing::warn!(order_ref = %order.order_ref, provider = %capture.provider, payment_id = %capture.payment_id, flag, "payment flagged for a human");
        metrics::counter!("oncehook_worker_payments_flagged_total", "flag" => flag).increment(1);
    }
    Ok(())
}

/// Moves stock once for the order. Stock may go negative (the money is
/// taken): that is recorded on the order as an oversell, never rolled back.
async fn decrement_stock(
    conn: &mut PgConnection,
    order: &Order,
) -> Result<Vec<store::StockMove>, sqlx::Error> {
    let moves = store::decrement_stock(conn, order.id).await?;
    warn_negative(order, &moves);
    Ok(moves)
}
