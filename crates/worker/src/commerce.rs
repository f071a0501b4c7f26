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

use oncehook_common::store::ledger::{self as store, OrderRow as Order};
use oncehook_common::store::outbox::{self, NewEmail};
use oncehook_common::store::{dedup, parking};
use oncehook_gateways::{EventKind, NormalizedEvent, currency_exponent, format_decimal_minor};
use sqlx::PgConnection;

use crate::effect::{Applied, Effect, EffectError, Outcome};
use crate::ledger::{self, Capture, OrderState, RefundFact, Terms};
use crate::processor;

pub use crate::ledger::{FLAG_AMOUNT_MISMATCH, FLAG_NEEDS_REFUND, FLAG_REFUNDED};

/// The default effect: see the module documentation.
#[derive(Debug, Default, Clone)]
pub struct CommerceEffect;

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

impl Effect for CommerceEffect {
    async fn apply(
        &self,
        conn: &mut PgConnection,
        event: &NormalizedEvent,
    ) -> Result<Applied, EffectError> {
        let fact = match fact_of(event)? {
            Some(fact) => fact,
            None => return link_only(conn, event).await,
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
        let adopted = match (&event.payment_id, recorded.linked) {
            (Some(payment_id), true) => adopt(conn, event, payment_id, &order).await?,
            _ => 0,
        };
        if !recorded.recorded && adopted == 0 {
            return Ok(Applied::new(
                Outcome::Ignored,
                format!("{} was already recorded", describe_fact(&fact)),
            ));
        }
        if adopted == 0
            && let Fact::Attempt {
                status: status @ ("failed" | "authorized"),
                payment_id,
            } = fact
        {
            // Failed and authorized attempts never change the order.
            return Ok(Applied::new(
                Outcome::Applied,
                format!(
                    "{status} attempt {payment_id} recorded; order {} stays {}",
                    order.order_ref, order.status
                ),
            ));
        }
        let state = settle(conn, &order).await?;
        if recorded.recorded
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

/// Locks the event's order: by its reference, else through the payment's
/// link. An unknown reference is permanent; a missing link parks the event.
async fn locate(conn: &mut PgConnection, event: &NormalizedEvent) -> Result<Located, EffectError> {
    if let Some(order_ref) = &event.order_ref {
        return match store::lock_order(conn, order_ref).await? {
            Some(order) => Ok(Located::Order(order)),
            None => Err(EffectError::permanent(
                "unknown_order",
                format!(
                    "{}: no order matches order_ref {order_ref:?}",
                    describe(event)
                ),
            )),
        };
    }
    let Some(payment_id) = &event.payment_id else {
        return Err(EffectError::permanent(
            "missing_order_ref",
            format!("{} carries no order reference", describe(event)),
        ));
    };
    let provider = event.provider.as_str();
    parking::lock_payment(conn, provider, payment_id).await?;
    Ok(
        match store::lock_order_of_payment(conn, provider, payment_id).await? {
            Some(order) => Located::Order(order),
            None => Located::Unlinked,
        },
    )
}

/// Records the event's fact (and, when it names both, the payment → order
/// link) in one statement.
async fn record(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    fact: &Fact<'_>,
    order: &Order,
) -> Result<store::Recorded, sqlx::Error> {
    let link = event.order_ref.is_some() && event.payment_id.is_some();
    match fact {
        Fact::Attempt { status, payment_id } => {
            store::record_attempt(
                conn,
                store::Attempt {
                    provider: event.provider.as_str(),
                    payment_id,
                    order_id: order.id,
                    status,
                    amount_minor: event.amount_minor,
                    currency: event.currency.as_deref(),
                    event_id: &event.event_id,
                    link,
                },
            )
            .await
        }
        Fact::Refund { refund_id, amount } => {
            store::record_refund(
                conn,
                store::Refund {
                    provider: event.provider.as_str(),
                    refund_id,
                    payment_id: event.payment_id.as_deref(),
                    order_id: order.id,
                    amount_minor: *amount,
                    currency: event.currency.as_deref(),
                    event_id: &event.event_id,
                    cumulative: event.cumulative_refund,
                    link,
                },
            )
            .await
        }
    }
}

/// An event oncehook does not act on may still link a payment to an order
/// (Stripe `checkout.session.expired` names both): record the link, apply
/// what was parked for it, and otherwise ignore the event.
async fn link_only(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
) -> Result<Applied, EffectError> {
    let ignored = || {
        Ok(Applied::new(
            Outcome::Ignored,
            format!("event type {} is not acted on", event.event_type),
        ))
    };
    let (Some(order_ref), Some(payment_id)) = (&event.order_ref, &event.payment_id) else {
        return ignored();
    };
    let Some(order) = store::lock_order(conn, order_ref).await? else {
        return ignored();
    };
    let linked = store::link(
        conn,
        event.provider.as_str(),
        payment_id,
        order.id,
        &event.event_id,
    )
    .await?;
    let adopted = if linked {
        adopt(conn, event, payment_id, &order).await?
    } else {
        0
    };
    if adopted == 0 {
        return ignored();
    }
    let state = settle(conn, &order).await?;
    Ok(Applied::new(
        Outcome::Applied,
        format!(
            "{} linked payment {payment_id} to order {}: {adopted} parked fact(s) applied; order is {}",
            event.event_type, order.order_ref, state.status
        ),
    ))
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
                parking::park(conn, &parked).await?;
                continue;
            }
        };
        let Some(fact) = fact_of(&decoded.event)? else {
            continue;
        };
        let recorded = record(conn, &decoded.event, &fact, order).await?;
        if recorded.recorded {
            added += 1;
            if let Fact::Refund { refund_id, amount } = fact {
                write_refund_email(conn, &decoded.event, order, refund_id, amount).await?;
            }
        }
        let detail = format!(
            "applied when {} linked payment {payment_id} to order {}",
            event.event_id, order.order_ref
        );
        dedup::finish(conn, &parked.key, Outcome::Applied.as_str(), &detail).await?;
        tracing::info!(event_id = %decoded.event.event_id, linked_by = %event.event_id, order_ref = %order.order_ref, "parked event applied");
    }
    Ok(added)
}

