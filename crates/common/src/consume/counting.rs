//! Delivery counting: how often a delivery already failed, read from the
//! headers RabbitMQ (and the consume loop's own requeued copies) put on it,
//! and the pure decisions the consume loop takes from that — dead-letter
//! now, requeue counted, requeue uncounted.
//!
//! RabbitMQ's quorum queues count in two ways, and the loop must keep its
//! promises under both:
//!
//! * 3.10–4.2: every return counts in `x-delivery-count` — `basic.nack` and
//!   `basic.reject` with requeue, a closed channel or connection. 4.0 adds a
//!   default delivery limit of 20 (the topology always sets its own).
//! * 4.3 and later: `x-delivery-count` counts failed deliveries only —
//!   `basic.reject` with requeue and a lost channel or connection — while
//!   `basic.nack` with requeue does not count; every hand-out counts in the
//!   new `x-acquired-count`, present on a redelivery.
//!
//! So a failed attempt (a handler panic) goes back with `basic.reject`,
//! which every version counts; a delivery given back through no fault of
//! its own (shutdown while it is held through database trouble) goes back
//! with `basic.nack` where the broker shows it does not count that
//! (`x-acquired-count` present), and otherwise as a confirmed copy carrying
//! the failures so far in `x-oncehook-failures`, the original acked — a
//! fresh message no version has counted. Before handling, a delivery whose
//! failures (the copy's carried ones included) are past the limit is
//! dead-lettered, so a copy cannot stretch a crash loop.

use std::collections::BTreeMap;

use lapin::types::{AMQPValue, FieldTable, ShortString};

use crate::amqp::header_int;
use crate::dead_letter::HEADER_ROUTING_KEY;
use crate::topology::{HEADER_ACQUIRED_COUNT, HEADER_DELIVERY_COUNT};

/// Failed deliveries of earlier copies of a message, carried by a copy the
/// consume loop requeued in their place (the broker's counters start again
/// on a copy).
pub const HEADER_FAILURES: &str = "x-oncehook-failures";

/// A delivery's counters, as its headers carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// `x-delivery-count`: returns the broker counted against this copy —
    /// every return before 4.3, failed ones only from 4.3 on. 0 when absent
    /// (a first delivery).
    pub delivery_count: u32,
    /// `x-acquired-count` (4.3 and later): how often this copy was handed
    /// to a consumer before. `None` when the broker does not send it (before
    /// 4.3, or a first delivery).
    pub acquired_count: Option<u32>,
    /// `x-oncehook-failures`: failures of the copies before this one.
    pub carried: u32,
}

impl Counts {
    /// The counters in `headers` (absent or unreadable ones count as none).
    pub fn from_headers(headers: Option<&FieldTable>) -> Counts {
        let count = |name| header_int(headers, name).and_then(|n| u32::try_from(n).ok());
        Counts {
            delivery_count: count(HEADER_DELIVERY_COUNT).unwrap_or(0),
            acquired_count: count(HEADER_ACQUIRED_COUNT),
            carried: count(HEADER_FAILURES).unwrap_or(0),
        }
    }

    /// Failed deliveries of the message so far, all copies together: what
    /// the delivery limit is about.
    pub fn failures(&self) -> u32 {
        self.carried.saturating_add(self.delivery_count)
    }

    /// This delivery's attempt number (1 on the first delivery): the
    /// failures so far, or every hand-out where the broker counts those.
    pub fn attempt(&self) -> u32 {
        let before = self
            .acquired_count
            .unwrap_or(0)
            .max(self.delivery_count)
            .saturating_add(self.carried);
        before.saturating_add(1)
    }

    /// Whether the broker showed that a `basic.nack` with requeue leaves
    /// the count alone (4.3 and later send `x-acquired-count`).
    pub fn nack_is_uncounted(&self) -> bool {
        self.acquired_count.is_some()
    }
}

/// What the consume loop does with a delivery before its handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Run the handler.
    Handle,
    /// Its failures are past the delivery limit (possible only through a
    /// copy's carried failures: the broker dead-letters the rest itself):
    /// dead-letter it as `delivery_limit` without handling it.
    DeadLetter,
}

/// [`Admission`] of a delivery with `counts` from a queue whose delivery
/// limit is `limit` (`None`: unknown, always handled). Like the broker, a
/// message may fail `limit` times and is given up on past that.
pub fn admit(counts: Counts, limit: Option<u32>) -> Admission {
    match limit {
        Some(limit) if counts.failures() > limit => Admission::DeadLetter,
        _ => Admission::Handle,
    }
}

