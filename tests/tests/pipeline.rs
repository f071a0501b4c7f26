//! The walking skeleton's promise, end to end through the real binaries:
//! a signed Razorpay payment.captured, delivered any number of times, makes
//! exactly one paid order, one stock decrement per item and one email.

use std::time::Duration;

use oncehook_common::dead_letter::{DeadLetterKind, DeadLetteredBy};
use oncehook_e2e::{PipelineSpec, Shop, SmtpSink, TestEnv, broker, eventually, shop};
use oncehook_gateways::Gateway;

const WAIT: Duration = Duration::from_secs(30);

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

#[tokio::test]
async fn failed_then_captured_pays_once_and_records_the_failure() {
    let mut env = TestEnv::new().await;
    Shop::basket("order_3").seed(&env.pool).await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    let failed = env.sign(
        Gateway::Razorpay,
        "payment.failed",
        &env.spec("order_3", "pay_C1", "evt_C1", 50_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &failed).await.0, 200);
    eventually("failure recorded", WAIT, || async {
        (!shop::payments(&env.pool, "order_3").await.is_empty()).then_some(())
    })
    .await;
    assert_eq!(shop::order_status(&env.pool, "order_3").await, "pending");

    let captured = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_3", "pay_C2", "evt_C2", 50_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &captured).await.0, 200);
    shop::wait_paid(&env.pool, "order_3").await;
    // A late copy of the failure must not move the paid order back.
    assert_eq!(env.post(&app.url, "razorpay", &failed).await.0, 200);
    env.wait_events_drained().await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert_eq!(shop::order_status(&env.pool, "order_3").await, "paid");
    let payments = shop::payments(&env.pool, "order_3").await;
    assert_eq!(
        payments,
        vec![("failed".to_owned(), None), ("captured".to_owned(), None)]
    );
    assert_eq!(shop::stock(&env.pool, "MUG").await, 8);
    assert_eq!(shop::emails(&env.pool, "order_3").await.len(), 1);
}

#[tokio::test]
async fn authorized_captured_and_order_paid_for_one_payment_decrement_once() {
    let mut env = TestEnv::new().await;
    Shop::basket("order_4").seed(&env.pool).await;
    let app = env.pipeline().await;

    for (event, id) in [
        ("payment.authorized", "evt_D1"),
        ("payment.captured", "evt_D2"),
        ("order.paid", "evt_D3"),
    ] {
        let d = env.sign(
            Gateway::Razorpay,
            event,
            &env.spec("order_4", "pay_D", id, 50_000),
        );
        assert_eq!(env.post(&app.url, "razorpay", &d).await.0, 200, "{event}");
    }
    eventually("three events processed", WAIT, || async {
        (shop::webhooks(&env.pool, "order_4").await.len() == 3).then_some(())
    })
    .await;
    shop::wait_emails_sent(&env.pool, "order_4", 1).await;
    env.wait_events_drained().await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    assert_eq!(shop::order_status(&env.pool, "order_4").await, "paid");
    assert_eq!(
        shop::stock(&env.pool, "MUG").await,
        8,
        "stock decremented once"
    );
    assert_eq!(shop::stock(&env.pool, "TSHIRT").await, 9);
    // The three events may be processed concurrently: compare as a set.
    let mut statuses: Vec<String> = shop::payments(&env.pool, "order_4")
        .await
        .into_iter()
        .map(|p| p.0)
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        vec!["authorized", "captured"],
        "one captured payment row"
    );
    assert_eq!(env.mail_files().len(), 1, "one email");
}

