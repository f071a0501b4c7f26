//! Shop fixtures: the one [`Shop`] builder of products (with stock) and
//! pending orders (with items) written straight into the test database, the
//! read-backs tests assert on, and the waits for what the pipeline does to
//! an order ([`wait_paid`], [`wait_emails_sent`], [`wait_paid_and_mailed`]).

use std::time::Duration;

use sqlx::{PgPool, Row};

use crate::{WAIT, eventually};

/// The amount of an order the builder is not told otherwise about: 500.00.
pub const AMOUNT_MINOR: i64 = 50_000;
/// The currency of an order the builder is not told otherwise about.
pub const CURRENCY: &str = "INR";

/// Products and pending orders to write into a test database, in three
/// statements however many there are ([`Shop::seed`]). A customer's email
/// is `<order_ref>@example.com`.
///
/// ```text
/// Shop::new()
///     .product("MUG", 10)
///     .order("order_1", &[("MUG", 2)])
///     .seed(&env.pool)
///     .await;
/// ```
#[derive(Clone, Debug, Default)]
pub struct Shop {
    products: Vec<(String, i32)>,
    orders: Vec<PendingOrder>,
}

#[derive(Clone, Debug)]
struct PendingOrder {
    order_ref: String,
    amount_minor: i64,
    currency: String,
    items: Vec<(String, i32)>,
}

impl Shop {
    pub fn new() -> Shop {
        Shop::default()
    }

    /// The walking skeleton's order: `order_ref` for 2 x MUG + 1 x TSHIRT
    /// (10 in stock each), 500.00 INR.
    pub fn basket(order_ref: &str) -> Shop {
        Shop::new()
            .product("MUG", 10)
            .product("TSHIRT", 10)
            .order(order_ref, &[("MUG", 2), ("TSHIRT", 1)])
    }

    /// Order `order_ref` for one unit of a product of its own,
    /// `SKU_<order_ref>` (10 in stock), 500.00 INR.
    pub fn own_product(order_ref: &str) -> Shop {
        let sku = format!("SKU_{order_ref}");
        Shop::new().product(&sku, 10).order(order_ref, &[(&sku, 1)])
    }

    /// One product MUG with `stock` units and an order of one MUG, 500.00
    /// INR, for each of `orders`.
    pub fn mugs<S: AsRef<str>>(stock: i32, orders: &[S]) -> Shop {
        orders
            .iter()
            .fold(Shop::new().product("MUG", stock), |shop, order_ref| {
                shop.order(order_ref.as_ref(), &[("MUG", 1)])
            })
    }

    /// A product `sku` with `stock` units.
    pub fn product(mut self, sku: &str, stock: i32) -> Shop {
        self.products.push((sku.to_owned(), stock));
        self
    }

    /// A pending order of 500.00 INR with `items` (sku, qty).
    pub fn order<S: AsRef<str>>(self, order_ref: &str, items: &[(S, i32)]) -> Shop {
        self.order_of(order_ref, AMOUNT_MINOR, CURRENCY, items)
    }

    /// A pending order of `amount_minor` in `currency` with `items` (sku, qty).
    pub fn order_of<S: AsRef<str>>(
        mut self,
        order_ref: &str,
        amount_minor: i64,
        currency: &str,
        items: &[(S, i32)],
    ) -> Shop {
        self.orders.push(PendingOrder {
            order_ref: order_ref.to_owned(),
            amount_minor,
            currency: currency.to_owned(),
            items: items
                .iter()
                .map(|(sku, qty)| (sku.as_ref().to_owned(), *qty))
                .collect(),
        });
        self
    }

    /// Writes the products, then the orders, then their items, one
    /// statement each, in the order they were added: the default tenant's.
    pub async fn seed(self, pool: &PgPool) {
        self.seed_in(pool, "default").await;
    }

