//! Stock: an order's items leave stock once, in the transaction that first
//! finds it paid. The products of every order a group locks are locked
//! with the orders, in sku order (`store::locks`), and moved by the
//! transaction's one write (`store::orders::write`); what moves is
//! weighed here, pure.
//! Stock may go negative (the money is taken): that order is recorded as
//! oversold, never rolled back. A paid order the shop then cancels gives
//! its items back, in the same statements.

use std::collections::BTreeMap;

use crate::store::books::OrderRow;

/// One product's stock after an order's decrement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StockMove {
    pub sku: String,
    pub qty: i32,
    pub stock: i32,
}

/// What the group's stock moves are.
#[derive(Debug, Default)]
pub struct Moves {
    /// The moves of the orders paid and probed, per order id.
    pub moved: BTreeMap<i64, Vec<StockMove>>,
    /// `(sku, qty)` to take off each product (negative: given back).
    pub taken: Vec<(String, i32)>,
}

/// Weighs taking the stock of `orders` (in the order they were paid within
/// the group: an oversell is the order whose decrement took a product below
/// zero, as when they come one by one), giving back that of `returned`
/// (cancelled after their stock moved) and `probed` (cancelled before a
/// capture covered them: taken and given back at once, so the stock does
/// not move), from each order's items as locked.
pub fn take<'o>(
    orders: &[&'o OrderRow],
    returned: &[&'o OrderRow],
    probed: &[&'o OrderRow],
) -> Moves {
    let mut moves = Moves::default();
    let mut stock: BTreeMap<&'o str, i32> = BTreeMap::new();
    let mut taken: BTreeMap<String, i32> = BTreeMap::new();
    for &order in returned {
        for item in &order.items {
            let left = stock.entry(&item.sku).or_insert(item.stock);
            *left = left.saturating_add(item.qty);
            *taken.entry(item.sku.clone()).or_insert(0) -= item.qty;
        }
        tracing::info!(order_ref = %order.order_ref, "cancelled order: its items are back in stock");
    }
    for &order in orders {
        let weighed = weigh(order, &mut stock);
        for m in &weighed {
            *taken.entry(m.sku.clone()).or_insert(0) += m.qty;
        }
        warn_negative(order, &weighed);
        moves.moved.insert(order.id, weighed);
    }
    for &order in probed {
        // Taken and given back at once: weighed on a copy, nothing moves.
        moves
            .moved
            .insert(order.id, weigh(order, &mut stock.clone()));
    }
    moves.taken = taken.into_iter().filter(|(_, qty)| *qty != 0).collect();
    moves
}

/// The moves of taking `order`'s items from `stock` (the levels so far,
/// each product's locked level where the group has not moved it yet),
/// which it lowers; sorted by sku.
fn weigh<'i>(order: &'i OrderRow, stock: &mut BTreeMap<&'i str, i32>) -> Vec<StockMove> {
    let mut moves: Vec<StockMove> = order
        .items
        .iter()
        .map(|item| {
            let left = stock.entry(&item.sku).or_insert(item.stock);
            *left = left.saturating_sub(item.qty);
            StockMove {
                sku: item.sku.clone(),
                qty: item.qty,
                stock: *left,
            }
        })
        .collect();
    moves.sort();
    moves
}

/// Whether the moves took a product below zero.
pub fn oversold(moves: &[StockMove]) -> bool {
    moves.iter().any(|m| m.stock < 0)
}

fn warn_negative(order: &OrderRow, moves: &[StockMove]) {
    for m in moves.iter().filter(|m| m.stock < 0) {
        tracing::warn!(order_ref = %order.order_ref, sku = %m.sku, stock = m.stock, "stock went negative; order marked oversold (the payment stands: restock or refund)");
        metrics::counter!("oncehook_worker_stock_negative_total").increment(1);
    }
}
