use std::time::Duration;

use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").worker;
    assert_eq!((c.prefetch, c.retention_days), (16, 90));
    assert_eq!(c.retry.max_attempts, Some(5));
    assert_eq!(c.retention_interval, Duration::from_secs(3_600));
    assert_eq!(c.unlinked_ttl, Duration::from_secs(3_600));
    assert_eq!(c.fault_panic_order_ref, None);
}

#[test]
fn retention_days_are_bounded() {
    for bad in ["0", "3651", "4294967295"] {
        let err = refused_env(&[(ENV_RETENTION_DAYS, bad)]);
        assert!(err.contains(ENV_RETENTION_DAYS), "{bad}: {err}");
    }
    let ok = load_env(&[(ENV_RETENTION_DAYS, "3650")]).expect("3650 days");
    assert_eq!(ok.worker.retention_days, 3650);
    assert_eq!(
        (*RETENTION_DAYS.start(), *RETENTION_DAYS.end()),
        (1, 3650),
        "what oncehookctl retention --days accepts"
    );
}

#[test]
fn retention_runs_at_an_interval_of_at_least_a_second() {
    let c = load_env(&[(ENV_RETENTION_INTERVAL_SECS, "1")]).expect("one second");
    assert_eq!(c.worker.retention_interval, Duration::from_secs(1));
    let text = refused_env(&[(ENV_RETENTION_INTERVAL_SECS, "0")]);
    assert!(text.contains(ENV_RETENTION_INTERVAL_SECS), "{text}");
}

#[test]
fn batches_are_bounded_and_default_to_eight_deliveries() {
    let d = load_env(&[]).expect("defaults");
    assert_eq!(d.worker.batch_size, 8);
    for bad in ["0", "257"] {
        let err = refused_env(&[(ENV_WORKER_BATCH_SIZE, bad)]);
        assert!(err.contains(ENV_WORKER_BATCH_SIZE), "{bad}: {err}");
    }
    let off = load_env(&[(ENV_WORKER_BATCH_SIZE, "1")]).expect("group commit off");
    assert_eq!(off.worker.batch_size, 1);
    assert!(BATCH_SIZE.contains(&256));
}

#[test]
fn the_retired_linger_is_refused_by_name_with_its_release() {
    let expected =
        "worker.batch.linger_ms (ONCEHOOK_WORKER_BATCH_LINGER_MS) was removed in oncehook 0.5.0";
    for text in [
        refused_env(&[("ONCEHOOK_WORKER_BATCH_LINGER_MS", "2")]),
        refused("[worker.batch]\nsize = 8\nlinger_ms = 2\n", &[]),
        refused("[worker]\nbatch = { linger_ms = 0 }\n", &[]),
    ] {
        assert!(text.contains(expected), "{text}");
        assert!(
            text.contains("worker.batch.size"),
            "says what to do: {text}"
        );
    }
    // An empty variable is unset, as for every other key.
    load_env(&[("ONCEHOOK_WORKER_BATCH_LINGER_MS", "")]).expect("empty is unset");
}

#[test]
fn the_unlinked_ttl_is_a_duration_above_zero() {
    let c = load("[worker]\nunlinked_ttl = \"15m\"\n", &[]).expect("15m");
    assert_eq!(c.worker.unlinked_ttl, Duration::from_secs(900));
    for bad in ["0s", "soon"] {
        let text = refused("", &[(ENV_UNLINKED_TTL, bad)]);
        assert!(text.contains(ENV_UNLINKED_TTL), "{bad}: {text}");
    }
}

#[test]
fn prefetch_and_attempts_are_at_least_one() {
    for key in [ENV_PREFETCH, ENV_MAX_ATTEMPTS] {
        let text = refused_env(&[(key, "0")]);
        assert!(text.contains(key), "{text}");
    }
    let c = load_env(&[(ENV_MAX_ATTEMPTS, "7")]).expect("seven");
    assert_eq!(c.worker.retry.max_attempts, Some(7));
}

#[test]
fn the_fault_injection_is_off_when_empty() {
    let c = load("[worker]\nfault_panic_order_ref = \"\"\n", &[]).expect("empty");
    assert_eq!(c.worker.fault_panic_order_ref, None);
    let c = load_env(&[(ENV_FAULT_PANIC_ORDER_REF, "order_x")]).expect("set");
    assert_eq!(c.worker.fault_panic_order_ref.as_deref(), Some("order_x"));
}

#[test]
fn committers_are_their_own_setting_bounded_and_default_to_eight() {
    let d = load_env(&[]).expect("defaults");
    assert_eq!(d.worker.committers, 8);
    let one = load_env(&[(ENV_WORKER_COMMITTERS, "1"), (ENV_WORKER_BATCH_SIZE, "64")])
        .expect("one committer, big groups");
    assert_eq!((one.worker.committers, one.worker.batch_size), (1, 64));
    for bad in ["0", "257", "many"] {
        let err = refused_env(&[(ENV_WORKER_COMMITTERS, bad)]);
        assert!(err.contains(ENV_WORKER_COMMITTERS), "{bad}: {err}");
    }
    let file = load("[worker.batch]\ncommitters = 12\n", &[]).expect("from the file");
    assert_eq!(file.worker.committers, 12);
    let capped = load_env(&[(ENV_WORKER_COMMITTERS, "20"), (ENV_PREFETCH, "4")]).expect("capped");
    assert_eq!(capped.worker.committers, 4, "never more than the prefetch");
}