    /// [`Shop::seed`] for `tenant`: the rows take its id from the
    /// transaction's scope, as the binaries' writes do.
    pub async fn seed_in(self, pool: &PgPool, tenant: &str) {
        let mut tx = pool.begin().await.expect("begin");
        sqlx::query("SELECT set_config('oncehook.tenants', $1, true)")
            .bind(tenant)
            .execute(&mut *tx)
            .await
            .expect("scope");
        if !self.products.is_empty() {
            let (skus, stocks): (Vec<String>, Vec<i32>) = self.products.into_iter().unzip();
            sqlx::query(
                "INSERT INTO products (sku, name, stock)
                 SELECT s, s, n FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS x(s, n, i)
                 ORDER BY i",
            )
            .bind(&skus)
            .bind(&stocks)
            .execute(&mut *tx)
            .await
            .expect("insert products");
        }
        if self.orders.is_empty() {
            tx.commit().await.expect("commit");
            return;
        }
        let refs: Vec<&str> = self.orders.iter().map(|o| o.order_ref.as_str()).collect();
        let emails: Vec<String> = refs.iter().map(|r| format!("{r}@example.com")).collect();
        let amounts: Vec<i64> = self.orders.iter().map(|o| o.amount_minor).collect();
        let currencies: Vec<&str> = self.orders.iter().map(|o| o.currency.as_str()).collect();
        sqlx::query(
            "INSERT INTO orders (order_ref, customer_email, amount_minor, currency)
             SELECT r, e, a, c
             FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) WITH ORDINALITY AS x(r, e, a, c, i)
             ORDER BY i",
        )
        .bind(&refs)
        .bind(&emails)
        .bind(&amounts)
        .bind(&currencies)
        .execute(&mut *tx)
        .await
        .expect("insert orders");
        let items: Vec<(&str, &str, i32)> = self
            .orders
            .iter()
            .flat_map(|o| {
                o.items
                    .iter()
                    .map(|(sku, qty)| (o.order_ref.as_str(), sku.as_str(), *qty))
            })
            .collect();
        if items.is_empty() {
            tx.commit().await.expect("commit");
            return;
        }
        // A database of a release before tenants has no `tenant_id`: the
        // default tenant's orders are found by reference alone.
        let insert = if tenant == "default" {
            "INSERT INTO order_items (order_id, sku, qty)
             SELECT o.id, x.s, x.q
             FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS x(r, s, q, i)
             JOIN orders o ON o.order_ref = x.r AND $4::text IS NOT NULL
             ORDER BY x.i"
        } else {
            "INSERT INTO order_items (order_id, sku, qty)
             SELECT o.id, x.s, x.q
             FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS x(r, s, q, i)
             JOIN orders o ON o.order_ref = x.r AND o.tenant_id = $4
             ORDER BY x.i"
        };
        sqlx::query(insert)
            .bind(items.iter().map(|i| i.0).collect::<Vec<_>>())
            .bind(items.iter().map(|i| i.1).collect::<Vec<_>>())
            .bind(items.iter().map(|i| i.2).collect::<Vec<_>>())
            .bind(tenant)
            .execute(&mut *tx)
            .await
            .expect("insert order items");
        tx.commit().await.expect("commit");
    }
}

/// Creates a product with `stock` units.
pub async fn product(pool: &PgPool, sku: &str, stock: i32) {
    sqlx::query("INSERT INTO products (sku, name, stock) VALUES ($1, $1, $2)")
        .bind(sku)
        .bind(stock)
        .execute(pool)
        .await
        .expect("insert product");
}

