use crate::config::testing::{load, load_env};

#[test]
fn ingest_needs_a_source_and_gets_no_database() {
    let err = load_env(&[])
        .expect("defaults")
        .into_ingest()
        .expect_err("no source");
    assert!(err.to_string().contains("[[source]]"), "{err}");
    let c = load(
        "[[source]]\nname = \"s\"\ngateway = \"razorpay\"\nsecrets = [\"rzp\"]\n",
        &[],
    )
    .expect("one source");
    let ingest = c.into_ingest().expect("ingest settings");
    assert_eq!(ingest.ingest.sources.len(), 1);
    assert_eq!(
        ingest.metrics_addr,
        Some(crate::config::INGEST_METRICS_ADDR)
    );
}

#[test]
fn ingest_with_a_sources_feed_needs_no_file_source_but_the_key_ring() {
    let feed = [
        (crate::config::ENV_SOURCES_FEED_URL, "http://api:8082"),
        (crate::config::ENV_SOURCES_FEED_KEY, "ohk_feed"),
    ];
    let err = load_env(&feed)
        .expect("a feed")
        .into_ingest()
        .expect_err("no key ring");
    assert!(err.to_string().contains("secrets.keys"), "{err}");
    let ring = crate::sealed::KeyRing::generate_key_line("k1").expect("a key line");
    let mut with_ring = feed.to_vec();
    with_ring.push((crate::config::ENV_SECRET_KEYS, ring.as_str()));
    let ingest = load_env(&with_ring)
        .expect("a feed and a ring")
        .into_ingest()
        .expect("no file source is fine with a feed");
    assert!(ingest.ingest.sources.is_empty());
    assert!(ingest.secrets.keys.is_some());
}

#[test]
fn worker_and_mailer_take_their_own_sections() {
    let c = load_env(&[
        ("ONCEHOOK_WORKER_BATCH_SIZE", "4"),
        ("ONCEHOOK_MAIL_CONCURRENCY", "3"),
    ])
    .expect("config");
    assert_eq!(c.clone().into_worker().worker.batch_size, 4);
    assert_eq!(c.into_mailer().mail.concurrency, 3);
}

#[test]
fn the_api_takes_its_own_section_and_listener() {
    let c = load_env(&[("ONCEHOOK_API_MAX_ITEMS", "7")]).expect("config");
    let api = c.into_api();
    assert_eq!(api.api.max_items, 7);
    assert_eq!(api.metrics_addr, Some(crate::config::API_METRICS_ADDR));
}
