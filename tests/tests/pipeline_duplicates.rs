//! The walking skeleton's promise, end to end through the real binaries:
//! a signed payment.captured, delivered any number of times — again later,
//! thirty copies at once to three workers, its signed body re-posted under
//! fresh event ids (Razorpay) or idempotency keys (Cashfree) — makes exactly
//! one paid order, one stock decrement per item and one email.

use std::time::Duration;

use oncehook_e2e::env::with_header;
use oncehook_e2e::{PipelineSpec, Shop, SmtpSink, TestEnv, WAIT, broker, eventually, shop};
use oncehook_gateways::Gateway;

#[tokio::test]
async fn same_captured_event_posted_twice_has_one_effect() {
    let mut env = TestEnv::new().await;
    Shop::basket("order_1").seed(&env.pool).await;
    let app = env.pipeline().await;

    let spec = env.spec("order_1", "pay_A1", "evt_A1", 50_000);
    let delivery = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let (status, body) = env.post(&app.url, "razorpay", &delivery).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"accepted\""), "{body}");
    shop::wait_paid(&env.pool, "order_1").await;
    shop::wait_emails_sent(&env.pool, "order_1", 1).await;

    // The gateway retries later (it did not see our 200, say).
    let (status, _) = env.post(&app.url, "razorpay", &delivery).await;
    assert_eq!(status, 200);
    eventually("second copy counted", WAIT, || async {
        let hooks = shop::webhooks(&env.pool, "order_1").await;
        (hooks.len() == 1 && hooks[0].2 == 2).then_some(())
    })
    .await;
    env.wait_events_drained().await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    assert_eq!(
        shop::payments(&env.pool, "order_1").await,
        vec![("captured".to_owned(), None)]
    );
    assert_eq!(shop::order_status(&env.pool, "order_1").await, "paid");
    assert_eq!(shop::stock(&env.pool, "MUG").await, 8);
    assert_eq!(shop::stock(&env.pool, "TSHIRT").await, 9);
    let files = env.mail_files();
    assert_eq!(files.len(), 1, "exactly one email file: {files:?}");
    let eml = std::fs::read_to_string(&files[0]).expect("read eml");
    assert!(eml.contains("To: order_1@example.com"), "{eml}");
    assert!(eml.contains("Subject: Order order_1 confirmed"), "{eml}");
    // The Message-ID is the one derived from the outbox row (lettre would
    // invent a random one otherwise), and a resend of the row carries it again.
    let outbox_id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM email_outbox")
        .fetch_one(&env.pool)
        .await
        .expect("one outbox row");
    let expected = format!("Message-ID: <{outbox_id}@oncehook>");
    assert!(eml.contains(&expected), "{expected} in {eml}");
    sqlx::query("UPDATE email_outbox SET sent_at = NULL, published_at = NULL")
        .execute(&env.pool)
        .await
        .expect("mark the row for a resend");
    eventually("the row sent again", WAIT, || async {
        (env.mail_files().len() == 2).then_some(())
    })
    .await;
    for file in env.mail_files() {
        let eml = std::fs::read_to_string(&file).expect("read eml");
        assert!(eml.contains(&expected), "{expected} in {eml}");
    }
}

#[tokio::test]
async fn thirty_concurrent_copies_with_three_workers_have_one_effect() {
    let mut env = TestEnv::new().await;
    Shop::basket("order_2").seed(&env.pool).await;
    let smtp = SmtpSink::start().await;
    let app = env
        .pipeline_with(PipelineSpec::default().workers(3).smtp(&smtp.url()))
        .await;

    let spec = env.spec("order_2", "pay_B1", "evt_B1", 50_000);
    let delivery = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let results = env
        .post_concurrently(&app.url, "razorpay", &delivery, 30)
        .await;
    assert!(results.iter().all(|(s, _)| *s == 200), "{results:?}");

    shop::wait_paid(&env.pool, "order_2").await;
    shop::wait_emails_sent(&env.pool, "order_2", 1).await;
    eventually("all 30 copies seen", WAIT, || async {
        let hooks = shop::webhooks(&env.pool, "order_2").await;
        (hooks.len() == 1 && hooks[0].2 == 30).then_some(())
    })
    .await;
    env.wait_events_drained().await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    assert_eq!(shop::payments(&env.pool, "order_2").await.len(), 1);
    assert_eq!(shop::stock(&env.pool, "MUG").await, 8);
    assert_eq!(shop::stock(&env.pool, "TSHIRT").await, 9);
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1, "exactly one email over SMTP");
    assert!(
        messages[0].contains("Subject: Order order_2 confirmed"),
        "{}",
        messages[0]
    );
    assert!(env.mail_files().is_empty(), "SMTP configured: no files");
}