/// Creates a pending order with `items` (sku, qty); returns its id.
pub async fn order(
    pool: &PgPool,
    order_ref: &str,
    amount_minor: i64,
    currency: &str,
    items: &[(&str, i32)],
) -> i64 {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (order_ref, customer_email, amount_minor, currency) VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(order_ref)
    .bind(format!("{order_ref}@example.com"))
    .bind(amount_minor)
    .bind(currency)
    .fetch_one(pool)
    .await
    .expect("insert order");
    for (sku, qty) in items {
        sqlx::query("INSERT INTO order_items (order_id, sku, qty) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(sku)
            .bind(qty)
            .execute(pool)
            .await
            .expect("insert order item");
    }
    id
}

/// The status of an order (`pending`, `paid`, …).
pub async fn order_status(pool: &PgPool, order_ref: &str) -> String {
    sqlx::query_scalar("SELECT status FROM orders WHERE order_ref = $1")
        .bind(order_ref)
        .fetch_one(pool)
        .await
        .expect("order status")
}

/// Units of `sku` in stock.
pub async fn stock(pool: &PgPool, sku: &str) -> i32 {
    sqlx::query_scalar("SELECT stock FROM products WHERE sku = $1")
        .bind(sku)
        .fetch_one(pool)
        .await
        .expect("stock")
}

/// (status, flag) of every payment row of an order, oldest first.
pub async fn payments(pool: &PgPool, order_ref: &str) -> Vec<(String, Option<String>)> {
    sqlx::query(
        "SELECT p.status, p.flag FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE o.order_ref = $1 ORDER BY p.id",
    )
    .bind(order_ref)
    .fetch_all(pool)
    .await
    .expect("payments")
    .iter()
    .map(|r| (r.get("status"), r.get("flag")))
    .collect()
}

/// Outbox rows of an order: (kind, sent?).
pub async fn emails(pool: &PgPool, order_ref: &str) -> Vec<(String, bool)> {
    sqlx::query(
        "SELECT e.kind, e.sent_at IS NOT NULL AS sent FROM email_outbox e JOIN orders o ON o.id = e.order_id
         WHERE o.order_ref = $1 ORDER BY e.created_at",
    )
    .bind(order_ref)
    .fetch_all(pool)
    .await
    .expect("emails")
    .iter()
    .map(|r| (r.get("kind"), r.get("sent")))
    .collect()
}

/// Rows in processed_webhooks for an order: (event_id, outcome, deliveries).
pub async fn webhooks(pool: &PgPool, order_ref: &str) -> Vec<(String, String, i32)> {
    sqlx::query("SELECT event_id, outcome, deliveries FROM processed_webhooks WHERE order_ref = $1 ORDER BY received_at")
        .bind(order_ref)
        .fetch_all(pool)
        .await
        .expect("webhooks")
        .iter()
        .map(|r| (r.get("event_id"), r.get("outcome"), r.get("deliveries")))
        .collect()
}

/// Waits ([`WAIT`]) until order `order_ref` is paid.
pub async fn wait_paid(pool: &PgPool, order_ref: &str) {
    wait_paid_within(pool, order_ref, WAIT).await;
}

/// Waits up to `within` until order `order_ref` is paid.
pub async fn wait_paid_within(pool: &PgPool, order_ref: &str, within: Duration) {
    eventually(&format!("order {order_ref} paid"), within, || async {
        (order_status(pool, order_ref).await == "paid").then_some(())
    })
    .await;
}

/// Waits ([`WAIT`]) until order `order_ref` has exactly `n` outbox rows,
/// every one of them sent.
pub async fn wait_emails_sent(pool: &PgPool, order_ref: &str, n: usize) {
    eventually(
        &format!("{n} email(s) of {order_ref} sent"),
        WAIT,
        || async { all_sent(&emails(pool, order_ref).await, n).then_some(()) },
    )
    .await;
}

/// Waits ([`WAIT`], for both together) until order `order_ref` is paid and
/// its one email sent.
pub async fn wait_paid_and_mailed(pool: &PgPool, order_ref: &str) {
    eventually(&format!("{order_ref} paid and mailed"), WAIT, || async {
        let paid = order_status(pool, order_ref).await == "paid";
        (paid && all_sent(&emails(pool, order_ref).await, 1)).then_some(())
    })
    .await;
}

/// Exactly `n` outbox rows, all sent.
fn all_sent(emails: &[(String, bool)], n: usize) -> bool {
    emails.len() == n && emails.iter().all(|(_, sent)| *sent)
}
