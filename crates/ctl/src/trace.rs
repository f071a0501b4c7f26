//! `oncehookctl trace`: answers "why is this order in this state?" in one
//! command — the order and its items, every payment attempt, every webhook
//! delivery that touched it (with outcome, how many copies arrived, and
//! when), refunds, and its emails with their status.

use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use oncehook_common::{Settings, db};
use oncehook_gateways::{currency_exponent, format_decimal_minor};
use serde_json::{Value, json};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::output::{Output, table};

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

pub async fn run(
    settings: &Settings,
    command: TraceCommand,
    out: &Output,
) -> anyhow::Result<ExitCode> {
    let pool = db::connect(&settings.database_url, 2, 3)
        .await
        .context("connecting to the database")?;
    match command {
        TraceCommand::Order { order_ref } => trace_order(&pool, &order_ref, out).await,
        TraceCommand::Event { provider, event_id } => {
            let row = sqlx::query(
                "SELECT provider, event_id, event_type, order_ref, payment_id, source, receipt_id::text AS receipt,
                        outcome, detail, deliveries, received_at, processed_at, last_seen_at
                 FROM processed_webhooks WHERE provider = $1 AND event_id = $2",
            )
            .bind(&provider)
            .bind(&event_id)
            .fetch_optional(&pool)
            .await?;
            let Some(row) = row else {
                out.done(
                    &format!(
                        "{provider} event {event_id} has not been processed.\nIf ingest accepted it, look in the dead-letter queue: oncehookctl dlq list"
                    ),
                    json!({ "provider": provider, "event_id": event_id, "processed": false }),
                );
                return Ok(ExitCode::FAILURE);
            };
            let event = webhook_json(&row)?;
            let order_ref: Option<String> = row.try_get("order_ref")?;
            if !out.json {
                println!(
                    "{provider} event {event_id} ({}): {} — {}\n  received {}, processed {}, {} deliver{}\n",
                    s(&event["event_type"]),
                    s(&event["outcome"]),
                    s(&event["detail"]),
                    s(&event["received_at"]),
                    s(&event["processed_at"]),
                    event["deliveries"],
                    if event["deliveries"] == json!(1) {
                        "y"
                    } else {
                        "ies"
                    },
                );
            }
            match order_ref {
                Some(r) if !out.json => trace_order(&pool, &r, out).await,
                Some(r) => {
                    let order = order_json(&pool, &r).await?;
                    out.done("", json!({ "event": event, "order": order }));
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    out.done(
                        "(the event names no order)",
                        json!({ "event": event, "order": null }),
                    );
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
    }
}

async fn trace_order(pool: &PgPool, order_ref: &str, out: &Output) -> anyhow::Result<ExitCode> {
    let order = order_json(pool, order_ref).await?;
    if order.is_null() {
        let seen: i64 =
            sqlx::query_scalar("SELECT count(*) FROM processed_webhooks WHERE order_ref = $1")
                .bind(order_ref)
                .fetch_one(pool)
                .await?;
        out.done(
            &format!(
                "no order {order_ref:?}. {seen} processed webhook(s) name it.\nEvents for unknown orders are dead-lettered: oncehookctl dlq list --error-kind unknown_order"
            ),
            json!({ "order_ref": order_ref, "order": null, "webhooks_naming_it": seen }),
        );
        return Ok(ExitCode::FAILURE);
    }
    if out.json {
        out.done("", order);
        return Ok(ExitCode::SUCCESS);
    }
    let o = &order["order"];
    let currency = s(&o["currency"]);
    let amount = |v: &Value| {
        v.as_i64().map_or_else(
            || "-".to_owned(),
            |minor| format_decimal_minor(minor, currency_exponent(&currency)),
        )
    };
    println!(
        "order {}  {}{}  {} {}  customer {}\n  created {}  paid {} by {}  refunded {} {}",
        s(&o["order_ref"]),
        s(&o["status"]).to_uppercase(),
        if o["oversold"].as_bool() == Some(true) {
            "  OVERSOLD (stock went below zero: restock or refund)"
        } else {
            ""
        },
        amount(&o["amount_minor"]),
        currency,
        s(&o["customer_email"]),
        s(&o["created_at"]),
        s(&o["paid_at"]),
        s(&o["paid_by"]),
        amount(&o["refunded_minor"]),
        currency,
    );
    section(
        "items",
        &["SKU", "QTY", "STOCK NOW"],
        &order["items"],
        &["sku", "qty", "stock"],
    );
    section(
        "payments",
        &[
            "PROVIDER", "PAYMENT", "STATUS", "AMOUNT", "FLAG", "EVENT", "AT",
        ],
        &order["payments"],
        &[
            "provider",
            "payment_id",
            "status",
            "amount_minor",
            "flag",
            "event_id",
            "created_at",
        ],
    );
    section(
        "webhook deliveries",
        &[
            "PROVIDER", "EVENT", "TYPE", "OUTCOME", "COPIES", "RECEIVED", "DETAIL",
        ],
        &order["webhooks"],
        &[
            "provider",
            "event_id",
            "event_type",
            "outcome",
            "deliveries",
            "received_at",
            "detail",
        ],
    );
    section(
        "refunds",
        &[
            "PROVIDER", "REFUND", "PAYMENT", "AMOUNT", "TOTAL?", "EVENT", "AT",
        ],
        &order["refunds"],
        &[
            "provider",
            "refund_id",
            "payment_id",
            "amount_minor",
            "cumulative",
            "event_id",
            "created_at",
        ],
    );
    section(
        "emails",
        &["KIND", "TO", "STATUS", "ATTEMPTS", "SENT", "LAST ERROR"],
        &order["emails"],
        &[
            "kind",
            "to_addr",
            "status",
            "attempts",
            "sent_at",
            "last_error",
        ],
    );
    Ok(ExitCode::SUCCESS)
}

fn section(title: &str, headers: &[&str], rows: &Value, keys: &[&str]) {
    let rows: Vec<Vec<String>> = rows
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| keys.iter().map(|k| s(&r[*k])).collect())
                .collect()
        })
        .unwrap_or_default();
    println!("\n{title}:");
    if rows.is_empty() {
        println!("  (none)");
    } else {
        for line in table(headers, &rows).lines() {
            println!("  {line}");
        }
    }
}

