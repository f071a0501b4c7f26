//! The built-in commerce effect: payments, orders, stock and the
//! confirmation / refund emails (written to the outbox, sent later).
//!
//! Second line of defence after delivery dedup: business idempotency.
//! `payments` is unique per (provider, payment, status), so `payment.captured`
//! and `order.paid` for one payment record it once; an order moves to `paid`
//! only from `pending`, so stock is decremented and the email written once;
//! `email_outbox.dedup_key` makes "one confirmation per order" a constraint.

use oncehook_gateways::{EventKind, NormalizedEvent};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::effect::{Applied, Effect, EffectError, Outcome};

/// Flags written to `payments.flag` for operators.
pub const FLAG_NEEDS_REFUND: &str = "needs_refund";
/// A `needs_refund` payment whose refund arrived.
pub const FLAG_REFUNDED: &str = "refunded";
pub const FLAG_AMOUNT_MISMATCH: &str = "amount_mismatch";

/// The default effect: see the module documentation.
#[derive(Debug, Default, Clone)]
pub struct CommerceEffect;

/// The order row an event refers to, locked for the transaction.
#[derive(Debug)]
struct Order {
    id: i64,
    order_ref: String,
    status: String,
    amount_minor: i64,
    currency: String,
    customer_email: String,
    paid_by: Option<String>,
    refunded_minor: i64,
}

impl Effect for CommerceEffect {
    async fn apply(
        &self,
        conn: &mut PgConnection,
        event: &NormalizedEvent,
    ) -> Result<Applied, EffectError> {
        match event.kind {
            EventKind::Other => Ok(Applied::new(
                Outcome::Ignored,
                format!("event type {} is not acted on", event.event_type),
            )),
            EventKind::Captured => captured(conn, event).await,
            EventKind::Failed => record_attempt(conn, event, "failed").await,
            EventKind::Authorized => record_attempt(conn, event, "authorized").await,
            EventKind::Refunded => refunded(conn, event).await,
        }
    }
}

fn describe(event: &NormalizedEvent) -> String {
    format!(
        "{} event {} ({})",
        event.provider, event.event_id, event.event_type
    )
}

fn require_payment_id(event: &NormalizedEvent) -> Result<&str, EffectError> {
    event.payment_id.as_deref().ok_or_else(|| {
        EffectError::permanent(
            "missing_payment_id",
            format!("{} carries no payment id", describe(event)),
        )
    })
}

/// Locks the order by its reference (or, failing that, through a payment
/// already recorded for it). Unknown orders are a permanent error.
async fn lock_order(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
) -> Result<Order, EffectError> {
    const COLUMNS: &str = "o.id, o.order_ref, o.status, o.amount_minor, o.currency, o.customer_email, o.paid_by, o.refunded_minor";
    let row = if let Some(order_ref) = &event.order_ref {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM orders o WHERE o.order_ref = $1 FOR UPDATE"
        )))
        .bind(order_ref)
        .fetch_optional(&mut *conn)
        .await?
    } else if let Some(payment_id) = &event.payment_id {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM orders o
             WHERE o.id = (SELECT p.order_id FROM payments p WHERE p.provider = $1 AND p.payment_id = $2 LIMIT 1)
             FOR UPDATE"
        )))
        .bind(event.provider.as_str())
        .bind(payment_id)
        .fetch_optional(&mut *conn)
        .await?
    } else {
        return Err(EffectError::permanent(
            "missing_order_ref",
            format!("{} carries no order reference", describe(event)),
        ));
    };
    let Some(row) = row else {
        let reference = match (&event.order_ref, &event.payment_id) {
            (Some(r), _) => format!("order_ref {r:?}"),
            (None, Some(p)) => format!("any order paid by payment {p:?}"),
            (None, None) => "no reference".to_owned(),
        };
        return Err(EffectError::permanent(
            "unknown_order",
            format!("{}: no order matches {reference}", describe(event)),
        ));
    };
    Ok(Order {
        id: row.try_get("id")?,
        order_ref: row.try_get("order_ref")?,
        status: row.try_get("status")?,
        amount_minor: row.try_get("amount_minor")?,
        currency: row.try_get("currency")?,
        customer_email: row.try_get("customer_email")?,
        paid_by: row.try_get("paid_by")?,
        refunded_minor: row.try_get("refunded_minor")?,
    })
}

