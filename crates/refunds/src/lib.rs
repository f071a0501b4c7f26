//! The refunder (docs/refunds.md): money the books owe back is refunded
//! through the gateway, once. The ledger mints a refund intent in the
//! transaction that records the fact that makes money owed (a second
//! capture, a capture of a cancelled order, a capture of the wrong amount);
//! this crate is the worker's task that takes it from there:
//!
//! `run` (the task: every `[refunds] interval`, decide, send, gauges) →
//! `policy` (pure: approve an `owed` intent, or hold it for an operator
//! with the reason) → `send` (one claimed intent: look up what the gateway
//! holds where its key alone is no guarantee, send under the intent's id as
//! idempotency key, record the answer).
//!
//! Nothing here knows a gateway: each one's refund request, lookup and
//! answers are its folder's (`oncehook_gateways::refund::GatewayRefunds`).
//! The loop closes through the books: a refund the gateway's answer proves
//! is published like a fact the reconciler finds, its webhook is the same
//! fact, and either one settles the intent in the ledger.

pub mod policy;
pub mod run;
pub mod send;

pub use run::Refunder;

/// Why a pass of the refunder failed (the next one tries again).
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("publishing a refund's fact failed: {0}")]
    Publish(#[from] oncehook_gateway_api::PublishError),
    #[error("the HTTP client could not be built: {0}")]
    Client(#[from] oncehook_gateway_api::CallError),
}

/// An `owed` intent of `amount` for `reason`, as the tests build them.
#[cfg(test)]
pub(crate) fn sample_intent(
    amount: i64,
    reason: &str,
) -> oncehook_ledger::store::refund_intents::Intent {
    let now = time::OffsetDateTime::UNIX_EPOCH;
    oncehook_ledger::store::refund_intents::Intent {
        id: "ri_1".into(),
        order_id: 1,
        order_ref: "ord_1".into(),
        provider: "razorpay".into(),
        payment_id: "pay_2".into(),
        amount_minor: amount,
        currency: "INR".into(),
        reason: reason.into(),
        refunded_minor: 0,
        state: "owed".into(),
        source: Some("rzp".into()),
        payment_order_ref: None,
        sent_minor: None,
        attempt_no: 1,
        sent_reason: None,
        in_doubt: false,
        approved_by: None,
        approved_at: None,
        attempts: 0,
        gateway_refund_id: None,
        gateway_code: None,
        gateway_message: None,
        held_because: None,
        trace_parent: None,
        created_at: now,
        updated_at: now,
    }
}
