//! `oncehookctl demo seed`: a few products and pending orders, so the README
//! tour has something to pay for. Idempotent: re-running resets nothing that
//! exists already.

use std::fmt;

use anyhow::Context;
use clap::Subcommand;
use oncehook_common::store::ledger::{self, NewOrder};
use oncehook_common::{Config, db};
use serde::Serialize;

use crate::output::{Report, table};

#[derive(Subcommand)]
pub enum DemoCommand {
    /// Create demo products and pending orders (idempotent).
    Seed,
}

/// (sku, name, stock)
pub const PRODUCTS: &[(&str, &str, i32)] = &[
    ("TSHIRT-M", "oncehook T-shirt (M)", 100),
    ("MUG", "Exactly-once mug", 50),
    ("STICKERS", "Sticker pack", 500),
];

/// A pending demo order.
pub struct DemoOrder {
    pub order_ref: &'static str,
    pub email: &'static str,
    pub currency: &'static str,
    /// (sku, qty)
    pub items: &'static [(&'static str, i32)],
}

const fn order(
    order_ref: &'static str,
    email: &'static str,
    currency: &'static str,
    items: &'static [(&'static str, i32)],
) -> DemoOrder {
    DemoOrder {
        order_ref,
        email,
        currency,
        items,
    }
}

pub const ORDERS: &[DemoOrder] = &[
    order(
        "order_1001",
        "asha@example.com",
        "INR",
        &[("TSHIRT-M", 1), ("MUG", 2)],
    ),
    order("order_1002", "ravi@example.com", "INR", &[("STICKERS", 3)]),
    order(
        "order_1003",
        "meera@example.com",
        "INR",
        &[("MUG", 1), ("STICKERS", 1)],
    ),
    order("order_1004", "john@example.com", "USD", &[("TSHIRT-M", 2)]),
    order("order_1005", "li@example.com", "INR", &[("TSHIRT-M", 1)]),
];

/// Unit prices in minor units.
fn price(sku: &str) -> i64 {
    match sku {
        "TSHIRT-M" => 49_900,
        "MUG" => 29_900,
        _ => 9_900,
    }
}

/// What `demo seed` made sure exists.
#[derive(Serialize)]
pub struct DemoReport {
    products: Vec<ProductView>,
    orders: Vec<OrderView>,
    /// ORDER, CUSTOMER, AMOUNT, ITEMS (text only).
    #[serde(skip)]
    rows: Vec<Vec<String>>,
}

#[derive(Serialize)]
struct ProductView {
    sku: &'static str,
    name: &'static str,
    initial_stock: i32,
}

#[derive(Serialize)]
struct OrderView {
    order_ref: &'static str,
    email: &'static str,
    currency: &'static str,
}

pub async fn run(settings: &Config, command: DemoCommand) -> anyhow::Result<DemoReport> {
    match command {
        DemoCommand::Seed => seed(settings).await,
    }
}

async fn seed(settings: &Config) -> anyhow::Result<DemoReport> {
    let pool = db::connect(settings.database.url.expose(), 2, 3)
        .await
        .context("connecting to the database")?;
    let mut tx = pool.begin().await?;
    for (sku, name, stock) in PRODUCTS {
        ledger::upsert_product(&mut tx, sku, name, *stock).await?;
    }
    let mut rows = Vec::new();
    for order in ORDERS {
        rows.push(insert_order(&mut tx, order).await?);
    }
    tx.commit().await?;
    Ok(DemoReport {
        products: PRODUCTS
            .iter()
            .map(|&(sku, name, initial_stock)| ProductView {
                sku,
                name,
                initial_stock,
            })
            .collect(),
        orders: ORDERS
            .iter()
            .map(|o| OrderView {
                order_ref: o.order_ref,
                email: o.email,
                currency: o.currency,
            })
            .collect(),
        rows,
    })
}

/// Inserts `order` and its items unless it exists; returns its table row.
async fn insert_order(
    tx: &mut sqlx::PgConnection,
    order: &DemoOrder,
) -> anyhow::Result<Vec<String>> {
    let DemoOrder {
        order_ref,
        email,
        currency,
        items,
    } = order;
    let amount: i64 = items
        .iter()
        .map(|(sku, qty)| price(sku) * i64::from(*qty))
        .sum();
    let new = NewOrder {
        order_ref,
        customer_email: email,
        amount_minor: amount,
        currency,
    };
    if let Some(id) = ledger::insert_order(tx, new).await? {
        for (sku, qty) in *items {
            ledger::insert_order_item(tx, id, sku, *qty).await?;
        }
    }
    Ok(vec![
        order_ref.to_string(),
        email.to_string(),
        format!("{}.{:02} {currency}", amount / 100, amount % 100),
        items
            .iter()
            .map(|(s, q)| format!("{q}x{s}"))
            .collect::<Vec<_>>()
            .join(" "),
    ])
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "demo data ready: {} products, {} orders\n\n{}",
            self.products.len(),
            self.orders.len(),
            table(&["ORDER", "CUSTOMER", "AMOUNT", "ITEMS"], &self.rows)
        )
    }
}

impl Report for DemoReport {}
