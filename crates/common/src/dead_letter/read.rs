//! Reading a dead letter back: what failed, why, when and where it came
//! from ([`Record`]), from oncehook's own headers or, for letters the broker
//! dead-lettered (the delivery limit), from `x-death`; and the letter's ID.
//!
//! Every dead letter has an ID: its `x-oncehook-dead-id` header when it has
//! one, else a hash of its identity (message id, correlation id, failure time
//! and body), so identical copies of one message share an ID.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::DeadLetterKind;
use super::write::{
    HEADER_ATTEMPTS, HEADER_DEAD_ID, HEADER_ERROR, HEADER_ERROR_KIND, HEADER_FAILED_AT,
    HEADER_ORIGIN, HEADER_REPLAYS, HEADER_ROUTING_KEY,
};
use crate::amqp::{header_int, header_string};

/// Who dead-lettered a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetteredBy {
    /// The worker or the mailer gave up on it (`x-oncehook-*` headers).
    Oncehook,
    /// The broker did (`x-death`, e.g. the delivery limit).
    Broker,
}

impl DeadLetteredBy {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetteredBy::Oncehook => "oncehook",
            DeadLetteredBy::Broker => "broker",
        }
    }
}

/// What a dead letter's headers say about its failure.
#[derive(Debug, Clone)]
pub struct Record {
    /// oncehook's kind, else the broker's reason, else
    /// [`DeadLetterKind::Unrecorded`].
    pub kind: DeadLetterKind,
    pub error: String,
    pub by: DeadLetteredBy,
    /// The failure time as written (part of a hashed ID).
    pub failed_at_text: Option<String>,
    pub failed_at: Option<OffsetDateTime>,
    /// The queue it came from.
    pub origin: Option<String>,
    /// Its original routing key, when a header says.
    pub routing_key: Option<String>,
    pub attempts: Option<i64>,
    /// How many times it was replayed before.
    pub replays: i64,
    /// The `x-oncehook-dead-id` header, lowercase.
    pub dead_id: Option<String>,
}

impl Record {
    /// Reads the dead-letter headers of a message.
    pub fn read(headers: Option<&FieldTable>) -> Record {
        let death = x_death(headers);
        let text = |name| non_empty(header_string(headers, name));
        let written_kind = text(HEADER_ERROR_KIND);
        let by = if written_kind.is_some() || header_string(headers, HEADER_ERROR).is_some() {
            DeadLetteredBy::Oncehook
        } else {
            DeadLetteredBy::Broker
        };
        let death_reason =
            non_empty(header_string(death, "reason")).or_else(|| text("x-first-death-reason"));
        let death_queue =
            non_empty(header_string(death, "queue")).or_else(|| text("x-first-death-queue"));
        let failed_at_text = text(HEADER_FAILED_AT);
        Record {
            error: text(HEADER_ERROR)
                .unwrap_or_else(|| broker_error(death_reason.as_deref(), death_queue.as_deref())),
            kind: written_kind
                .or(death_reason)
                .map_or(DeadLetterKind::Unrecorded, DeadLetterKind::from),
            by,
            failed_at: failed_at_text
                .as_deref()
                .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
                .or_else(|| table_timestamp(death, "time")),
            failed_at_text,
            origin: text(HEADER_ORIGIN).or(death_queue),
            routing_key: text(HEADER_ROUTING_KEY)
                .or_else(|| first_string_in_array(death, "routing-keys")),
            attempts: header_int(headers, HEADER_ATTEMPTS),
            replays: header_int(headers, HEADER_REPLAYS).unwrap_or(0),
            dead_id: text(HEADER_DEAD_ID).map(|id| id.to_ascii_lowercase()),
        }
    }

    /// The letter's ID: its `x-oncehook-dead-id`, else a hash of the
    /// message id, correlation id, failure time (for oncehook's letters)
    /// and body.
    pub fn letter_id(&self, properties: &BasicProperties, body: &[u8]) -> String {
        if let Some(id) = &self.dead_id {
            return id.clone();
        }
        let mid = properties.message_id().as_ref().map_or("", |m| m.as_str());
        let cid = properties
            .correlation_id()
            .as_ref()
            .map_or("", |m| m.as_str());
        match self.by {
            DeadLetteredBy::Oncehook => {
                let at = self.failed_at_text.as_deref().unwrap_or("");
                stable_id(&[
                    b"oncehook",
                    mid.as_bytes(),
                    cid.as_bytes(),
                    at.as_bytes(),
                    body,
                ])
            }
            DeadLetteredBy::Broker => stable_id(&[mid.as_bytes(), cid.as_bytes(), body]),
        }
    }
}

/// The error text of a letter the broker dead-lettered.
fn broker_error(reason: Option<&str>, queue: Option<&str>) -> String {
    let limit = DeadLetterKind::DeliveryLimit.as_str();
    match (reason, queue) {
        (Some(reason), Some(q)) if reason == limit => format!(
            "the broker dead-lettered it from {q}: it reached the delivery limit (a consumer crashed or stalled on every delivery)"
        ),
        (Some(reason), Some(q)) => format!("the broker dead-lettered it from {q} ({reason})"),
        (Some(reason), None) => format!("the broker dead-lettered it ({reason})"),
        _ => "no error recorded".to_owned(),
    }
}

/// A short, stable id (12 lowercase hex characters) for a dead letter, derived
/// from `parts`. The hash is 64-bit FNV-1a over the length-prefixed parts, so
/// it never changes between versions or machines; the id is its top 48 bits.
pub(super) fn stable_id(parts: &[&[u8]]) -> String {
    use std::hash::Hasher as _;
    let mut hash = fnv::FnvHasher::default();
    for part in parts {
        hash.write(&(part.len() as u64).to_be_bytes());
        hash.write(part);
    }
    format!("{:012x}", hash.finish() >> 16)
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
