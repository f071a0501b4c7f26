//! The mailer's decisions, tested with the in-memory queue (no broker, no
//! database, no SMTP: these paths decide before any of them is needed).

use oncehook_common::consume::dispatch;
use oncehook_common::consume::memory::{MemoryDeadLetters, MemoryDelivery, Settled};

use super::*;

fn mailer() -> Arc<Mailer> {
    mailer_with(&[])
}

fn mailer_with(vars: &[(&str, &str)]) -> Arc<Mailer> {
    let settings = oncehook_common::Config::offline(vars)
        .expect("settings")
        .into_mailer();
    let pool = Pooled::open(&settings.database, 1).expect("lazy pool");
    let dir = std::env::temp_dir().join("oncehook-mailer-unit");
    let transport = Transport::files(dir);
    Mailer::new(pool, transport, settings, Shutdown::new())
}

#[tokio::test]
async fn an_unreadable_message_is_dead_lettered_as_bad_message_then_acked() {
    let sink = MemoryDeadLetters::default();
    let delivery = MemoryDelivery::new(b"{\"outbox_id\": 7}".to_vec()).with_message_id("email:x");
    dispatch(mailer(), delivery.clone(), Arc::new(sink.clone())).await;
    assert_eq!(delivery.settled(), [Settled::Acked]);
    let published = sink.published();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].kind, DeadLetterKind::BadMessage);
    assert!(published[0].error.contains("email:x"), "{published:?}");
    assert_eq!(published[0].attempts, 1);
}

#[tokio::test]
async fn an_unreadable_message_whose_dead_letter_fails_is_requeued() {
    let sink = MemoryDeadLetters::failing();
    let delivery = MemoryDelivery::new(b"garbage".to_vec());
    dispatch(mailer(), delivery.clone(), Arc::new(sink.clone())).await;
    assert_eq!(delivery.settled(), [Settled::Requeued]);
}

/// The decision table for a lease.
#[test]
fn leases_map_to_verdicts() {
    let id = Uuid::new_v4();
    match after_lease(id, Ok(Leasing::Missing)) {
        AfterLease::Settle(Verdict::DeadLetter { kind, error, .. }) => {
            assert_eq!(kind, DeadLetterKind::UnknownOutboxRow);
            assert!(error.contains(&id.to_string()), "{error}");
        }
        other => panic!("{other:?}"),
    }
    for skip in [Leasing::AlreadySent, Leasing::AlreadyFailed] {
        assert!(matches!(
            after_lease(id, Ok(skip)),
            AfterLease::Settle(Verdict::Ack)
        ));
    }
    assert!(matches!(
        after_lease(id, Ok(Leasing::Busy)),
        AfterLease::Busy
    ));
    assert!(matches!(
        after_lease(id, Err(sqlx::Error::PoolTimedOut)),
        AfterLease::Hold(_)
    ));
    // A database error no retry fixes dead-letters instead of spinning.
    match after_lease(id, Err(sqlx::Error::RowNotFound)) {
        AfterLease::Settle(Verdict::DeadLetter { kind, .. }) => {
            assert_eq!(kind, DeadLetterKind::Database)
        }
        other => panic!("{other:?}"),
    }
    let email = Email {
        outbox_id: id,
        to: "a@example.com".into(),
        subject: "s".into(),
        body: "b".into(),
        from: None,
    };
    match after_lease(id, Ok(Leasing::Leased(email))) {
        AfterLease::Send(email) => assert_eq!(email.outbox_id, id),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_send_retry_budget_comes_from_the_settings() {
    assert_eq!(mailer().retry.max_attempts, Some(5), "the default");
    let mailer = mailer_with(&[("ONCEHOOK_MAX_ATTEMPTS", "7")]);
    assert_eq!(mailer.retry.max_attempts, Some(7));
    assert_eq!(mailer.retry.min_delay, Duration::from_secs(1));
    assert_eq!(mailer.retry.max_delay, Duration::from_secs(30));
}