/// Why a delivery goes back to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Return {
    /// The attempt failed (the handler panicked, or its dead letter could
    /// not be published): it counts toward the delivery limit, so a message
    /// that always fails ends in the dead-letter queue.
    Failed,
    /// Not the message's fault (`Verdict::Retry`: shutdown while the
    /// delivery was held through database trouble, a lease held by another
    /// consumer): it never counts toward the delivery limit.
    GiveBack,
}

/// How a delivery goes back to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// `basic.reject` with requeue: counted by every version (3.10–4.2
    /// count every return, 4.3+ count a reject).
    Reject,
    /// `basic.nack` with requeue: not counted by 4.3+ (only chosen when
    /// the delivery shows it came from such a broker).
    Nack,
    /// Publish a copy carrying `failures` (confirmed), then ack the
    /// original: counted by no version. Should the copy fail, the delivery
    /// is nacked (which brokers before 4.3 count).
    Copy {
        /// What the copy carries in `x-oncehook-failures`.
        failures: u32,
    },
}

/// How a delivery with `counts` goes back for `why`.
pub fn requeue(counts: Counts, why: Return) -> Requeue {
    match why {
        Return::Failed => Requeue::Reject,
        Return::GiveBack if counts.nack_is_uncounted() => Requeue::Nack,
        Return::GiveBack => Requeue::Copy {
            failures: counts.failures(),
        },
    }
}

