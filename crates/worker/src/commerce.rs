//! The built-in commerce effect: the order ledger of docs/ledger.md.
//!
//! Every event becomes a fact — a payment attempt (`payments`, unique per
//! provider, payment and status), a refund (`refunds`, unique per refund id,
//! or per cumulative total), a link from a payment to its order
//! (`payment_links`). Then the order's state is recomputed from *all* its
//! facts by [`ledger::compute`] and written in the same transaction: status,
//! `refunded_minor`, `paid_by`, the flags on payments, the one stock movement
//! and the emails (written to the outbox, sent later). So the books depend on
//! the set of events, not on the order or number of their deliveries.
//!
//! An event naming no order whose payment has no link yet is parked (the
//! processor keeps it); when a later event links that payment, the parked
//! events are taken back and applied here, in the linking transaction.

use oncehook_gateways::{EventKind, NormalizedEvent, currency_exponent, format_decimal_minor};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::dedup;
use crate::effect::{Applied, Effect, EffectError, Outcome};
use crate::ledger::{self, Capture, OrderState, RefundFact, Terms};
use crate::parking;
use crate::processor;

pub use crate::ledger::{FLAG_AMOUNT_MISMATCH, FLAG_NEEDS_REFUND, FLAG_REFUNDED};

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
    stock_applied: bool,
}

/// What an event records.
#[derive(Debug)]
enum Fact<'a> {
    Attempt {
        status: &'static str,
        payment_id: &'a str,
    },
    Refund {
        refund_id: &'a str,
        amount: i64,
    },
}

/// Where the event's order is.
enum Located {
    Order(Order),
    /// No order reference and no link for this payment yet.
    Unlinked,
}

/// What recording one event's fact did.
#[derive(Debug, Default)]
struct Recorded {
    fact: bool,
    link: bool,
}

impl Effect for CommerceEffect {
    async fn apply(
        &self,
        conn: &mut PgConnection,
        event: &NormalizedEvent,
    ) -> Result<Applied, EffectError> {
        let fact = match fact_of(event)? {
            Some(fact) => fact,
            None => {
                return Ok(Applied::new(
                    Outcome::Ignored,
                    format!("event type {} is not acted on", event.event_type),
                ));
            }
        };
        let order = match locate(conn, event).await? {
            Located::Order(order) => order,
            Located::Unlinked => {
                return Ok(Applied::new(
                    Outcome::Parked,
                    format!(
                        "payment {} is not linked to an order yet; parked until an event links it",
                        event.payment_id.as_deref().unwrap_or("-")
                    ),
                ));
            }
        };
        let recorded = record(conn, event, &fact, &order).await?;
        let adopted = match (&event.payment_id, recorded.link) {
            (Some(payment_id), true) => adopt(conn, event, payment_id, &order).await?,
            _ => 0,
        };
        if !recorded.fact && adopted == 0 {
            return Ok(Applied::new(
                Outcome::Ignored,
                format!("{} was already recorded", describe_fact(&fact)),
            ));
        }
        let state = settle(conn, &order).await?;
        if recorded.fact
            && let Fact::Refund { refund_id, amount } = fact
        {
            write_refund_email(conn, event, &order, refund_id, amount).await?;
        }
        Ok(outcome_of(event, &fact, &order, &state, adopted))
    }
}

fn describe(event: &NormalizedEvent) -> String {
    format!(
        "{} event {} ({})",
        event.provider, event.event_id, event.event_type
    )
}

fn describe_fact(fact: &Fact<'_>) -> String {
    match fact {
        Fact::Attempt { status, payment_id } => format!("{status} attempt {payment_id}"),
        Fact::Refund { refund_id, .. } => format!("refund {refund_id}"),
    }
}

/// The fact an event records; `None` for events oncehook does not act on.
fn fact_of(event: &NormalizedEvent) -> Result<Option<Fact<'_>>, EffectError> {
    let payment_id = || {
        event.payment_id.as_deref().ok_or_else(|| {
            EffectError::permanent(
                "missing_payment_id",
                format!("{} carries no payment id", describe(event)),
            )
        })
    };
    let status = match event.kind {
        EventKind::Other => return Ok(None),
        EventKind::Captured => "captured",
        EventKind::Failed => "failed",
        EventKind::Authorized => "authorized",
        EventKind::Refunded => {
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
            return Ok(Some(Fact::Refund { refund_id, amount }));
        }
    };
    Ok(Some(Fact::Attempt {
        status,
        payment_id: payment_id()?,
    }))
}

const ORDER_COLUMNS: &str = "o.id, o.order_ref, o.status, o.amount_minor, o.currency, o.customer_email, o.paid_by, o.refunded_minor, o.stock_applied";

