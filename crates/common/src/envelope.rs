//! The envelope: what ingest publishes and the worker consumes. It carries the
//! gateway's raw body bytes unchanged (base64, so nothing re-serialises them),
//! the headers the gateway's scheme needs, the ingest receipt id and the
//! moment the signature (and its timestamp) was verified. Redeliveries and
//! DLQ replays never re-check the clock: `verified_at` is the proof.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use oncehook_gateways::Headers;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::amqp::short;

/// Current envelope format version.
pub const ENVELOPE_VERSION: u32 = 1;
pub const CONTENT_TYPE: &str = "application/vnd.oncehook.envelope+json";

/// Why a message body could not be read as an envelope.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("message is not an oncehook envelope: {0}")]
    Json(#[from] serde_json::Error),
    #[error("envelope body is not valid base64: {0}")]
    Body(#[from] base64::DecodeError),
    #[error("envelope version {0} is not supported (expected {ENVELOPE_VERSION})")]
    Version(u32),
}

/// A verified webhook delivery on its way to the worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u32,
    /// Ingest's id for this HTTP request (also the AMQP `correlation_id`).
    pub receipt_id: Uuid,
    /// The configured source name (`/webhooks/{source}`).
    pub source: String,
    /// The gateway scheme of the source (`razorpay`, `stripe`, …).
    pub gateway: String,
    /// The event identity, where ingest could extract it.
    pub event_id: Option<String>,
    /// The gateway's event type, where ingest could extract it.
    pub event_type: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub verified_at: OffsetDateTime,
    /// The timestamp the gateway signed (unix seconds), if its scheme signs one.
    pub signed_at: Option<i64>,
    /// The request headers the gateway's scheme needs (lowercase names).
    pub headers: Headers,
    /// The raw request body, base64.
    pub body_b64: String,
}

impl Envelope {
    pub fn body(&self) -> Result<Vec<u8>, EnvelopeError> {
        Ok(STANDARD.decode(&self.body_b64)?)
    }

    pub fn encode_body(raw: &[u8]) -> String {
        STANDARD.encode(raw)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising a struct of strings and numbers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let env: Envelope = serde_json::from_slice(bytes)?;
        if env.version != ENVELOPE_VERSION {
            return Err(EnvelopeError::Version(env.version));
        }
        Ok(env)
    }

    /// `<gateway>:<event_id>` where the identity is known, else `receipt:<uuid>`.
    pub fn message_id(&self) -> String {
        match &self.event_id {
            Some(id) => format!("{}:{}", self.gateway, id),
            None => format!("receipt:{}", self.receipt_id),
        }
    }

    /// `<gateway>.<event_type>` (topic routing key).
    pub fn routing_key(&self) -> String {
        format!(
            "{}.{}",
            self.gateway,
            self.event_type.as_deref().unwrap_or("unknown")
        )
    }

    /// Persistent message properties for publishing this envelope.
    pub fn properties(&self) -> BasicProperties {
        let mut headers = FieldTable::default();
        headers.insert(
            crate::topology::HEADER_SOURCE.into(),
            AMQPValue::LongString(self.source.clone().into()),
        );
        BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type(CONTENT_TYPE.into())
            .with_message_id(short(&self.message_id()))
            .with_correlation_id(short(&self.receipt_id.to_string()))
            .with_timestamp(self.received_at.unix_timestamp().max(0) as u64)
            .with_headers(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_bytes_survive_byte_exact() {
        let raw = b"{\"amount\":500.00,\"x\":\"\xe2\x82\xb9\"}\n".to_vec();
        let env = Envelope {
            version: ENVELOPE_VERSION,
            receipt_id: Uuid::new_v4(),
            source: "cashfree".into(),
            gateway: "cashfree".into(),
            event_id: Some("e1".into()),
            event_type: Some("PAYMENT_SUCCESS_WEBHOOK".into()),
            received_at: OffsetDateTime::now_utc(),
            verified_at: OffsetDateTime::now_utc(),
            signed_at: Some(1),
            headers: Headers::new().with("X-Webhook-Timestamp", "1000"),
            body_b64: Envelope::encode_body(&raw),
        };
        let back = Envelope::from_bytes(&env.to_bytes()).expect("round trip");
        assert_eq!(back.body().expect("body"), raw);
        assert_eq!(back.headers.get("x-webhook-timestamp"), Some("1000"));
        assert_eq!(back.message_id(), "cashfree:e1");
        assert_eq!(back.routing_key(), "cashfree.PAYMENT_SUCCESS_WEBHOOK");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Envelope::from_bytes(b"\xff\x00").is_err());
        assert!(Envelope::from_bytes(b"{}").is_err());
    }
}
