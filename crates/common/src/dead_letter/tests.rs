//! The dead-letter module: kind names pinned, and headers written, read back
//! and replayed as `oncehookctl dlq` and the console see them.

use std::collections::BTreeSet;

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use time::OffsetDateTime;
use time::macros::datetime;

use super::read::stable_id;
use super::*;
use crate::amqp::{header_int, header_string};
use crate::consume::counting::HEADER_FAILURES;
use crate::topology::{HEADER_ACQUIRED_COUNT, HEADER_DELIVERY_COUNT, HEADER_SOURCE};

fn why(kind: DeadLetterKind) -> DeadLetter {
    DeadLetter {
        kind,
        error: "no order o1".to_owned(),
        origin: "oh.events".to_owned(),
        attempts: 3,
        trace_parent: None,
    }
}

#[test]
fn the_kind_names_never_change() {
    // A wire format: letters already in a queue and operators' filters use them.
    let names: Vec<&str> = DeadLetterKind::KNOWN.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "bad_envelope",
            "unknown_gateway",
            "unparseable",
            "missing_payment_id",
            "missing_refund_id",
            "missing_amount",
            "missing_order_ref",
            "unknown_order",
            "database",
            "bad_message",
            "unknown_outbox_row",
            "smtp_failed",
            "delivery_limit",
            "unknown",
        ]
    );
}

#[test]
fn every_known_name_parses_back_to_its_kind() {
    for kind in DeadLetterKind::KNOWN {
        assert_eq!(&DeadLetterKind::parse(kind.as_str()), kind);
        assert_eq!(
            DeadLetterKind::from_known(kind.as_str()).as_ref(),
            Some(kind)
        );
        assert_eq!(kind.known_name(), Some(kind.as_str()));
        assert_eq!(kind.label(), kind.as_str());
    }
}

#[test]
fn an_unknown_name_is_kept_as_written() {
    let kind = DeadLetterKind::from("refund_exceeds_payment");
    assert!(matches!(kind, DeadLetterKind::Other(_)), "{kind:?}");
    assert_eq!(kind.as_str(), "refund_exceeds_payment");
    assert_eq!(kind.known_name(), None);
    assert!(kind.writers().is_empty());
    assert_eq!(DeadLetterKind::from_known("refund_exceeds_payment"), None);
    // A known name never becomes `Other`, however it arrives.
    assert_eq!(
        DeadLetterKind::from("unknown_order".to_owned()),
        DeadLetterKind::UnknownOrder
    );
    assert_eq!(kind, "refund_exceeds_payment");
    assert_eq!(
        serde_json::to_value(&kind).unwrap(),
        "refund_exceeds_payment"
    );
}

#[test]
fn each_service_dead_letters_with_its_own_kinds() {
    let of = |w| {
        DeadLetterKind::written_by(w)
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of(Writer::Mailer),
        [
            "database",
            "bad_message",
            "unknown_outbox_row",
            "smtp_failed",
            "delivery_limit"
        ]
    );
    assert_eq!(of(Writer::Broker), ["delivery_limit"]);
    assert!(of(Writer::Worker).contains(&"unknown_order"));
    // A requeued copy past the limit is dead-lettered by the consume loop.
    assert!(of(Writer::Worker).contains(&"delivery_limit"));
    assert!(!of(Writer::Worker).contains(&"smtp_failed"));
}

/// The kinds and who writes them, as docs/operations.md's table lists them.
fn documented_kinds() -> Vec<(String, String)> {
    let doc = include_str!("../../../../docs/operations.md");
    let table = doc
        .split("### Dead-letter error kinds")
        .nth(1)
        .expect("the kinds section")
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2);
    let mut rows = Vec::new();
    for line in table {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        for name in cells[1].split('/').map(|n| n.trim().trim_matches('`')) {
            rows.push((name.to_owned(), cells[2].to_owned()));
        }
    }
    rows
}

#[test]
fn the_operations_guide_lists_every_kind_and_who_writes_it() {
    let documented: BTreeSet<(String, String)> = documented_kinds().into_iter().collect();
    let known: BTreeSet<(String, String)> = DeadLetterKind::KNOWN
        .iter()
        .map(|k| {
            let writers: Vec<&str> = k
                .writers()
                .iter()
                .map(|w| match w {
                    Writer::Worker => "worker",
                    Writer::Mailer => "mailer",
                    Writer::Broker => "broker",
                })
                .collect();
            let from = if writers.is_empty() {
                "—".to_owned()
            } else {
                writers.join(", ")
            };
            (k.as_str().to_owned(), from)
        })
        .collect();
    assert_eq!(documented, known);
}

