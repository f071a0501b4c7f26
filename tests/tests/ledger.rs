//! The order ledger's cases that need processes (docs/ledger.md): what
//! ingest accepts and the worker deduplicates over HTTP and the broker, the
//! sweeper's dead letters after `ONCEHOOK_UNLINKED_TTL`, what `oncehookctl`
//! shows of the books, and the schema's upgrade in a database of its own.
//! The ledger's decisions themselves (refunds before captures, events that
//! wait for their link, each gateway's own ways) run on the worker in
//! process: `ledger_in_process.rs`. The random, model-based proof is
//! `confluence.rs`.

use std::time::Duration;

use oncehook_common::consume::memory::Settled;
use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_e2e::env::{Secrets, TestEnv};
use oncehook_e2e::in_process::{InProcess, envelope};
use oncehook_e2e::{broker, eventually, shop};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample;
use oncehook_ledger::Ledger;

/// Waits until `n` deliveries are recorded in `processed_webhooks`.
async fn wait_processed(env: &TestEnv, n: i64) {
    eventually(
        &format!("{n} deliveries processed"),
        Duration::from_secs(30),
        || async {
            (env.count("SELECT count(*) FROM processed_webhooks WHERE outcome <> 'parked'")
                .await
                >= n)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn an_event_never_linked_is_dead_lettered_after_the_ttl_leaving_nothing_to_absorb_a_replay() {
    // At process level: the sweeper runs in the worker's broker session and
    // dead-letters over the broker once the TTL has passed.
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1s");
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;

    let refund = env.sign(
        Gateway::Razorpay,
        "refund.processed",
        &env.spec("", "pay_lonely", "evt_lonely", 100),
    );
    env.post_ok(&base, "razorpay", &refund).await;
    let dead_queue = format!("{}.dead", env.prefix);
    eventually("dead-lettered", Duration::from_secs(30), || async {
        (broker::depth(&dead_queue).await == Some(1)).then_some(())
    })
    .await;
    let dead = broker::peek(&dead_queue).await;
    assert_eq!(dead[0].kind(), &DeadLetterKind::UnknownOrder, "{dead:?}");
    let error = &dead[0].record.error;
    assert!(
        error.contains("pay_lonely") && error.contains("evt_lonely"),
        "the error names the payment and the event: {error}"
    );
    // Nothing parked, and no delivery record that would absorb a replay.
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks").await,
        0
    );
}

#[tokio::test]
async fn two_accounts_of_one_gateway_do_not_share_event_ids() {
    // At process level: each account is a source of ingest's, with its own
    // endpoint and secret; the dedup key is the source ingest verified.
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_a", 10).await;
    shop::order(&env.pool, "order_a1", 50000, "INR", &[("sku_a", 1)]).await;
    shop::order(&env.pool, "order_a2", 50000, "INR", &[("sku_a", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;

    // Both accounts happen to use the same event id.
    let first_spec = env.spec("order_a1", "pay_a1", "evt_same", 50000);
    let first = env.sign(Gateway::Razorpay, "payment.captured", &first_spec);
    let second = sample::build(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_a2", "pay_a2", "evt_same", 50000),
        Secrets::RAZORPAY_SECOND_ACCOUNT,
    )
    .expect("sample");
    env.post_ok(&base, "razorpay", &first).await;
    env.post_ok(&base, "razorpay_second", &second).await;
    wait_processed(&env, 2).await;
    assert_eq!(shop::order_status(&env.pool, "order_a1").await, "paid");
    assert_eq!(shop::order_status(&env.pool, "order_a2").await, "paid");

    // Even byte-identical bodies are one delivery per account, not a
    // duplicate of the other account's.
    let same_bytes = sample::build(
        Gateway::Razorpay,
        "payment.captured",
        &first_spec,
        Secrets::RAZORPAY_SECOND_ACCOUNT,
    )
    .expect("sample");
    assert_eq!(same_bytes.body, first.body);
    env.post_ok(&base, "razorpay_second", &same_bytes).await;
    eventually("a record per account", Duration::from_secs(30), || async {
        (env.count("SELECT count(*) FROM processed_webhooks").await == 3).then_some(())
    })
    .await;
    assert_eq!(
        env.count("SELECT coalesce(sum(deliveries), 0)::bigint FROM processed_webhooks")
            .await,
        3,
        "no delivery counted as another account's duplicate"
    );
}

#[tokio::test]
async fn an_unsigned_event_id_cannot_make_another_body_a_duplicate() {
    // At process level: the event id travels in a header ingest does not
    // verify; the dedup on the signed body is held over HTTP and the broker.
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_d", 10).await;
    shop::order(&env.pool, "order_d", 50000, "INR", &[("sku_d", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;

    // A genuine payment.failed body, re-sent under the capture's event id
    // (the x-razorpay-event-id header is not covered by the signature).
    let mut failed = env.sign(
        Gateway::Razorpay,
        "payment.failed",
        &env.spec("order_d", "pay_d0", "evt_failed", 50000),
    );
    failed
        .headers
        .insert("x-razorpay-event-id", "evt_capture_d");
    env.post_ok(&base, "razorpay", &failed).await;
    wait_processed(&env, 1).await;
    let capture = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_d", "pay_d1", "evt_capture_d", 50000),
    );
    env.post_ok(&base, "razorpay", &capture).await;
    wait_processed(&env, 2).await;
    assert_eq!(shop::order_status(&env.pool, "order_d").await, "paid");
    // A true copy of the capture is still absorbed.
    env.post_ok(&base, "razorpay", &capture).await;
    eventually("copy absorbed", Duration::from_secs(30), || async {
        (env.count("SELECT coalesce(sum(deliveries), 0)::bigint FROM processed_webhooks")
            .await
            == 3)
            .then_some(())
    })
    .await;
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks").await,
        2
    );
    assert_eq!(shop::stock(&env.pool, "sku_d").await, 9);
}

#[tokio::test]
async fn an_oversell_is_recorded_on_the_order_and_shown_by_trace_and_stats() {
    // At process level: what `oncehookctl` prints. The books it reads are
    // made by the worker in process (no ingest, no broker needed for them).
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_last", 1).await;
    shop::order(&env.pool, "order_o1", 50000, "INR", &[("sku_last", 1)]).await;
    shop::order(&env.pool, "order_o2", 50000, "INR", &[("sku_last", 1)]).await;
    let worker = InProcess::start(&env.pool, Ledger::default(), &[]);
    for (order, pay) in [("order_o1", "pay_o1"), ("order_o2", "pay_o2")] {
        let d = env.sign(
            Gateway::Razorpay,
            "payment.captured",
            &env.spec(order, pay, &format!("evt_{pay}"), 50000),
        );
        let settled = worker
            .deliver(&envelope("razorpay", Gateway::Razorpay, &d))
            .await;
        assert_eq!(settled, [Settled::Acked]);
    }
    assert_eq!(shop::stock(&env.pool, "sku_last").await, -1);
    let oversold: Vec<String> =
        sqlx::query_scalar("SELECT order_ref FROM orders WHERE oversold ORDER BY order_ref")
            .fetch_all(&env.pool)
            .await
            .expect("oversold");
    assert_eq!(oversold.len(), 1, "exactly the second sale oversold");

    let (code, text, _) = env.ctl(&["trace", "order", &oversold[0]]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("OVERSOLD"), "{text}");
    let (code, json, _) = env.ctl(&["stats", "--json"]).await;
    assert_eq!(code, 0, "{json}");
    let stats: serde_json::Value = serde_json::from_str(&json).expect("stats json");
    assert_eq!(stats["ledger"]["oversold_orders"], 1, "{stats}");
}

#[tokio::test]
async fn the_migration_upgrades_an_existing_database_in_place() {
    // Here and not in process: no worker at all, the schema's upgrade of an
    // old database of its own.
    use oncehook_common::db::MIGRATOR;
    let env = TestEnv::new().await;
    // A second, empty database migrated only to the first version.
    let name = format!("{}_old", env.db_name);
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&env.pool)
        .await
        .expect("create database");
    let url = match env.database_url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => panic!("database URL has no database part"),
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .expect("connect");
    let first = MIGRATOR.iter().next().expect("a first migration").version;
    MIGRATOR
        .run_to(first, &pool)
        .await
        .expect("first migration");
    sqlx::raw_sql(
        "INSERT INTO products (sku, name, stock) VALUES ('s', 's', 5);
         INSERT INTO orders (order_ref, customer_email, amount_minor, currency, status, paid_by)
           VALUES ('o_paid', 'a@example.com', 100, 'INR', 'paid', 'razorpay:pay_1'),
                  ('o_pending', 'b@example.com', 100, 'INR', 'pending', NULL);
         INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
           SELECT 'razorpay', 'pay_1', id, 'captured', 100, 'INR', 'evt_1' FROM orders WHERE order_ref = 'o_paid';
         INSERT INTO processed_webhooks (provider, event_id, event_type, outcome, received_at)
           VALUES ('razorpay', 'evt_1', 'payment.captured', 'applied', now());",
    )
    .execute(&pool)
    .await
    .expect("old data");

    oncehook_common::store::schema::both_steps()
        .run(&pool)
        .await
        .expect("upgrade");

    let (source, digest): (String, String) =
        sqlx::query_as("SELECT source, body_sha256 FROM processed_webhooks")
            .fetch_one(&pool)
            .await
            .expect("dedup row kept");
    assert_eq!((source.as_str(), digest.as_str()), ("razorpay", ""));
    let link: i64 = sqlx::query_scalar(
        "SELECT l.order_id FROM payment_links l WHERE l.provider = 'razorpay' AND l.payment_id = 'pay_1'",
    )
    .fetch_one(&pool)
    .await
    .expect("payments became links");
    let paid: i64 = sqlx::query_scalar("SELECT id FROM orders WHERE order_ref = 'o_paid'")
        .fetch_one(&pool)
        .await
        .expect("order");
    assert_eq!(link, paid);
    let applied: Vec<(String, bool)> =
        sqlx::query_as("SELECT order_ref, stock_applied FROM orders ORDER BY order_ref")
            .fetch_all(&pool)
            .await
            .expect("orders");
    assert_eq!(
        applied,
        vec![("o_paid".to_owned(), true), ("o_pending".to_owned(), false)],
        "a paid order's stock already moved; it must not move again"
    );
    pool.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE \"{name}\" WITH (FORCE)"
    )))
    .execute(&env.pool)
    .await
    .expect("drop database");
}