/// Inserts a payments row; `false` if this (provider, payment, status) exists already.
async fn insert_payment(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    payment_id: &str,
    order_id: i64,
    status: &str,
    flag: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query(
        "INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id, flag)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (provider, payment_id, status) DO NOTHING
         RETURNING id",
    )
    .bind(event.provider.as_str())
    .bind(payment_id)
    .bind(order_id)
    .bind(status)
    .bind(event.amount_minor)
    .bind(&event.currency)
    .bind(&event.event_id)
    .bind(flag)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// Failed and authorized attempts are recorded; they never change the order.
async fn record_attempt(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    status: &str,
) -> Result<Applied, EffectError> {
    let payment_id = require_payment_id(event)?;
    let order = lock_order(conn, event).await?;
    if insert_payment(conn, event, payment_id, order.id, status, None).await? {
        Ok(Applied::new(
            Outcome::Applied,
            format!(
                "{status} attempt {payment_id} recorded for order {} (order stays {})",
                order.order_ref, order.status
            ),
        ))
    } else {
        Ok(Applied::new(
            Outcome::Ignored,
            format!("{status} attempt {payment_id} was already recorded"),
        ))
    }
}

async fn captured(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
) -> Result<Applied, EffectError> {
    let payment_id = require_payment_id(event)?;
    let order = lock_order(conn, event).await?;
    let payer = format!("{}:{payment_id}", event.provider);

    if order.paid_by.as_deref() == Some(payer.as_str()) {
        return Ok(Applied::new(
            Outcome::Ignored,
            format!(
                "payment {payment_id} already paid order {}",
                order.order_ref
            ),
        ));
    }
    let mismatch = amount_mismatch(event, &order);
    let flag = if order.status != "pending" {
        Some(FLAG_NEEDS_REFUND)
    } else if mismatch.is_some() {
        Some(FLAG_AMOUNT_MISMATCH)
    } else {
        None
    };
    if !insert_payment(conn, event, payment_id, order.id, "captured", flag).await? {
        return Ok(Applied::new(
            Outcome::Ignored,
            format!("captured payment {payment_id} was already recorded"),
        ));
    }
    match flag {
        Some(FLAG_NEEDS_REFUND) => {
            tracing::warn!(
                order_ref = %order.order_ref,
                payment_id,
                paid_by = order.paid_by.as_deref().unwrap_or("-"),
                "second successful payment for an order that is already {}; flagged for refund",
                order.status
            );
            metrics::counter!("oncehook_worker_payments_flagged_total", "flag" => FLAG_NEEDS_REFUND)
                .increment(1);
            return Ok(Applied::new(
                Outcome::Flagged,
                format!(
                    "order {} is already {} (by {}); payment {payment_id} needs a refund",
                    order.order_ref,
                    order.status,
                    order.paid_by.as_deref().unwrap_or("-")
                ),
            ));
        }
        Some(_) => {
            let why = mismatch.unwrap_or_default();
            tracing::warn!(order_ref = %order.order_ref, payment_id, %why, "captured amount differs from the order; flagged, order left pending");
            metrics::counter!("oncehook_worker_payments_flagged_total", "flag" => FLAG_AMOUNT_MISMATCH)
                .increment(1);
            return Ok(Applied::new(
                Outcome::Flagged,
                format!("order {} left pending: {why}", order.order_ref),
            ));
        }
        None => {}
    }

    sqlx::query("UPDATE orders SET status = 'paid', paid_at = now(), paid_by = $2 WHERE id = $1")
        .bind(order.id)
        .bind(&payer)
        .execute(&mut *conn)
        .await?;
    let items = decrement_stock(conn, &order).await?;
    let body = confirmation_body(&order, payment_id, &items);
    write_email(
        conn,
        order.id,
        "confirmation",
        &format!("order:{}:confirmation", order.id),
        &order.customer_email,
        &format!("Order {} confirmed", order.order_ref),
        &body,
    )
    .await?;
    Ok(Applied::new(
        Outcome::Applied,
        format!(
            "order {} paid by {payer}; stock decremented for {} item(s); confirmation queued",
            order.order_ref,
            items.len()
        ),
    ))
}

fn amount_mismatch(event: &NormalizedEvent, order: &Order) -> Option<String> {
    let amount_ok = event.amount_minor.is_none_or(|a| a == order.amount_minor);
    let currency_ok = event
        .currency
        .as_deref()
        .is_none_or(|c| c.eq_ignore_ascii_case(&order.currency));
    if amount_ok && currency_ok {
        None
    } else {
        Some(format!(
            "paid {} {} but the order is for {} {}",
            event.amount_minor.map_or("?".to_owned(), |a| a.to_string()),
            event.currency.as_deref().unwrap_or("?"),
            order.amount_minor,
            order.currency
        ))
    }
}

/// Decrements stock for every item, locking products in sku order so
/// concurrent orders sharing products cannot deadlock. Stock may go
/// negative (the money is taken): that is reported, never rolled back.
async fn decrement_stock(
    conn: &mut PgConnection,
    order: &Order,
) -> Result<Vec<(String, i32, i32)>, sqlx::Error> {
    sqlx::query(
        "SELECT p.sku FROM products p JOIN order_items i ON i.sku = p.sku
         WHERE i.order_id = $1 ORDER BY p.sku FOR UPDATE OF p",
    )
    .bind(order.id)
    .fetch_all(&mut *conn)
    .await?;
    let rows = sqlx::query(
        "UPDATE products p SET stock = p.stock - i.qty
         FROM order_items i
         WHERE i.order_id = $1 AND i.sku = p.sku
         RETURNING p.sku, i.qty, p.stock",
    )
    .bind(order.id)
    .fetch_all(&mut *conn)
    .await?;
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let (sku, qty, stock): (String, i32, i32) = (
            row.try_get("sku")?,
            row.try_get("qty")?,
            row.try_get("stock")?,
        );
        if stock < 0 {
            tracing::warn!(order_ref = %order.order_ref, %sku, stock, "stock went negative; the payment stands, restock or refund");
            metrics::counter!("oncehook_worker_stock_negative_total").increment(1);
        }
        items.push((sku, qty, stock));
    }
    items.sort();
    Ok(items)
}