/// A JSON value as display text ("-" for null).
fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    }
}

fn ts(row: &PgRow, col: &str) -> anyhow::Result<Value> {
    let t: Option<OffsetDateTime> = row.try_get(col)?;
    Ok(t.and_then(|t| t.format(&Rfc3339).ok())
        .map_or(Value::Null, Value::String))
}

fn webhook_json(row: &PgRow) -> anyhow::Result<Value> {
    Ok(json!({
        "provider": row.try_get::<String, _>("provider")?,
        "event_id": row.try_get::<String, _>("event_id")?,
        "event_type": row.try_get::<String, _>("event_type")?,
        "order_ref": row.try_get::<Option<String>, _>("order_ref")?,
        "payment_id": row.try_get::<Option<String>, _>("payment_id")?,
        "source": row.try_get::<Option<String>, _>("source")?,
        "receipt_id": row.try_get::<Option<String>, _>("receipt")?,
        "outcome": row.try_get::<String, _>("outcome")?,
        "detail": row.try_get::<Option<String>, _>("detail")?,
        "deliveries": row.try_get::<i32, _>("deliveries")?,
        "received_at": ts(row, "received_at")?,
        "processed_at": ts(row, "processed_at")?,
        "last_seen_at": ts(row, "last_seen_at")?,
    }))
}

