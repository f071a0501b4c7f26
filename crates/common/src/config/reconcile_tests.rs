use std::time::Duration;

use super::*;
use crate::config::testing::{load, load_env, refused, refused_env};

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").reconcile;
    assert_eq!(
        c,
        ReconcileConfig {
            interval: Duration::from_secs(300),
            after: Duration::from_secs(600),
            horizon: Duration::from_secs(7 * 86_400),
            paid_interval: Duration::from_secs(3_600),
            paid_horizon: Duration::from_secs(7 * 86_400),
            calls_per_run: 1_000,
            calls_per_second: 5,
            timeout: Duration::from_secs(10),
        }
    );
}

#[test]
fn the_file_and_the_environment_set_it_and_the_environment_wins() {
    let toml = "[reconcile]\ninterval = \"1m\"\nafter = \"2m\"\nhorizon = \"3d\"\n\
                paid_interval = \"2h\"\npaid_horizon = \"14d\"\n\
                limits = { calls_per_run = 50, calls_per_second = 2, timeout = \"3s\" }\n";
    let c = load(toml, &[]).expect("file").reconcile;
    assert_eq!(c.interval, Duration::from_secs(60));
    assert_eq!(c.after, Duration::from_secs(120));
    assert_eq!(c.horizon, Duration::from_secs(3 * 86_400));
    assert_eq!(c.paid_interval, Duration::from_secs(2 * 3_600));
    assert_eq!(c.paid_horizon, Duration::from_secs(14 * 86_400));
    assert_eq!((c.calls_per_run, c.calls_per_second), (50, 2));
    assert_eq!(c.timeout, Duration::from_secs(3));
    let c = load(
        toml,
        &[
            (ENV_RECONCILE_INTERVAL, "30s"),
            (ENV_RECONCILE_CALLS_PER_SECOND, "9"),
            (ENV_RECONCILE_PAID_INTERVAL, "90m"),
        ],
    )
    .expect("file and env")
    .reconcile;
    assert_eq!(c.paid_interval, Duration::from_secs(90 * 60));
    assert_eq!(c.interval, Duration::from_secs(30));
    assert_eq!(c.calls_per_second, 9);
}

#[test]
fn values_that_cannot_work_refuse_to_start_naming_the_key() {
    let text = refused_env(&[(ENV_RECONCILE_AFTER, "8d")]);
    assert!(
        text.contains("reconcile.after")
            && text.contains(ENV_RECONCILE_AFTER)
            && text.contains("horizon"),
        "{text}"
    );
    let text = refused_env(&[(ENV_RECONCILE_CALLS_PER_SECOND, "0")]);
    assert!(text.contains(ENV_RECONCILE_CALLS_PER_SECOND), "{text}");
    let text = refused_env(&[(ENV_RECONCILE_INTERVAL, "soon")]);
    assert!(text.contains(ENV_RECONCILE_INTERVAL), "{text}");
    let text = refused("[reconcile]\nevery = \"5m\"\n", &[]);
    assert!(text.contains("every"), "{text}");
}

#[test]
fn a_paid_interval_of_zero_is_refused_with_its_key() {
    let text = refused("[reconcile]\npaid_interval = \"0s\"\n", &[]);
    assert!(text.contains("paid_interval"), "{text}");
    assert!(text.contains("greater than zero"), "{text}");
}