/// Recomputes the order from all its facts and writes the result: status,
/// refunds, primary payment, payment flags, the one stock movement and the
/// confirmation email.
async fn settle(conn: &mut PgConnection, order: &Order) -> Result<OrderState, sqlx::Error> {
    let facts = store::facts(conn, order.id).await?;
    let (capture_rows, refund_rows): (Vec<_>, Vec<_>) = facts.into_iter().partition(|f| f.capture);
    let captures: Vec<Capture> = capture_rows
        .iter()
        .map(|f| Capture {
            provider: f.provider.clone(),
            payment_id: f.payment_id.clone().unwrap_or_default(),
            amount_minor: f.amount_minor,
            currency: f.currency.clone(),
        })
        .collect();
    let refunds: Vec<RefundFact> = refund_rows
        .into_iter()
        .map(|f| RefundFact {
            provider: f.provider,
            payment_id: f.payment_id,
            amount_minor: f.amount_minor.unwrap_or(0),
            cumulative: f.cumulative,
        })
        .collect();
    let terms = Terms {
        amount_minor: order.amount_minor,
        currency: order.currency.clone(),
    };
    let state = ledger::compute(&terms, &captures, &refunds);
    for (capture, row) in captures.iter().zip(&capture_rows) {
        let wanted = state
            .flags
            .get(&(capture.provider.clone(), capture.payment_id.clone()))
            .copied()
            .flatten();
        if row.flag.as_deref() != wanted {
            update_flag(conn, order, capture, wanted).await?;
        }
    }

    let move_stock = state.is_paid() && !order.stock_applied;
    let moves = if move_stock {
        decrement_stock(conn, order).await?
    } else {
        Vec::new()
    };
    let oversold = moves.iter().any(|m| m.stock < 0);
    let changed = order.status != state.status
        || order.refunded_minor != state.refunded_minor
        || order.paid_by != state.paid_by
        || move_stock;
    if changed {
        let written = store::OrderState {
            status: state.status,
            refunded_minor: state.refunded_minor,
            paid_by: state.paid_by.as_deref(),
            stock_moved: move_stock,
            oversold,
        };
        store::write_order(conn, order.id, written).await?;
    }
    if move_stock {
        write_confirmation(conn, order, &moves).await?;
    }
    Ok(state)
}

async fn update_flag(
    conn: &mut PgConnection,
    order: &Order,
    capture: &Capture,
    flag: Option<&'static str>,
) -> Result<(), sqlx::Error> {
    store::set_capture_flag(conn, &capture.provider, &capture.payment_id, order.id, flag).await?;
    if let Some(flag @ (FLAG_NEEDS_REFUND | FLAG_AMOUNT_MISMATCH)) = flag {
        tracing::warn!(order_ref = %order.order_ref, provider = %capture.provider, payment_id = %capture.payment_id, flag, "payment flagged for a human");
        metrics::counter!("oncehook_worker_payments_flagged_total", "flag" => flag).increment(1);
    }
    Ok(())
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

/// Moves stock once for the order. Stock may go negative (the money is
/// taken): that is recorded on the order as an oversell, never rolled back.
async fn decrement_stock(
    conn: &mut PgConnection,
    order: &Order,
) -> Result<Vec<store::StockMove>, sqlx::Error> {
    let moves = store::decrement_stock(conn, order.id).await?;
    for m in moves.iter().filter(|m| m.stock < 0) {
        tracing::warn!(order_ref = %order.order_ref, sku = %m.sku, stock = m.stock, "stock went negative; order marked oversold (the payment stands: restock or refund)");
        metrics::counter!("oncehook_worker_stock_negative_total").increment(1);
    }
    Ok(moves)
}

/// An amount with the currency's own number of decimals (`5000 JPY`, `500.00 INR`).
pub fn money(minor: i64, currency: &str) -> String {
    format!(
        "{} {currency}",
        format_decimal_minor(minor, currency_exponent(currency))
    )
}

async fn write_confirmation(
    conn: &mut PgConnection,
    order: &Order,
    items: &[store::StockMove],
) -> Result<bool, sqlx::Error> {
    let mut body = format!(
        "Thank you for your order {}.\n\nWe received your payment of {}.\n\nItems:\n",
        order.order_ref,
        money(order.amount_minor, &order.currency)
    );
    for item in items {
        body.push_str(&format!("  {} x {}\n", item.qty, item.sku));
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

/// Writes an email into the outbox (once per `dedup_key`).
async fn write_email(
    conn: &mut PgConnection,
    order_id: i64,
    kind: &str,
    dedup_key: &str,
    to: &str,
    subject: &str,
    body: &str,
) -> Result<bool, sqlx::Error> {
    let email = NewEmail {
        order_id,
        kind,
        dedup_key,
        to,
        subject,
        body,
    };
    outbox::write(conn, email).await
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
