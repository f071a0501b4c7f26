//! `oncehookctl trace`: answers "why is this order in this state?" in one
//! command — the order and its items, every payment attempt, every webhook
//! delivery that touched it (with outcome, how many copies arrived, and
//! when), refunds, and its emails with their status.

use std::fmt;

use anyhow::Context;
use clap::Subcommand;
use oncehook_common::{Config, db};
use oncehook_gateways::{currency_exponent, format_decimal_minor};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use time::OffsetDateTime;

use crate::output::{Report, table};
use crate::timefmt::serialize_rfc3339;

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Everything that happened to one order.
    Order {
        /// The order reference the gateway echoes back.
        order_ref: String,
    },
    /// One delivery identity: its outcome, then the order it touched.
    Event {
        /// razorpay | cashfree | payu | stripe | standard
        provider: String,
        event_id: String,
    },
}

/// What `trace` found.
#[derive(Serialize)]
#[serde(untagged)]
pub enum TraceReport {
    Order(Box<OrderStory>),
    NoOrder(NoOrder),
    Event(Box<EventStory>),
    NoEvent(NoEvent),
}

/// Everything about one order (`trace order --json`).
#[derive(Serialize)]
pub struct OrderStory {
    order: OrderRow,
    items: Vec<ItemRow>,
    payments: Vec<PaymentRow>,
    webhooks: Vec<WebhookRow>,
    refunds: Vec<RefundRow>,
    emails: Vec<EmailRow>,
}

/// No such order.
#[derive(Serialize)]
pub struct NoOrder {
    order_ref: String,
    order: Option<()>,
    webhooks_naming_it: i64,
}

/// One processed delivery and the order it names.
#[derive(Serialize)]
pub struct EventStory {
    event: WebhookRow,
    order: Option<OrderStory>,
    /// The event names an order that does not exist (text only).
    #[serde(skip)]
    missing: Option<NoOrder>,
}

/// The delivery was never processed.
#[derive(Serialize)]
pub struct NoEvent {
    provider: String,
    event_id: String,
    processed: bool,
}

#[derive(Serialize, sqlx::FromRow)]
struct OrderRow {
    #[serde(skip)]
    id: i64,
    order_ref: String,
    customer_email: String,
    amount_minor: i64,
    currency: String,
    status: String,
    #[serde(serialize_with = "serialize_rfc3339")]
    paid_at: Option<OffsetDateTime>,
    paid_by: Option<String>,
    refunded_minor: i64,
    oversold: bool,
    #[serde(serialize_with = "serialize_rfc3339")]
    created_at: Option<OffsetDateTime>,
}

#[derive(Serialize, sqlx::FromRow)]
struct ItemRow {
    sku: String,
    qty: i32,
    stock: i32,
}

#[derive(Serialize, sqlx::FromRow)]
struct PaymentRow {
    provider: String,
    payment_id: String,
    status: String,
    amount_minor: Option<i64>,
    currency: Option<String>,
    flag: Option<String>,
    event_id: String,
    #[serde(serialize_with = "serialize_rfc3339")]
    created_at: Option<OffsetDateTime>,
}

#[derive(Serialize, sqlx::FromRow)]
struct WebhookRow {
    provider: String,
    event_id: String,
    event_type: String,
    order_ref: Option<String>,
    payment_id: Option<String>,
    source: Option<String>,
    receipt_id: Option<String>,
    outcome: String,
    detail: Option<String>,
    deliveries: i32,
    #[serde(serialize_with = "serialize_rfc3339")]
    received_at: Option<OffsetDateTime>,
    #[serde(serialize_with = "serialize_rfc3339")]
    processed_at: Option<OffsetDateTime>,
    #[serde(serialize_with = "serialize_rfc3339")]
    last_seen_at: Option<OffsetDateTime>,
}

#[derive(Serialize, sqlx::FromRow)]
struct RefundRow {
    provider: String,
    refund_id: String,
    payment_id: Option<String>,
    amount_minor: i64,
    cumulative: bool,
    event_id: String,
    #[serde(serialize_with = "serialize_rfc3339")]
    created_at: Option<OffsetDateTime>,
}

#[derive(Serialize, sqlx::FromRow)]
struct EmailRow {
    id: String,
    kind: String,
    to_addr: String,
    subject: String,
    status: String,
    attempts: i32,
    last_error: Option<String>,
    #[serde(serialize_with = "serialize_rfc3339")]
    created_at: Option<OffsetDateTime>,
    #[serde(serialize_with = "serialize_rfc3339")]
    published_at: Option<OffsetDateTime>,
    #[serde(serialize_with = "serialize_rfc3339")]
    sent_at: Option<OffsetDateTime>,
    #[serde(serialize_with = "serialize_rfc3339")]
    failed_at: Option<OffsetDateTime>,
}