/// The one `processed_webhooks` row of `order_ref`: (event id, copies under
/// that id, copies of its body under other event ids).
async fn only_delivery_of(env: &TestEnv, order_ref: &str) -> Option<(String, i32, i32)> {
    sqlx::query_as::<_, (String, i32, i32)>(
        "SELECT event_id, deliveries, body_redeliveries FROM processed_webhooks WHERE order_ref = $1",
    )
    .bind(order_ref)
    .fetch_all(&env.pool)
    .await
    .ok()
    .and_then(|rows| match rows.as_slice() {
        [row] => Some(row.clone()),
        _ => None,
    })
}

/// The one effect of order `order_ref` (seeded by [`Shop::basket`]): one captured
/// payment, stock moved once, one confirmation email.
async fn assert_paid_once(env: &TestEnv, order_ref: &str) {
    assert_eq!(shop::order_status(&env.pool, order_ref).await, "paid");
    assert_eq!(
        shop::payments(&env.pool, order_ref).await,
        vec![("captured".to_owned(), None)]
    );
    assert_eq!(shop::stock(&env.pool, "MUG").await, 8);
    assert_eq!(shop::stock(&env.pool, "TSHIRT").await, 9);
    assert_eq!(
        shop::emails(&env.pool, order_ref).await.len(),
        1,
        "one confirmation email"
    );
}

/// The worker's `oncehook_worker_redelivered_bodies_total` samples, by source.
async fn redelivered_bodies(metrics: &str) -> Vec<(String, String)> {
    let body = oncehook_e2e::metrics::scrape(metrics).await;
    body.lines()
        .filter_map(|l| l.strip_prefix("oncehook_worker_redelivered_bodies_total{source=\""))
        .filter_map(|l| l.split_once("\"} "))
        .map(|(source, n)| (source.to_owned(), n.to_owned()))
        .collect()
}

