use std::time::Duration;

use super::*;
use crate::config::testing::{File, load, load_env, refused};
use crate::config::{ENV_AMQP_PREFIX, ENV_PREFETCH};

#[test]
fn defaults_without_file() {
    let s = load_env(&[]).expect("defaults");
    assert_eq!(s.broker.prefix, "oncehook");
    assert!(s.ingest.sources.is_empty());
    assert!(s.into_ingest().is_err());
}

#[test]
fn env_wins_over_file_over_defaults() {
    let mut file = File::new("[broker]\nprefix = \"fromfile\"\n[worker]\nprefetch = 3\n");
    let c = file.load().expect("file");
    assert_eq!(
        (c.broker.prefix.as_str(), c.worker.prefetch),
        ("fromfile", 3)
    );
    assert_eq!(
        c.mail.prefetch, 16,
        "the default stays where the file says nothing"
    );
    let c = file.set(ENV_AMQP_PREFIX, "fromenv").load().expect("env");
    assert_eq!(c.broker.prefix, "fromenv");
    let c = file.set(ENV_AMQP_PREFIX, "").load().expect("empty env");
    assert_eq!(c.broker.prefix, "fromfile", "an empty variable is unset");
}

#[test]
fn sections_and_older_flat_keys_both_read() {
    let c = load(
        "delivery_limit = 9\n[broker]\nprefix = \"sectioned\"\n[worker]\nunlinked_ttl = \"15m\"\n[mail]\nprefetch = 4\n",
        &[],
    )
    .expect("config");
    assert_eq!(c.broker.prefix, "sectioned");
    assert_eq!(c.broker.delivery_limit, 9);
    assert_eq!(c.worker.unlinked_ttl, Duration::from_secs(900));
    assert_eq!((c.worker.prefetch, c.mail.prefetch), (16, 4));
    assert!(format!("{c:?}").contains("[redacted]"));
}

#[test]
fn a_flat_key_shared_by_sections_sets_each_and_the_environment_still_wins() {
    let c = load("prefetch = 6\namqp_prefix = \"flat\"\n", &[]).expect("flat");
    assert_eq!((c.worker.prefetch, c.mail.prefetch), (6, 6));
    assert_eq!(c.broker.prefix, "flat");
    let c = load("prefetch = 6\n", &[(ENV_PREFETCH, "2")]).expect("env");
    assert_eq!((c.worker.prefetch, c.mail.prefetch), (2, 2));
}

#[test]
fn wrong_types_and_unknown_keys_are_named() {
    let text = refused("[worker]\nprefetch = \"lots\"\n", &[]);
    assert!(
        text.contains("worker.prefetch") && text.contains(ENV_PREFETCH),
        "{text}"
    );
    let text = refused("[worker]\nprefetsh = 3\n", &[]);
    assert!(text.contains("prefetsh"), "{text}");
    let text = refused("[workers]\nprefetch = 3\n", &[]);
    assert!(text.contains("workers"), "{text}");
    let text = refused("[worker.batch]\nsise = 3\n", &[]);
    assert!(text.contains("sise"), "{text}");
}

#[test]
fn numbers_may_be_written_as_text() {
    let c = load("[worker]\nprefetch = \"12\"\n", &[]).expect("text number");
    assert_eq!(c.worker.prefetch, 12);
    let c = load_env(&[(ENV_PREFETCH, " 12 ")]).expect("spaces around a number");
    assert_eq!(c.worker.prefetch, 12);
}

#[test]
fn a_toml_syntax_error_names_the_place_not_the_line() {
    let text = refused(
        "[[source]]\nname = \"s\"\ngateway = \"stripe\"\nsecrets = [\"whsec_TOPSECRET\" oops]\n",
        &[],
    );
    assert!(text.contains("line 4"), "{text}");
    assert!(
        !text.contains("TOPSECRET"),
        "the line (and its secret) is not quoted: {text}"
    );
}

#[test]
fn a_missing_file_is_named() {
    let text = load_env(&[(ENV_CONFIG, "/nonexistent/oncehook.toml")])
        .expect_err("no file")
        .to_string();
    assert!(text.contains("/nonexistent/oncehook.toml"), "{text}");
}

#[test]
fn line_and_column_are_one_based() {
    assert_eq!(line_column("a = 1\nbb = x", 11), (2, 6));
    assert_eq!(line_column("x", 0), (1, 1));
}
