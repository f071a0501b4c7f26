//! What the pipeline does when something is wrong that is not the sender's
//! request: no broker (503, not ready), an event for an order nobody has
//! (dead-lettered with the reason), an email that cannot be sent (marked
//! failed and dead-lettered, the order still paid).

use oncehook_common::dead_letter::{DeadLetterKind, DeadLetteredBy};
use oncehook_e2e::{PipelineSpec, Shop, TestEnv, WAIT, broker, eventually, shop};
use oncehook_gateways::Gateway;

#[tokio::test]
async fn ingest_without_a_broker_answers_503_and_is_not_ready() {
    let mut env = TestEnv::new().await;
    let dead_port = oncehook_e2e::free_port();
    let amqp = format!("amqp://guest:guest@127.0.0.1:{dead_port}/%2f");
    let (mut ingest, url) = env.spawn_ingest(&[("ONCEHOOK_AMQP_URL", amqp.as_str())]);
    let metrics = ingest.metrics_url().to_owned();
    env.wait_ready(&metrics, "/healthz").await;

    let status = |u: String| {
        let http = env.http.clone();
        async move { http.get(u).send().await.map(|r| r.status().as_u16()).ok() }
    };
    assert_eq!(status(format!("{metrics}/readyz")).await, Some(503));
    // The public port: the load balancer's check says "not now"; metrics and
    // readiness are not served there at all.
    assert_eq!(status(format!("{url}/healthz")).await, Some(503));
    assert_eq!(status(format!("{url}/readyz")).await, Some(404));
    assert_eq!(status(format!("{url}/metrics")).await, Some(404));
    let spec = env.spec("order_6", "pay_F", "evt_F", 50_000);
    let d = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    for _ in 0..3 {
        let (status, body) = env.post(&url, "razorpay", &d).await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("broker_unavailable"), "{body}");
    }
    assert!(
        ingest.is_running(),
        "ingest must not crash without a broker"
    );
    assert!(
        !ingest.log_text().contains("panicked"),
        "no panic in the log"
    );
}

#[tokio::test]
async fn captured_event_for_an_unknown_order_is_dead_lettered_with_the_reason() {
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    let d = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_missing", "pay_G", "evt_G", 50_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &d).await.0, 200);
    let dead_queue = format!("{}.dead", env.prefix);
    eventually("dead letter", WAIT, || async {
        (broker::depth(&dead_queue).await == Some(1)).then_some(())
    })
    .await;

    let dead = broker::peek(&dead_queue).await;
    assert_eq!(dead.len(), 1);
    let record = &dead[0].record;
    assert_eq!(record.kind, DeadLetterKind::UnknownOrder);
    assert_eq!(record.by, DeadLetteredBy::Oncehook);
    let error = &record.error;
    assert!(
        error.contains("evt_G") && error.contains("order_missing"),
        "names the event and the order: {error}"
    );
    assert_eq!(record.origin, Some(format!("{}.events", env.prefix)));
    assert!(record.failed_at.is_some(), "{dead:?}");
    assert!(record.dead_id.is_some(), "{dead:?}");
    assert_eq!(dead[0].message_id.as_deref(), Some("razorpay:evt_G"));
    // Nothing committed.
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks").await,
        0
    );
    assert_eq!(env.count("SELECT count(*) FROM payments").await, 0);
    assert_eq!(broker::events_depth(&env.prefix).await, Some(0));
}

#[tokio::test]
async fn an_email_that_cannot_be_sent_is_marked_failed_and_dead_lettered_while_the_order_stays_paid()
 {
    let mut env = TestEnv::new().await;
    Shop::basket("order_8").seed(&env.pool).await;
    let nowhere = format!("smtp://127.0.0.1:{}", oncehook_e2e::free_port());
    env.set_env("ONCEHOOK_SMTP_URL", &nowhere);
    env.set_env("ONCEHOOK_MAX_ATTEMPTS", "2");
    let app = env.pipeline().await;

    let d = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_8", "pay_H", "evt_H", 50_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &d).await.0, 200);
    let dead_queue = format!("{}.dead", env.prefix);
    eventually("email dead-lettered", WAIT, || async {
        (broker::depth(&dead_queue).await == Some(1)).then_some(())
    })
    .await;

    let dead = broker::peek(&dead_queue).await;
    assert_eq!(dead[0].kind(), &DeadLetterKind::SmtpFailed);
    assert_eq!(
        dead[0].record.origin,
        Some(format!("{}.emails", env.prefix))
    );
    let (attempts, failed, error): (i32, bool, Option<String>) =
        sqlx::query_as("SELECT attempts, failed_at IS NOT NULL, last_error FROM email_outbox")
            .fetch_one(&env.pool)
            .await
            .expect("outbox row");
    assert!(failed, "row marked failed");
    assert_eq!(
        attempts, 2,
        "ONCEHOOK_MAX_ATTEMPTS=2 attempts, then it gave up"
    );
    assert!(
        error
            .unwrap_or_default()
            .contains("Order order_8 confirmed"),
        "error names the email"
    );
    assert_eq!(
        shop::order_status(&env.pool, "order_8").await,
        "paid",
        "email trouble never unpays an order"
    );
}
