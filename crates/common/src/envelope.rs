//! The envelope: what ingest publishes and the worker consumes. It carries the
//! gateway's raw body bytes unchanged (base64, so nothing re-serialises them),
//! the headers the gateway's scheme needs, the ingest receipt id and the
//! moment the signature (and its timestamp) was verified. Redeliveries and
//! DLQ replays never re-check the clock: `verified_at` is the proof.
//!
//! It also carries ingest's one parse of the body (`event`, absent when
//! ingest could not understand the payload): the routing key and message id
//! are derived from it, and the worker uses it instead of parsing again, so
//! the two can never disagree. The raw body stays: parked events and DLQ
//! replays are re-read from the envelope bytes.
//!
//! Compatibility: `event` is an optional field added to version 1, not a new
//! version. Serde ignores fields it does not know, so a worker or ctl of the
//! previous release reads new envelopes, and a new worker reads old ones
//! (without `event` it parses the body itself, as before); a version bump
//! would have made old workers dead-letter every new envelope during a
//! rolling deploy. An `event` this build cannot read (from a newer ingest) is
//! treated as absent for the same reason.
//!
//! `origin` says how the event reached oncehook: a webhook (verified by its
//! signature at ingest; the default, and what an envelope without the
//! field is) or reconciliation (the worker's reconciler read it from the
//! gateway's own API, authenticated by that call: `event` is always set and
//! the body is the event itself as JSON, so a replay reads the same fact).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use oncehook_gateways::{Gateway, Headers, NormalizedEvent, ParseError, UnknownGateway};
use serde::{Deserialize, Serialize};

use crate::tenant::TenantId;
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
    /// A well-formed envelope naming a gateway this build does not know
    /// (a newer ingest in front of an older worker).
    #[error("{gateway}")]
    UnknownGateway {
        /// The envelope's configured source name.
        source_name: String,
        gateway: UnknownGateway,
    },
}

/// Why an envelope's event could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error("its {gateway} envelope carries a {provider} event")]
    Mismatch { gateway: Gateway, provider: Gateway },
    #[error("{gateway} delivery (receipt {receipt_id}) is authentic but not understood: {error}")]
    Unparseable {
        gateway: Gateway,
        receipt_id: Uuid,
        error: ParseError,
    },
}

/// How an event reached oncehook.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A webhook the gateway sent, its signature verified by ingest.
    #[default]
    Webhook,
    /// A payment state read from the gateway's API by the reconciler.
    Reconciliation,
}

impl Origin {
    /// `webhook` or `reconciliation`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Webhook => "webhook",
            Origin::Reconciliation => "reconciliation",
        }
    }

    fn is_webhook(&self) -> bool {
        *self == Origin::Webhook
    }
}

/// A verified webhook delivery on its way to the worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u32,
    /// Ingest's id for this HTTP request (also the AMQP `correlation_id`).
    pub receipt_id: Uuid,
    /// The configured source name (`/webhooks/{source}`).
    pub source: String,
    /// The gateway scheme of the source (serialised as its name: `razorpay`, `stripe`, …).
    pub gateway: Gateway,
    /// The event identity, where ingest could extract it: `event`'s, set by
    /// [`Envelope::with_event`] (kept on the wire for readers of older releases).
    pub event_id: Option<String>,
    /// The gateway's event type, where ingest could extract it: `event`'s, set by
    /// [`Envelope::with_event`] (kept on the wire for readers of older releases).
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
    /// Ingest's parse of the body; `None` when ingest could not understand
    /// it, and in envelopes from an ingest older than this field.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "event_if_readable"
    )]
    pub event: Option<NormalizedEvent>,
    /// How the event came; absent (a webhook) in ingest's envelopes.
    #[serde(default, skip_serializing_if = "Origin::is_webhook")]
    pub origin: Origin,
    /// The tenant of the source it came through (docs/tenants.md): the
    /// worker applies it in that tenant's scope. Absent on the wire for
    /// the default tenant, so a single shop's envelopes are as before and
    /// an older ingest's are the default tenant's.
    #[serde(
        default = "TenantId::default_tenant",
        skip_serializing_if = "TenantId::is_default"
    )]
    pub tenant: TenantId,
}

