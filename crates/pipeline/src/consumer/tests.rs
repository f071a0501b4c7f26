//! The worker's decisions, tested with the in-memory queue (no broker, no
//! database: these paths never reach Postgres).

use std::sync::Arc;
use std::time::Duration;

use oncehook_common::consume::dispatch;
use oncehook_common::consume::memory::{MemoryDeadLetters, MemoryDelivery, Settled};

use super::*;
use crate::{EffectError, Effects};

/// An effect never reached: the paths under test decide before the
/// pipeline's transaction.
struct Unreached;

impl Effect for Unreached {
    async fn apply(
        &self,
        _conn: &mut sqlx::PgConnection,
        _deliveries: &[&Delivery],
    ) -> Result<Effects, EffectError> {
        Err(EffectError::Permanent(Rejection::new(
            oncehook_common::dead_letter::DeadLetterKind::Database,
            "the effect was reached",
        )))
    }
}

fn worker() -> Arc<Worker<Unreached>> {
    worker_with(&[])
}

fn worker_with(vars: &[(&str, &str)]) -> Arc<Worker<Unreached>> {
    let settings = oncehook_common::Config::offline(vars)
        .expect("settings")
        .into_worker();
    // Never connected: the paths under test decide before touching Postgres.
    let pool = Pooled::open(&settings.database, 1).expect("lazy pool");
    Worker::new(pool, Unreached, settings, Shutdown::new())
}

#[tokio::test]
async fn an_undecodable_envelope_is_dead_lettered_as_bad_envelope_then_acked() {
    let sink = MemoryDeadLetters::default();
    let delivery = MemoryDelivery::new(b"not an envelope".to_vec())
        .with_message_id("razorpay:evt_1")
        .with_delivery_count(1);
    dispatch(worker(), delivery.clone(), Arc::new(sink.clone())).await;
    assert_eq!(delivery.settled(), [Settled::Acked]);
    let published = sink.published();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].kind, "bad_envelope");
    assert!(
        published[0].error.contains("razorpay:evt_1"),
        "{published:?}"
    );
    assert_eq!(published[0].attempts, 2);
    assert_eq!(published[0].body, b"not an envelope");
}

#[tokio::test]
async fn an_undecodable_envelope_whose_dead_letter_fails_is_requeued() {
    let sink = MemoryDeadLetters::failing();
    let delivery = MemoryDelivery::new(b"{}".to_vec());
    dispatch(worker(), delivery.clone(), Arc::new(sink.clone())).await;
    assert_eq!(delivery.settled(), [Settled::Requeued]);
    assert!(sink.published().is_empty());
}

/// The decision table: ProcessError → what happens to the message.
#[test]
fn process_errors_map_to_verdicts() {
    let rejection = |kind| {
        ProcessError::Permanent(Rejection::new(
            oncehook_common::dead_letter::DeadLetterKind::parse(kind),
            format!("{kind} for evt_1"),
        ))
    };
    for kind in ["unknown_order", "unparseable", "database"] {
        match next_step(rejection(kind)) {
            Step::Settle(Verdict::DeadLetter { kind: k, error, .. }) => {
                assert_eq!(k, kind);
                assert_eq!(error, format!("{kind} for evt_1"));
            }
            other => panic!("{kind}: {other:?}"),
        }
    }
    // A database error that no retry fixes is permanent too.
    match next_step(ProcessError::from(sqlx::Error::RowNotFound)) {
        Step::Settle(Verdict::DeadLetter { kind, .. }) => assert_eq!(kind, "database"),
        other => panic!("{other:?}"),
    }
    // Postgres unreachable: pause, burning no attempt.
    for err in [
        sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed,
        sqlx::Error::Io(std::io::Error::other("connection reset")),
    ] {
        let label = err.to_string();
        assert!(
            matches!(
                next_step(ProcessError::from(err)),
                Step::PauseForDatabase(_)
            ),
            "{label}"
        );
    }
    // Transient but not a lost connection: back off within the budget.
    assert!(matches!(
        next_step(ProcessError::from(sqlx::Error::Protocol("garbled".into()))),
        Step::Backoff(_)
    ));
}

#[tokio::test]
async fn the_delivery_retry_budget_comes_from_the_settings() {
    assert_eq!(worker().retry.max_attempts, Some(5), "the default");
    let worker = worker_with(&[("ONCEHOOK_MAX_ATTEMPTS", "3")]);
    assert_eq!(worker.retry.max_attempts, Some(3));
    assert_eq!(
        worker.retry.backoff().count(),
        2,
        "retries after the first attempt"
    );
    assert_eq!(worker.retry.min_delay, Duration::from_millis(50));
}
