//! Dispatch from a [`Gateway`] to its scheme: `verify` for ingest, `parse`
//! for the worker. One submodule per gateway.

pub(crate) mod cashfree;
pub(crate) mod crypto;
pub(crate) mod form;
pub(crate) mod json;
pub(crate) mod payu;
pub(crate) mod razorpay;
pub(crate) mod standard;
pub(crate) mod stripe;

use sha2::{Digest, Sha256};

use crate::{Gateway, Headers, NormalizedEvent};

/// What a successful verification established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Index into the `secrets` slice of the secret that matched (rotation visibility).
    pub secret_index: usize,
    /// The signed timestamp (unix seconds), for schemes that sign one.
    pub signed_at: Option<i64>,
}

/// Why a delivery was refused at the edge. `Malformed` maps to HTTP 400, all
/// others to 401. Messages never contain secrets or expected signatures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A required header (or, for PayU, form field) is absent.
    #[error("missing {0}")]
    Missing(&'static str),
    /// A header or field is present but cannot be read.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// The header or field.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Well-formed, but no configured secret produces the signature.
    #[error("signature does not match any configured secret")]
    Mismatch,
    /// The signed timestamp is too old or too far in the future.
    #[error("signed timestamp {signed_at} is outside the {tolerance_secs}s tolerance (now {now})")]
    OutsideTolerance {
        /// The signed timestamp, unix seconds.
        signed_at: i64,
        /// The caller's clock, unix seconds.
        now: i64,
        /// The allowed distance in either direction.
        tolerance_secs: u64,
    },
    /// The source has no secrets configured: nothing can verify.
    #[error("no secrets configured")]
    NoSecrets,
    /// A PayU source has no merchant key configured: nothing can verify.
    #[error("no merchant key configured")]
    NoMerchantKey,
}

/// Why an authentic payload could not be understood (the worker dead-letters it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The body is not valid JSON / form data.
    #[error("body is not valid {0}: {1}")]
    Syntax(&'static str, String),
    /// A field needed to name or identify the event is absent.
    #[error("missing field {0}")]
    MissingField(&'static str),
    /// A field is present but has an unusable value (e.g. a fractional amount in minor units).
    #[error("field {field} is invalid: {reason}")]
    InvalidField {
        /// The field, as a dotted path where nested.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
}

/// What a source verifies deliveries with: its live secrets and, for PayU,
/// the merchant key. Deliberately not `Debug`: it holds secrets.
#[derive(Clone, Copy)]
pub struct Credentials<'a> {
    /// Live secrets, any of which may match (rotation). PayU: merchant salts.
    pub secrets: &'a [String],
    /// PayU: the merchant key the posted form's `key` field must equal
    /// (the key is covered by the hash, but a salt is per merchant key, so
    /// the key decides whose notification it is). Ignored by other gateways.
    pub merchant_key: Option<&'a str>,
}

impl<'a> Credentials<'a> {
    /// Credentials with `secrets` and no merchant key.
    pub fn new(secrets: &'a [String]) -> Self {
        Credentials {
            secrets,
            merchant_key: None,
        }
    }

    /// The same credentials with `merchant_key` (PayU).
    pub fn with_merchant_key(self, merchant_key: Option<&'a str>) -> Self {
        Credentials {
            merchant_key,
            ..self
        }
    }
}

/// Verifies a delivery's signature over the raw `body` bytes against any of
/// the `credentials`' secrets, and (for schemes that sign a timestamp) that
/// the timestamp is within `tolerance_secs` of `now_unix` in either
/// direction.
///
/// Headers are read first (`Missing` / `Malformed`), then the timestamp
/// window, then the signature. For PayU the secrets are merchant salts, the
/// form's `key` must equal `credentials.merchant_key` (`Missing` without the
/// field, `Mismatch` for another key, [`VerifyError::NoMerchantKey`] when
/// none is configured), and no hash-covered field may contain `|`.
pub fn verify(
    gateway: Gateway,
    credentials: Credentials<'_>,
    headers: &Headers,
    body: &[u8],
    now_unix: i64,
    tolerance_secs: u64,
) -> Result<Verification, VerifyError> {
    let secrets = credentials.secrets;
    if secrets.is_empty() {
        return Err(VerifyError::NoSecrets);
    }
    match gateway {
        Gateway::Razorpay => razorpay::verify(secrets, headers, body),
        Gateway::Cashfree => cashfree::verify(secrets, headers, body, now_unix, tolerance_secs),
        Gateway::Payu => payu::verify(secrets, credentials.merchant_key, body),
        Gateway::Stripe => stripe::verify(secrets, headers, body, now_unix, tolerance_secs),
        Gateway::Standard => standard::verify(secrets, headers, body, now_unix, tolerance_secs),
    }
}

/// Why `secret` can never verify a delivery of `gateway` (checked when the
/// configuration is loaded, so a bad secret refuses to start instead of
/// refusing every genuine delivery), or `None` if it is usable.
pub fn secret_problem(gateway: Gateway, secret: &str) -> Option<&'static str> {
    if secret.trim().is_empty() {
        return Some("is blank");
    }
    match gateway {
        Gateway::Standard if standard::key_of(secret).is_none_or(|k| k.is_empty()) => {
            Some("is not a Standard Webhooks secret (`whsec_` followed by base64)")
        }
        _ => None,
    }
}

/// Parses an (already verified) delivery into a [`NormalizedEvent`].
///
/// Event identity (`event_id`) per gateway:
/// - Razorpay: header `x-razorpay-event-id`, else `{event}:{entity id}`.
/// - Cashfree: header `x-idempotency-key`, else
///   `{type}:{cf_payment_id}:{payment_status}` (refunds:
///   `{type}:{refund_id}:{refund_status}`).
/// - PayU: `{txnid}:{status}` (both covered by the hash; a new `txnid` per
///   attempt, so `txnid` is also the payment id).
/// - Stripe: the body's `id`.
/// - Standard Webhooks: header `webhook-id`.
///
/// Events of a kind oncehook does not act on ([`crate::EventKind::Other`])
/// that carry none of those fall back to `{type}:sha256:{digest of the body}`,
/// which is stable across redeliveries of the same bytes.
pub fn parse(
    gateway: Gateway,
    headers: &Headers,
    body: &[u8],
) -> Result<NormalizedEvent, ParseError> {
    match gateway {
        Gateway::Razorpay => razorpay::parse(headers, body),
        Gateway::Cashfree => cashfree::parse(headers, body),
        Gateway::Payu => payu::parse(body),
        Gateway::Stripe => stripe::parse(body),
        Gateway::Standard => standard::parse(headers, body),
    }
}

/// A non-empty, trimmed header value.
pub(crate) fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers.get(name).map(str::trim).filter(|v| !v.is_empty())
}

/// Last-resort identity for events oncehook ignores: the event type and a
/// digest of the exact body bytes.
pub(crate) fn body_digest_id(event_type: &str, body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let short = digest.get(..16).unwrap_or_default();
    format!("{event_type}:sha256:{}", hex::encode(short))
}
