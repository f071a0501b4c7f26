//! What an event records: a payment attempt (`payments`, unique per
//! provider, payment and status), a refund (`refunds`, unique per refund
//! id, or per cumulative total), or nothing (an event type oncehook does not
//! act on, which may still link a payment to its order). Pure: no I/O.

use crate::store::books::PaymentKey;
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_gateways::NormalizedEvent;

use oncehook_pipeline::Rejection;

/// What an event records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    Attempt {
        status: &'static str,
        payment_id: String,
    },
    Refund {
        refund_id: String,
        amount: i64,
    },
}

impl Fact {
    /// The fact in an operator's words (`captured attempt pay_1`, `refund rfnd_1`).
    pub fn describe(&self) -> String {
        match self {
            Fact::Attempt { status, payment_id } => format!("{status} attempt {payment_id}"),
            Fact::Refund { refund_id, .. } => format!("refund {refund_id}"),
        }
    }

    /// Whether recording it can change the order's state (captures and
    /// refunds do; failed and authorized attempts never do).
    pub fn moves_the_order(&self) -> bool {
        match self {
            Fact::Attempt { status, .. } => *status == "captured",
            Fact::Refund { .. } => true,
        }
    }
}

/// An event as the ledger reads it.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    pub event: &'a NormalizedEvent,
    /// `None`: an event type not acted on.
    pub fact: Option<Fact>,
    /// The payment it names, if any.
    pub payment: Option<PaymentKey>,
}

impl<'a> Event<'a> {
    /// Reads an event; events that can never be recorded are rejected.
    pub fn read(event: &'a NormalizedEvent) -> Result<Self, Rejection> {
        let fact = fact_of(event)?;
        let payment = event.payment_id.as_ref().map(|payment_id| PaymentKey {
            provider: event.provider.as_str().to_owned(),
            payment_id: payment_id.clone(),
        });
        if fact.is_some() && event.order_ref.is_none() && payment.is_none() {
            return Err(Rejection::new(
                DeadLetterKind::MissingOrderRef,
                format!("{} carries no order reference", describe(event)),
            ));
        }
        Ok(Event {
            event,
            fact,
            payment,
        })
    }

    pub fn order_ref(&self) -> Option<&'a str> {
        self.event.order_ref.as_deref()
    }
}

/// `razorpay event evt_1 (payment.captured)`.
pub fn describe(event: &NormalizedEvent) -> String {
    format!(
        "{} event {} ({})",
        event.provider, event.event_id, event.event_type
    )
}

/// The fact an event records; `None` for events oncehook does not act on.
/// The identity is the gateways crate's ([`NormalizedEvent::fact`]), the
/// one the reconciler looks facts up by.
pub fn fact_of(event: &NormalizedEvent) -> Result<Option<Fact>, Rejection> {
    use oncehook_gateways::{Fact as Identity, FactError};
    let fact = event.fact().map_err(|e| {
        let kind = match e {
            FactError::MissingPaymentId => DeadLetterKind::MissingPaymentId,
            FactError::MissingRefundId => DeadLetterKind::MissingRefundId,
            FactError::MissingRefundAmount => DeadLetterKind::MissingAmount,
        };
        Rejection::new(kind, format!("{} {e}", describe(event)))
    })?;
    Ok(fact.map(|f| match f {
        Identity::Attempt {
            status, payment_id, ..
        } => Fact::Attempt { status, payment_id },
        Identity::Refund {
            refund_id,
            amount_minor,
            ..
        } => Fact::Refund {
            refund_id,
            amount: amount_minor,
        },
    }))
}