/// The whole story of an order as JSON (`null` if there is no such order).
pub async fn order_json(pool: &PgPool, order_ref: &str) -> anyhow::Result<Value> {
    let Some(o) = sqlx::query(
        "SELECT id, order_ref, customer_email, amount_minor, currency, status, paid_at, paid_by, refunded_minor, oversold, created_at
         FROM orders WHERE order_ref = $1",
    )
    .bind(order_ref)
    .fetch_optional(pool)
    .await?
    else {
        return Ok(Value::Null);
    };
    let id: i64 = o.try_get("id")?;
    let order = json!({
        "order_ref": o.try_get::<String, _>("order_ref")?,
        "customer_email": o.try_get::<String, _>("customer_email")?,
        "amount_minor": o.try_get::<i64, _>("amount_minor")?,
        "currency": o.try_get::<String, _>("currency")?,
        "status": o.try_get::<String, _>("status")?,
        "paid_at": ts(&o, "paid_at")?,
        "paid_by": o.try_get::<Option<String>, _>("paid_by")?,
        "refunded_minor": o.try_get::<i64, _>("refunded_minor")?,
        "oversold": o.try_get::<bool, _>("oversold")?,
        "created_at": ts(&o, "created_at")?,
    });
    let mut items = Vec::new();
    for r in sqlx::query("SELECT i.sku, i.qty, p.stock FROM order_items i JOIN products p ON p.sku = i.sku WHERE i.order_id = $1 ORDER BY i.sku")
        .bind(id)
        .fetch_all(pool)
        .await?
    {
        items.push(json!({ "sku": r.try_get::<String, _>("sku")?, "qty": r.try_get::<i32, _>("qty")?, "stock": r.try_get::<i32, _>("stock")? }));
    }
    let mut payments = Vec::new();
    for r in sqlx::query("SELECT provider, payment_id, status, amount_minor, currency, flag, event_id, created_at FROM payments WHERE order_id = $1 ORDER BY created_at, id")
        .bind(id)
        .fetch_all(pool)
        .await?
    {
        payments.push(json!({
            "provider": r.try_get::<String, _>("provider")?,
            "payment_id": r.try_get::<String, _>("payment_id")?,
            "status": r.try_get::<String, _>("status")?,
            "amount_minor": r.try_get::<Option<i64>, _>("amount_minor")?,
            "currency": r.try_get::<Option<String>, _>("currency")?,
            "flag": r.try_get::<Option<String>, _>("flag")?,
            "event_id": r.try_get::<String, _>("event_id")?,
            "created_at": ts(&r, "created_at")?,
        }));
    }
    let mut webhooks = Vec::new();
    for r in sqlx::query(
        "SELECT provider, event_id, event_type, order_ref, payment_id, source, receipt_id::text AS receipt,
                outcome, detail, deliveries, received_at, processed_at, last_seen_at
         FROM processed_webhooks
         WHERE order_ref = $1
            OR (order_ref IS NULL AND (provider, payment_id) IN (
                SELECT provider, payment_id FROM payments WHERE order_id = $2
                UNION SELECT provider, payment_id FROM payment_links WHERE order_id = $2
                UNION SELECT provider, payment_id FROM refunds WHERE order_id = $2))
         ORDER BY received_at, processed_at",
    )
    .bind(order_ref)
    .bind(id)
    .fetch_all(pool)
    .await?
    {
        webhooks.push(webhook_json(&r)?);
    }
    let mut refunds = Vec::new();
    for r in sqlx::query("SELECT provider, refund_id, payment_id, amount_minor, cumulative, event_id, created_at FROM refunds WHERE order_id = $1 ORDER BY created_at")
        .bind(id)
        .fetch_all(pool)
        .await?
    {
        refunds.push(json!({
            "provider": r.try_get::<String, _>("provider")?,
            "refund_id": r.try_get::<String, _>("refund_id")?,
            "payment_id": r.try_get::<Option<String>, _>("payment_id")?,
            "amount_minor": r.try_get::<i64, _>("amount_minor")?,
            "cumulative": r.try_get::<bool, _>("cumulative")?,
            "event_id": r.try_get::<String, _>("event_id")?,
            "created_at": ts(&r, "created_at")?,
        }));
    }
    let mut emails = Vec::new();
    for r in sqlx::query(
        "SELECT id::text AS id, kind, to_addr, subject, attempts, last_error, created_at, published_at, sent_at, failed_at,
                CASE WHEN sent_at IS NOT NULL THEN 'sent' WHEN failed_at IS NOT NULL THEN 'failed'
                     WHEN published_at IS NOT NULL THEN 'queued' ELSE 'pending' END AS status
         FROM email_outbox WHERE order_id = $1 ORDER BY created_at",
    )
    .bind(id)
    .fetch_all(pool)
    .await?
    {
        emails.push(json!({
            "id": r.try_get::<String, _>("id")?,
            "kind": r.try_get::<String, _>("kind")?,
            "to_addr": r.try_get::<String, _>("to_addr")?,
            "subject": r.try_get::<String, _>("subject")?,
            "status": r.try_get::<String, _>("status")?,
            "attempts": r.try_get::<i32, _>("attempts")?,
            "last_error": r.try_get::<Option<String>, _>("last_error")?,
            "created_at": ts(&r, "created_at")?,
            "published_at": ts(&r, "published_at")?,
            "sent_at": ts(&r, "sent_at")?,
            "failed_at": ts(&r, "failed_at")?,
        }));
    }
    Ok(json!({
        "order": order, "items": items, "payments": payments, "webhooks": webhooks,
        "refunds": refunds, "emails": emails,
    }))
}
