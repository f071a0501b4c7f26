//! Standard Webhooks sample deliveries in oncehook's payment payload shape,
//! with `webhook-id` set to the spec's event id and signed with the
//! base64-decoded `whsec_` secret.

use crate::sample::text::{js, rfc3339_utc};
use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use super::scheme::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, key_of, sign};
use crate::{Gateway, Headers};

pub(super) const TABLE: &[(&str, &str)] = &[
    ("payment.succeeded", "payment.succeeded"),
    ("payment.failed", "payment.failed"),
    ("payment.authorized", "payment.authorized"),
    ("payment.refunded", "payment.refunded"),
    ("captured", "payment.succeeded"),
    ("failed", "payment.failed"),
    ("authorized", "payment.authorized"),
    ("refunded", "payment.refunded"),
];

pub(super) const EVENT_NAMES: &[&str] = &[
    "payment.succeeded",
    "payment.failed",
    "payment.authorized",
    "payment.refunded",
    "captured",
    "failed",
    "authorized",
    "refunded",
];

/// Fails if `secret` is not a usable Standard Webhooks secret.
pub(super) fn build(
    event: &str,
    spec: &SampleSpec,
    secret: &str,
) -> Result<SignedDelivery, SampleError> {
    let key = key_of(secret).ok_or(SampleError::InvalidSecret {
        gateway: Gateway::Standard,
        reason: "not base64 after the whsec_ prefix",
    })?;
    let refund = if event == "payment.refunded" {
        format!(r#","refund_id":{}"#, js(&spec.refund_id(Gateway::Standard)))
    } else {
        String::new()
    };
    let body = format!(
        concat!(
            r#"{{"type":{ty},"timestamp":{time},"data":{{"payment_id":{payment},"order_id":{order},"#,
            r#""amount":{amount},"currency":{currency},"email":{email}{refund}}}}}"#,
        ),
        ty = js(event),
        time = js(&rfc3339_utc(spec.timestamp)),
        payment = js(&spec.payment_id),
        order = js(&spec.order_ref),
        amount = spec.amount_minor,
        currency = js(&spec.currency.to_ascii_uppercase()),
        email = js(&spec.email),
        refund = refund,
    )
    .into_bytes();
    let headers = Headers::new()
        .with("Content-Type", "application/json")
        .with(ID_HEADER, spec.event_id.clone())
        .with(TIMESTAMP_HEADER, spec.timestamp.to_string())
        .with(
            SIGNATURE_HEADER,
            sign(&key, &spec.event_id, spec.timestamp, &body),
        );
    Ok(SignedDelivery { headers, body })
}