fn order_from(row: &sqlx::postgres::PgRow) -> Result<Order, sqlx::Error> {
    Ok(Order {
        id: row.try_get("id")?,
        order_ref: row.try_get("order_ref")?,
        status: row.try_get("status")?,
        amount_minor: row.try_get("amount_minor")?,
        currency: row.try_get("currency")?,
        customer_email: row.try_get("customer_email")?,
        paid_by: row.try_get("paid_by")?,
        refunded_minor: row.try_get("refunded_minor")?,
        stock_applied: row.try_get("stock_applied")?,
    })
}

/// Locks the event's order: by its reference, else through the payment's
/// link. An unknown reference is permanent; a missing link parks the event.
async fn locate(conn: &mut PgConnection, event: &NormalizedEvent) -> Result<Located, EffectError> {
    if let Some(order_ref) = &event.order_ref {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {ORDER_COLUMNS} FROM orders o WHERE o.order_ref = $1 FOR UPDATE"
        )))
        .bind(order_ref)
        .fetch_optional(&mut *conn)
        .await?;
        return match row {
            Some(row) => Ok(Located::Order(order_from(&row)?)),
            None => Err(EffectError::permanent(
                "unknown_order",
                format!("{}: no order matches order_ref {order_ref:?}", describe(event)),
            )),
        };
    }
    let Some(payment_id) = &event.payment_id else {
        return Err(EffectError::permanent(
            "missing_order_ref",
            format!("{} carries no order reference", describe(event)),
        ));
    };
    parking::lock_payment(conn, event.provider.as_str(), payment_id).await?;
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {ORDER_COLUMNS} FROM payment_links l JOIN orders o ON o.id = l.order_id
         WHERE l.provider = $1 AND l.payment_id = $2
         FOR UPDATE OF o"
    )))
    .bind(event.provider.as_str())
    .bind(payment_id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match row {
        Some(row) => Located::Order(order_from(&row)?),
        None => Located::Unlinked,
    })
}

/// Records the event's fact (and, when it names both, the payment → order
/// link) in one statement.
async fn record(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    fact: &Fact<'_>,
    order: &Order,
) -> Result<Recorded, sqlx::Error> {
    let link = event.order_ref.is_some() && event.payment_id.is_some();
    let row = match fact {
        Fact::Attempt { status, payment_id } => {
            sqlx::query(
                "WITH link AS (
                     INSERT INTO payment_links (provider, payment_id, order_id, event_id)
                     SELECT $1, $2, $3, $7 WHERE $8
                     ON CONFLICT DO NOTHING RETURNING 1),
                 fact AS (
                     INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (provider, payment_id, status) DO NOTHING RETURNING 1)
                 SELECT EXISTS (SELECT 1 FROM link) AS linked, EXISTS (SELECT 1 FROM fact) AS recorded",
            )
            .bind(event.provider.as_str())
            .bind(*payment_id)
            .bind(order.id)
            .bind(*status)
            .bind(event.amount_minor)
            .bind(&event.currency)
            .bind(&event.event_id)
            .bind(link)
            .fetch_one(&mut *conn)
            .await?
        }
        Fact::Refund { refund_id, amount } => {
            sqlx::query(
                "WITH link AS (
                     INSERT INTO payment_links (provider, payment_id, order_id, event_id)
                     SELECT $1, $2, $3, $7 WHERE $8
                     ON CONFLICT DO NOTHING RETURNING 1),
                 fact AS (
                     INSERT INTO refunds (provider, refund_id, payment_id, order_id, amount_minor, currency, event_id, cumulative)
                     VALUES ($1, $4, $2, $3, $5, $6, $7, $9)
                     ON CONFLICT (provider, refund_id) DO NOTHING RETURNING 1)
                 SELECT EXISTS (SELECT 1 FROM link) AS linked, EXISTS (SELECT 1 FROM fact) AS recorded",
            )
            .bind(event.provider.as_str())
            .bind(&event.payment_id)
            .bind(order.id)
            .bind(*refund_id)
            .bind(*amount)
            .bind(&event.currency)
            .bind(&event.event_id)
            .bind(link)
            .bind(event.cumulative_refund)
            .fetch_one(&mut *conn)
            .await?
        }
    };
    Ok(Recorded {
        link: row.try_get("linked")?,
        fact: row.try_get("recorded")?,
    })
}

