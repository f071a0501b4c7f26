//! Stock: an order's items leave stock once, in the transaction that first
//! finds it paid. The products of every order a group paid are locked at
//! once, in sku order, and moved in one statement, so concurrent groups
//! hold these hot rows only for the group's last statements and commit.
//! Stock may go negative (the money is taken): that order is recorded as
//! oversold, never rolled back. A paid order the shop then cancels gives
//! its items back, in the same statements.

use std::collections::BTreeMap;

use crate::store::books::{self, OrderRow};
use sqlx::PgConnection;

/// One product's stock after an order's decrement.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StockMove {
    pub sku: String,
    pub qty: i32,
    pub stock: i32,
}

/// Takes the stock of `orders` (in the order they were paid within the
/// group: an oversell is the order whose decrement took a product below
/// zero, as when they come one by one), gives back that of `returned`
/// (cancelled after their stock moved) and weighs `probed` (cancelled
/// before a capture covered them: taken and given back at once, so the
/// stock does not move); the moves of `orders` and `probed` per order id.
pub async fn take(
    conn: &mut PgConnection,
    orders: &[&OrderRow],
    returned: &[&OrderRow],
    probed: &[&OrderRow],
) -> Result<BTreeMap<i64, Vec<StockMove>>, sqlx::Error> {
    let mut moved = BTreeMap::new();
    if orders.is_empty() && returned.is_empty() && probed.is_empty() {
        return Ok(moved);
    }
    let ids: Vec<i64> = orders
        .iter()
        .chain(returned)
        .chain(probed)
        .map(|o| o.id)
        .collect();
    let items = books::lock_stock(conn, &ids).await?;
    let mut stock: BTreeMap<&str, i32> = BTreeMap::new();
    let mut taken: BTreeMap<String, i32> = BTreeMap::new();
    for order in returned {
        for item in items.iter().filter(|i| i.order_id == order.id) {
            let left = stock.entry(&item.sku).or_insert(item.stock);
            *left = left.saturating_add(item.qty);
            *taken.entry(item.sku.clone()).or_insert(0) -= item.qty;
        }
        tracing::info!(order_ref = %order.order_ref, "cancelled order: its items are back in stock");
    }
    for order in orders {
        let moves = weigh(order, &items, &mut stock);
        for m in &moves {
            *taken.entry(m.sku.clone()).or_insert(0) += m.qty;
        }
        warn_negative(order, &moves);
        moved.insert(order.id, moves);
    }
    for order in probed {
        // Taken and given back at once: weighed on a copy, nothing moves.
        moved.insert(order.id, weigh(order, &items, &mut stock.clone()));
    }
    let (skus, qtys): (Vec<String>, Vec<i32>) = taken.into_iter().unzip();
    books::take_stock(conn, &skus, &qtys).await?;
    Ok(moved)
}

/// The moves of taking `order`'s items from `stock` (the levels so far,
/// each product's locked level where the group has not moved it yet),
/// which it lowers; sorted by sku.
fn weigh<'i>(
    order: &OrderRow,
    items: &'i [books::ItemToMove],
    stock: &mut BTreeMap<&'i str, i32>,
) -> Vec<StockMove> {
    let mut moves: Vec<StockMove> = items
        .iter()
        .filter(|i| i.order_id == order.id)
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