/// Reads `event` leniently: a value this build cannot decode is `None`, so
/// the worker falls back to parsing the body instead of rejecting the envelope.
fn event_if_readable<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<NormalizedEvent>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

/// Why an envelope failed to decode, when it is its gateway name.
fn unknown_gateway(bytes: &[u8]) -> Option<EnvelopeError> {
    #[derive(Deserialize)]
    struct Names {
        version: u32,
        source: String,
        gateway: String,
    }
    let names: Names = serde_json::from_slice(bytes).ok()?;
    if names.version != ENVELOPE_VERSION {
        return Some(EnvelopeError::Version(names.version));
    }
    let gateway = names.gateway.parse::<Gateway>().err()?;
    Some(EnvelopeError::UnknownGateway {
        source_name: names.source,
        gateway,
    })
}

impl Envelope {
    /// A delivery whose signature was verified just now, as ingest wraps
    /// it: a new receipt id, the body as received, and ingest's one parse
    /// of it (`event: None` when it cannot be read).
    pub fn verified(
        source: &str,
        gateway: Gateway,
        headers: Headers,
        body: &[u8],
        received_at: OffsetDateTime,
        signed_at: Option<i64>,
    ) -> Envelope {
        let parsed = oncehook_gateways::parse(gateway, &headers, body).ok();
        Envelope {
            version: ENVELOPE_VERSION,
            receipt_id: Uuid::new_v4(),
            source: source.to_owned(),
            gateway,
            event_id: None,
            event_type: None,
            received_at,
            verified_at: OffsetDateTime::now_utc(),
            signed_at,
            headers,
            body_b64: Envelope::encode_body(body),
            event: None,
            origin: Origin::Webhook,
            tenant: TenantId::default_tenant(),
        }
        .with_event(parsed)
    }

    /// The envelope of a delivery for `tenant`'s source.
    pub fn for_tenant(mut self, tenant: &TenantId) -> Self {
        self.tenant = tenant.clone();
        self
    }

    /// A payment state the reconciler read from `source`'s API just now:
    /// no signature (the API call authenticated it), the event itself as
    /// the body, so the same fact is always the same body.
    pub fn reconciled(source: &str, event: NormalizedEvent) -> Envelope {
        let now = OffsetDateTime::now_utc();
        // Serialising a struct of strings and numbers cannot fail.
        let body = serde_json::to_vec(&event).unwrap_or_default();
        Envelope {
            version: ENVELOPE_VERSION,
            receipt_id: Uuid::new_v4(),
            source: source.to_owned(),
            gateway: event.provider,
            event_id: None,
            event_type: None,
            received_at: now,
            verified_at: now,
            signed_at: None,
            headers: Headers::new(),
            body_b64: Envelope::encode_body(&body),
            event: None,
            origin: Origin::Reconciliation,
            tenant: TenantId::default_tenant(),
        }
        .with_event(Some(event))
    }

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

    /// Attaches ingest's parse of the body (`None`: not understood) and the
    /// identity and type derived from it.
    pub fn with_event(mut self, event: Option<NormalizedEvent>) -> Self {
        self.event_id = event.as_ref().map(|e| e.event_id.clone());
        self.event_type = event.as_ref().map(|e| e.event_type.clone());
        self.event = event;
        self
    }

    /// The event identity: the parsed event's, else (an older ingest's
    /// envelope) the `event_id` field.
    pub fn identity(&self) -> Option<&str> {
        match &self.event {
            Some(event) => Some(&event.event_id),
            None => self.event_id.as_deref(),
        }
    }

    /// The gateway's event type: the parsed event's, else the `event_type` field.
    pub fn kind_name(&self) -> Option<&str> {
        match &self.event {
            Some(event) => Some(&event.event_type),
            None => self.event_type.as_deref(),
        }
    }

