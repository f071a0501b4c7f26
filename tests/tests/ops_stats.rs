//! `oncehookctl stats` end to end through the real binaries: queues, dead
//! letters, the outbox and outcomes per gateway in a window; an unreachable
//! database reported while the broker is still shown; and the webhooks
//! received per source, from Prometheus, in stats and on the console.

use oncehook_common::dead_letter::DeadLetterKind as Kind;
use oncehook_e2e::ops::{ctl_json, ctl_ok, payu_failure, wait_dead};
use oncehook_e2e::{Shop, TestEnv, WAIT, eventually, shop};
use oncehook_gateways::Gateway;
use serde_json::Value;

#[tokio::test]
async fn stats_reports_queues_dead_letters_outbox_and_outcomes_per_gateway() {
    let mut env = TestEnv::new().await;
    Shop::own_product("order_s1").seed(&env.pool).await;
    let app = env.pipeline().await;

    let paid = env.captured("order_s1", "pay_S1", "evt_S1");
    env.post_ok(&app.url, "razorpay", &paid).await;
    env.post_ok(&app.url, "razorpay", &paid).await;
    env.post_ok(
        &app.url,
        "razorpay",
        &env.captured("order_nope", "pay_S2", "evt_S2"),
    )
    .await;
    env.post_ok(
        &app.url,
        "payu",
        &payu_failure(&env, "order_payu_nope", "payu_S3"),
    )
    .await;
    shop::wait_paid(&env.pool, "order_s1").await;
    eventually("duplicate counted", WAIT, || async {
        (shop::webhooks(&env.pool, "order_s1")
            .await
            .first()
            .map(|w| w.2)
            == Some(2))
        .then_some(())
    })
    .await;
    wait_dead(&env, 2).await;
    eventually("email sent", WAIT, || async {
        (shop::emails(&env.pool, "order_s1")
            .await
            .iter()
            .all(|e| e.1))
        .then_some(())
    })
    .await;

    let stats = ctl_json(&env, &["stats"]).await;
    assert_eq!(stats["broker"]["available"], true, "{stats:#}");
    assert_eq!(stats["database"]["available"], true, "{stats:#}");
    let queue = |role: &str| {
        stats["queues"]
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["role"] == role))
            .cloned()
            .unwrap_or_else(|| panic!("queue {role} in {stats:#}"))
    };
    assert_eq!(
        queue("events")["queue"],
        format!("{}.events", env.prefix).as_str()
    );
    assert!(
        queue("events")["consumers"].as_u64() >= Some(1),
        "{stats:#}"
    );
    assert!(
        queue("emails")["consumers"].as_u64() >= Some(1),
        "{stats:#}"
    );
    assert_eq!(queue("dead")["messages"], 2, "{stats:#}");
    let dead = &stats["dead_letters"];
    assert_eq!(dead["depth"], 2, "{stats:#}");
    assert_eq!(dead["by_gateway"]["razorpay"], 1);
    assert_eq!(dead["by_gateway"]["payu"], 1);
    assert_eq!(dead["by_kind"][Kind::UnknownOrder.as_str()], 2);
    let age = dead["oldest_age_secs"].as_i64().expect("oldest age");
    assert!((0..300).contains(&age), "{age}");
    assert_eq!(stats["outbox"]["backlog"], 0, "{stats:#}");
    assert_eq!(stats["outbox"]["failed"], 0, "{stats:#}");
    let gateway = |name: &str| {
        stats["gateways"]
            .as_array()
            .and_then(|gs| gs.iter().find(|g| g["gateway"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("gateway {name} in {stats:#}"))
    };
    let rzp = gateway("razorpay");
    assert_eq!(rzp["applied"], 1, "{rzp}");
    assert_eq!(rzp["duplicates"], 1, "{rzp}");
    assert_eq!(rzp["flagged"], 0, "{rzp}");
    assert_eq!(rzp["dead"], 1, "{rzp}");
    let payu = gateway("payu");
    assert_eq!(payu["applied"], 0, "{payu}");
    assert_eq!(payu["dead"], 1, "{payu}");

    let text = ctl_ok(&env, &["stats"]).await;
    for needle in [
        format!("{}.events", env.prefix),
        format!("{}.dead", env.prefix),
        "Dead letters: 2".to_owned(),
        "Outbox: backlog 0".to_owned(),
        "razorpay".to_owned(),
        "DUPLICATES".to_owned(),
    ] {
        assert!(text.contains(&needle), "{needle:?}:\n{text}");
    }

    // The window applies: outcomes from two hours ago are outside the last hour.
    sqlx::query("UPDATE processed_webhooks SET processed_at = now() - interval '2 hours'")
        .execute(&env.pool)
        .await
        .expect("backdate");
    let recent = ctl_json(&env, &["stats", "--since", "1h"]).await;
    let rzp = recent["gateways"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["gateway"] == "razorpay"))
        .cloned()
        .expect("razorpay still listed for its dead letter");
    assert_eq!(rzp["applied"], 0, "{recent:#}");
    assert_eq!(rzp["duplicates"], 0, "{recent:#}");
    assert_eq!(rzp["dead"], 1, "{recent:#}");
    assert_eq!(recent["window_secs"], 3_600);
}

