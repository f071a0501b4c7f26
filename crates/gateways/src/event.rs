//! The normalised event: what every gateway's payload is reduced to, and all
//! the worker's business effect needs to know.

use serde::{Deserialize, Serialize};

use crate::Gateway;

/// What a webhook says happened to a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Money taken: the order can be fulfilled.
    Captured,
    /// An attempt failed (the customer may retry with another attempt).
    Failed,
    /// Authorised but not yet captured: recorded, no effect on the order.
    Authorized,
    /// Money (fully or partly) returned to the customer.
    Refunded,
    /// An event type oncehook does not act on: recorded as `ignored`.
    Other,
}

impl EventKind {
    /// The kind's lower-case name, as serialised (`captured`, `refunded`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Captured => "captured",
            EventKind::Failed => "failed",
            EventKind::Authorized => "authorized",
            EventKind::Refunded => "refunded",
            EventKind::Other => "other",
        }
    }
}

/// A gateway event reduced to the facts the business effect needs.
///
/// `event_id` is the *delivery* identity (the dedup key together with the
/// provider); `payment_id` is the *business* identity of the payment, shared
/// by several distinct events (authorized, captured, order.paid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NormalizedEvent {
    /// The gateway the delivery came from.
    pub provider: Gateway,
    /// Delivery identity, unique per provider (see [`crate::parse`] for how each gateway's is derived).
    pub event_id: String,
    /// The gateway's own name for the event (`payment.captured`, `PAYMENT_SUCCESS_WEBHOOK`, `success`, …).
    pub event_type: String,
    /// What the event means for the payment.
    pub kind: EventKind,
    /// The gateway's payment id (`pay_…`, `pi_…`, `cf_payment_id`, PayU's `txnid`).
    pub payment_id: Option<String>,
    /// The merchant's order reference the payment is for.
    pub order_ref: Option<String>,
    /// Integer minor units (paise, cents). For refunds: the refunded amount
    /// (see [`NormalizedEvent::cumulative_refund`]).
    pub amount_minor: Option<i64>,
    /// ISO 4217, upper case.
    pub currency: Option<String>,
    /// The customer's email address, when the payload carries one.
    pub email: Option<String>,
    /// For refunds: the gateway's refund id (for a cumulative refund, an
    /// identity of the total: Stripe `{charge}:refunded:{total}`).
    pub refund_id: Option<String>,
    /// For [`EventKind::Refunded`]: `amount_minor` is the payment's
    /// *cumulative* refunded total (Stripe `charge.refunded`), not one
    /// refund. Always `false` for other kinds.
    #[serde(default)]
    pub cumulative_refund: bool,
}
