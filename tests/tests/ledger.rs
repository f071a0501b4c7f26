//! The order ledger end to end (docs/ledger.md): cases that came out wrong
//! when the order's state followed the arrival order of events, each
//! delivered through the real ingest to real workers. The random,
//! model-based proof is `confluence.rs`.

use std::time::Duration;

use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_e2e::env::{Secrets, TestEnv};
use oncehook_e2e::{broker, eventually, shop};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample;
use sqlx::Row;

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

/// (status, refunded_minor, paid_by, oversold)
async fn books(env: &TestEnv, order_ref: &str) -> (String, i64, Option<String>, bool) {
    let r = sqlx::query(
        "SELECT status, refunded_minor, paid_by, oversold FROM orders WHERE order_ref = $1",
    )
    .bind(order_ref)
    .fetch_one(&env.pool)
    .await
    .expect("order");
    (
        r.get("status"),
        r.get("refunded_minor"),
        r.get("paid_by"),
        r.get("oversold"),
    )
}

#[tokio::test]
async fn a_refund_that_overtakes_its_capture_is_not_forgotten() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_r", 10).await;
    shop::order(&env.pool, "order_r", 50000, "INR", &[("sku_r", 2)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;

    let refund = env.sign(
        Gateway::Razorpay,
        "refund.processed",
        &env.spec("order_r", "pay_r", "evt_refund", 50000),
    );
    env.post_ok(&base, "razorpay", &refund).await;
    wait_processed(&env, 1).await;
    let (status, refunded, _, _) = books(&env, "order_r").await;
    assert_eq!((status.as_str(), refunded), ("pending", 50000));

    let capture = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_r", "pay_r", "evt_capture", 50000),
    );
    env.post_ok(&base, "razorpay", &capture).await;
    wait_processed(&env, 2).await;
    let (status, refunded, paid_by, _) = books(&env, "order_r").await;
    assert_eq!(
        (status.as_str(), refunded, paid_by.as_deref()),
        ("refunded", 50000, Some("razorpay:pay_r"))
    );
    // Stock moved once; one confirmation and one refund email.
    assert_eq!(shop::stock(&env.pool, "sku_r").await, 8);
    let mut kinds: Vec<String> = shop::emails(&env.pool, "order_r")
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    kinds.sort();
    assert_eq!(kinds, vec!["confirmation", "refund"]);
}

