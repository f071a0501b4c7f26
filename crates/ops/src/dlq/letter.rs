//! One dead letter as read from `P.dead`: what failed, why, when and where
//! it came from (its headers read by `oncehook_common::dead_letter`, which
//! also derives its ID), and what its body says about the event or email it
//! carries. Identical copies of one message share an ID.

use base64::Engine as _;
use lapin::BasicProperties;
use lapin::message::Delivery;
use lapin::types::AMQPValue;
use oncehook_common::amqp::header_string;
use oncehook_common::dead_letter::{DeadLetterKind, Record};
use oncehook_common::email::EmailMessage;
use oncehook_common::otel;
use oncehook_common::topology::HEADER_SOURCE;
use oncehook_common::{Envelope, Topology};
use serde::Serialize;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::output::{or_dash, truncate};
use crate::timefmt::{rfc3339, short_time};

/// What a dead letter is and why it failed: the fields a letter carries and
/// its summary (`dlq list --json`) prints as they are.
#[derive(Debug, Clone, Serialize)]
pub struct LetterFacts {
    pub id: String,
    pub gateway: String,
    pub source: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub kind: DeadLetterKind,
    pub error: String,
    pub attempts: Option<i64>,
    pub origin: Option<String>,
    pub routing_key: Option<String>,
    pub replays: i64,
    /// The trace of the delivery that failed (its `traceparent` header),
    /// to find in the trace backend; `None` when it was not traced.
    pub trace_id: Option<String>,
    /// A replayed letter's first trace (`x-oncehook-first-traceparent`).
    pub first_trace_id: Option<String>,
    /// `oncehook` (the worker or mailer gave up) or `broker` (x-death, e.g. the delivery limit).
    pub dead_lettered_by: &'static str,
}

/// One dead letter as read from `P.dead`.
#[derive(Debug, Clone)]
pub struct Letter {
    pub facts: LetterFacts,
    /// Delivery tag on the channel that peeked it.
    pub tag: u64,
    pub properties: BasicProperties,
    /// The message body (emptied by peeks that do not need it).
    pub body: Vec<u8>,
    pub body_len: usize,
    pub failed_at: Option<OffsetDateTime>,
    pub envelope: Option<Envelope>,
    pub email: Option<EmailMessage>,
}

impl Letter {
    /// The tenant of the event it holds (docs/tenants.md); `None` for a
    /// letter that is no event (an email) or whose envelope is unreadable.
    pub fn tenant(&self) -> Option<&str> {
        self.envelope.as_ref().map(|e| e.tenant.as_str())
    }
}

/// The summary fields of a dead letter (`dlq list --json`, one element).
#[derive(Debug, Clone, Serialize)]
pub struct LetterSummary {
    #[serde(flatten)]
    pub facts: LetterFacts,
    pub failed_at: Option<String>,
    pub message_id: Option<String>,
    pub receipt_id: Option<String>,
    pub body_bytes: usize,
    pub headers: Map<String, Value>,
    /// The table row, for text output only.
    #[serde(skip)]
    pub row: Vec<String>,
}

/// Columns of [`LetterSummary::row`].
pub const LIST_HEADERS: [&str; 8] = [
    "ID",
    "GATEWAY",
    "EVENT",
    "TYPE",
    "KIND",
    "ERROR",
    "FAILED AT",
    "ATTEMPTS",
];

/// What the body says about the event (or email) it carries.
struct Identity {
    gateway: String,
    event_id: Option<String>,
    event_type: Option<String>,
    envelope: Option<Envelope>,
    email: Option<EmailMessage>,
}

/// The trace id of the `traceparent` in header `name`, if it holds one.
fn trace_id(headers: Option<&lapin::types::FieldTable>, name: &str) -> Option<String> {
    let tp = header_string(headers, name)?;
    otel::trace_id_of(&tp).map(str::to_owned)
}

impl Letter {
    pub fn from_delivery(delivery: Delivery, topology: &Topology) -> Letter {
        let props = delivery.properties;
        let headers = props.headers().as_ref();
        let body = delivery.data;
        let record = Record::read(headers);
        let identity = Identity::read(&body, props.message_id().as_ref().map(|m| m.as_str()));
        // An email letter the broker wrote names no routing key: the email queue has one.
        let routing_key = record.routing_key.clone().or_else(|| {
            (record.origin.as_deref() == Some(topology.emails().as_str()))
                .then(|| topology.email_routing_key().to_owned())
        });
        let facts = LetterFacts {
            id: record.letter_id(&props, &body),
            gateway: identity.gateway,
            source: identity
                .envelope
                .as_ref()
                .map(|e| e.source.clone())
                .or_else(|| header_string(headers, HEADER_SOURCE)),
            event_id: identity.event_id,
            event_type: identity.event_type,
            kind: record.kind,
            error: record.error,
            attempts: record.attempts,
            origin: record.origin,
            routing_key,
            replays: record.replays,
            trace_id: trace_id(headers, "traceparent"),
            first_trace_id: trace_id(headers, otel::HEADER_FIRST_TRACEPARENT),
            dead_lettered_by: record.by.as_str(),
        };
        Letter {
            facts,
            tag: delivery.delivery_tag,
            body_len: body.len(),
            properties: props,
            body,
            failed_at: record.failed_at,
            envelope: identity.envelope,
            email: identity.email,
        }
    }

