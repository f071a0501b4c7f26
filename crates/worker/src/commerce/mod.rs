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

mod emails;
mod linking;
mod settle;

use oncehook_common::store::ledger::{self as store, OrderRow as Order};
use oncehook_common::store::parking;
use oncehook_gateways::{EventKind, NormalizedEvent};
use sqlx::PgConnection;

pub use emails::money;
use emails::write_refund_email;
use linking::{adopt, link_only};
pub use settle::StockMoves;
use settle::settle;

use crate::effect::{Applied, Effect, EffectError, Outcome};
use crate::ledger::OrderState;

pub use crate::ledger::{FLAG_AMOUNT_MISMATCH, FLAG_NEEDS_REFUND, FLAG_REFUNDED};

/// The default effect: see the module documentation.
#[derive(Debug, Default, Clone)]
pub struct CommerceEffect;

/// What an event records.
#[derive(Debug)]
pub(super) enum Fact<'a> {
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
    /// Orders first paid in a batch: their stock moves (and their
    /// confirmation is written) at the end of the batch.
    type Deferred = StockMoves;

    async fn apply(
        &self,
        conn: &mut PgConnection,
        event: &NormalizedEvent,
    ) -> Result<Applied, EffectError> {
        apply(conn, event, None).await
    }

    async fn apply_batched(
        &self,
        conn: &mut PgConnection,
        event: &NormalizedEvent,
        deferred: &mut StockMoves,
    ) -> Result<Applied, EffectError> {
        apply(conn, event, Some(deferred)).await
    }

    async fn finish_batch(
        &self,
        conn: &mut PgConnection,
        deferred: StockMoves,
    ) -> Result<(), EffectError> {
        deferred.apply(conn).await?;
        Ok(())
    }
}

/// Applies an event; with `defer` (inside a batch), an order's first stock
/// movement and its confirmation are left for the end of the batch.
async fn apply(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    defer: Option<&mut StockMoves>,
) -> Result<Applied, EffectError> {
    let fact = match fact_of(event)? {
        Some(fact) => fact,
        None => return link_only(conn, event, defer).await,
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
    // Parked facts applied in this transaction are not in `recorded.facts`.
    let known = (adopted == 0).then_some(recorded.facts);
    let state = settle(conn, &order, known, defer).await?;
    if recorded.recorded
        && let Fact::Refund { refund_id, amount } = fact
    {
        write_refund_email(conn, event, &order, refund_id, amount).await?;
    }
    Ok(outcome_of(event, &fact, &order, &state, adopted))
}

pub(super) fn describe(event: &NormalizedEvent) -> String {
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
pub(super) fn fact_of(event: &NormalizedEvent) -> Result<Option<Fact<'_>>, EffectError> {
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
pub(super) async fn record(
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
