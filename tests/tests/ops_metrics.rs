//! The Prometheus endpoints of every process after traffic (what each
//! counted of it, the documented metrics, refusals and dead-letter kinds
//! counted from zero, the release each runs in `oncehook_build_info`, only
//! the load balancer's check on ingest's public port), and the queue
//! gauges: a queue deleted under the worker does not stop the outbox relay.

use std::time::Duration;

use oncehook_common::dead_letter::{DeadLetterKind as Kind, Writer};
use oncehook_e2e::ops::dead_queue;
use oncehook_e2e::{PipelineSpec, Shop, TestEnv, WAIT, broker, eventually, shop};

#[tokio::test]
async fn metrics_endpoints_expose_the_documented_metrics_after_traffic() {
    let mut env = TestEnv::new().await;
    Shop::own_product("order_metrics").seed(&env.pool).await;
    let (ingest, url) = env.start_ingest().await;
    let ingest_metrics = ingest.metrics_url().to_owned();
    // The public port keeps only the load balancer's check.
    for (path, expected) in [("/healthz", 200), ("/metrics", 404), ("/readyz", 404)] {
        let status = env
            .http
            .get(format!("{url}{path}"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .ok();
        assert_eq!(status, Some(expected), "public {path}");
    }
    let (_worker, worker_metrics) = env
        .start_consumer_with_metrics("oncehook-worker", &[])
        .await;
    let (_mailer, mailer_metrics) = env
        .start_consumer_with_metrics("oncehook-mailer", &[])
        .await;

    env.post_ok(
        &url,
        "razorpay",
        &env.captured("order_metrics", "pay_Q1", "evt_Q1"),
    )
    .await;
    shop::wait_paid(&env.pool, "order_metrics").await;
    eventually("email sent", WAIT, || async {
        let emails = shop::emails(&env.pool, "order_metrics").await;
        (!emails.is_empty() && emails.iter().all(|e| e.1)).then_some(())
    })
    .await;

    // Ingest counted the one delivery it accepted, under its source.
    let body = scrape_until(
        &env,
        &ingest_metrics,
        "the accepted delivery counted",
        |body| {
            sample(
                body,
                "oncehook_ingest_requests_total",
                &[("source", "razorpay"), ("outcome", "accepted")],
            ) == Some(1.0)
        },
    )
    .await;
    assert!(
        has(&body, "oncehook_ingest_request_duration_seconds_bucket"),
        "{body}"
    );
    assert_names_the_release(&body);
    assert_eq!(
        sample(
            &body,
            "oncehook_ingest_requests_total",
            &[("source", "razorpay"), ("outcome", "invalid_signature")],
        ),
        Some(0.0),
        "refusals are counted from zero:\n{body}"
    );

    // The worker applied it; the dashboards' other series are there.
    let body = scrape_until(&env, &worker_metrics, "the applied event counted", |body| {
        sample(
            body,
            "oncehook_worker_events_total",
            &[("gateway", "razorpay"), ("outcome", "applied")],
        ) == Some(1.0)
    })
    .await;
    for name in [
        "oncehook_worker_transaction_duration_seconds_bucket",
        "oncehook_outbox_backlog",
        "oncehook_queue_messages",
    ] {
        assert!(has(&body, name), "{name}:\n{body}");
    }
    assert_eq!(
        sample(
            &body,
            "oncehook_worker_events_total",
            &[("gateway", "payu"), ("outcome", "dead")],
        ),
        Some(0.0),
        "every gateway's dead letters are counted from zero:\n{body}"
    );
    assert_counts_every_kind_from_zero(&body, Writer::Worker);
    assert_names_the_release(&body);

    // The mailer counted every email it sent.
    let sent = shop::emails(&env.pool, "order_metrics").await.len() as f64;
    let body = scrape_until(&env, &mailer_metrics, "the sent emails counted", |body| {
        sample(body, "oncehook_mailer_emails_total", &[("outcome", "sent")]) == Some(sent)
    })
    .await;
    assert_counts_every_kind_from_zero(&body, Writer::Mailer);
    assert_names_the_release(&body);
}

/// `oncehook_build_info` is 1 under the workspace's version (the e2e
/// crate's own is `version.workspace = true`) and a commit label.
fn assert_names_the_release(body: &str) {
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        sample(body, "oncehook_build_info", &[("version", version)]),
        Some(1.0),
        "oncehook_build_info{{version=\"{version}\"}} 1:\n{body}"
    );
    assert!(
        body.lines()
            .any(|l| l.starts_with("oncehook_build_info{") && l.contains("commit=\"")),
        "oncehook_build_info has a commit label:\n{body}"
    );
}

/// The value of the sample of `name` whose labels include every one of
/// `labels`, in a Prometheus text exposition.
fn sample(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let labelled = rest.is_empty() || rest.starts_with('{');
            let matches = labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            (labelled && matches).then(|| value.parse().ok()).flatten()
        })
}

/// Whether the exposition has a series called `name`.
fn has(body: &str, name: &str) -> bool {
    body.lines().any(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(['{', ' ']))
    })
}

/// Scrapes `{base}/metrics` until `ready` holds for it; its text.
async fn scrape_until(
    env: &TestEnv,
    base: &str,
    what: &str,
    ready: impl Fn(&str) -> bool,
) -> String {
    let endpoint = format!("{base}/metrics");
    eventually(&format!("{what} at {endpoint}"), WAIT, || async {
        let body = env
            .http
            .get(&endpoint)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        ready(&body).then_some(body)
    })
    .await
}

/// Every kind `writer` dead-letters with is counted, from zero.
fn assert_counts_every_kind_from_zero(body: &str, writer: Writer) {
    for kind in Kind::written_by(writer) {
        let line = format!("oncehook_dead_letters_total{{kind=\"{kind}\"}} 0");
        assert!(body.lines().any(|l| l == line), "{line}:\n{body}");
    }
}

#[tokio::test]
async fn a_deleted_queue_does_not_stop_the_outbox_relay() {
    use lapin::options::QueueDeleteOptions;
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_delete(
        dead_queue(&env).as_str().into(),
        QueueDeleteOptions::default(),
    )
    .await
    .expect("delete the dead-letter queue");
    let _ = conn.close(200, "bye".into()).await;
    // Let at least one gauge pass (every 5 s) fail its passive declare.
    tokio::time::sleep(Duration::from_secs(7)).await;

    Shop::own_product("order_relay").seed(&env.pool).await;
    env.post_ok(
        &app.url,
        "razorpay",
        &env.captured("order_relay", "pay_relay", "evt_relay"),
    )
    .await;
    shop::wait_paid(&env.pool, "order_relay").await;
    eventually("the confirmation email published", WAIT, || async {
        (env.count("SELECT count(*) FROM email_outbox WHERE published_at IS NOT NULL")
            .await
            > 0)
        .then_some(())
    })
    .await;
    // Same session throughout: a restarted one would have declared the queue again.
    assert_eq!(broker::depth(&dead_queue(&env)).await, None);
    let log = app.worker().log_text();
    assert!(!log.contains("reconnecting"), "{log}");
}