#[tokio::test]
async fn bad_signatures_get_401_and_nothing_is_published() {
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let spec = env.spec("order_5", "pay_E", "evt_E", 50_000);
    let good = env.sign(Gateway::Razorpay, "payment.captured", &spec);

    let mut tampered = good.clone();
    oncehook_gateways::sample::tamper(&mut tampered);
    let wrong_secret = oncehook_gateways::sample::build(
        Gateway::Razorpay,
        "payment.captured",
        &spec,
        "not-the-secret",
    )
    .expect("sample");
    let mut missing = good.clone();
    missing.headers = missing
        .headers
        .iter()
        .filter(|(n, _)| *n != "x-razorpay-signature")
        .collect();

    for (what, d) in [
        ("tampered body", &tampered),
        ("wrong secret", &wrong_secret),
        ("missing header", &missing),
    ] {
        let (status, body) = env.post(&url, "razorpay", d).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(
            body.contains("\"error\""),
            "{what}: JSON error body: {body}"
        );
    }
    // Unknown source and an oversized body are refused too.
    assert_eq!(env.post(&url, "paypal", &good).await.0, 404);
    let mut huge = good.clone();
    huge.body = vec![b' '; 300 * 1024];
    assert_eq!(env.post_fresh(&url, "razorpay", &huge).await.0, 413);

    // A signature header that cannot be read, and a PayU body that is not a readable form: 400.
    let mut garbled = env.sign(Gateway::Stripe, "captured", &spec);
    garbled.headers = garbled
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n,
                if n == "stripe-signature" {
                    "nonsense".to_owned()
                } else {
                    v.to_owned()
                },
            )
        })
        .collect();
    let (status, body) = env.post(&url, "stripe", &garbled).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("malformed_signature"), "{body}");
    let mut not_a_form = env.sign(Gateway::Payu, "success", &spec);
    not_a_form.body = b"txnid=\xff\xfe&hash=00".to_vec();
    assert_eq!(env.post(&url, "payu", &not_a_form).await.0, 400);

    // No worker runs, so anything published would still be in the queue.
    assert_eq!(
        broker::depth(&format!("{}.events", env.prefix)).await,
        Some(0)
    );
    // Refusals are logged for operators, without secrets.
    let log = ingest.log_text();
    assert!(log.contains("webhook refused"), "{log}");
    for secret in [
        oncehook_e2e::Secrets::RAZORPAY,
        oncehook_e2e::Secrets::STRIPE,
        oncehook_e2e::Secrets::PAYU,
    ] {
        assert!(!log.contains(secret), "a secret leaked into the log");
    }
    // The authentic one is accepted and is then the only message.
    assert_eq!(env.post(&url, "razorpay", &good).await.0, 200);
    assert_eq!(
        broker::depth(&format!("{}.events", env.prefix)).await,
        Some(1)
    );
}

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
    assert_eq!(
        broker::depth(&format!("{}.events", env.prefix)).await,
        Some(0)
    );
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

#[tokio::test]
async fn the_edge_refuses_oversized_headers_stalled_bodies_and_wrong_methods_without_publishing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut env = TestEnv::new().await;
    let (mut ingest, url) = env.start_ingest().await;
    let addr = url.trim_start_matches("http://").to_owned();

    // 200 KB of headers: refused (by the HTTP layer, or by ingest's own limit).
    // A fresh connection per request: the server closes a connection after
    // refusing its headers, and a pooled one would then be reset under the next request.
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(15))
            .build()
            .expect("client")
    };
    let huge = fresh()
        .post(format!("{url}/webhooks/razorpay"))
        .header("x-padding", "a".repeat(200 * 1024))
        .body("{}")
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert!(
        matches!(huge, Ok(431) | Err(_)),
        "oversized headers refused: {huge:?}"
    );

    // 20 KB of headers pass the HTTP layer but not ingest's limit.
    let big = fresh()
        .post(format!("{url}/webhooks/razorpay"))
        .header("x-padding", "a".repeat(20 * 1024))
        // No body: an early answer with unread body bytes can turn into a TCP reset.
        .send()
        .await
        .expect("answered");
    assert_eq!(big.status().as_u16(), 431);
    assert!(
        big.text()
            .await
            .unwrap_or_default()
            .contains("headers_too_large")
    );

    // A sender that stops after one byte of a 100-byte body gets 408, not a hung worker.
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream
        .write_all(b"POST /webhooks/razorpay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .await
        .expect("write");
    let mut answer = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut answer))
        .await
        .expect("answered within 20 s")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");

    // GET on the webhook endpoint: 405 with a JSON error.
    let get = fresh()
        .get(format!("{url}/webhooks/razorpay"))
        .send()
        .await
        .expect("get");
    assert_eq!(get.status().as_u16(), 405);
    assert!(
        get.text()
            .await
            .unwrap_or_default()
            .contains("method_not_allowed")
    );

    assert_eq!(
        broker::depth(&format!("{}.events", env.prefix)).await,
        Some(0),
        "nothing published"
    );
    assert!(ingest.is_running(), "still serving");
}