/// The headers of a requeued copy: the message's own, without the broker's
/// counters (the copy is a new message to the broker; a stale counter would
/// be read as its own), with `failures` (left out when 0) and the routing
/// key the message was published with (the copy goes to its queue through
/// the default exchange, under the queue's name).
pub fn copy_headers(headers: Option<&FieldTable>, routing_key: &str, failures: u32) -> FieldTable {
    let mut kept: BTreeMap<ShortString, AMQPValue> = headers
        .map(|h| {
            h.into_iter()
                .filter(|(k, _)| {
                    ![
                        HEADER_DELIVERY_COUNT,
                        HEADER_ACQUIRED_COUNT,
                        HEADER_FAILURES,
                        HEADER_ROUTING_KEY,
                    ]
                    .contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    if failures > 0 {
        kept.insert(
            HEADER_FAILURES.into(),
            AMQPValue::LongLongInt(i64::from(failures)),
        );
    }
    kept.insert(
        HEADER_ROUTING_KEY.into(),
        AMQPValue::LongString(routing_key.into()),
    );
    FieldTable::from(kept)
}

/// The routing key a delivery was first published with: a requeued copy
/// (delivered from the default exchange, `exchange` empty) keeps it in
/// `x-oncehook-routing-key`; any other delivery has its own.
pub fn original_routing_key<'a>(
    exchange: &str,
    routing_key: &'a str,
    headers: Option<&'a FieldTable>,
) -> &'a str {
    if !exchange.is_empty() {
        return routing_key;
    }
    match headers.and_then(|h| h.inner().get(HEADER_ROUTING_KEY)) {
        Some(AMQPValue::LongString(s)) => std::str::from_utf8(s.as_bytes()).unwrap_or(routing_key),
        Some(AMQPValue::ShortString(s)) => s.as_str(),
        _ => routing_key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, i64)]) -> FieldTable {
        let mut h = FieldTable::default();
        for (k, v) in pairs {
            h.insert((*k).into(), AMQPValue::LongLongInt(*v));
        }
        h
    }

    /// RabbitMQ 3.10–4.2: only `x-delivery-count`, counting every return.
    fn before_4_3(returns: i64) -> FieldTable {
        headers(&[(HEADER_DELIVERY_COUNT, returns)])
    }

    /// RabbitMQ 4.3+: failed deliveries in `x-delivery-count`, hand-outs in
    /// `x-acquired-count`.
    fn from_4_3(failed: i64, acquired: i64) -> FieldTable {
        headers(&[
            (HEADER_DELIVERY_COUNT, failed),
            (HEADER_ACQUIRED_COUNT, acquired),
        ])
    }

    #[test]
    fn counts_read_both_header_sets() {
        assert_eq!(Counts::from_headers(None), Counts::default());
        let old = Counts::from_headers(Some(&before_4_3(3)));
        assert_eq!(
            old,
            Counts {
                delivery_count: 3,
                acquired_count: None,
                carried: 0
            }
        );
        assert_eq!((old.failures(), old.attempt()), (3, 4));
        assert!(!old.nack_is_uncounted());

        // Two failures and five nacks: six hand-outs before this one.
        let new = Counts::from_headers(Some(&from_4_3(2, 7)));
        assert_eq!(new.failures(), 2, "nacks are not failures");
        assert_eq!(new.attempt(), 8, "every hand-out is an attempt");
        assert!(new.nack_is_uncounted());

        // A requeued copy carries the failures of the copies before it.
        let mut copy = from_4_3(1, 1);
        copy.insert(HEADER_FAILURES.into(), AMQPValue::LongInt(4));
        let copy = Counts::from_headers(Some(&copy));
        assert_eq!((copy.failures(), copy.attempt()), (5, 6));

        // A header the broker never writes like that is no count at all.
        let odd = headers(&[(HEADER_DELIVERY_COUNT, -1)]);
        assert_eq!(Counts::from_headers(Some(&odd)).failures(), 0);
    }

    #[test]
    fn a_failed_attempt_is_rejected_which_every_version_counts() {
        for h in [None, Some(before_4_3(2)), Some(from_4_3(2, 9))] {
            let counts = Counts::from_headers(h.as_ref());
            assert_eq!(requeue(counts, Return::Failed), Requeue::Reject, "{h:?}");
        }
    }

    #[test]
    fn a_give_back_is_nacked_only_where_the_broker_shows_a_nack_is_not_counted() {
        // 4.3+ (x-acquired-count present): a nack leaves the count alone.
        let new = Counts::from_headers(Some(&from_4_3(1, 3)));
        assert_eq!(requeue(new, Return::GiveBack), Requeue::Nack);
        // 3.x–4.2 count every return: a copy takes its place, carrying the
        // failures so far (every return counted so far, there).
        let old = Counts::from_headers(Some(&before_4_3(2)));
        assert_eq!(
            requeue(old, Return::GiveBack),
            Requeue::Copy { failures: 2 }
        );
        // A first delivery does not say how the broker counts: a copy.
        assert_eq!(
            requeue(Counts::default(), Return::GiveBack),
            Requeue::Copy { failures: 0 }
        );
    }

    #[test]
    fn only_failures_past_the_limit_are_dead_lettered_before_handling() {
        let at = |h: FieldTable| Counts::from_headers(Some(&h));
        // The broker lets a message fail `limit` times.
        assert_eq!(admit(at(before_4_3(5)), Some(5)), Admission::Handle);
        assert_eq!(admit(at(before_4_3(6)), Some(5)), Admission::DeadLetter);
        // Nacks (acquired only) never bring a message to the limit.
        assert_eq!(admit(at(from_4_3(0, 100)), Some(5)), Admission::Handle);
        assert_eq!(admit(at(from_4_3(6, 6)), Some(5)), Admission::DeadLetter);
        // Carried failures count with the copy's own.
        let mut copy = before_4_3(2);
        copy.insert(HEADER_FAILURES.into(), AMQPValue::LongLongInt(4));
        assert_eq!(admit(at(copy.clone()), Some(5)), Admission::DeadLetter);
        assert_eq!(admit(at(copy), Some(6)), Admission::Handle);
        // No known limit: the broker's alone.
        assert_eq!(admit(at(before_4_3(1000)), None), Admission::Handle);
    }

    #[test]
    fn a_copy_drops_the_broker_counters_and_keeps_the_rest() {
        let mut h = from_4_3(2, 5);
        h.insert(HEADER_FAILURES.into(), AMQPValue::LongLongInt(1));
        h.insert("traceparent".into(), AMQPValue::LongString("00-ab".into()));
        h.insert(
            HEADER_ROUTING_KEY.into(),
            AMQPValue::LongString("stale".into()),
        );
        let copy = copy_headers(Some(&h), "razorpay.payment.captured", 3);
        let keys: Vec<&str> = copy.inner().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["traceparent", HEADER_FAILURES, HEADER_ROUTING_KEY]);
        let counts = Counts::from_headers(Some(&copy));
        assert_eq!(
            counts,
            Counts {
                delivery_count: 0,
                acquired_count: None,
                carried: 3
            }
        );
        assert_eq!(
            original_routing_key("", "oncehook.events", Some(&copy)),
            "razorpay.payment.captured"
        );
        let none = copy_headers(None, "k", 0);
        assert!(none.inner().get(HEADER_FAILURES).is_none(), "0 is left out");
    }

    #[test]
    fn only_a_copy_from_the_default_exchange_takes_its_routing_key_from_the_header() {
        let mut h = FieldTable::default();
        h.insert(
            HEADER_ROUTING_KEY.into(),
            AMQPValue::LongString("stripe.charge.succeeded".into()),
        );
        assert_eq!(
            original_routing_key("oncehook.events", "payu.success", Some(&h)),
            "payu.success"
        );
        assert_eq!(
            original_routing_key("", "oncehook.events", Some(&h)),
            "stripe.charge.succeeded"
        );
        assert_eq!(
            original_routing_key("", "oncehook.events", None),
            "oncehook.events"
        );
    }
}
