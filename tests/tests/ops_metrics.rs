//! The Prometheus endpoints of every process after traffic (the documented
//! metrics, dead-letter kinds counted from zero, only the load balancer's
//! check on ingest's public port), and the queue gauges: a queue deleted
//! under the worker does not stop the outbox relay.

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

    for (base, names) in [
        (
            ingest_metrics.as_str(),
            &[
                "oncehook_ingest_requests_total",
                "oncehook_ingest_request_duration_seconds_bucket",
            ][..],
        ),
        (
            worker_metrics.as_str(),
            &[
                "oncehook_worker_events_total",
                "oncehook_worker_transaction_duration_seconds_bucket",
                "oncehook_outbox_backlog",
                "oncehook_queue_messages",
            ][..],
        ),
        (
            mailer_metrics.as_str(),
            &["oncehook_mailer_emails_total"][..],
        ),
    ] {
        let endpoint = format!("{base}/metrics");
        let body = eventually(&format!("{names:?} at {endpoint}"), WAIT, || async {
            let body = env
                .http
                .get(&endpoint)
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            names
                .iter()
                .all(|n| body.lines().any(|l| l.starts_with(n)))
                .then_some(body)
        })
        .await;
        if base == url {
            assert!(
                body.lines()
                    .any(|l| l.starts_with("oncehook_ingest_requests_total")
                        && l.contains("outcome=\"accepted\"")),
                "{body}"
            );
        }
        if base == mailer_metrics {
            assert!(
                body.lines()
                    .any(|l| l.starts_with("oncehook_mailer_emails_total") && l.contains("sent")),
                "{body}"
            );
        }
        // Every kind a service dead-letters with is counted from zero.
        let writer = if base == worker_metrics {
            Some(Writer::Worker)
        } else if base == mailer_metrics {
            Some(Writer::Mailer)
        } else {
            None
        };
        for kind in writer.into_iter().flat_map(Kind::written_by) {
            let line = format!("oncehook_dead_letters_total{{kind=\"{kind}\"}} 0");
            assert!(body.lines().any(|l| l == line), "{line}:\n{body}");
        }
        if base == worker_metrics {
            let dead_payu = |l: &&str| {
                l.starts_with("oncehook_worker_events_total{")
                    && l.contains("gateway=\"payu\"")
                    && l.contains("outcome=\"dead\"")
            };
            assert!(body.lines().any(|l| dead_payu(&l)), "{body}");
        }
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