/// Razorpay signs neither a timestamp nor its `x-razorpay-event-id`
/// header: a captured genuine delivery re-posted under fresh event ids, any
/// time later, passes the signature check. Each copy is counted on the
/// first delivery of that signed body instead of filling the dedup table.
#[tokio::test]
async fn a_razorpay_body_replayed_under_fresh_event_ids_is_counted_on_its_one_delivery() {
    const REPLAYS: usize = 4;
    let mut env = TestEnv::new().await;
    Shop::basket("order_replay").seed(&env.pool).await;
    let (_ingest, url) = env.start_ingest().await;
    let (_worker, metrics) = env
        .start_consumer_with_metrics("oncehook-worker", &[])
        .await;

    let spec = env.spec("order_replay", "pay_R1", "evt_R1", 50_000);
    let genuine = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    assert_eq!(env.post(&url, "razorpay", &genuine).await.0, 200);
    shop::wait_paid(&env.pool, "order_replay").await;

    let replays: Vec<_> = (0..REPLAYS)
        .map(|n| with_header(&genuine, "x-razorpay-event-id", &format!("evt_forged_{n}")))
        .collect();
    // All at once, so the copies also meet inside one group commit.
    let answers = env.post_all(&url, "razorpay", replays, REPLAYS).await;
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");
    // The gateway's own retry (same id, same body) is still a duplicate by id.
    assert_eq!(env.post(&url, "razorpay", &genuine).await.0, 200);

    let expected = Some(("evt_R1".to_owned(), 2, REPLAYS as i32));
    eventually("the copies counted on the one delivery", WAIT, || async {
        (only_delivery_of(&env, "order_replay").await == expected).then_some(())
    })
    .await;
    env.wait_events_drained().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks").await,
        1,
        "one dedup row for one signed body"
    );
    assert_eq!(only_delivery_of(&env, "order_replay").await, expected);
    assert_paid_once(&env, "order_replay").await;
    assert_eq!(
        broker::depth(&format!("{}.dead", env.prefix)).await,
        Some(0),
        "replays are absorbed, never dead-lettered"
    );

    // Operators see the count: in `trace`, as text and as JSON.
    let (code, text, err) = env.ctl(&["trace", "order", "order_replay"]).await;
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("REDELIVERED"), "{text}");
    assert!(
        text.contains("same signed body under another event id"),
        "{text}"
    );
    let (code, json, err) = env.ctl(&["--json", "trace", "order", "order_replay"]).await;
    assert_eq!(code, 0, "{json}{err}");
    let story: serde_json::Value = serde_json::from_str(&json).expect("trace JSON");
    assert_eq!(story["webhooks"][0]["event_id"], "evt_R1", "{story}");
    assert_eq!(
        story["webhooks"][0]["body_redeliveries"], REPLAYS,
        "{story}"
    );
    let (code, text, err) = env.ctl(&["trace", "event", "razorpay", "evt_R1"]).await;
    assert_eq!(code, 0, "{text}{err}");
    assert!(
        text.contains(&format!(
            "{REPLAYS} copies of its signed body under other event ids"
        )),
        "{text}"
    );

    // And in the worker's metrics, per source, every source from zero.
    let samples = redelivered_bodies(&metrics).await;
    assert!(
        samples.contains(&("razorpay".to_owned(), REPLAYS.to_string())),
        "{samples:?}"
    );
    assert!(
        samples.contains(&("cashfree".to_owned(), "0".to_owned())),
        "counters exist at zero before the first replay: {samples:?}"
    );
}

/// Cashfree signs its timestamp but not `x-idempotency-key`: within the
/// 300 s window the genuine delivery and copies under fresh keys, all
/// arriving at once, are one delivery with the copies counted on it.
#[tokio::test]
async fn a_cashfree_body_replayed_under_fresh_idempotency_keys_is_counted_on_its_one_delivery() {
    const REPLAYS: usize = 5;
    let mut env = TestEnv::new().await;
    Shop::basket("order_cf_replay").seed(&env.pool).await;
    let app = env
        .pipeline_with(PipelineSpec::default().workers(2).without_mailer())
        .await;

    let spec = env.spec("order_cf_replay", "pay_cf_R1", "idem_R1", 50_000);
    let genuine = env.sign(Gateway::Cashfree, "PAYMENT_SUCCESS_WEBHOOK", &spec);
    let mut copies = vec![genuine.clone()];
    copies.extend(
        (0..REPLAYS)
            .map(|n| with_header(&genuine, "x-idempotency-key", &format!("idem_forged_{n}"))),
    );
    let answers = env
        .post_all(&app.url, "cashfree", copies, REPLAYS + 1)
        .await;
    assert!(answers.iter().all(|(s, _)| *s == 200), "{answers:?}");

    // Whichever copy was processed first is the delivery; the others are
    // counted on it.
    let row = eventually("the copies counted on one delivery", WAIT, || async {
        only_delivery_of(&env, "order_cf_replay")
            .await
            .filter(|(_, deliveries, others)| (*deliveries, *others) == (1, REPLAYS as i32))
    })
    .await;
    env.wait_events_drained().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks").await,
        1,
        "one dedup row for one signed body"
    );
    assert_eq!(only_delivery_of(&env, "order_cf_replay").await, Some(row));
    assert_paid_once(&env, "order_cf_replay").await;

    let (code, json, err) = env
        .ctl(&["--json", "trace", "order", "order_cf_replay"])
        .await;
    assert_eq!(code, 0, "{json}{err}");
    let story: serde_json::Value = serde_json::from_str(&json).expect("trace JSON");
    assert_eq!(
        story["webhooks"][0]["body_redeliveries"], REPLAYS,
        "{story}"
    );
}