#[tokio::test]
async fn oncehookctl_send_signs_for_every_gateway_and_reports_the_answers() {
    let mut env = TestEnv::new().await;
    Shop::mugs(10, &["ord_s1", "ord_s2", "ord_s3", "ord_s4", "ord_s5"])
        .seed(&env.pool)
        .await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    for (source, event, order) in [
        ("razorpay", "payment.captured", "ord_s1"),
        ("cashfree", "PAYMENT_SUCCESS_WEBHOOK", "ord_s2"),
        ("payu", "success", "ord_s3"),
        ("stripe", "payment_intent.succeeded", "ord_s4"),
        ("standard", "payment.succeeded", "ord_s5"),
    ] {
        let (code, out, err) = env
            .ctl(&[
                "send",
                source,
                event,
                "--order",
                order,
                "--times",
                "3",
                "--concurrency",
                "3",
                "--url",
                &app.url,
            ])
            .await;
        assert_eq!(code, 0, "{source}: {out}{err}");
        assert!(out.contains("200 x3"), "{source}: {out}");
    }
    // Refusals are what --tamper and --stale are for: exit 0 when refused as expected.
    let (code, out, _) = env
        .ctl(&[
            "send", "razorpay", "captured", "--order", "ord_s1", "--tamper", "--url", &app.url,
        ])
        .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("401 x1"), "{out}");
    let (code, out, _) = env
        .ctl(&[
            "send", "stripe", "captured", "--order", "ord_s4", "--stale", "--url", &app.url,
        ])
        .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("stale_timestamp"), "{out}");
    // An unknown source is a clear error, not a post.
    let (code, _, err) = env
        .ctl(&["send", "paypal", "captured", "--url", &app.url])
        .await;
    assert_ne!(code, 0);
    assert!(err.contains("no source named \"paypal\""), "{err}");

    eventually("five orders paid once each", WAIT, || async {
        (env.count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await
            == 5)
            .then_some(())
    })
    .await;
    env.wait_events_drained().await;
    assert_eq!(env.count("SELECT count(*) FROM payments").await, 5);
    assert_eq!(shop::stock(&env.pool, "MUG").await, 5);
}

#[tokio::test]
async fn ctrl_c_stops_ingest_gracefully_letting_an_in_flight_request_finish() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut env = TestEnv::new().await;
    Shop::new()
        .product("sku_int", 5)
        .order("order_int", &[("sku_int", 1)])
        .seed(&env.pool)
        .await;
    let (mut ingest, base) = env.start_ingest().await;
    let delivery = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_int", "pay_int", "evt_int", 50000),
    );
    let addr = base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect to ingest");
    let mut head = format!(
        "POST /webhooks/razorpay HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        delivery.body.len()
    );
    for (name, value) in delivery.headers.iter() {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let (first, rest) = delivery.body.split_at(delivery.body.len() / 2);
    stream.write_all(head.as_bytes()).await.expect("headers");
    stream.write_all(first).await.expect("half the body");
    stream.flush().await.expect("flush");
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Ctrl-C while the request is half sent.
    ingest.signal("INT");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream.write_all(rest).await.expect("rest of the body");
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer)).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the in-flight request finished: {answer:?}"
    );
    assert_eq!(
        ingest.wait_exit(Duration::from_secs(15)),
        Some(0),
        "ingest exits 0 on SIGINT"
    );
    // It was published, not lost.
    let _worker = env.start_worker().await;
    shop::wait_paid(&env.pool, "order_int").await;
}

