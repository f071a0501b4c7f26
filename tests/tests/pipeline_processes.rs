//! The binaries as processes: ingest drains an in-flight request on Ctrl-C,
//! every binary stops on SIGTERM even with its log reader gone, a worker
//! keeps to its database connection budget, and the mailer sends
//! concurrently on SMTP sessions it reuses, each email once.

use std::time::Duration;

use oncehook_e2e::{PipelineSpec, Shop, SmtpSink, TestEnv, WAIT, broker, eventually, shop};
use oncehook_gateways::Gateway;

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
            .envs(env.database_envs(bin, &[]))
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
        // Behind PgBouncer the worker's connections are its clients there
        // (the server connections, shared, keep the last client's name);
        // in the PgBouncer pass the worker goes straight to Postgres, as
        // the deploy files run it.
        let pooled = env
            .pooled("oncehook-worker")
            .then(|| env.pooler_clients_named("oncehook_budget"))
            .flatten();
        let open = match pooled {
            Some(clients) => clients as i64,
            None => sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'oncehook_budget'",
            )
            .fetch_one(&env.pool)
            .await
            .expect("pg_stat_activity"),
        };
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
