//! Writing a dead letter: the `x-oncehook-*` headers of its copy, publishing
//! that copy with a confirm, and the headers of a replayed copy (the
//! bookkeeping taken off again, the replay counter raised).

use std::collections::BTreeMap;
use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::DeadLetterKind;
use crate::amqp::{self, PublishError, header_int};
use crate::consume::counting::HEADER_FAILURES;
use crate::topology::{HEADER_ACQUIRED_COUNT, HEADER_DELIVERY_COUNT};

/// Stable id of a dead letter (what `oncehookctl dlq show|replay|purge` take).
pub const HEADER_DEAD_ID: &str = "x-oncehook-dead-id";
/// Why the message was dead-lettered (human readable, names the event).
pub const HEADER_ERROR: &str = "x-oncehook-error";
/// The [`DeadLetterKind`] of the failure (`unknown_order`, `unparseable`, …).
pub const HEADER_ERROR_KIND: &str = "x-oncehook-error-kind";
/// RFC 3339 time of the failure.
pub const HEADER_FAILED_AT: &str = "x-oncehook-failed-at";
/// The queue the message came from (replay target).
pub const HEADER_ORIGIN: &str = "x-oncehook-origin";
/// The routing key the message was originally published with.
pub const HEADER_ROUTING_KEY: &str = "x-oncehook-routing-key";
/// Delivery attempts seen when the message was given up on.
pub const HEADER_ATTEMPTS: &str = "x-oncehook-attempts";
/// Set on replayed messages: how many times this message was replayed.
pub const HEADER_REPLAYS: &str = "x-oncehook-replays";

/// Why a message is being dead-lettered.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub kind: DeadLetterKind,
    /// What failed and for which event.
    pub error: String,
    /// The queue the message came from.
    pub origin: String,
    pub attempts: u32,
    /// The trace of the handling that gave up: the letter's `traceparent`
    /// (replacing the message's, which is its parent in the same trace);
    /// `None` keeps the message's own.
    pub trace_parent: Option<String>,
}

impl DeadLetter {
    /// The headers of the dead letter's copy of a message: the message's
    /// own `headers` plus this record, failed `at`, under a new random id.
    pub fn headers(
        &self,
        headers: Option<&FieldTable>,
        routing_key: &str,
        at: OffsetDateTime,
    ) -> FieldTable {
        let mut headers = headers.cloned().unwrap_or_default();
        let at = at.format(&Rfc3339).unwrap_or_default();
        for (k, v) in [
            (HEADER_ERROR, self.error.as_str()),
            (HEADER_ERROR_KIND, self.kind.as_str()),
            (HEADER_FAILED_AT, at.as_str()),
            (HEADER_ORIGIN, self.origin.as_str()),
            (HEADER_ROUTING_KEY, routing_key),
        ] {
            headers.insert(k.into(), AMQPValue::LongString(v.into()));
        }
        headers.insert(
            HEADER_ATTEMPTS.into(),
            AMQPValue::LongLongInt(i64::from(self.attempts)),
        );
        if let Some(tp) = &self.trace_parent {
            // The message's tracestate belongs to its own span, not ours.
            let mut kept = kept_headers(Some(&headers), |k| k != "tracestate");
            kept.insert(
                "traceparent".into(),
                AMQPValue::LongString(tp.clone().into()),
            );
            headers = FieldTable::from(kept);
        }
        let dead_id = uuid::Uuid::new_v4().simple().to_string();
        headers.insert(
            HEADER_DEAD_ID.into(),
            AMQPValue::LongString(dead_id[..12].to_owned().into()),
        );
        headers
    }
}

/// Publishes a copy of a message (its body and properties kept) to the
/// dead-letter exchange with the headers of `why`, persistent, and waits for
/// the confirm. Used for deliveries (through
/// `consume::broker::BrokerDeadLetters`, which acks the original only after
/// this returns `Ok`) and for events the worker kept parked.
pub async fn publish(
    ch: &Channel,
    dead_exchange: &str,
    data: &[u8],
    properties: &BasicProperties,
    routing_key: &str,
    why: &DeadLetter,
    timeout: Duration,
) -> Result<(), PublishError> {
    let headers = why.headers(
        properties.headers().as_ref(),
        routing_key,
        OffsetDateTime::now_utc(),
    );
    let props = properties
        .clone()
        .with_headers(headers)
        .with_delivery_mode(2);
    amqp::publish_confirmed(ch, dead_exchange, "", data, props, timeout).await
}

/// Headers of a replayed copy: the dead-letter bookkeeping (oncehook's and
/// the broker's) removed, the replay counter incremented; the message's own
/// headers kept, but its trace context moved to
/// [`otel::HEADER_FIRST_TRACEPARENT`](crate::otel::HEADER_FIRST_TRACEPARENT):
/// the replay is a new trace, linked to the delivery's first.
pub fn replay_headers(headers: Option<&FieldTable>) -> FieldTable {
    let replays = header_int(headers, HEADER_REPLAYS).unwrap_or(0) + 1;
    let mut kept = kept_headers(headers, |k| !is_bookkeeping(k));
    kept.insert(HEADER_REPLAYS.into(), AMQPValue::LongLongInt(replays));
    kept.remove(&ShortString::from("tracestate"));
    if let Some(first) = kept.remove(&ShortString::from("traceparent")) {
        kept.entry(crate::otel::HEADER_FIRST_TRACEPARENT.into())
            .or_insert(first);
    }
    FieldTable::from(kept)
}

/// The headers whose names `keep` accepts, as a map to edit (a
/// [`FieldTable`] cannot remove an entry).
fn kept_headers(
    headers: Option<&FieldTable>,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<ShortString, AMQPValue> {
    headers
        .map(|h| {
            h.into_iter()
                .filter(|(k, _)| keep(k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// How many times the message was replayed (its `x-oncehook-replays`, 0 if none).
pub fn replays(headers: Option<&FieldTable>) -> i64 {
    header_int(headers, HEADER_REPLAYS).unwrap_or(0)
}

/// `headers` with the replay counter set to `replays` (left out when 0):
/// for a message rebuilt from a stored copy that lost its headers (a parked
/// event dead-lettered by the sweeper).
pub fn with_replays(headers: Option<&FieldTable>, replays: i64) -> FieldTable {
    let mut kept: BTreeMap<ShortString, AMQPValue> = headers
        .map(|h| h.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    if replays > 0 {
        kept.insert(HEADER_REPLAYS.into(), AMQPValue::LongLongInt(replays));
    }
    FieldTable::from(kept)
}

/// Whether header `k` records a dead-lettering rather than the message.
fn is_bookkeeping(k: &str) -> bool {
    [
        HEADER_ERROR,
        HEADER_ERROR_KIND,
        HEADER_FAILED_AT,
        HEADER_ORIGIN,
        HEADER_ROUTING_KEY,
        HEADER_ATTEMPTS,
        HEADER_DEAD_ID,
        HEADER_DELIVERY_COUNT,
        HEADER_ACQUIRED_COUNT,
        HEADER_FAILURES,
        HEADER_REPLAYS,
        "x-death",
    ]
    .contains(&k)
        || k.starts_with("x-first-death-")
        || k.starts_with("x-last-death-")
}
