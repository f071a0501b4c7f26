//! The vocabulary of refund intents (docs/refunds.md), shared by the ledger
//! that mints them, the refunder that sends them, the configuration that
//! says which may go without a person, and the operators' tools: why money
//! is owed back, and the states an intent moves through.

/// A capture that is not the order's payment (the customer paid twice).
pub const REASON_DUPLICATE_CAPTURE: &str = "duplicate_capture";
/// A capture of an order the shop cancelled.
pub const REASON_CANCELLED_ORDER: &str = "cancelled_order";
/// A capture of the wrong amount or currency (it pays nothing).
pub const REASON_AMOUNT_MISMATCH: &str = "amount_mismatch";
/// Every reason.
pub const REASONS: &[&str] = &[
    REASON_DUPLICATE_CAPTURE,
    REASON_CANCELLED_ORDER,
    REASON_AMOUNT_MISMATCH,
];

/// Minted; waits for the policy or an operator.
pub const STATE_OWED: &str = "owed";
/// Approved (by the policy or an operator); the refunder sends it.
pub const STATE_APPROVED: &str = "approved";
/// A refunder holds it and may have sent it.
pub const STATE_SENDING: &str = "sending";
/// The gateway took the refund; its fact settles the intent.
pub const STATE_SENT: &str = "sent";
/// The books show the payment refunded after oncehook sent it.
pub const STATE_SETTLED: &str = "settled";
/// The gateway refused; an operator decides.
pub const STATE_FAILED: &str = "failed";
/// Nothing to send any more: refunded from elsewhere first, or cancelled
/// by an operator.
pub const STATE_CANCELLED: &str = "cancelled";
/// Every state, in the order an intent moves through them.
pub const STATES: &[&str] = &[
    STATE_OWED,
    STATE_APPROVED,
    STATE_SENDING,
    STATE_SENT,
    STATE_SETTLED,
    STATE_FAILED,
    STATE_CANCELLED,
];
