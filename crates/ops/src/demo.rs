//! `oncehookctl demo seed`: a few products and pending orders, so the README
//! tour has something to pay for, created the way a shop creates them —
//! through the shop's API (`oncehook-api`, docs/shop-integration.md), never
//! with SQL. Idempotent: products are created only when missing (their stock
//! is never reset), and each order is posted under a fixed
//! `Idempotency-Key`, so a second run answers the same orders again.
//!
//! The key comes from `ONCEHOOK_API_KEY` (never from the command line, where
//! other users of the machine could read it) and needs `products:write` and
//! `orders:write`; `make run` passes the local demo key.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use oncehook_common::Config;
use serde::Serialize;
use serde_json::{Value, json};

use crate::output::{Report, table};

/// Where the API key for `demo seed` is read from.
pub const ENV_API_KEY: &str = "ONCEHOOK_API_KEY";

#[derive(Subcommand)]
pub enum DemoCommand {
    /// Create demo products and pending orders through the shop's API (idempotent).
    Seed(SeedArgs),
}

#[derive(Args)]
pub struct SeedArgs {
    /// The shop API's base URL (default: http:// and the configured api.addr).
    #[arg(long)]
    pub api: Option<String>,
    /// Wait this many seconds for the API to accept connections (it may be starting).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub wait: u64,
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

impl DemoOrder {
    fn amount_minor(&self) -> i64 {
        self.items
            .iter()
            .map(|(sku, qty)| price(sku) * i64::from(*qty))
            .sum()
    }

    /// The `POST /v1/orders` body.
    fn body(&self) -> Value {
        let items: Vec<Value> = self
            .items
            .iter()
            .map(|(sku, qty)| json!({"sku": sku, "qty": qty, "unit_minor": price(sku)}))
            .collect();
        json!({
            "order_ref": self.order_ref,
            "customer_email": self.email,
            "currency": self.currency,
            "amount_minor": self.amount_minor(),
            "items": items,
            "metadata": {"source": "oncehookctl demo seed"},
        })
    }