/// The columns of a [`WebhookRow`] (a macro: sqlx takes static SQL only).
macro_rules! webhook_columns {
    () => {
        "provider, event_id, event_type, order_ref, payment_id, source,
         receipt_id::text AS receipt_id, outcome, detail, deliveries, received_at, processed_at, last_seen_at"
    };
}

pub async fn run(settings: &Config, command: TraceCommand) -> anyhow::Result<TraceReport> {
    let pool = db::connect(settings.database.url.expose(), 2, 3)
        .await
        .context("connecting to the database")?;
    let report = match command {
        TraceCommand::Order { order_ref } => trace_order(&pool, &order_ref).await,
        TraceCommand::Event { provider, event_id } => trace_event(&pool, provider, event_id).await,
    };
    pool.close().await;
    report
}

async fn trace_event(
    pool: &PgPool,
    provider: String,
    event_id: String,
) -> anyhow::Result<TraceReport> {
    let event: Option<WebhookRow> = sqlx::query_as(concat!(
        "SELECT ",
        webhook_columns!(),
        " FROM processed_webhooks WHERE provider = $1 AND event_id = $2"
    ))
    .bind(&provider)
    .bind(&event_id)
    .fetch_optional(pool)
    .await?;
    let Some(event) = event else {
        return Ok(TraceReport::NoEvent(NoEvent {
            provider,
            event_id,
            processed: false,
        }));
    };
    let (order, missing) = match &event.order_ref {
        None => (None, None),
        Some(r) => match trace_order(pool, r).await? {
            TraceReport::Order(story) => (Some(*story), None),
            TraceReport::NoOrder(n) => (None, Some(n)),
            _ => (None, None),
        },
    };
    Ok(TraceReport::Event(Box::new(EventStory {
        event,
        order,
        missing,
    })))
}

async fn trace_order(pool: &PgPool, order_ref: &str) -> anyhow::Result<TraceReport> {
    if let Some(story) = order_story(pool, order_ref).await? {
        return Ok(TraceReport::Order(Box::new(story)));
    }
    let seen: i64 =
        sqlx::query_scalar("SELECT count(*) FROM processed_webhooks WHERE order_ref = $1")
            .bind(order_ref)
            .fetch_one(pool)
            .await?;
    Ok(TraceReport::NoOrder(NoOrder {
        order_ref: order_ref.to_owned(),
        order: None,
        webhooks_naming_it: seen,
    }))
}

/// The whole story of an order (`None` if there is no such order).
async fn order_story(pool: &PgPool, order_ref: &str) -> anyhow::Result<Option<OrderStory>> {
    let Some(order) = sqlx::query_as::<_, OrderRow>(
        "SELECT id, order_ref, customer_email, amount_minor, currency, status, paid_at, paid_by, refunded_minor, oversold, created_at
         FROM orders WHERE order_ref = $1",
    )
    .bind(order_ref)
    .fetch_optional(pool)
    .await?
    else {
        return Ok(None);
    };
    let id = order.id;
    let items = sqlx::query_as("SELECT i.sku, i.qty, p.stock FROM order_items i JOIN products p ON p.sku = i.sku WHERE i.order_id = $1 ORDER BY i.sku")
        .bind(id)
        .fetch_all(pool)
        .await?;
    let payments = sqlx::query_as("SELECT provider, payment_id, status, amount_minor, currency, flag, event_id, created_at FROM payments WHERE order_id = $1 ORDER BY created_at, id")
        .bind(id)
        .fetch_all(pool)
        .await?;
    let webhooks = sqlx::query_as(concat!(
        "SELECT ",
        webhook_columns!(),
        " FROM processed_webhooks
         WHERE order_ref = $1
            OR (order_ref IS NULL AND (provider, payment_id) IN (
                SELECT provider, payment_id FROM payments WHERE order_id = $2
                UNION SELECT provider, payment_id FROM payment_links WHERE order_id = $2
                UNION SELECT provider, payment_id FROM refunds WHERE order_id = $2))
         ORDER BY received_at, processed_at"
    ))
    .bind(order_ref)
    .bind(id)
    .fetch_all(pool)
    .await?;
    let refunds = sqlx::query_as("SELECT provider, refund_id, payment_id, amount_minor, cumulative, event_id, created_at FROM refunds WHERE order_id = $1 ORDER BY created_at")
        .bind(id)
        .fetch_all(pool)
        .await?;
    let emails = sqlx::query_as(
        "SELECT id::text AS id, kind, to_addr, subject, attempts, last_error, created_at, published_at, sent_at, failed_at,
                CASE WHEN sent_at IS NOT NULL THEN 'sent' WHEN failed_at IS NOT NULL THEN 'failed'
                     WHEN published_at IS NOT NULL THEN 'queued' ELSE 'pending' END AS status
         FROM email_outbox WHERE order_id = $1 ORDER BY created_at",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok(Some(OrderStory {
        order,
        items,
        payments,
        webhooks,
        refunds,
        emails,
    }))
}