fn confirmation_body(order: &Order, payment_id: &str, items: &[(String, i32, i32)]) -> String {
    let mut body = format!(
        "Thank you for your order {}.\n\nWe received your payment of {} {} (payment {payment_id}).\n\nItems:\n",
        order.order_ref,
        format_minor(order.amount_minor),
        order.currency
    );
    for (sku, qty, _) in items {
        body.push_str(&format!("  {qty} x {sku}\n"));
    }
    body.push_str("\nWe will let you know when it ships.\n");
    body
}

fn format_minor(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, (minor % 100).abs())
}

/// Writes an email into the outbox; a second write with the same
/// `dedup_key` is a no-op.
async fn write_email(
    conn: &mut PgConnection,
    order_id: i64,
    kind: &str,
    dedup_key: &str,
    to: &str,
    subject: &str,
    body: &str,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query(
        "INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (dedup_key) DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::new_v4())
    .bind(order_id)
    .bind(kind)
    .bind(dedup_key)
    .bind(to)
    .bind(subject)
    .bind(body)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

async fn refunded(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
) -> Result<Applied, EffectError> {
    let refund_id = event.refund_id.as_deref().ok_or_else(|| {
        EffectError::permanent(
            "missing_refund_id",
            format!("{} carries no refund id", describe(event)),
        )
    })?;
    let amount = event.amount_minor.ok_or_else(|| {
        EffectError::permanent(
            "missing_amount",
            format!("{} carries no refund amount", describe(event)),
        )
    })?;
    let order = lock_order(conn, event).await?;
    let inserted = sqlx::query(
        "INSERT INTO refunds (provider, refund_id, payment_id, order_id, amount_minor, currency, event_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (provider, refund_id) DO NOTHING
         RETURNING 1",
    )
    .bind(event.provider.as_str())
    .bind(refund_id)
    .bind(&event.payment_id)
    .bind(order.id)
    .bind(amount)
    .bind(&event.currency)
    .bind(&event.event_id)
    .fetch_optional(&mut *conn)
    .await?
    .is_some();
    if !inserted {
        return Ok(Applied::new(
            Outcome::Ignored,
            format!("refund {refund_id} was already recorded"),
        ));
    }
    // Refunding the extra payment of a doubly-paid order settles the flag;
    // the order itself stays as it is.
    if let Some(payment_id) = &event.payment_id {
        let settled = sqlx::query(
            "UPDATE payments SET flag = $4
             WHERE provider = $1 AND payment_id = $2 AND order_id = $3 AND status = 'captured' AND flag = $5
             RETURNING id",
        )
        .bind(event.provider.as_str())
        .bind(payment_id)
        .bind(order.id)
        .bind(FLAG_REFUNDED)
        .bind(FLAG_NEEDS_REFUND)
        .fetch_optional(&mut *conn)
        .await?
        .is_some();
        if settled {
            write_refund_email(conn, event, &order, refund_id, amount).await?;
            return Ok(Applied::new(
                Outcome::Applied,
                format!(
                    "refund {refund_id} settles duplicate payment {payment_id}; order {} stays {}",
                    order.order_ref, order.status
                ),
            ));
        }
    }
    if order.status == "pending" {
        tracing::warn!(order_ref = %order.order_ref, refund_id, "refund for an order that was never paid; recorded and flagged");
        return Ok(Applied::new(
            Outcome::Flagged,
            format!(
                "refund {refund_id} recorded for unpaid order {}",
                order.order_ref
            ),
        ));
    }
    let total = order.refunded_minor.saturating_add(amount);
    let status = if total >= order.amount_minor {
        "refunded"
    } else {
        "partially_refunded"
    };
    sqlx::query("UPDATE orders SET refunded_minor = $2, status = $3 WHERE id = $1")
        .bind(order.id)
        .bind(total)
        .bind(status)
        .execute(&mut *conn)
        .await?;
    write_refund_email(conn, event, &order, refund_id, amount).await?;
    Ok(Applied::new(
        Outcome::Applied,
        format!(
            "refund {refund_id} of {amount} recorded; order {} is {status}; refund email queued",
            order.order_ref
        ),
    ))
}

async fn write_refund_email(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    order: &Order,
    refund_id: &str,
    amount: i64,
) -> Result<bool, sqlx::Error> {
    let body = format!(
        "We have refunded {} {} for your order {} (refund {refund_id}).\n\nIt may take a few days to reach your account.\n",
        format_minor(amount),
        event.currency.as_deref().unwrap_or(&order.currency),
        order.order_ref
    );
    write_email(
        conn,
        order.id,
        "refund",
        &format!("refund:{}:{refund_id}", event.provider),
        &order.customer_email,
        &format!("Refund for order {}", order.order_ref),
        &body,
    )
    .await
}