    /// Drops the payload (keeps the parsed fields): peeks of a large queue
    /// keep only what they need.
    pub fn forget_body(&mut self) {
        self.body = Vec::new();
        if let Some(env) = &mut self.envelope {
            env.body_b64 = String::new();
        }
    }

    pub fn message_id(&self) -> Option<String> {
        self.properties
            .message_id()
            .as_ref()
            .map(|m| m.as_str().to_owned())
    }

    pub fn correlation_id(&self) -> Option<String> {
        self.properties
            .correlation_id()
            .as_ref()
            .map(|m| m.as_str().to_owned())
    }

    /// Sorted headers as JSON.
    pub fn headers_json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        if let Some(headers) = self.properties.headers() {
            for (k, v) in headers {
                map.insert(k.as_str().to_owned(), amqp_to_json(v));
            }
        }
        map
    }

    /// The summary fields (`dlq list --json`) and the table row.
    pub fn summary(&self) -> LetterSummary {
        LetterSummary {
            facts: self.facts.clone(),
            failed_at: self.failed_at.and_then(rfc3339),
            message_id: self.message_id(),
            receipt_id: self.correlation_id(),
            body_bytes: self.body_len,
            headers: self.headers_json(),
            row: self.row(),
        }
    }

    fn row(&self) -> Vec<String> {
        let f = &self.facts;
        vec![
            f.id.clone(),
            f.gateway.clone(),
            or_dash(f.event_id.as_ref()),
            or_dash(f.event_type.as_ref()),
            f.kind.to_string(),
            truncate(&f.error, 60),
            or_dash(self.failed_at.map(short_time)),
            or_dash(f.attempts),
        ]
    }
}

impl Identity {
    fn read(body: &[u8], message_id: Option<&str>) -> Identity {
        let envelope = Envelope::from_bytes(body).ok();
        let email = if envelope.is_none() {
            EmailMessage::from_bytes(body).ok()
        } else {
            None
        };
        // Without a readable body, the message id is `gateway:event_id`.
        let from_id = message_id.and_then(|m| m.split_once(':'));
        let (gateway, event_id, event_type) = match (&envelope, &email) {
            (Some(env), _) => (
                env.gateway.to_string(),
                env.event_id.clone(),
                env.event_type.clone(),
            ),
            (None, Some(m)) => (
                "email".to_owned(),
                Some(m.outbox_id.to_string()),
                Some("email".to_owned()),
            ),
            _ => (
                from_id
                    .map(|(g, _)| g.to_owned())
                    .filter(|g| !g.is_empty())
                    .unwrap_or_else(|| "unknown".to_owned()),
                from_id.map(|(_, e)| e.to_owned()),
                None,
            ),
        };
        Identity {
            gateway,
            event_id,
            event_type,
            envelope,
            email,
        }
    }
}

/// Converts a header value to JSON (timestamps as RFC 3339, bytes as base64).
pub fn amqp_to_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => json!(b),
        AMQPValue::ShortShortInt(n) => json!(n),
        AMQPValue::ShortShortUInt(n) => json!(n),
        AMQPValue::ShortInt(n) => json!(n),
        AMQPValue::ShortUInt(n) => json!(n),
        AMQPValue::LongInt(n) => json!(n),
        AMQPValue::LongUInt(n) => json!(n),
        AMQPValue::LongLongInt(n) => json!(n),
        AMQPValue::Float(f) => json!(f),
        AMQPValue::Double(f) => json!(f),
        AMQPValue::DecimalValue(d) => {
            let value = f64::from(d.value) / 10f64.powi(i32::from(d.scale));
            json!(value)
        }
        AMQPValue::ShortString(s) => json!(s.as_str()),
        AMQPValue::LongString(s) => json!(String::from_utf8_lossy(s.as_bytes())),
        AMQPValue::FieldArray(items) => {
            Value::Array(items.as_slice().iter().map(amqp_to_json).collect())
        }
        AMQPValue::Timestamp(secs) => i64::try_from(*secs)
            .ok()
            .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
            .and_then(rfc3339)
            .map_or_else(|| json!(secs), Value::String),
        AMQPValue::FieldTable(t) => Value::Object(
            t.into_iter()
                .map(|(k, v)| (k.as_str().to_owned(), amqp_to_json(v)))
                .collect(),
        ),
        AMQPValue::ByteArray(b) => {
            json!(base64::engine::general_purpose::STANDARD.encode(b.as_slice()))
        }
        AMQPValue::Void => Value::Null,
    }
}