#[tokio::test]
async fn stats_reports_an_unreachable_database_and_still_shows_the_broker() {
    let mut env = TestEnv::new().await;
    let port = oncehook_e2e::free_port();
    env.set_env(
        "ONCEHOOK_DATABASE_URL",
        &format!("postgres://postgres@127.0.0.1:{port}/nowhere"),
    );
    let (code, stdout, stderr) = env.ctl(&["--json", "stats"]).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    let stats: Value = serde_json::from_str(&stdout).expect("JSON even when degraded");
    assert_eq!(stats["database"]["available"], false, "{stats:#}");
    assert!(
        stats["database"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("database")),
        "{stats:#}"
    );
    assert!(stats["outbox"].is_null(), "{stats:#}");
    assert_eq!(stats["broker"]["available"], true, "{stats:#}");
    let queues = stats["queues"].as_array().expect("queues");
    // The events queue, its bulk lanes, the emails and the dead letters.
    assert_eq!(
        queues.len(),
        3 + usize::from(oncehook_common::topology::BULK_LANES)
    );
    // Nothing declared this prefix's queues: they are reported missing, not a crash.
    assert!(queues.iter().all(|q| q["exists"] == false), "{stats:#}");

    let (code, stdout, stderr) = env.ctl(&["stats"]).await;
    assert_eq!(code, 1);
    assert!(stdout.contains("missing"), "{stdout}");
    assert!(stdout.contains("unavailable"), "{stdout}");
    assert!(stderr.contains("database"), "{stderr}");
}

#[tokio::test]
async fn stats_and_the_console_show_webhooks_accepted_and_refused_per_source_from_prometheus() {
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let target = ingest
        .metrics_url()
        .trim_start_matches("http://")
        .to_owned();
    let prometheus = oncehook_e2e::prometheus::Prometheus::start(&env.dir, &[&target]).await;
    // Ingest's counters exist at zero from its start, so Prometheus has a
    // sample before the first webhook (increase() cannot count a first sample).
    eventually("the zero counters scraped", WAIT, || async {
        prometheus
            .scalar("oncehook_ingest_requests_total{source=\"razorpay\",outcome=\"accepted\"}")
            .await
            .filter(|v| *v == 0.0)
    })
    .await;

    for i in 0..3 {
        env.post_ok(
            &url,
            "razorpay",
            &env.captured("order_p", &format!("pay_P{i}"), &format!("evt_P{i}")),
        )
        .await;
    }
    for i in 0..2 {
        let mut forged = env.captured("order_p", "pay_F", &format!("evt_F{i}"));
        forged.body.push(b' ');
        let (status, body) = env.post(&url, "razorpay", &forged).await;
        assert_eq!(status, 401, "{body}");
    }
    let mut forged = env.sign(
        Gateway::Stripe,
        "payment_intent.succeeded",
        &env.spec("order_p", "pi_F", "evt_SF", 50_000),
    );
    forged.body.push(b' ');
    assert_eq!(env.post(&url, "stripe", &forged).await.0, 401);

    env.set_env("ONCEHOOK_PROMETHEUS_URL", &prometheus.url);
    let received = |stats: &Value, source: &str| -> Value {
        stats["received"]["sources"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["source"] == source).cloned())
            .unwrap_or(Value::Null)
    };
    let stats = eventually("stats shows the counts", WAIT, || async {
        let (_, stdout, _) = env.ctl(&["--json", "stats"]).await;
        let stats: Value = serde_json::from_str(&stdout).ok()?;
        let rzp = received(&stats, "razorpay");
        (rzp["accepted_1h"] == 3
            && rzp["refused_1h"] == 2
            && received(&stats, "stripe")["refused_1h"] == 1)
            .then_some(stats)
    })
    .await;
    let rzp = received(&stats, "razorpay");
    assert_eq!(rzp["accepted_24h"], 3, "{stats:#}");
    assert_eq!(rzp["refusals_24h"]["invalid_signature"], 2, "{stats:#}");
    assert_eq!(
        received(&stats, "payu")["accepted_1h"],
        0,
        "a quiet source shows zeros: {stats:#}"
    );
    let (code, text, _) = env.ctl(&["stats"]).await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("Webhooks received per source") && text.contains("invalid_signature 2"),
        "{text}"
    );

    // The console's Overview shows the same section.
    let console = oncehook_e2e::console::Console::start(&mut env, &[]).await;
    let cookie = console.login(oncehook_e2e::console::VIEWER).await;
    let overview = console.get("/", Some(&cookie)).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(
        overview.body.contains("Webhooks received per source")
            && overview.body.contains("invalid_signature"),
        "{}",
        overview.body
    );

    // Without the setting, stats says how to get the numbers; Prometheus
    // down, it says why they are missing and still exits 0.
    env.set_env("ONCEHOOK_PROMETHEUS_URL", "");
    let (_, text, _) = env.ctl(&["stats"]).await;
    assert!(text.contains("set ONCEHOOK_PROMETHEUS_URL"), "{text}");
    drop(prometheus);
    env.set_env(
        "ONCEHOOK_PROMETHEUS_URL",
        &format!("http://127.0.0.1:{}", oncehook_e2e::free_port()),
    );
    let (code, text, _) = env.ctl(&["stats"]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("Webhooks received: unavailable"), "{text}");
}