impl fmt::Display for TraceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceReport::Order(story) => story.fmt(f),
            TraceReport::NoOrder(n) => n.fmt(f),
            TraceReport::Event(e) => {
                e.event.fmt_summary(f)?;
                writeln!(f)?;
                match (&e.order, &e.missing) {
                    (Some(story), _) => story.fmt(f),
                    (None, Some(n)) => n.fmt(f),
                    (None, None) => write!(f, "(the event names no order)"),
                }
            }
            TraceReport::NoEvent(n) => write!(
                f,
                "{} event {} has not been processed.\nIf ingest accepted it, look in the dead-letter queue: oncehookctl dlq list",
                n.provider, n.event_id
            ),
        }
    }
}

impl Report for TraceReport {
    fn ok(&self) -> bool {
        match self {
            TraceReport::Order(_) => true,
            TraceReport::Event(e) => e.missing.is_none(),
            TraceReport::NoOrder(_) | TraceReport::NoEvent(_) => false,
        }
    }
}

impl fmt::Display for NoOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no order {:?}. {} processed webhook(s) name it.\nEvents for unknown orders are dead-lettered: oncehookctl dlq list --error-kind unknown_order",
            self.order_ref, self.webhooks_naming_it
        )
    }
}

impl WebhookRow {
    /// The first lines of `trace event`.
    fn fmt_summary(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = serde_json::to_value(self).unwrap_or_default();
        writeln!(
            f,
            "{} event {} ({}): {} — {}\n  received {}, processed {}, {} deliver{}",
            self.provider,
            self.event_id,
            cell(&v["event_type"]),
            cell(&v["outcome"]),
            cell(&v["detail"]),
            cell(&v["received_at"]),
            cell(&v["processed_at"]),
            self.deliveries,
            if self.deliveries == 1 { "y" } else { "ies" },
        )
    }
}

impl fmt::Display for OrderStory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_order(f)?;
        section(
            f,
            "items",
            &self.items,
            &[("SKU", "sku"), ("QTY", "qty"), ("STOCK NOW", "stock")],
        )?;
        section(
            f,
            "payments",
            &self.payments,
            &[
                ("PROVIDER", "provider"),
                ("PAYMENT", "payment_id"),
                ("STATUS", "status"),
                ("AMOUNT", "amount_minor"),
                ("FLAG", "flag"),
                ("EVENT", "event_id"),
                ("AT", "created_at"),
            ],
        )?;
        section(
            f,
            "webhook deliveries",
            &self.webhooks,
            &[
                ("PROVIDER", "provider"),
                ("EVENT", "event_id"),
                ("TYPE", "event_type"),
                ("OUTCOME", "outcome"),
                ("COPIES", "deliveries"),
                ("RECEIVED", "received_at"),
                ("DETAIL", "detail"),
            ],
        )?;
        section(
            f,
            "refunds",
            &self.refunds,
            &[
                ("PROVIDER", "provider"),
                ("REFUND", "refund_id"),
                ("PAYMENT", "payment_id"),
                ("AMOUNT", "amount_minor"),
                ("TOTAL?", "cumulative"),
                ("EVENT", "event_id"),
                ("AT", "created_at"),
            ],
        )?;
        section(
            f,
            "emails",
            &self.emails,
            &[
                ("KIND", "kind"),
                ("TO", "to_addr"),
                ("STATUS", "status"),
                ("ATTEMPTS", "attempts"),
                ("SENT", "sent_at"),
                ("LAST ERROR", "last_error"),
            ],
        )
    }
}

impl OrderStory {
    fn fmt_order(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.order;
        let v = serde_json::to_value(o).unwrap_or_default();
        let amount = |minor: i64| format_decimal_minor(minor, currency_exponent(&o.currency));
        write!(
            f,
            "order {}  {}{}  {} {}  customer {}\n  created {}  paid {} by {}  refunded {} {}",
            o.order_ref,
            o.status.to_uppercase(),
            if o.oversold {
                "  OVERSOLD (stock went below zero: restock or refund)"
            } else {
                ""
            },
            amount(o.amount_minor),
            o.currency,
            o.customer_email,
            cell(&v["created_at"]),
            cell(&v["paid_at"]),
            cell(&v["paid_by"]),
            amount(o.refunded_minor),
            o.currency,
        )
    }
}

/// A titled table of `rows`; `columns` are (header, JSON field).
fn section<R: Serialize>(
    f: &mut fmt::Formatter<'_>,
    title: &str,
    rows: &[R],
    columns: &[(&str, &str)],
) -> fmt::Result {
    write!(f, "\n\n{title}:")?;
    if rows.is_empty() {
        return write!(f, "\n  (none)");
    }
    let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let v = serde_json::to_value(r).unwrap_or_default();
            columns.iter().map(|(_, k)| cell(&v[*k])).collect()
        })
        .collect();
    for line in table(&headers, &cells).lines() {
        write!(f, "\n  {line}")?;
    }
    Ok(())
}

/// A JSON value as display text ("-" for null).
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    }
}
