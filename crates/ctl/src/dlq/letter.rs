//! One dead letter as read from `P.dead`: what failed, why, when and where
//! it came from, derived from oncehook's own headers or, for letters the
//! broker dead-lettered (e.g. the delivery limit), from `x-death`.
//!
//! Every dead letter has an ID: its `x-oncehook-dead-id` header when it has
//! one, else a hash of its identity (message id, correlation id, failure time
//! and body). Identical copies of one message share an ID.

use base64::Engine as _;
use lapin::BasicProperties;
use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable};
use oncehook_common::amqp::{self, header_int, header_string};
use oncehook_common::email::EmailMessage;
use oncehook_common::topology::{
    HEADER_ATTEMPTS, HEADER_DEAD_ID, HEADER_ERROR, HEADER_ERROR_KIND, HEADER_FAILED_AT,
    HEADER_ORIGIN, HEADER_REPLAYS, HEADER_ROUTING_KEY, HEADER_SOURCE,
};
use oncehook_common::{Envelope, Topology};
use serde::Serialize;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::output::{or_dash, truncate};
use crate::timefmt::{parse_rfc3339, rfc3339, short_time};

/// What a dead letter is and why it failed: the fields a letter carries and
/// its summary (`dlq list --json`) prints as they are.
#[derive(Debug, Clone, Serialize)]
pub struct LetterFacts {
    pub id: String,
    pub gateway: String,
    pub source: Option<String>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub kind: String,
    pub error: String,
    pub attempts: Option<i64>,
    pub origin: Option<String>,
    pub routing_key: Option<String>,
    pub replays: i64,
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

/// Why and by whom a message was dead-lettered, and where it came from.
struct Failure {
    kind: String,
    error: String,
    by_oncehook: bool,
    failed_at_text: Option<String>,
    failed_at: Option<OffsetDateTime>,
    origin: Option<String>,
    routing_key: Option<String>,
}

/// What the body says about the event (or email) it carries.
struct Identity {
    gateway: String,
    event_id: Option<String>,
    event_type: Option<String>,
    envelope: Option<Envelope>,
    email: Option<EmailMessage>,
}

impl Letter {
    pub fn from_delivery(delivery: Delivery, topology: &Topology) -> Letter {
        let props = delivery.properties.clone();
        let headers = props.headers().as_ref();
        let message_id = text_of(props.message_id().as_ref().map(|m| m.as_str()));
        let correlation_id = text_of(props.correlation_id().as_ref().map(|m| m.as_str()));
        let body = delivery.data;
        let failure = Failure::read(headers, topology);
        let identity = Identity::read(&body, message_id.as_deref());
        let id = letter_id(headers, &failure, [&message_id, &correlation_id], &body);
        let facts = LetterFacts {
            id,
            gateway: identity.gateway,
            source: identity
                .envelope
                .as_ref()
                .map(|e| e.source.clone())
                .or_else(|| header_string(headers, HEADER_SOURCE)),
            event_id: identity.event_id,
            event_type: identity.event_type,
            kind: failure.kind,
            error: failure.error,
            attempts: header_int(headers, HEADER_ATTEMPTS),
            origin: failure.origin,
            routing_key: failure.routing_key,
            replays: header_int(headers, HEADER_REPLAYS).unwrap_or(0),
            dead_lettered_by: if failure.by_oncehook {
                "oncehook"
            } else {
                "broker"
            },
        };
        Letter {
            facts,
            tag: delivery.delivery_tag,
            body_len: body.len(),
            properties: props.clone(),
            body,
            failed_at: failure.failed_at,
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
        text_of(self.properties.message_id().as_ref().map(|m| m.as_str()))
    }

    pub fn correlation_id(&self) -> Option<String> {
        text_of(
            self.properties
                .correlation_id()
                .as_ref()
                .map(|m| m.as_str()),
        )
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
            f.kind.clone(),
            truncate(&f.error, 60),
            or_dash(self.failed_at.map(short_time)),
            or_dash(f.attempts),
        ]
    }
}

impl Failure {
    fn read(headers: Option<&FieldTable>, topology: &Topology) -> Failure {
        let death = x_death(headers);
        let oncehook_kind = non_empty(header_string(headers, HEADER_ERROR_KIND));
        let by_oncehook = oncehook_kind.is_some() || header_string(headers, HEADER_ERROR).is_some();
        let death_reason = non_empty(header_string(death, "reason"))
            .or_else(|| non_empty(header_string(headers, "x-first-death-reason")));
        let death_queue = non_empty(header_string(death, "queue"))
            .or_else(|| non_empty(header_string(headers, "x-first-death-queue")));
        let failed_at_text = non_empty(header_string(headers, HEADER_FAILED_AT));
        let origin = non_empty(header_string(headers, HEADER_ORIGIN)).or(death_queue.clone());
        let routing_key = non_empty(header_string(headers, HEADER_ROUTING_KEY))
            .or_else(|| first_string_in_array(death, "routing-keys"))
            .or_else(|| {
                (origin.as_deref() == Some(topology.emails().as_str()))
                    .then(|| topology.email_routing_key().to_owned())
            });
        let error = non_empty(header_string(headers, HEADER_ERROR))
            .unwrap_or_else(|| broker_error(death_reason.as_deref(), death_queue.as_deref()));
        Failure {
            kind: oncehook_kind
                .or(death_reason)
                .unwrap_or_else(|| "unknown".to_owned()),
            error,
            by_oncehook,
            failed_at: failed_at_text
                .as_deref()
                .and_then(parse_rfc3339)
                .or_else(|| table_timestamp(death, "time")),
            failed_at_text,
            origin,
            routing_key,
        }
    }
}

/// The error text of a letter the broker dead-lettered.
fn broker_error(reason: Option<&str>, queue: Option<&str>) -> String {
    match (reason, queue) {
        (Some("delivery_limit"), Some(q)) => format!(
            "the broker dead-lettered it from {q}: it reached the delivery limit (a consumer crashed or stalled on every delivery)"
        ),
        (Some(reason), Some(q)) => format!("the broker dead-lettered it from {q} ({reason})"),
        (Some(reason), None) => format!("the broker dead-lettered it ({reason})"),
        _ => "no error recorded".to_owned(),
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

fn letter_id(
    headers: Option<&FieldTable>,
    failure: &Failure,
    [message_id, correlation_id]: [&Option<String>; 2],
    body: &[u8],
) -> String {
    if let Some(id) = non_empty(header_string(headers, HEADER_DEAD_ID)) {
        return id.to_ascii_lowercase();
    }
    let mid = message_id.as_deref().unwrap_or("").as_bytes();
    let cid = correlation_id.as_deref().unwrap_or("").as_bytes();
    if failure.by_oncehook {
        let at = failure.failed_at_text.as_deref().unwrap_or("").as_bytes();
        amqp::stable_id(&[b"oncehook", mid, cid, at, body])
    } else {
        amqp::stable_id(&[mid, cid, body])
    }
}

fn text_of(s: Option<&str>) -> Option<String> {
    s.map(str::to_owned)
}

/// The first (most recent) entry of the `x-death` header, if any.
fn x_death(headers: Option<&FieldTable>) -> Option<&FieldTable> {
    match headers?.inner().get("x-death")? {
        AMQPValue::FieldArray(entries) => entries.as_slice().iter().find_map(|v| match v {
            AMQPValue::FieldTable(t) => Some(t),
            _ => None,
        }),
        _ => None,
    }
}

fn table_timestamp(table: Option<&FieldTable>, name: &str) -> Option<OffsetDateTime> {
    let secs = match table?.inner().get(name)? {
        AMQPValue::Timestamp(secs) => i64::try_from(*secs).ok()?,
        AMQPValue::LongLongInt(n) => *n,
        AMQPValue::LongInt(n) => i64::from(*n),
        _ => return None,
    };
    OffsetDateTime::from_unix_timestamp(secs).ok()
}

fn first_string_in_array(table: Option<&FieldTable>, name: &str) -> Option<String> {
    match table?.inner().get(name)? {
        AMQPValue::FieldArray(items) => items.as_slice().iter().find_map(value_string),
        other => value_string(other),
    }
}

fn value_string(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|v| !v.trim().is_empty())
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