/// Applies the events parked for a payment that `event` just linked to
/// `order`; returns how many facts that added.
async fn adopt(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    payment_id: &str,
    order: &Order,
) -> Result<usize, EffectError> {
    let provider = event.provider.as_str();
    parking::lock_payment(conn, provider, payment_id).await?;
    let mut added = 0;
    for parked in parking::take(conn, provider, payment_id).await? {
        let decoded = match processor::decode(&parked.envelope, &parked.key.event_id) {
            Ok(decoded) => decoded,
            Err(rejection) => {
                // It was understood when parked; keep it for the sweeper
                // (and the DLQ) rather than lose it.
                tracing::error!(event_id = %parked.key.event_id, error = %rejection, "a parked event can no longer be read; left parked");
                parking::park(conn, &parked.key, provider, payment_id, "unknown", &parked.envelope)
                    .await?;
                continue;
            }
        };
        let Some(fact) = fact_of(&decoded.event)? else {
            continue;
        };
        let recorded = record(conn, &decoded.event, &fact, order).await?;
        if recorded.fact {
            added += 1;
            if let Fact::Refund { refund_id, amount } = fact {
                write_refund_email(conn, &decoded.event, order, refund_id, amount).await?;
            }
        }
        let detail = format!(
            "applied when {} linked payment {payment_id} to order {}",
            event.event_id, order.order_ref
        );
        dedup::finish(conn, &parked.key, Outcome::Applied, &detail).await?;
        tracing::info!(event_id = %decoded.event.event_id, linked_by = %event.event_id, order_ref = %order.order_ref, "parked event applied");
    }
    Ok(added)
}

/// Recomputes the order from all its facts and writes the result: status,
/// refunds, primary payment, payment flags, the one stock movement and the
/// confirmation email.
async fn settle(conn: &mut PgConnection, order: &Order) -> Result<OrderState, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT true AS capture, provider, payment_id, amount_minor, currency, flag, false AS cumulative
         FROM payments WHERE order_id = $1 AND status = 'captured'
         UNION ALL
         SELECT false, provider, payment_id, amount_minor, currency, NULL, cumulative
         FROM refunds WHERE order_id = $1",
    )
    .bind(order.id)
    .fetch_all(&mut *conn)
    .await?;
    let mut captures = Vec::new();
    let mut current_flags = Vec::new();
    let mut refunds = Vec::new();
    for row in &rows {
        let provider: String = row.try_get("provider")?;
        let payment_id: Option<String> = row.try_get("payment_id")?;
        let amount_minor: Option<i64> = row.try_get("amount_minor")?;
        if row.try_get("capture")? {
            let flag: Option<String> = row.try_get("flag")?;
            current_flags.push(((provider.clone(), payment_id.clone().unwrap_or_default()), flag));
            captures.push(Capture {
                provider,
                payment_id: payment_id.unwrap_or_default(),
                amount_minor,
                currency: row.try_get("currency")?,
            });
        } else {
            refunds.push(RefundFact {
                provider,
                payment_id,
                amount_minor: amount_minor.unwrap_or(0),
                cumulative: row.try_get("cumulative")?,
            });
        }
    }
    let terms = Terms {
        amount_minor: order.amount_minor,
        currency: order.currency.clone(),
    };
    let state = ledger::compute(&terms, &captures, &refunds);

    for ((provider, payment_id), current) in current_flags {
        let wanted = state
            .flags
            .get(&(provider.clone(), payment_id.clone()))
            .copied()
            .flatten();
        if current.as_deref() != wanted {
            sqlx::query(
                "UPDATE payments SET flag = $4
                 WHERE provider = $1 AND payment_id = $2 AND order_id = $3 AND status = 'captured'",
            )
            .bind(&provider)
            .bind(&payment_id)
            .bind(order.id)
            .bind(wanted)
            .execute(&mut *conn)
            .await?;
            if let Some(flag @ (FLAG_NEEDS_REFUND | FLAG_AMOUNT_MISMATCH)) = wanted {
                tracing::warn!(order_ref = %order.order_ref, %provider, %payment_id, flag, "payment flagged for a human");
                metrics::counter!("oncehook_worker_payments_flagged_total", "flag" => flag)
                    .increment(1);
            }
        }
    }

    let mut oversold = false;
    let move_stock = state.is_paid() && !order.stock_applied;
    if move_stock {
        oversold = decrement_stock(conn, order).await?;
    }
    let changed = order.status != state.status
        || order.refunded_minor != state.refunded_minor
        || order.paid_by != state.paid_by
        || move_stock;
    if changed {
        sqlx::query(
            "UPDATE orders SET status = $2, refunded_minor = $3, paid_by = $4,
                 paid_at = CASE WHEN $4::text IS NULL THEN NULL ELSE COALESCE(paid_at, now()) END,
                 stock_applied = stock_applied OR $5,
                 oversold = oversold OR $6
             WHERE id = $1",
        )
        .bind(order.id)
        .bind(state.status)
        .bind(state.refunded_minor)
        .bind(&state.paid_by)
        .bind(move_stock)
        .bind(oversold)
        .execute(&mut *conn)
        .await?;
    }
    if move_stock {
        write_confirmation(conn, order).await?;
    }
    Ok(state)
}

