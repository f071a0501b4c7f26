//! Refund intents (docs/refunds.md): the money the recomputed orders owe
//! back, as the intents the ledger mints in the transaction that recorded
//! the fact. An intent's id is derived from the owed payment alone, so
//! every road to the same facts — a replay, a duplicate, reconciliation,
//! any delivery order — names the same intent, and the gateway sees that
//! id as the refund's idempotency key.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use crate::state::OrderState;
use crate::store::books::OrderRow;
use crate::store::refund_intents::minting::{self, OwedRefund};

/// The intent id of an owed payment: `ri_` and 24 hex digits of
/// SHA-256(`provider:payment_id`) — short enough for every gateway's
/// merchant reference (Razorpay's 40-character receipt, Cashfree's
/// `refund_id`), the same wherever it is computed.
pub fn intent_id(provider: &str, payment_id: &str) -> String {
    let digest = Sha256::digest(format!("{provider}:{payment_id}").as_bytes());
    format!("ri_{}", &hex::encode(digest)[..24])
}

/// Writes the intents the recomputed orders owe (one statement, and none
/// when no order owes anything: a plain payment costs nothing more); a new
/// intent joins the trace of the delivery that minted it (`traces`, by
/// order), which the refunder's spans continue.
pub async fn write(
    conn: &mut PgConnection,
    touched: &[&OrderRow],
    states: &BTreeMap<i64, OrderState>,
    traces: &BTreeMap<i64, String>,
) -> Result<(), sqlx::Error> {
    let rows: Vec<OwedRefund> = touched
        .iter()
        .filter_map(|o| Some((o, states.get(&o.id)?)))
        .flat_map(|(order, state)| {
            state.refunds_due.iter().map(|due| OwedRefund {
                id: intent_id(&due.provider, &due.payment_id),
                order_id: order.id,
                provider: due.provider.clone(),
                payment_id: due.payment_id.clone(),
                amount_minor: due.amount_minor,
                currency: due.currency.clone(),
                reason: due.reason.to_owned(),
                refunded_minor: due.refunded_minor,
                trace_parent: traces.get(&order.id).cloned(),
            })
        })
        .collect();
    for (id, state) in minting::write(conn, &rows).await? {
        tracing::info!(intent = %id, state = %state, "refund intent");
        metrics::counter!("oncehook_refund_intents_total", "state" => state).increment(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::intent_id;

    #[test]
    fn the_id_depends_on_the_payment_alone_and_fits_every_gateway() {
        let a = intent_id("razorpay", "pay_2");
        assert_eq!(a, intent_id("razorpay", "pay_2"));
        assert_ne!(a, intent_id("razorpay", "pay_3"));
        assert_ne!(a, intent_id("stripe", "pay_2"));
        assert_eq!(a.len(), 27);
        assert!(a.starts_with("ri_") && a[3..].chars().all(|c| c.is_ascii_hexdigit()));
    }
}
