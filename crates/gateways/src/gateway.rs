//! The gateways oncehook understands, named as they appear in configuration
//! (`gateway = "razorpay"`) and in routing keys / `message_id`s.

use std::fmt;
use std::str::FromStr;

/// A payment gateway's webhook scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gateway {
    /// Razorpay (`X-Razorpay-Signature`).
    Razorpay,
    /// Cashfree Payments PG (`x-webhook-signature` over timestamp ‖ body).
    Cashfree,
    /// PayU India (form post with a salted SHA-512 `hash`).
    Payu,
    /// Stripe (`Stripe-Signature: t=…,v1=…`).
    Stripe,
    /// The Standard Webhooks specification (`webhook-id` / `webhook-timestamp` / `webhook-signature`).
    Standard,
}

/// A gateway name that is not one of [`Gateway::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown gateway {0:?} (expected one of razorpay, cashfree, payu, stripe, standard)")]
pub struct UnknownGateway(pub String);

impl Gateway {
    /// Every gateway, in a fixed order.
    pub const ALL: [Gateway; 5] = [
        Gateway::Razorpay,
        Gateway::Cashfree,
        Gateway::Payu,
        Gateway::Stripe,
        Gateway::Standard,
    ];

    /// The configuration name (`razorpay`, `cashfree`, `payu`, `stripe`, `standard`).
    pub fn as_str(self) -> &'static str {
        match self {
            Gateway::Razorpay => "razorpay",
            Gateway::Cashfree => "cashfree",
            Gateway::Payu => "payu",
            Gateway::Stripe => "stripe",
            Gateway::Standard => "standard",
        }
    }

    /// Whether this gateway signs a timestamp (so a replay window applies).
    pub fn signs_timestamp(self) -> bool {
        matches!(
            self,
            Gateway::Cashfree | Gateway::Stripe | Gateway::Standard
        )
    }

    /// Request headers (lowercase) that verification or parsing needs; ingest
    /// carries exactly these in the envelope so the worker sees what ingest saw.
    pub fn relevant_headers(self) -> &'static [&'static str] {
        match self {
            Gateway::Razorpay => &[
                "x-razorpay-signature",
                "x-razorpay-event-id",
                "content-type",
            ],
            Gateway::Cashfree => &[
                "x-webhook-signature",
                "x-webhook-timestamp",
                "x-webhook-version",
                "x-webhook-attempt",
                "x-idempotency-key",
                "content-type",
            ],
            Gateway::Payu => &["content-type"],
            Gateway::Stripe => &["stripe-signature", "content-type"],
            Gateway::Standard => &[
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "content-type",
            ],
        }
    }
}

impl fmt::Display for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Gateway {
    type Err = UnknownGateway;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Gateway::ALL
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| UnknownGateway(s.to_owned()))
    }
}