#[test]
fn written_headers_read_back() {
    let mut own = FieldTable::default();
    own.insert(HEADER_SOURCE.into(), AMQPValue::LongString("rzp".into()));
    let at = datetime!(2024-05-01 10:42:07 UTC);
    let headers =
        why(DeadLetterKind::UnknownOrder).headers(Some(&own), "razorpay.payment.captured", at);
    assert_eq!(
        header_string(Some(&headers), HEADER_SOURCE).as_deref(),
        Some("rzp")
    );
    assert_eq!(
        header_string(Some(&headers), HEADER_ERROR_KIND).as_deref(),
        Some("unknown_order")
    );

    let record = Record::read(Some(&headers));
    assert_eq!(record.kind, DeadLetterKind::UnknownOrder);
    assert_eq!(record.error, "no order o1");
    assert_eq!(record.by, DeadLetteredBy::Oncehook);
    assert_eq!(record.failed_at, Some(at));
    assert_eq!(
        record.failed_at_text.as_deref(),
        Some("2024-05-01T10:42:07Z")
    );
    assert_eq!(record.origin.as_deref(), Some("oh.events"));
    assert_eq!(
        record.routing_key.as_deref(),
        Some("razorpay.payment.captured")
    );
    assert_eq!(record.attempts, Some(3));
    assert_eq!(record.replays, 0);
    let id = record.dead_id.clone().expect("a dead id");
    assert_eq!(id.len(), 12);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(record.letter_id(&BasicProperties::default(), b"{}"), id);
}

#[test]
fn each_dead_letter_gets_its_own_id() {
    let at = OffsetDateTime::now_utc();
    let a = why(DeadLetterKind::Database).headers(None, "k", at);
    let b = why(DeadLetterKind::Database).headers(None, "k", at);
    assert_ne!(
        header_string(Some(&a), HEADER_DEAD_ID),
        header_string(Some(&b), HEADER_DEAD_ID)
    );
}

#[test]
fn a_kind_this_version_does_not_know_reads_back_as_written() {
    let mut h = FieldTable::default();
    h.insert(
        HEADER_ERROR_KIND.into(),
        AMQPValue::LongString("future_kind".into()),
    );
    h.insert(
        HEADER_ERROR.into(),
        AMQPValue::LongString("from a newer worker".into()),
    );
    let record = Record::read(Some(&h));
    assert_eq!(record.kind.as_str(), "future_kind");
    assert_eq!(record.by, DeadLetteredBy::Oncehook);
    let again = why(record.kind).headers(None, "k", OffsetDateTime::now_utc());
    assert_eq!(
        header_string(Some(&again), HEADER_ERROR_KIND).as_deref(),
        Some("future_kind")
    );
}

/// Headers the broker writes when the delivery limit dead-letters a message.
fn broker_headers() -> FieldTable {
    let mut death = FieldTable::default();
    death.insert(
        "reason".into(),
        AMQPValue::LongString("delivery_limit".into()),
    );
    death.insert("queue".into(), AMQPValue::LongString("oh.events".into()));
    death.insert("time".into(), AMQPValue::Timestamp(1_714_560_127));
    death.insert(
        "routing-keys".into(),
        AMQPValue::FieldArray(
            vec![AMQPValue::LongString("razorpay.payment.captured".into())].into(),
        ),
    );
    let mut h = FieldTable::default();
    h.insert(
        "x-death".into(),
        AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()),
    );
    h
}

#[test]
fn a_letter_the_broker_wrote_reads_from_x_death() {
    let record = Record::read(Some(&broker_headers()));
    assert_eq!(record.kind, DeadLetterKind::DeliveryLimit);
    assert_eq!(record.by, DeadLetteredBy::Broker);
    assert!(record.error.contains("delivery limit"), "{}", record.error);
    assert_eq!(record.origin.as_deref(), Some("oh.events"));
    assert_eq!(
        record.routing_key.as_deref(),
        Some("razorpay.payment.captured")
    );
    assert_eq!(record.failed_at, Some(datetime!(2024-05-01 10:42:07 UTC)));
    assert_eq!(record.dead_id, None);
}

#[test]
fn a_letter_without_a_dead_id_gets_a_stable_one() {
    let props = BasicProperties::default()
        .with_message_id("razorpay:evt_1".into())
        .with_correlation_id("r1".into());
    let by_broker = Record::read(Some(&broker_headers()));
    let id = by_broker.letter_id(&props, b"{}");
    // Pinned: IDs printed by `dlq list` must not change between versions.
    assert_eq!(id, "78848b7c9887");
    assert_eq!(id, by_broker.letter_id(&props, b"{}"));
    assert_ne!(id, by_broker.letter_id(&props, b"{ }"));

    let mut h = FieldTable::default();
    h.insert(
        HEADER_ERROR_KIND.into(),
        AMQPValue::LongString("unknown_order".into()),
    );
    h.insert(
        HEADER_FAILED_AT.into(),
        AMQPValue::LongString("2024-05-01T10:42:07Z".into()),
    );
    let by_oncehook = Record::read(Some(&h)).letter_id(&props, b"{}");
    assert_eq!(by_oncehook.len(), 12);
    assert_ne!(
        by_oncehook, id,
        "oncehook's letters hash their failure time too"
    );
}