    /// Fixed per order: a second run is answered from the first.
    fn idempotency_key(&self) -> String {
        format!("demo-seed-{}", self.order_ref)
    }
}

/// What `demo seed` made sure exists.
#[derive(Serialize)]
pub struct DemoReport {
    api: String,
    products: Vec<ProductView>,
    orders: Vec<OrderView>,
    /// ORDER, CUSTOMER, AMOUNT, STATUS, ITEMS (text only).
    #[serde(skip)]
    rows: Vec<Vec<String>>,
}

#[derive(Serialize)]
struct ProductView {
    sku: &'static str,
    name: String,
    stock: i64,
    /// `created` now, or `existed`.
    result: &'static str,
}

#[derive(Serialize)]
struct OrderView {
    order_ref: &'static str,
    email: &'static str,
    amount: String,
    status: String,
    /// `created` now, or `existed` (an earlier run made it).
    result: &'static str,
}

pub async fn run(settings: &Config, command: DemoCommand) -> anyhow::Result<DemoReport> {
    match command {
        DemoCommand::Seed(args) => seed(settings, args).await,
    }
}

async fn seed(settings: &Config, args: SeedArgs) -> anyhow::Result<DemoReport> {
    let key = std::env::var(ENV_API_KEY).ok().filter(|k| !k.is_empty());
    let Some(key) = key else {
        bail!(
            "demo seed creates its products and orders through the shop's API: set {ENV_API_KEY} to a key with the scopes products:write and orders:write (make run uses the local demo key; `oncehookctl api-key NAME --scope products:write --scope orders:write` makes one)"
        );
    };
    let base = args
        .api
        .unwrap_or_else(|| format!("http://{}", settings.api.addr));
    let base = base.trim_end_matches('/').to_owned();
    let client = ShopClient {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?,
        base,
        key,
    };
    client.wait_until_up(Duration::from_secs(args.wait)).await?;
    let mut products = Vec::new();
    for &(sku, name, stock) in PRODUCTS {
        products.push(client.product(sku, name, stock).await?);
    }
    let mut orders = Vec::new();
    for order in ORDERS {
        orders.push(client.order(order).await?);
    }
    let rows = ORDERS
        .iter()
        .zip(&orders)
        .map(|(o, v)| {
            vec![
                o.order_ref.to_owned(),
                o.email.to_owned(),
                v.amount.clone(),
                format!("{} ({})", v.status, v.result),
                o.items
                    .iter()
                    .map(|(s, q)| format!("{q}x{s}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            ]
        })
        .collect();
    Ok(DemoReport {
        api: client.base,
        products,
        orders,
        rows,
    })
}

/// The few calls `demo seed` makes to the shop's API.
struct ShopClient {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl ShopClient {
    /// Retries the connection (not the answer) until `patience` is up.
    async fn wait_until_up(&self, patience: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + patience;
        let url = format!("{}/v1/openapi.json", self.base);
        loop {
            match self.http.get(&url).send().await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e).with_context(|| {
                        format!(
                            "the shop's API at {} did not answer within {}s: is oncehook-api running (make run starts it)?",
                            self.base,
                            patience.as_secs()
                        )
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// `PUT /v1/products/{sku}`: creates it with `stock`, or leaves it be.
    async fn product(
        &self,
        sku: &'static str,
        name: &str,
        stock: i32,
    ) -> anyhow::Result<ProductView> {
        let path = format!("/v1/products/{sku}");
        let body = json!({"name": name, "stock": stock});
        let request = json_body(self.http.put(self.url(&path)), &body);
        let (status, _, answer) = self.call(request, &path).await?;
        Ok(ProductView {
            sku,
            name: answer["name"].as_str().unwrap_or(name).to_owned(),
            stock: answer["stock"].as_i64().unwrap_or(0),
            result: if status == 201 { "created" } else { "existed" },
        })
    }

    /// `POST /v1/orders` under the order's fixed idempotency key.
    async fn order(&self, order: &DemoOrder) -> anyhow::Result<OrderView> {
        let path = "/v1/orders";
        let request = json_body(
            self.http
                .post(self.url(path))
                .header("Idempotency-Key", order.idempotency_key()),
            &order.body(),
        );
        let (status, replayed, answer) = self
            .call(request, &format!("{path} ({})", order.order_ref))
            .await?;
        Ok(OrderView {
            order_ref: order.order_ref,
            email: order.email,
            amount: format!(
                "{} {}",
                answer["amount"]["formatted"]
                    .as_str()
                    .map_or_else(|| order.amount_minor().to_string(), str::to_owned),
                order.currency
            ),
            status: answer["status"].as_str().unwrap_or("?").to_owned(),
            result: if status == 201 && !replayed {
                "created"
            } else {
                "existed"
            },
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends with the key; a success's status, whether it was repeated
    /// from its idempotency key, and its JSON — or an error that says which
    /// call failed and the API's own `error` and `message`.
    async fn call(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> anyhow::Result<(u16, bool, Value)> {
        let response = request
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("calling the shop's API: {what}"))?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("Idempotent-Replayed")
            .is_some_and(|v| v.as_bytes() == b"true");
        let text = response.text().await.unwrap_or_default();
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            let hint = match status {
                401 => format!(" (is {ENV_API_KEY} one of the configured [[api.key]] entries?)"),
                403 => " (the key needs the scopes products:write and orders:write)".to_owned(),
                _ => String::new(),
            };
            bail!(
                "{what}: the shop's API answered {status} {}: {}{hint}",
                json["error"].as_str().unwrap_or("?"),
                json["message"].as_str().unwrap_or(text.as_str()),
            );
        }
        Ok((status, replayed, json))
    }
}

/// `request` with `body` as its JSON.
fn json_body(request: reqwest::RequestBuilder, body: &Value) -> reqwest::RequestBuilder {
    request
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
}

impl fmt::Display for DemoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let created = |n: usize| {
            if n == 0 {
                String::new()
            } else {
                format!(", {n} new")
            }
        };
        writeln!(
            f,
            "demo data ready through {}: {} products{}, {} orders{}\n",
            self.api,
            self.products.len(),
            created(
                self.products
                    .iter()
                    .filter(|p| p.result == "created")
                    .count()
            ),
            self.orders.len(),
            created(self.orders.iter().filter(|o| o.result == "created").count()),
        )?;
        write!(
            f,
            "{}",
            table(
                &["ORDER", "CUSTOMER", "AMOUNT", "STATUS", "ITEMS"],
                &self.rows
            )
        )
    }
}

impl Report for DemoReport {}
