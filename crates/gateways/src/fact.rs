//! A fact's identity: what an event records in the ledger and how the
//! ledger keys it — a payment attempt by gateway, payment and status, a
//! refund by gateway and refund id. Written once, here: the worker's ledger
//! records by it, the reconciler looks up what the ledger has by it, and the
//! tests that hold a webhook and an API answer to be the same fact compare
//! it.

use crate::{EventKind, Gateway, NormalizedEvent};

/// What an event records, keyed as the ledger keys it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Fact {
    /// A payment attempt: one per gateway, payment and status.
    Attempt {
        /// The gateway.
        provider: Gateway,
        /// The gateway's payment id.
        payment_id: String,
        /// `captured`, `failed` or `authorized` ([`EventKind::as_str`]).
        status: &'static str,
    },
    /// A refund: one per gateway and refund id.
    Refund {
        /// The gateway.
        provider: Gateway,
        /// The gateway's refund id (for a cumulative refund, the identity
        /// of the total).
        refund_id: String,
        /// The refunded amount, minor units (not part of the identity).
        amount_minor: i64,
    },
}

/// Why an event that should record a fact cannot: a field the fact needs
/// is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FactError {
    /// An attempt (captured, failed, authorized) without a payment id.
    #[error("carries no payment id")]
    MissingPaymentId,
    /// A refund without a refund id.
    #[error("carries no refund id")]
    MissingRefundId,
    /// A refund without an amount.
    #[error("carries no refund amount")]
    MissingRefundAmount,
}

impl NormalizedEvent {
    /// The fact this event records; `None` for a kind oncehook does not act
    /// on ([`EventKind::Other`]).
    pub fn fact(&self) -> Result<Option<Fact>, FactError> {
        let provider = self.provider;
        let status = match self.kind {
            EventKind::Other => return Ok(None),
            EventKind::Refunded => {
                let refund_id = self.refund_id.clone().ok_or(FactError::MissingRefundId)?;
                let amount_minor = self.amount_minor.ok_or(FactError::MissingRefundAmount)?;
                return Ok(Some(Fact::Refund {
                    provider,
                    refund_id,
                    amount_minor,
                }));
            }
            kind => kind.as_str(),
        };
        let payment_id = self.payment_id.clone().ok_or(FactError::MissingPaymentId)?;
        Ok(Some(Fact::Attempt {
            provider,
            payment_id,
            status,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind) -> NormalizedEvent {
        NormalizedEvent {
            provider: "razorpay".parse().expect("a gateway"),
            event_id: "evt_1".into(),
            event_type: "x".into(),
            kind,
            payment_id: Some("pay_1".into()),
            order_ref: None,
            amount_minor: Some(100),
            currency: Some("INR".into()),
            email: None,
            refund_id: Some("rfnd_1".into()),
            cumulative_refund: false,
        }
    }

    #[test]
    fn attempts_are_keyed_by_payment_and_status_refunds_by_refund_id() {
        let provider = "razorpay".parse().expect("a gateway");
        for (kind, status) in [
            (EventKind::Captured, "captured"),
            (EventKind::Failed, "failed"),
            (EventKind::Authorized, "authorized"),
        ] {
            assert_eq!(
                event(kind).fact(),
                Ok(Some(Fact::Attempt {
                    provider,
                    payment_id: "pay_1".into(),
                    status
                }))
            );
        }
        assert_eq!(
            event(EventKind::Refunded).fact(),
            Ok(Some(Fact::Refund {
                provider,
                refund_id: "rfnd_1".into(),
                amount_minor: 100
            }))
        );
        assert_eq!(event(EventKind::Other).fact(), Ok(None));
    }

    #[test]
    fn a_fact_without_its_identity_is_an_error() {
        let mut e = event(EventKind::Captured);
        e.payment_id = None;
        assert_eq!(e.fact(), Err(FactError::MissingPaymentId));
        let mut r = event(EventKind::Refunded);
        r.amount_minor = None;
        assert_eq!(r.fact(), Err(FactError::MissingRefundAmount));
        r.refund_id = None;
        assert_eq!(r.fact(), Err(FactError::MissingRefundId));
    }
}