#[tokio::test]
async fn every_binary_stops_on_sigterm_even_after_its_log_reader_went_away() {
    // `make run` pipes each binary's log through a prefixing reader; when
    // that reader dies first, a log line must not stand between SIGTERM and
    // a clean exit.
    let env = TestEnv::new().await;
    let port = oncehook_e2e::free_port();
    for bin in ["oncehook-ingest", "oncehook-worker", "oncehook-mailer"] {
        let mut child = std::process::Command::new(oncehook_e2e::process::bin(bin))
            .envs(env.envs())
            .env("ONCEHOOK_INGEST_ADDR", format!("127.0.0.1:{port}"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The reader goes away: both pipes' read ends are closed.
        drop(child.stdout.take());
        drop(child.stderr.take());
        let pid = child.id().to_string();
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(killed.success());
        let mut exited = None;
        for _ in 0..150 {
            if let Some(status) = child.try_wait().expect("try_wait") {
                exited = Some(status);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if exited.is_none() {
            let _ = child.kill();
        }
        let status =
            exited.unwrap_or_else(|| panic!("{bin} ignored SIGTERM with a closed log pipe"));
        assert_eq!(status.code(), Some(0), "{bin} exits 0");
    }
}

#[tokio::test]
async fn a_worker_keeps_to_its_database_connection_budget() {
    let mut env = TestEnv::new().await;
    (0..20)
        .fold(Shop::new().product("sku_budget", 100), |shop, n| {
            shop.order(&format!("order_b{n}"), &[("sku_budget", 1)])
        })
        .seed(&env.pool)
        .await;
    let (_ingest, url) = env.start_ingest().await;
    // The worker's connections are told apart by their application name.
    let worker_url = format!("{}?application_name=oncehook_budget", env.database_url);
    let _worker = env
        .start_consumer(
            "oncehook-worker",
            &[
                ("ONCEHOOK_DATABASE_URL", worker_url.as_str()),
                ("ONCEHOOK_DATABASE_MAX_CONNECTIONS", "2"),
            ],
        )
        .await;
    for n in 0..20 {
        let spec = env.spec(
            &format!("order_b{n}"),
            &format!("pay_b{n}"),
            &format!("evt_b{n}"),
            50_000,
        );
        let (status, body) = env
            .post(
                &url,
                "razorpay",
                &env.sign(Gateway::Razorpay, "payment.captured", &spec),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let mut most = 0;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oncehook_budget'",
        )
        .fetch_one(&env.pool)
        .await
        .expect("pg_stat_activity");
        most = most.max(open);
        let paid = env
            .count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await;
        if paid == 20 || std::time::Instant::now() > deadline {
            assert_eq!(paid, 20, "every order paid");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(most >= 1, "the worker's connections were seen");
    assert!(most <= 2, "at most the budget of 2 connections, saw {most}");
}

/// The mailer sends as many emails at once as its concurrency says — more
/// than its prefetch would allow — on SMTP sessions it keeps and reuses,
/// and every outbox row still leaves exactly once.
#[tokio::test]
async fn the_mailer_sends_concurrently_on_reused_smtp_sessions() {
    const ORDERS: usize = 24;
    let mut env = TestEnv::new().await;
    let orders: Vec<String> = (0..ORDERS).map(|n| format!("order_m{n}")).collect();
    Shop::mugs(1_000, &orders).seed(&env.pool).await;
    let smtp = SmtpSink::start_with_delay(Duration::from_millis(300)).await;
    let app = env
        .pipeline_with(PipelineSpec::default().smtp(&smtp.url()).without_mailer())
        .await;
    for n in 0..ORDERS {
        let spec = env.spec(
            &format!("order_m{n}"),
            &format!("pay_m{n}"),
            &format!("evt_m{n}"),
            50_000,
        );
        let delivery = env.sign(Gateway::Razorpay, "payment.captured", &spec);
        assert_eq!(env.post(&app.url, "razorpay", &delivery).await.0, 200);
    }
    // Every email waits in the queue before the mailer starts, so it has
    // enough work to fill all its slots at once.
    let emails_queue = format!("{}.emails", env.prefix);
    eventually("every email relayed to the queue", WAIT, || async {
        let depth = broker::depth(&emails_queue).await?;
        (depth as usize == ORDERS).then_some(())
    })
    .await;
    let _mailer = env
        .start_consumer(
            "oncehook-mailer",
            &[
                ("ONCEHOOK_MAIL_CONCURRENCY", "4"),
                ("ONCEHOOK_PREFETCH", "2"),
            ],
        )
        .await;
    for n in 0..ORDERS {
        shop::wait_emails_sent(&env.pool, &format!("order_m{n}"), 1).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let messages = smtp.messages();
    assert_eq!(messages.len(), ORDERS, "one email per order");
    let mut ids: Vec<&str> = messages
        .iter()
        .filter_map(|m| {
            m.lines()
                .find(|l| l.to_ascii_lowercase().starts_with("message-id:"))
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), ORDERS, "every outbox row sent once: {ids:?}");
    let peak = smtp.peak_sessions();
    assert!(
        (3..=4).contains(&peak),
        "more sends at once than the prefetch of 2, never more than the concurrency of 4: {peak}"
    );
    assert!(
        smtp.connections() <= 4,
        "sessions are reused: {} connections for {ORDERS} emails",
        smtp.connections()
    );
}

/// `delivery` with header `name` set to `value` (replacing the one it had).
fn with_header(
    delivery: &oncehook_gateways::sample::SignedDelivery,
    name: &str,
    value: &str,
) -> oncehook_gateways::sample::SignedDelivery {
    let mut copy = delivery.clone();
    copy.headers = delivery
        .headers
        .iter()
        .filter(|(n, _)| *n != name)
        .chain(std::iter::once((name, value)))
        .collect();
    copy
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
async fn redelivered_bodies(env: &TestEnv, metrics: &str) -> Vec<(String, String)> {
    let body = env
        .http
        .get(format!("{metrics}/metrics"))
        .send()
        .await
        .expect("metrics answered")
        .text()
        .await
        .unwrap_or_default();
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
    let samples = redelivered_bodies(&env, &metrics).await;
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

/// Sends `request` on a connection of its own and returns whatever came
/// back before the server closed it (or 20 s passed).
async fn raw_exchange(addr: &str, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    // The server may answer and close before it read everything.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Refusals that are the sender's fault, one of each kind ingest tells
/// apart: (source, delivery, expected status).
fn bad_requests(
    env: &TestEnv,
) -> Vec<(&'static str, oncehook_gateways::sample::SignedDelivery, u16)> {
    let spec = env.spec("order_bad", "pay_bad", "evt_bad", 50_000);
    let good = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let mut tampered = good.clone();
    oncehook_gateways::sample::tamper(&mut tampered);
    let garbled = with_header(
        &env.sign(Gateway::Stripe, "captured", &spec),
        "stripe-signature",
        "nonsense",
    );
    let mut not_a_form = env.sign(Gateway::Payu, "success", &spec);
    not_a_form.body = b"txnid=\xff\xfe&hash=00".to_vec();
    let wrong_type = with_header(&good, "content-type", "text/plain");
    vec![
        ("razorpay", tampered, 401),
        ("stripe", garbled, 400),
        ("payu", not_a_form, 400),
        ("paypal", good, 404),
        ("razorpay", wrong_type, 415),
    ]
}

/// A burst of bad requests is the senders' fault, not the operator's: no
/// ERROR line, and at most one WARN line per kind of refusal per second,
/// the lines it held back counted on the next line of that kind.
#[tokio::test]
async fn a_burst_of_bad_requests_is_logged_at_warn_at_most_once_per_reason_per_second() {
    const BURST: usize = 30;
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let addr = url.trim_start_matches("http://").to_owned();
    let bad = bad_requests(&env);
    let mut huge = bad[0].1.clone();
    huge.body = vec![b' '; 300 * 1024];
    let mut huge_head = b"POST /webhooks/razorpay HTTP/1.1\r\nHost: x\r\nX-Padding: ".to_vec();
    huge_head.extend(std::iter::repeat_n(b'a', 200 * 1024));
    huge_head.extend_from_slice(b"\r\n\r\n");
    // Refused by ingest (5 kinds, plus too large), and by the HTTP layer
    // before ingest sees them (not HTTP; a head over the HTTP layer's limit).
    let reasons = bad.len() + 2;

    let started = std::time::Instant::now();
    for _ in 0..BURST {
        for (source, delivery, status) in &bad {
            assert_eq!(
                env.post(&url, source, delivery).await.0,
                *status,
                "{source}"
            );
        }
        assert_eq!(env.post_fresh(&url, "razorpay", &huge).await.0, 413);
        let answer = raw_exchange(&addr, b"NOT HTTP AT ALL\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
        raw_exchange(&addr, &huge_head).await;
    }
    let elapsed = started.elapsed();
    // The count of what a reason's last second held back is written within
    // a second or so after it.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let log = ingest.log_text();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.is_empty(),
        "a sender's bad request is not an operator's error:\n{}",
        errors.join("\n")
    );
    let warns: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    // One line per reason per started second, and the final counts.
    let bound = reasons * (elapsed.as_secs() as usize + 4);
    assert!(
        warns.len() <= bound,
        "{} WARN lines for {} bad requests in {elapsed:?}, at most {bound}:\n{}",
        warns.len(),
        BURST * (bad.len() + 3),
        warns.join("\n")
    );
    assert!(
        bound < BURST * (bad.len() + 3),
        "the burst is long enough to need the limit"
    );
    // Every refusal is accounted for: logged, or counted as held back.
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.trim_matches('"').parse().ok())
    };
    let signature_lines: Vec<&str> = warns
        .iter()
        .copied()
        .filter(|l| l.contains("code=invalid_signature"))
        .collect();
    let logged = signature_lines
        .iter()
        .filter(|l| l.contains("webhook refused"))
        .count() as u64;
    let held_back: u64 = signature_lines
        .iter()
        .filter_map(|l| field(l, "suppressed"))
        .sum();
    assert_eq!(
        logged + held_back,
        BURST as u64,
        "every bad signature logged or counted:\n{}",
        signature_lines.join("\n")
    );
    assert!(held_back > 0, "{}", signature_lines.join("\n"));
    assert!(
        warns.iter().any(|l| l.contains("code=malformed_http")),
        "the HTTP layer's refusals are logged at WARN too:\n{}",
        warns.join("\n")
    );
    assert_eq!(
        broker::depth(&format!("{}.events", env.prefix)).await,
        Some(0),
        "nothing published"
    );
}

/// `X-Content-Type-Options: nosniff` on everything ingest answers: the
/// webhook's 200, every refusal, the unknown paths, the balancer's
/// `/healthz`, a 503 without a broker, and the metrics listener.
#[tokio::test]
async fn every_answer_of_ingest_says_nosniff() {
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let addr = url.trim_start_matches("http://").to_owned();
    let nosniff = |what: &str, resp: &reqwest::Response| {
        assert_eq!(
            resp.headers()
                .get("x-content-type-options")
                .and_then(|v| v.to_str().ok()),
            Some("nosniff"),
            "{what}: {} {:?}",
            resp.status(),
            resp.headers()
        );
    };
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(15))
            .build()
            .expect("client")
    };
    let post = |source: &str, d: &oncehook_gateways::sample::SignedDelivery| {
        let mut req = fresh()
            .post(format!("{url}/webhooks/{source}"))
            .body(d.body.clone());
        for (name, value) in d.headers.iter() {
            req = req.header(name, value);
        }
        req.send()
    };

    let spec = env.spec("order_ns", "pay_ns", "evt_ns", 50_000);
    let good = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let accepted = post("razorpay", &good).await.expect("answered");
    assert_eq!(accepted.status().as_u16(), 200);
    nosniff("accepted", &accepted);
    for (source, delivery, status) in bad_requests(&env) {
        let resp = post(source, &delivery).await.expect("answered");
        assert_eq!(resp.status().as_u16(), status, "{source}");
        nosniff(&format!("{status} from {source}"), &resp);
    }
    let mut huge = good.clone();
    huge.body = vec![b' '; 300 * 1024];
    let resp = post("razorpay", &huge).await.expect("answered");
    assert_eq!(resp.status().as_u16(), 413);
    nosniff("413", &resp);
    let resp = fresh()
        .post(format!("{url}/webhooks/razorpay"))
        .header("x-padding", "a".repeat(20 * 1024))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 431);
    nosniff("431", &resp);
    for (path, status) in [
        ("/webhooks/razorpay", 405),
        ("/nothing/here", 404),
        ("/healthz", 200),
    ] {
        let resp = fresh()
            .get(format!("{url}{path}"))
            .send()
            .await
            .expect("answered");
        assert_eq!(resp.status().as_u16(), status, "{path}");
        nosniff(path, &resp);
    }
    let stalled = raw_exchange(
        &addr,
        b"POST /webhooks/razorpay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .await;
    assert!(stalled.starts_with("HTTP/1.1 408"), "{stalled}");
    assert!(
        stalled
            .to_ascii_lowercase()
            .contains("\r\nx-content-type-options: nosniff\r\n"),
        "408: {stalled}"
    );
    for path in ["/healthz", "/readyz", "/metrics"] {
        let resp = fresh()
            .get(format!("{}{path}", ingest.metrics_url()))
            .send()
            .await
            .expect("answered");
        assert_eq!(resp.status().as_u16(), 200, "metrics listener {path}");
        nosniff(&format!("metrics listener {path}"), &resp);
    }

    // Without a broker: the 503s.
    let dead_port = oncehook_e2e::free_port();
    let amqp = format!("amqp://guest:guest@127.0.0.1:{dead_port}/%2f");
    let (orphan, orphan_url) = env.spawn_ingest(&[("ONCEHOOK_AMQP_URL", amqp.as_str())]);
    env.wait_ready(orphan.metrics_url(), "/healthz").await;
    let mut req = fresh()
        .post(format!("{orphan_url}/webhooks/razorpay"))
        .body(good.body.clone());
    for (name, value) in good.headers.iter() {
        req = req.header(name, value);
    }
    let resp = req.send().await.expect("answered");
    assert_eq!(resp.status().as_u16(), 503);
    nosniff("503", &resp);
    let resp = fresh()
        .get(format!("{orphan_url}/healthz"))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 503);
    nosniff("/healthz while not ready", &resp);
}
