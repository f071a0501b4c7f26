//! From message bytes to a [`Delivery`]: the envelope, the event ingest
//! parsed into it (an older ingest's envelope has its body parsed here) and
//! the delivery's dedup identity — its source, the gateway's event id and a
//! digest of the signed body bytes. The claim conflicts on the source and
//! the digest, so an unsigned event-id header can neither make a different
//! body look like a duplicate nor the same body look like a new delivery.

use oncehook_common::Envelope;
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_common::envelope::{EnvelopeError, EventError};
use oncehook_common::store::advisory::LockName;
use oncehook_common::store::dedup::{Claim, DeliveryKey};
use oncehook_gateways::NormalizedEvent;
use sha2::{Digest, Sha256};

use super::Rejection;

/// A message the worker understood.
#[derive(Debug)]
pub struct Delivery {
    pub envelope: Envelope,
    pub event: NormalizedEvent,
    /// The delivery's dedup identity (source, event id, body digest).
    pub key: DeliveryKey,
    /// How many times an operator replayed its message (`x-oncehook-replays`);
    /// kept when it is parked, so a later dead letter counts them.
    pub replays: i64,
    /// The `traceparent` of the delivery's span, when traced: its emails
    /// and its `processed_webhooks` row keep it.
    pub trace_parent: Option<String>,
}

impl Delivery {
    /// The delivery's claim row (what `processed_webhooks` records about
    /// it), with the advisory locks its effect takes if it is fresh.
    pub fn claim<'a>(&'a self, locks: &'a [LockName]) -> Claim<'a> {
        let event = &self.event;
        Claim {
            key: &self.key,
            provider: event.provider.as_str(),
            event_type: &event.event_type,
            order_ref: event.order_ref.as_deref(),
            payment_id: event.payment_id.as_deref(),
            receipt_id: self.envelope.receipt_id,
            received_at: self.envelope.received_at,
            origin: self.envelope.origin.as_str(),
            trace_id: self
                .trace_parent
                .as_deref()
                .and_then(oncehook_common::otel::trace_id_of),
            locks,
        }
    }
}

/// Decodes a message body; `message_id` only names the message in errors.
pub fn decode(data: &[u8], message_id: &str) -> Result<Delivery, Rejection> {
    let envelope = Envelope::from_bytes(data).map_err(|e| match e {
        EnvelopeError::UnknownGateway {
            source_name,
            gateway,
        } => Rejection::new(
            DeadLetterKind::UnknownGateway,
            format!("message {message_id} from source {source_name}: {gateway}"),
        ),
        other => bad_envelope(message_id, &other),
    })?;
    let event = envelope.normalized_event().map_err(|e| match e {
        EventError::Unparseable { .. } => Rejection::new(
            DeadLetterKind::Unparseable,
            format!("message {message_id}: {e}"),
        ),
        other => bad_envelope(message_id, &other),
    })?;
    let body = envelope.body().map_err(|e| bad_envelope(message_id, &e))?;
    let key = key(&envelope.source, &event.event_id, &body);
    Ok(Delivery {
        envelope,
        event,
        key,
        replays: 0,
        trace_parent: None,
    })
}

fn bad_envelope(message_id: &str, e: &dyn std::fmt::Display) -> Rejection {
    Rejection::new(
        DeadLetterKind::BadEnvelope,
        format!("message {message_id}: {e}"),
    )
}

/// The key of a delivery of `body` from `source` with `event_id`.
pub fn key(source: &str, event_id: &str, body: &[u8]) -> DeliveryKey {
    let digest = Sha256::digest(body);
    DeliveryKey {
        source: source.to_owned(),
        event_id: event_id.to_owned(),
        body_sha256: hex::encode(digest.get(..16).unwrap_or_default()),
    }
}
