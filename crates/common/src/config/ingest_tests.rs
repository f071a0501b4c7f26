use super::*;
use crate::config::testing::{load, load_env, refused_env};

#[test]
fn defaults() {
    let c = load_env(&[]).expect("defaults").ingest;
    assert_eq!(c.addr, "127.0.0.1:8080".parse().expect("addr"));
    assert_eq!((c.workers, c.body_limit_bytes), (None, 262_144));
    assert!(c.sources.is_empty());
}

#[test]
fn ingest_workers_are_actix_default_unless_set() {
    let c = load("[ingest]\nworkers = 3\n", &[]).expect("from the file");
    assert_eq!(c.ingest.workers, Some(3));
    let text = refused_env(&[(ENV_INGEST_WORKERS, "0")]);
    assert!(text.contains(ENV_INGEST_WORKERS), "{text}");
}

#[test]
fn the_body_limit_is_a_number_in_its_table_or_flat() {
    let c = load("[ingest]\nlimits = { body_limit_bytes = 1024 }\n", &[]).expect("table");
    assert_eq!(c.ingest.body_limit_bytes, 1024);
    let c = load("body_limit_bytes = 2048\n", &[]).expect("older flat key");
    assert_eq!(c.ingest.body_limit_bytes, 2048);
    let text = refused_env(&[(ENV_BODY_LIMIT, "lots")]);
    assert!(
        text.contains("ingest.limits.body_limit_bytes") && text.contains(ENV_BODY_LIMIT),
        "{text}"
    );
}

#[test]
fn the_address_is_a_socket_address() {
    let c = load_env(&[(ENV_INGEST_ADDR, "0.0.0.0:0")]).expect("any port");
    assert_eq!(c.ingest.addr.port(), 0);
    let text = refused_env(&[(ENV_INGEST_ADDR, "localhost")]);
    assert!(
        text.contains(ENV_INGEST_ADDR) && text.contains("localhost"),
        "{text}"
    );
}

#[test]
fn the_sources_feed_needs_its_url_and_key_together() {
    assert!(
        load_env(&[])
            .expect("defaults")
            .ingest
            .sources_feed
            .is_none()
    );
    let c = load_env(&[
        (ENV_SOURCES_FEED_URL, "http://api:8082/"),
        (ENV_SOURCES_FEED_KEY, "ohk_feed"),
    ])
    .expect("a feed");
    let feed = c.ingest.sources_feed.expect("the feed");
    assert_eq!(feed.url, "http://api:8082");
    assert_eq!(feed.every, Duration::from_secs(1));
    assert!(
        !format!("{feed:?}").contains("ohk_feed"),
        "the key is not printed"
    );
    for (env, says) in [
        (
            vec![(ENV_SOURCES_FEED_URL, "http://api:8082")],
            "sources:feed",
        ),
        (
            vec![(ENV_SOURCES_FEED_KEY, "ohk_feed")],
            "without the feed's URL",
        ),
        (
            vec![
                (ENV_SOURCES_FEED_URL, "api:8082"),
                (ENV_SOURCES_FEED_KEY, "k"),
            ],
            "http://",
        ),
        (
            vec![
                (ENV_SOURCES_FEED_URL, "http://api"),
                (ENV_SOURCES_FEED_KEY, "k"),
                (ENV_SOURCES_FEED_EVERY, "5m"),
            ],
            "at most 60s",
        ),
    ] {
        let text = refused_env(&env);
        assert!(text.contains(says), "{env:?}: {text}");
        assert!(!text.contains("ohk_feed"), "{text}");
    }
}
