//! `oncehookctl trace`: answers "why is this order in this state?" in one
//! command — the order and its items, every payment attempt, every webhook
//! delivery that touched it (with outcome, how many copies arrived — under
//! its event id, and of its signed body under other event ids — and when),
//! refunds, its emails with their status, and the shop API's writes
//! about it (`api_audit`).

use std::fmt;

use anyhow::Context;
use clap::Subcommand;
use oncehook_common::Config;
use oncehook_common::store::Pooled;
use oncehook_common::store::dedup::{self, WebhookRow};
use oncehook_common::store::outbox::{self, EmailRecord};
use oncehook_gateways::{currency_exponent, format_decimal_minor};
use oncehook_ledger::store::refund_intents as refunds;
use oncehook_ledger::store::{self as ledger, ItemStock, OrderDetail, PaymentRecord, RefundRecord};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;

use crate::output::{Report, table};
use crate::store::{self, ApiAuditEntry};

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
    order: OrderDetail,
    items: Vec<ItemStock>,
    payments: Vec<PaymentRecord>,
    webhooks: Vec<WebhookRow>,
    refunds: Vec<RefundRecord>,
    /// What the books owe back, and what became of it (docs/refunds.md).
    refund_intents: Vec<refunds::Intent>,
    emails: Vec<EmailRecord>,
    /// The shop API's writes about this order (`api_audit`).
    api: Vec<ApiAuditEntry>,
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

pub async fn run(settings: &Config, command: TraceCommand) -> anyhow::Result<TraceReport> {
    let pool = Pooled::connect(&settings.database, 2, 3)
        .await
        .context("connecting to the database")?;
    let report = async {
        let mut conn = pool.single().await?;
        let report = match command {
            TraceCommand::Order { order_ref } => trace_order(&mut conn, &order_ref).await?,
            TraceCommand::Event { provider, event_id } => {
                trace_event(&mut conn, provider, event_id).await?
            }
        };
        conn.finish().await?;
        anyhow::Ok(report)
    }
    .await;
    pool.close().await;
    report
}

pub async fn trace_event(
    conn: &mut PgConnection,
    provider: String,
    event_id: String,
) -> anyhow::Result<TraceReport> {
    let Some(event) = dedup::find_event(conn, &provider, &event_id).await? else {
        return Ok(TraceReport::NoEvent(NoEvent {
            provider,
            event_id,
            processed: false,
        }));
    };
    let (order, missing) = match &event.order_ref {
        None => (None, None),
        Some(r) => match trace_order(conn, r).await? {
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

pub async fn trace_order(conn: &mut PgConnection, order_ref: &str) -> anyhow::Result<TraceReport> {
    if let Some(story) = order_story(conn, order_ref).await? {
        return Ok(TraceReport::Order(Box::new(story)));
    }
    let seen = dedup::count_naming_order(conn, order_ref).await?;
    Ok(TraceReport::NoOrder(NoOrder {
        order_ref: order_ref.to_owned(),
        order: None,
        webhooks_naming_it: seen,
    }))
}

/// The whole story of an order (`None` if there is no such order).
async fn order_story(
    conn: &mut PgConnection,
    order_ref: &str,
) -> anyhow::Result<Option<OrderStory>> {
    let Some(order) = ledger::order_by_ref(conn, order_ref).await? else {
        return Ok(None);
    };
    let id = order.id;
    Ok(Some(OrderStory {
        items: ledger::items_of(conn, id).await?,
        payments: ledger::payments_of(conn, id).await?,
        webhooks: dedup::touching_order(conn, order_ref, id).await?,
        refunds: ledger::refunds_of(conn, id).await?,
        refund_intents: refunds::find(conn, order_ref).await?,
        emails: outbox::emails_of(conn, id).await?,
        api: store::audit_of_order(conn, order_ref).await?,
        order,
    }))
}

impl fmt::Display for TraceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceReport::Order(story) => story.fmt(f),
            TraceReport::NoOrder(n) => n.fmt(f),
            TraceReport::Event(e) => {
                fmt_event_summary(&e.event, f)?;
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

/// The first lines of `trace event`.
fn fmt_event_summary(e: &WebhookRow, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let v = serde_json::to_value(e).unwrap_or_default();
    write!(
        f,
        "{} event {} ({}{}): {} — {}\n  received {}, processed {}, {} deliver{}",
        e.provider,
        e.event_id,
        cell(&v["event_type"]),
        if e.origin == "webhook" {
            ""
        } else {
            ", from reconciliation"
        },
        cell(&v["outcome"]),
        cell(&v["detail"]),
        cell(&v["received_at"]),
        cell(&v["processed_at"]),
        e.deliveries,
        if e.deliveries == 1 { "y" } else { "ies" },
    )?;
    if e.body_redeliveries > 0 {
        write!(
            f,
            ", and {} cop{} of its signed body under other event ids (absorbed, no effect)",
            e.body_redeliveries,
            if e.body_redeliveries == 1 { "y" } else { "ies" },
        )?;
    }
    writeln!(f)
}

impl OrderStory {
    /// The webhook deliveries section, with the note on redelivered bodies.
    fn fmt_webhooks(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        section(
            f,
            "webhook deliveries",
            &self.webhooks,
            &[
                ("PROVIDER", "provider"),
                ("EVENT", "event_id"),
                ("TYPE", "event_type"),
                ("OUTCOME", "outcome"),
                ("ORIGIN", "origin"),
                ("COPIES", "deliveries"),
                ("TRACE", "trace_id"),
                ("REDELIVERED", "body_redeliveries"),
                ("RECEIVED", "received_at"),
                ("DETAIL", "detail"),
            ],
        )?;
        if self.webhooks.iter().any(|w| w.origin != "webhook") {
            write!(
                f,
                "\n  ORIGIN reconciliation: read from the gateway's API by the reconciler (no webhook had brought it; see docs/reconciliation.md)"
            )?;
        }
        if self.webhooks.iter().any(|w| w.body_redeliveries > 0) {
            write!(
                f,
                "\n  REDELIVERED: copies of the same signed body under another event id (absorbed like duplicates, no effect)"
            )?;
        }
        Ok(())
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
        self.fmt_webhooks(f)?;
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
            "refund intents",
            &self.refund_intents,
            &[
                ("INTENT", "id"),
                ("PAYMENT", "payment_id"),
                ("AMOUNT", "amount_minor"),
                ("REASON", "reason"),
                ("STATE", "state"),
                ("REFUND", "gateway_refund_id"),
                ("NOTE", "gateway_message"),
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
        )?;
        section(
            f,
            "shop API",
            &self.api,
            &[
                ("AT", "at"),
                ("KEY", "key_name"),
                ("ACTION", "action"),
                ("OK", "ok"),
                ("RESULT", "result"),
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