    /// The event this envelope carries: ingest's parse, else (an older
    /// ingest's envelope) the body parsed now.
    pub fn normalized_event(&self) -> Result<NormalizedEvent, EventError> {
        match &self.event {
            Some(event) if event.provider != self.gateway => Err(EventError::Mismatch {
                gateway: self.gateway,
                provider: event.provider,
            }),
            Some(event) => Ok(event.clone()),
            None => {
                let body = self.body()?;
                if self.origin == Origin::Reconciliation {
                    // Its body is the event itself ([`Envelope::reconciled`]).
                    return serde_json::from_slice(&body).map_err(|e| EventError::Unparseable {
                        gateway: self.gateway,
                        receipt_id: self.receipt_id,
                        error: ParseError::InvalidField {
                            field: "body",
                            reason: format!("a reconciliation envelope's event: {e}"),
                        },
                    });
                }
                oncehook_gateways::parse(self.gateway, &self.headers, &body).map_err(|error| {
                    EventError::Unparseable {
                        gateway: self.gateway,
                        receipt_id: self.receipt_id,
                        error,
                    }
                })
            }
        }
    }

    /// Decodes and checks the version; an unknown gateway name is
    /// [`EnvelopeError::UnknownGateway`], not a JSON error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let env: Envelope = serde_json::from_slice(bytes)
            .map_err(|err| unknown_gateway(bytes).unwrap_or(EnvelopeError::Json(err)))?;
        if env.version != ENVELOPE_VERSION {
            return Err(EnvelopeError::Version(env.version));
        }
        Ok(env)
    }

    /// `<gateway>:<event_id>` where the identity is known, else `receipt:<uuid>`.
    pub fn message_id(&self) -> String {
        match self.identity() {
            Some(id) => format!("{}:{}", self.gateway, id),
            None => format!("receipt:{}", self.receipt_id),
        }
    }

    /// `<gateway>.<event_type>` (topic routing key).
    pub fn routing_key(&self) -> String {
        format!("{}.{}", self.gateway, self.kind_name().unwrap_or("unknown"))
    }

    /// Persistent message properties for publishing this envelope, with
    /// the current span's trace context in the headers.
    pub fn properties(&self) -> BasicProperties {
        let mut headers = FieldTable::default();
        headers.insert(
            crate::topology::HEADER_SOURCE.into(),
            AMQPValue::LongString(self.source.clone().into()),
        );
        // The current span's trace context (`traceparent`), when traced.
        crate::otel::inject_amqp(&mut headers);
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
    use oncehook_gateways::EventKind;

    use super::*;

    fn envelope(raw: &[u8]) -> Envelope {
        Envelope {
            version: ENVELOPE_VERSION,
            receipt_id: Uuid::new_v4(),
            source: "cashfree".into(),
            gateway: "cashfree".parse().expect("a gateway"),
            event_id: None,
            event_type: None,
            received_at: OffsetDateTime::now_utc(),
            verified_at: OffsetDateTime::now_utc(),
            signed_at: Some(1),
            headers: Headers::new().with("X-Webhook-Timestamp", "1000"),
            body_b64: Envelope::encode_body(raw),
            event: None,
            origin: Origin::Webhook,
            tenant: TenantId::default_tenant(),
        }
    }

    fn event() -> NormalizedEvent {
        NormalizedEvent {
            provider: "cashfree".parse().expect("a gateway"),
            event_id: "e1".into(),
            event_type: "PAYMENT_SUCCESS_WEBHOOK".into(),
            kind: EventKind::Captured,
            payment_id: Some("p1".into()),
            order_ref: Some("o1".into()),
            amount_minor: Some(50_000),
            currency: Some("INR".into()),
            email: None,
            refund_id: None,
            cumulative_refund: false,
        }
    }

    #[test]
    fn body_bytes_survive_byte_exact() {
        let raw = b"{\"amount\":500.00,\"x\":\"\xe2\x82\xb9\"}\n".to_vec();
        let env = envelope(&raw).with_event(Some(event()));
        let back = Envelope::from_bytes(&env.to_bytes()).expect("round trip");
        assert_eq!(back.body().expect("body"), raw);
        assert_eq!(back.headers.get("x-webhook-timestamp"), Some("1000"));
        assert_eq!(back.message_id(), "cashfree:e1");
        assert_eq!(back.routing_key(), "cashfree.PAYMENT_SUCCESS_WEBHOOK");
        assert_eq!(back.event, Some(event()));
        assert_eq!(
            back.event_id.as_deref(),
            Some("e1"),
            "kept for older readers"
        );
    }

    #[test]
    fn without_an_event_the_receipt_names_the_message() {
        let env = envelope(b"?").with_event(None);
        let back = Envelope::from_bytes(&env.to_bytes()).expect("round trip");
        assert_eq!(back.event, None);
        assert_eq!(back.message_id(), format!("receipt:{}", env.receipt_id));
        assert_eq!(back.routing_key(), "cashfree.unknown");
        assert!(!String::from_utf8_lossy(&env.to_bytes()).contains("\"event\""));
    }

    /// What the previous ingest published: no `event`, identity in the fields.
    const OLD: &str = r#"{"version":1,"receipt_id":"6f1c1d2e-8a59-4a43-9d3e-0c8a3b1c2d4e","source":"rzp","gateway":"razorpay","event_id":"evt_1","event_type":"payment.captured","received_at":"2025-05-05T06:40:21Z","verified_at":"2025-05-05T06:40:21Z","signed_at":null,"headers":[["x-razorpay-signature","ab"]],"body_b64":"e30="}"#;

    #[test]
    fn envelopes_from_the_previous_ingest_still_decode() {
        let env = Envelope::from_bytes(OLD.as_bytes()).expect("old envelope");
        assert_eq!(env.gateway.as_str(), "razorpay");
        assert_eq!(env.event, None);
        assert_eq!(env.message_id(), "razorpay:evt_1");
        assert_eq!(env.routing_key(), "razorpay.payment.captured");
        assert_eq!(env.body().expect("body"), b"{}");
    }

    #[test]
    fn an_unknown_gateway_is_named_and_an_unreadable_event_is_absent() {
        let unknown = OLD.replace(r#""gateway":"razorpay""#, r#""gateway":"paypal""#);
        match Envelope::from_bytes(unknown.as_bytes()) {
            Err(EnvelopeError::UnknownGateway {
                source_name,
                gateway,
            }) => {
                assert_eq!(source_name, "rzp");
                assert_eq!(gateway.0, "paypal");
            }
            other => panic!("expected UnknownGateway, got {other:?}"),
        }
        let newer = OLD.replace(
            r#""body_b64""#,
            r#""event":{"kind":"teleported"},"body_b64""#,
        );
        let env = Envelope::from_bytes(newer.as_bytes()).expect("envelope");
        assert_eq!(env.event, None, "the worker parses the body itself");
        let bumped = unknown.replace(r#""version":1"#, r#""version":2"#);
        assert!(matches!(
            Envelope::from_bytes(bumped.as_bytes()),
            Err(EnvelopeError::Version(2))
        ));
    }

    #[test]
    fn a_reconciled_fact_is_the_same_body_every_time_and_reads_back_without_its_event() {
        let a = Envelope::reconciled("cashfree", event());
        let b = Envelope::reconciled("cashfree", event());
        assert_eq!(a.body_b64, b.body_b64, "the same fact, the same body");
        assert_ne!(a.receipt_id, b.receipt_id);
        let back = Envelope::from_bytes(&a.to_bytes()).expect("round trip");
        assert_eq!(back.origin, Origin::Reconciliation);
        assert_eq!(back.message_id(), "cashfree:e1");
        let mut bare = back.clone();
        bare.event = None;
        assert_eq!(bare.normalized_event().expect("from the body"), event());
        assert!(bare.headers.is_empty() && bare.signed_at.is_none());
        // Ingest's envelopes never carry the field; older readers ignore it.
        let webhook = envelope(b"{}").with_event(Some(event()));
        assert!(!String::from_utf8_lossy(&webhook.to_bytes()).contains("origin"));
        assert_eq!(
            Envelope::from_bytes(OLD.as_bytes()).expect("old").origin,
            Origin::Webhook
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Envelope::from_bytes(b"\xff\x00").is_err());
        assert!(Envelope::from_bytes(b"{}").is_err());
    }
}