#[test]
fn nothing_recorded_reads_as_unrecorded() {
    let record = Record::read(None);
    assert_eq!(record.kind, DeadLetterKind::Unrecorded);
    assert_eq!(record.by, DeadLetteredBy::Broker);
    assert_eq!(record.error, "no error recorded");
}

#[test]
fn stable_id_separates_parts() {
    let a = stable_id(&[b"razorpay:evt_1", b"r1", b"{}"]);
    assert_eq!(a, "78848b7c9887");
    assert_ne!(a, stable_id(&[b"razorpay:evt_1r", b"1", b"{}"]));
}

#[test]
fn replay_strips_bookkeeping_and_counts_replays() {
    let mut h = FieldTable::default();
    for k in [
        HEADER_ERROR,
        HEADER_ERROR_KIND,
        HEADER_FAILED_AT,
        HEADER_ORIGIN,
        HEADER_ROUTING_KEY,
        HEADER_DEAD_ID,
        "x-first-death-queue",
        "x-last-death-reason",
    ] {
        h.insert(k.into(), AMQPValue::LongString("x".into()));
    }
    h.insert(HEADER_ATTEMPTS.into(), AMQPValue::LongLongInt(3));
    h.insert(HEADER_DELIVERY_COUNT.into(), AMQPValue::LongLongInt(7));
    // RabbitMQ 4.3's hand-out counter and a requeued copy's failures: a
    // replay starts counting afresh.
    h.insert(HEADER_ACQUIRED_COUNT.into(), AMQPValue::LongLongInt(9));
    h.insert(HEADER_FAILURES.into(), AMQPValue::LongLongInt(2));
    h.insert("x-death".into(), AMQPValue::FieldArray(Vec::new().into()));
    h.insert(HEADER_SOURCE.into(), AMQPValue::LongString("rzp".into()));
    h.insert(HEADER_REPLAYS.into(), AMQPValue::LongLongInt(1));
    let out = replay_headers(Some(&h));
    let keys: Vec<&str> = out.inner().keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, vec![HEADER_REPLAYS, HEADER_SOURCE]);
    assert_eq!(header_int(Some(&out), HEADER_REPLAYS), Some(2));
    assert_eq!(Record::read(Some(&out)).replays, 2);
}

#[test]
fn a_replay_count_put_back_on_rebuilt_headers_reads_back() {
    let mut h = FieldTable::default();
    h.insert(HEADER_SOURCE.into(), AMQPValue::LongString("payu".into()));
    assert_eq!(replays(Some(&h)), 0);
    let none = with_replays(Some(&h), 0);
    assert!(none.inner().get(HEADER_REPLAYS).is_none(), "0 is left out");
    let out = with_replays(Some(&h), 3);
    assert_eq!(replays(Some(&out)), 3);
    assert_eq!(Record::read(Some(&out)).replays, 3);
    assert_eq!(
        header_string(Some(&out), HEADER_SOURCE).as_deref(),
        Some("payu")
    );
    assert_eq!(replays(None), 0);
}

#[test]
fn a_letter_is_in_the_trace_of_the_handling_that_gave_up() {
    let mut message = FieldTable::default();
    let theirs = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let ours = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";
    message.insert("traceparent".into(), AMQPValue::LongString(theirs.into()));
    message.insert("tracestate".into(), AMQPValue::LongString("v=1".into()));
    let at = OffsetDateTime::UNIX_EPOCH;
    let kept = why(DeadLetterKind::UnknownOrder).headers(Some(&message), "rk", at);
    assert_eq!(
        header_string(Some(&kept), "traceparent").as_deref(),
        Some(theirs)
    );
    assert!(header_string(Some(&kept), "tracestate").is_some());
    let traced = DeadLetter {
        trace_parent: Some(ours.to_owned()),
        ..why(DeadLetterKind::UnknownOrder)
    };
    let headers = traced.headers(Some(&message), "rk", at);
    assert_eq!(
        header_string(Some(&headers), "traceparent").as_deref(),
        Some(ours)
    );
    assert_eq!(
        header_string(Some(&headers), "tracestate"),
        None,
        "not ours"
    );
    assert_eq!(
        header_string(Some(&headers), HEADER_ERROR).as_deref(),
        Some("no order o1"),
        "the record is written all the same"
    );
    // A replay moves it aside: a new trace, linked to the failure.
    let replayed = replay_headers(Some(&headers));
    assert_eq!(header_string(Some(&replayed), "traceparent"), None);
    assert_eq!(
        header_string(Some(&replayed), crate::otel::HEADER_FIRST_TRACEPARENT).as_deref(),
        Some(ours)
    );
}