/// The outcome recorded for the event that was just applied.
fn outcome_of(
    event: &NormalizedEvent,
    fact: &Fact<'_>,
    order: &Order,
    state: &OrderState,
    adopted: usize,
) -> Applied {
    let adopted_note = if adopted > 0 {
        format!(" ({adopted} parked fact(s) applied)")
    } else {
        String::new()
    };
    let summary = format!(
        "order {} is {} (refunded {}){adopted_note}",
        order.order_ref,
        state.status,
        money(state.refunded_minor, &order.currency)
    );
    match fact {
        Fact::Attempt {
            status: "captured",
            payment_id,
        } => {
            let flag = state
                .flags
                .get(&(event.provider.as_str().to_owned(), (*payment_id).to_owned()))
                .copied()
                .flatten();
            match flag {
                Some(flag @ (FLAG_NEEDS_REFUND | FLAG_AMOUNT_MISMATCH)) => Applied::new(
                    Outcome::Flagged,
                    format!(
                        "captured payment {payment_id} flagged {flag} (paid by {}); {summary}",
                        state.paid_by.as_deref().unwrap_or("-")
                    ),
                ),
                _ => Applied::new(
                    Outcome::Applied,
                    format!("captured payment {payment_id} recorded; {summary}"),
                ),
            }
        }
        _ => Applied::new(
            Outcome::Applied,
            format!("{} recorded; {summary}", describe_fact(fact)),
        ),
    }
}

/// Decrements stock for every item, locking products in sku order so
/// concurrent orders sharing products cannot deadlock. Stock may go
/// negative (the money is taken): that is recorded on the order as an
/// oversell, never rolled back. Returns whether it oversold.
async fn decrement_stock(conn: &mut PgConnection, order: &Order) -> Result<bool, sqlx::Error> {
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
         RETURNING p.sku, p.stock",
    )
    .bind(order.id)
    .fetch_all(&mut *conn)
    .await?;
    let mut oversold = false;
    for row in rows {
        let (sku, stock): (String, i32) = (row.try_get("sku")?, row.try_get("stock")?);
        if stock < 0 {
            oversold = true;
            tracing::warn!(order_ref = %order.order_ref, %sku, stock, "stock went negative; order marked oversold (the payment stands: restock or refund)");
            metrics::counter!("oncehook_worker_stock_negative_total").increment(1);
        }
    }
    Ok(oversold)
}

/// An amount with the currency's own number of decimals (`5000 JPY`, `500.00 INR`).
pub fn money(minor: i64, currency: &str) -> String {
    format!(
        "{} {currency}",
        format_decimal_minor(minor, currency_exponent(currency))
    )
}

async fn write_confirmation(conn: &mut PgConnection, order: &Order) -> Result<bool, sqlx::Error> {
    let items: Vec<(String, i32)> =
        sqlx::query_as("SELECT sku, qty FROM order_items WHERE order_id = $1 ORDER BY sku")
            .bind(order.id)
            .fetch_all(&mut *conn)
            .await?;
    let mut body = format!(
        "Thank you for your order {}.\n\nWe received your payment of {}.\n\nItems:\n",
        order.order_ref,
        money(order.amount_minor, &order.currency)
    );
    for (sku, qty) in &items {
        body.push_str(&format!("  {qty} x {sku}\n"));
    }
    body.push_str("\nWe will let you know when it ships.\n");
    write_email(
        conn,
        order.id,
        "confirmation",
        &format!("order:{}:confirmation", order.id),
        &order.customer_email,
        &format!("Order {} confirmed", order.order_ref),
        &body,
    )
    .await
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

/// One refund email per refund fact, whatever the order's state.
async fn write_refund_email(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    order: &Order,
    refund_id: &str,
    amount: i64,
) -> Result<bool, sqlx::Error> {
    let currency = event.currency.as_deref().unwrap_or(&order.currency);
    let body = if event.cumulative_refund {
        format!(
            "Refunds for your order {} now total {}.\n\nIt may take a few days to reach your account.\n",
            order.order_ref,
            money(amount, currency)
        )
    } else {
        format!(
            "We have refunded {} for your order {} (refund {refund_id}).\n\nIt may take a few days to reach your account.\n",
            money(amount, currency),
            order.order_ref
        )
    };
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

#[cfg(test)]
mod tests {
    use super::money;

    #[test]
    fn amounts_use_the_currency_exponent() {
        assert_eq!(money(5000, "JPY"), "5000 JPY");
        assert_eq!(money(12345, "KWD"), "12.345 KWD");
        assert_eq!(money(50000, "INR"), "500.00 INR");
        assert_eq!(money(7, "USD"), "0.07 USD");
    }
}