#[tokio::test]
async fn an_event_naming_only_its_payment_waits_for_the_link_then_applies() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_p", 10).await;
    shop::order(&env.pool, "order_p", 50000, "INR", &[("sku_p", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _w1 = env.start_worker().await;
    let _w2 = env.start_worker().await;

    // A refund whose payload names no order: parked, not dead-lettered.
    let refund = env.sign(
        Gateway::Razorpay,
        "refund.processed",
        &env.spec("", "pay_p", "evt_refund_p", 20000),
    );
    env.post_ok(&base, "razorpay", &refund).await;
    eventually("refund parked", Duration::from_secs(30), || async {
        (env.count("SELECT count(*) FROM parked_events").await == 1).then_some(())
    })
    .await;
    let (status, refunded, _, _) = books(&env, "order_p").await;
    assert_eq!((status.as_str(), refunded), ("pending", 0));

    // The capture links pay_p to order_p: the parked refund applies with it.
    let capture = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_p", "pay_p", "evt_capture_p", 50000),
    );
    env.post_ok(&base, "razorpay", &capture).await;
    eventually("refund applied", Duration::from_secs(30), || async {
        (env.count("SELECT count(*) FROM parked_events").await == 0
            && env.count("SELECT count(*) FROM refunds").await == 1)
            .then_some(())
    })
    .await;
    let (status, refunded, _, _) = books(&env, "order_p").await;
    assert_eq!((status.as_str(), refunded), ("partially_refunded", 20000));
    let outcomes: Vec<String> =
        sqlx::query_scalar("SELECT outcome FROM processed_webhooks ORDER BY event_id")
            .fetch_all(&env.pool)
            .await
            .expect("outcomes");
    assert_eq!(outcomes, vec!["applied", "applied"]);
    assert_eq!(
        broker::depth(&format!("{}.dead", env.prefix)).await,
        Some(0)
    );
}

#[tokio::test]
async fn an_event_never_linked_is_dead_lettered_after_the_ttl_leaving_nothing_to_absorb_a_replay() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
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
async fn zero_decimal_currencies_are_mailed_with_their_own_exponent() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_j", 10).await;
    shop::order(&env.pool, "order_jpy", 5000, "JPY", &[("sku_j", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let mut spec = env.spec("order_jpy", "pay_jpy", "evt_jpy", 5000);
    spec.currency = "JPY".into();
    env.post_ok(
        &base,
        "razorpay",
        &env.sign(Gateway::Razorpay, "payment.captured", &spec),
    )
    .await;
    wait_processed(&env, 1).await;
    let body: String =
        sqlx::query_scalar("SELECT body FROM email_outbox WHERE kind = 'confirmation'")
            .fetch_one(&env.pool)
            .await
            .expect("confirmation");
    assert!(body.contains("5000 JPY"), "{body}");
    assert!(!body.contains("50.00"), "{body}");
}

#[tokio::test]
async fn an_oversell_is_recorded_on_the_order_and_shown_by_trace_and_stats() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_last", 1).await;
    shop::order(&env.pool, "order_o1", 50000, "INR", &[("sku_last", 1)]).await;
    shop::order(&env.pool, "order_o2", 50000, "INR", &[("sku_last", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    for (order, pay) in [("order_o1", "pay_o1"), ("order_o2", "pay_o2")] {
        let d = env.sign(
            Gateway::Razorpay,
            "payment.captured",
            &env.spec(order, pay, &format!("evt_{pay}"), 50000),
        );
        env.post_ok(&base, "razorpay", &d).await;
    }
    wait_processed(&env, 2).await;
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

    MIGRATOR.run(&pool).await.expect("upgrade");

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

#[tokio::test]
async fn stripe_cumulative_refund_totals_are_not_added_up() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_s", 10).await;
    shop::order(&env.pool, "order_s", 500, "INR", &[("sku_s", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let capture = env.sign(
        Gateway::Stripe,
        "payment_intent.succeeded",
        &env.spec("order_s", "pi_s", "evt_s_paid", 500),
    );
    // Two partial refunds of 100 and 150: Stripe reports totals 100 and 250,
    // and here the later total arrives first.
    let total_250 = env.sign(
        Gateway::Stripe,
        "charge.refunded",
        &env.spec("order_s", "pi_s", "evt_s_r2", 250),
    );
    let total_100 = env.sign(
        Gateway::Stripe,
        "charge.refunded",
        &env.spec("order_s", "pi_s", "evt_s_r1", 100),
    );
    for d in [&capture, &total_250, &total_100] {
        env.post_ok(&base, "stripe", d).await;
    }
    wait_processed(&env, 3).await;
    let (status, refunded, _, _) = books(&env, "order_s").await;
    assert_eq!((status.as_str(), refunded), ("partially_refunded", 250));
}

#[tokio::test]
async fn a_stripe_checkout_intent_that_overtakes_its_session_is_not_dead_lettered() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_c", 10).await;
    shop::order(&env.pool, "order_c", 2500, "INR", &[("sku_c", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    // Checkout: the intents carry no order reference; only the session does.
    let failed = env.sign(
        Gateway::Stripe,
        "payment_intent.payment_failed",
        &env.spec("", "pi_c", "evt_c_failed", 2500),
    );
    let succeeded = env.sign(
        Gateway::Stripe,
        "payment_intent.succeeded",
        &env.spec("", "pi_c", "evt_c_succeeded", 2500),
    );
    env.post_ok(&base, "stripe", &failed).await;
    env.post_ok(&base, "stripe", &succeeded).await;
    eventually("intents parked", Duration::from_secs(30), || async {
        (env.count("SELECT count(*) FROM parked_events").await == 2).then_some(())
    })
    .await;
    assert_eq!(shop::order_status(&env.pool, "order_c").await, "pending");

    let session = env.sign(
        Gateway::Stripe,
        "checkout.session.completed",
        &env.spec("order_c", "pi_c", "evt_c_session", 2500),
    );
    env.post_ok(&base, "stripe", &session).await;
    wait_processed(&env, 3).await;
    assert_eq!(shop::order_status(&env.pool, "order_c").await, "paid");
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    let mut attempts: Vec<(String, Option<String>)> = shop::payments(&env.pool, "order_c").await;
    attempts.sort();
    assert_eq!(
        attempts,
        vec![("captured".to_owned(), None), ("failed".to_owned(), None)],
        "the failed attempt is recorded too, and the capture once"
    );
    assert_eq!(shop::stock(&env.pool, "sku_c").await, 9);
    assert_eq!(
        broker::depth(&format!("{}.dead", env.prefix)).await,
        Some(0)
    );
}

#[tokio::test]
async fn a_payu_retry_with_a_new_txnid_pays_the_order_named_in_udf1() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_u", 10).await;
    shop::order(&env.pool, "order_u", 50000, "INR", &[("sku_u", 1)]).await;
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    // PayU needs a new txnid per attempt; the order reference is in udf1.
    let failed = env.sign(
        Gateway::Payu,
        "failure",
        &env.spec("order_u", "txn_u_1", "evt_u_1", 50000),
    );
    let retried = env.sign(
        Gateway::Payu,
        "success",
        &env.spec("order_u", "txn_u_2", "evt_u_2", 50000),
    );
    env.post_ok(&base, "payu", &failed).await;
    env.post_ok(&base, "payu", &retried).await;
    wait_processed(&env, 2).await;
    let (status, _, paid_by, _) = books(&env, "order_u").await;
    assert_eq!(
        (status.as_str(), paid_by.as_deref()),
        ("paid", Some("payu:txn_u_2"))
    );
    assert_eq!(
        broker::depth(&format!("{}.dead", env.prefix)).await,
        Some(0)
    );
}

#[tokio::test]
async fn a_razorpay_shop_keeps_its_own_order_ids_through_a_gateway_reference() {
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    shop::product(&env.pool, "sku_gr", 10).await;
    shop::order(&env.pool, "shop_1001", 50000, "INR", &[("sku_gr", 1)]).await;
    sqlx::query(
        "INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id)
         SELECT 'razorpay', 'order_RZPgr1', id FROM orders WHERE order_ref = 'shop_1001'",
    )
    .execute(&env.pool)
    .await
    .expect("gateway reference");
    let (_ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    // Razorpay's payload names its own order id, never the shop's.
    let capture = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("order_RZPgr1", "pay_gr1", "evt_gr1", 50000),
    );
    env.post_ok(&base, "razorpay", &capture).await;
    eventually("the shop's order paid", Duration::from_secs(30), || async {
        (books(&env, "shop_1001").await.0 == "paid").then_some(())
    })
    .await;
    let (status, refunded, paid_by, oversold) = books(&env, "shop_1001").await;
    assert_eq!(
        (status.as_str(), refunded, paid_by.as_deref(), oversold),
        ("paid", 0, Some("razorpay:pay_gr1"), false)
    );
    assert_eq!(shop::stock(&env.pool, "sku_gr").await, 9);
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox WHERE kind = 'confirmation'")
            .await,
        1
    );
}
