use std::time::Duration;

use super::*;
use crate::config::testing::{load, load_env, refused};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn endpoint_toml(extra: &str) -> String {
    format!(
        "[[notify.endpoint]]\nname = \"shop\"\nurl = \"http://127.0.0.1:9/hooks\"\nsecret = \"${{SHOP_SECRET}}\"\n{extra}"
    )
}

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").notify;
    assert!(c.endpoints.is_empty());
    let mins: Vec<u64> = c.retry_schedule.iter().map(|d| d.as_secs()).collect();
    assert_eq!(mins, [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000]);
    assert_eq!(c.timeout, Duration::from_secs(10));
    assert_eq!(c.concurrency, 4);
    assert_eq!(c.retry_after(1), Some(Duration::from_secs(5)));
    assert_eq!(c.retry_after(7), Some(Duration::from_secs(36_000)));
    assert_eq!(c.retry_after(8), None);
    assert_eq!(c.retry_after(0), None);
}

#[test]
fn endpoints_come_from_the_file_with_their_secrets_from_the_environment() {
    let toml = endpoint_toml("events = [\"order.paid\", \"order.refund*\"]\n");
    let c = load(&toml, &[("SHOP_SECRET", SECRET)])
        .expect("file")
        .notify;
    let e = &c.endpoints[0];
    assert_eq!(
        (e.name.as_str(), e.url.as_str()),
        ("shop", "http://127.0.0.1:9/hooks")
    );
    assert_eq!(e.secrets.len(), 1);
    assert_eq!(e.secrets[0].expose(), &SECRET["whsec_".len()..]);
    assert!(e.wants("order.paid") && e.wants("order.refunded"));
    assert!(!e.wants("order.cancelled"));
    // Left out, the events are every order event.
    let c = load(&endpoint_toml(""), &[("SHOP_SECRET", SECRET)])
        .expect("file")
        .notify;
    assert!(c.endpoints[0].wants("order.payment_failed"));
    // During a rotation: two secrets, each signs.
    let two = format!("{SECRET} whsec_{}", "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY");
    let c = load(&endpoint_toml(""), &[("SHOP_SECRET", &two)])
        .expect("file")
        .notify;
    assert_eq!(c.endpoints[0].secrets.len(), 2);
}

#[test]
fn the_schedule_is_a_list_in_the_file_or_a_comma_separated_variable() {
    let c = load("[notify]\nretry_schedule = [\"1s\", \"2m\"]\n", &[])
        .expect("file")
        .notify;
    assert_eq!(
        c.retry_schedule,
        [Duration::from_secs(1), Duration::from_secs(120)]
    );
    let c = load("", &[(ENV_NOTIFY_RETRY_SCHEDULE, "5s, 5m,30m")])
        .expect("env")
        .notify;
    assert_eq!(
        c.retry_schedule,
        [
            Duration::from_secs(5),
            Duration::from_secs(300),
            Duration::from_secs(1_800)
        ]
    );
    let c = load(
        "",
        &[(ENV_NOTIFY_TIMEOUT, "2s"), (ENV_NOTIFY_CONCURRENCY, "9")],
    )
    .expect("env")
    .notify;
    assert_eq!((c.timeout, c.concurrency), (Duration::from_secs(2), 9));
}

/// A file, its variables and a text the refusal must contain.
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);

#[test]
fn endpoints_that_cannot_work_refuse_to_start_naming_the_field() {
    let cases: &[Case<'_>] = &[
        (&endpoint_toml(""), &[], "SHOP_SECRET"),
        (
            &endpoint_toml(""),
            &[("SHOP_SECRET", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")],
            "whsec_",
        ),
        (&endpoint_toml(""), &[("SHOP_SECRET", "whsec_!!")], "base64"),
        (
            "[[notify.endpoint]]\nname = \"shop\"\nurl = \"ftp://x/\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            &[],
            "http://",
        ),
        (
            "[[notify.endpoint]]\nname = \"s p\"\nurl = \"http://x/\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            &[],
            "notify.endpoint[0].name",
        ),
        (
            &endpoint_toml("events = [\"Order Paid\"]\n"),
            &[("SHOP_SECRET", SECRET)],
            "globs",
        ),
        (
            &format!("{}{}", endpoint_toml(""), endpoint_toml("")),
            &[("SHOP_SECRET", SECRET)],
            "another endpoint",
        ),
        ("[notify]\nretry_schedule = \"5s,soon\"\n", &[], "soon"),
        ("[notify]\nconcurrency = 0\n", &[], "concurrency"),
    ];
    for (toml, vars, expected) in cases {
        let text = refused(toml, vars);
        assert!(text.contains(expected), "{toml:?}: {text}");
        assert!(
            !text.contains("MfKQ9r8GKYqr"),
            "a secret in an error: {text}"
        );
    }
}

#[test]
fn globs_match_runs_of_any_characters() {
    assert!(glob_matches("order.*", "order.paid"));
    assert!(glob_matches("*", "order.paid"));
    assert!(glob_matches("*.paid", "order.paid"));
    assert!(glob_matches("order.*_*", "order.needs_refund"));
    assert!(!glob_matches("order.*_*", "order.paid"));
    assert!(!glob_matches("order.paid", "order.paid.x"));
    assert!(!glob_matches("order.*", "orders.paid"));
}
