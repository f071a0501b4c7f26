//! Reconciliation (docs/reconciliation.md) against the real binaries, with
//! a stand-in for each gateway's API (`support::gateway_api`): what the
//! gateway knows and no webhook brought is applied once, through the same
//! ledger; a late webhook, a second pass or a second worker change
//! nothing; faults of the API cost a metric and a retry, never a crash; a
//! source that fails mid-pass is given up for the rest of the pass, its
//! order is asked again by the next one, and what another source found in
//! that pass is applied without waiting for it to end.

use std::time::Duration;

use oncehook_e2e::gateway_api::{
    Fault, Gate, GatewayApi, backdate_orders, reconcile_every_second, reconcile_passes,
    register_gateway_ref, shapes, wait_more_reconcile_passes,
};
use oncehook_e2e::metrics::{scrape, series};
use oncehook_e2e::ops::{ctl_json, dead_queue};
use oncehook_e2e::shop::{self, Shop, emails, order_status, stock, wait_paid_and_mailed};
use oncehook_e2e::{PipelineSpec, TestEnv, WAIT, broker, eventually};
use oncehook_gateways::Gateway;
use serde_json::Value;

/// The stand-ins' sources, reconciled every second.
fn reconcile_often(env: &mut TestEnv, apis: &[&GatewayApi]) {
    env.use_gateway_apis(apis);
    reconcile_every_second(env);
}

async fn backdate(env: &TestEnv) {
    backdate_orders(env).await;
}

/// Completed passes on a worker's `/metrics`.
async fn passes(metrics: &str) -> f64 {
    reconcile_passes(metrics, "completed").await
}

/// An order with a Razorpay order id whose capture Razorpay knows (500.00 INR).
async fn captured_at_razorpay(
    env: &TestEnv,
    rzp: &GatewayApi,
    order_ref: &str,
    razorpay_order: &str,
    payment: &str,
    email: &str,
) {
    gateway_ref(env, order_ref, "razorpay", razorpay_order).await;
    rzp.add(
        &format!("/v1/orders/{razorpay_order}/payments"),
        shapes::razorpay_payment(payment, razorpay_order, "captured", 50_000, email),
    );
}

async fn gateway_ref(env: &TestEnv, order_ref: &str, gateway: &str, reference: &str) {
    register_gateway_ref(env, order_ref, gateway, reference).await;
}

/// `(event_id, outcome, origin)` of every delivery that touched an order.
async fn deliveries(env: &TestEnv, order_id_like: &str) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT event_id, outcome, origin FROM processed_webhooks
         WHERE order_ref = $1 OR payment_id IN (SELECT payment_id FROM payments p JOIN orders o ON o.id = p.order_id WHERE o.order_ref = $1)
            OR order_ref IN (SELECT gateway_ref FROM order_gateway_refs g JOIN orders o ON o.id = g.order_id WHERE o.order_ref = $1)
         ORDER BY received_at, event_id",
    )
    .bind(order_id_like)
    .fetch_all(&env.pool)
    .await
    .expect("deliveries")
}

/// Every fact of a `reconcile --json` report.
fn facts_of(report: &Value) -> Vec<Value> {
    report["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["calls"].as_array().cloned().unwrap_or_default())
        .flat_map(|c| c["facts"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_capture_whose_webhook_never_came_is_applied_once_and_the_late_webhook_is_absorbed() {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    Shop::basket("rc_lost_1").seed(&env.pool).await;
    captured_at_razorpay(
        &env,
        &rzp,
        "rc_lost_1",
        "order_RClost1",
        "pay_RClost1",
        "a@example.com",
    )
    .await;
    backdate(&env).await;
    reconcile_often(&mut env, &[&rzp]);
    let p = env.pipeline().await;

    wait_paid_and_mailed(&env.pool, "rc_lost_1").await;
    assert_eq!(
        (
            stock(&env.pool, "MUG").await,
            stock(&env.pool, "TSHIRT").await
        ),
        (8, 9)
    );
    let rows = deliveries(&env, "rc_lost_1").await;
    assert_eq!(
        rows,
        [(
            "reconciliation:pay_RClost1:captured".to_owned(),
            "applied".to_owned(),
            "reconciliation".to_owned()
        )]
    );
    let calls = rzp.calls();
    assert!(
        calls
            .iter()
            .any(|c| c == "GET /v1/orders/order_RClost1/payments")
            && calls
                .iter()
                .any(|c| c == "GET /v1/payments/pay_RClost1/refunds"),
        "the order's payments, then the refunds of the capture: {calls:?}"
    );
    let text = scrape(p.worker().metrics_url()).await;
    assert_eq!(
        series(
            &text,
            "oncehook_reconcile_facts_total",
            &[("source", "razorpay"), ("found", "missing_webhook")]
        ),
        1.0,
        "{text}"
    );
    assert!(
        series(
            &text,
            "oncehook_reconcile_last_success_timestamp_seconds",
            &[("source", "razorpay")]
        ) > 0.0
    );

    // The webhook arrives at last: the ledger has the fact already.
    env.post_ok(
        &p.url,
        "razorpay",
        &env.captured("order_RClost1", "pay_RClost1", "evt_RClate1"),
    )
    .await;
    eventually("the late webhook processed", WAIT, || async {
        (deliveries(&env, "rc_lost_1").await.len() == 2).then_some(())
    })
    .await;
    env.wait_events_drained().await;
    let rows = deliveries(&env, "rc_lost_1").await;
    assert_eq!(rows[1].0, "evt_RClate1");
    assert_eq!(
        (rows[1].1.as_str(), rows[1].2.as_str()),
        ("ignored", "webhook"),
        "{rows:?}"
    );
    assert_eq!(emails(&env.pool, "rc_lost_1").await.len(), 1, "one email");
    assert_eq!(
        (
            stock(&env.pool, "MUG").await,
            stock(&env.pool, "TSHIRT").await
        ),
        (8, 9),
        "stock once"
    );

    // Passes go on; a paid order is no longer asked about.
    let before = (rzp.call_count(), passes(p.worker().metrics_url()).await);
    eventually("two more passes", WAIT, || async {
        (passes(p.worker().metrics_url()).await >= before.1 + 2.0).then_some(())
    })
    .await;
    assert_eq!(rzp.call_count(), before.0);
    assert_eq!(deliveries(&env, "rc_lost_1").await.len(), 2);
    assert_eq!(order_status(&env.pool, "rc_lost_1").await, "paid");

    // `trace` says where the capture came from.
    let (code, out, err) = env.ctl(&["trace", "order", "rc_lost_1"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ORIGIN") && out.contains("reconciliation"),
        "{out}"
    );

    // `stats` (and the console's Overview) count what only reconciliation found.
    let stats = ctl_json(&env, &["stats"]).await;
    let r = &stats["reconciliation"];
    assert_eq!(r["from_reconciliation"]["razorpay"], 1, "{stats}");
    assert_eq!(r["sources"], serde_json::json!(["razorpay"]), "{stats}");
    assert_eq!(r["pending_in_window"], 0, "{stats}");
    assert!(
        r["last_run_age_secs"].as_i64().is_some_and(|s| s < 60),
        "{stats}"
    );
    let (_, text, _) = env.ctl(&["stats"]).await;
    assert!(
        text.contains("razorpay: 1 payment state(s) found only by reconciliation"),
        "{text}"
    );
}

#[tokio::test]
async fn a_failed_attempt_a_success_and_a_refund_are_each_applied_once() {
    let mut env = TestEnv::new().await;
    let cf = GatewayApi::start(Gateway::Cashfree).await;
    let payu = GatewayApi::start(Gateway::Payu).await;
    Shop::own_product("rc_cf_1").seed(&env.pool).await;
    Shop::own_product("rc_payu_1").seed(&env.pool).await;
    // Cashfree knows the order by the shop's own reference.
    let payments = "/pg/orders/rc_cf_1/payments";
    cf.add(
        payments,
        shapes::cashfree_payment(7001, "rc_cf_1", "FAILED", 500.0),
    );
    cf.add(
        payments,
        shapes::cashfree_payment(7002, "rc_cf_1", "SUCCESS", 500.0),
    );
    cf.add(
        "/pg/orders/rc_cf_1/refunds",
        shapes::cashfree_refund(7002, "rf_cf_1", "rc_cf_1", 125.5),
    );
    payu.payu_transaction(
        "rc_payu_1",
        shapes::payu_transaction("rc_payu_1", "rc_payu_1", "success", "500.00"),
    );
    backdate(&env).await;
    reconcile_often(&mut env, &[&cf, &payu]);
    let p = env.pipeline().await;

    eventually("the cashfree order refunded in part", WAIT, || async {
        (order_status(&env.pool, "rc_cf_1").await == "partially_refunded").then_some(())
    })
    .await;
    wait_paid_and_mailed(&env.pool, "rc_payu_1").await;
    let mut statuses: Vec<String> = shop::payments(&env.pool, "rc_cf_1")
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    statuses.sort();
    assert_eq!(statuses, ["captured", "failed"]);
    let refunded: i64 =
        sqlx::query_scalar("SELECT refunded_minor FROM orders WHERE order_ref = 'rc_cf_1'")
            .fetch_one(&env.pool)
            .await
            .expect("refunded");
    assert_eq!(refunded, 12_550);
    shop::wait_emails_sent(&env.pool, "rc_cf_1", 2).await;

    // More passes change nothing (and ask nothing: no order is pending).
    let rows = deliveries(&env, "rc_cf_1").await.len();
    let before = (cf.call_count(), passes(p.worker().metrics_url()).await);
    eventually("two more passes", WAIT, || async {
        (passes(p.worker().metrics_url()).await >= before.1 + 2.0).then_some(())
    })
    .await;
    assert_eq!(cf.call_count(), before.0);
    env.wait_events_drained().await;
    assert_eq!(deliveries(&env, "rc_cf_1").await.len(), rows);
    assert_eq!(
        emails(&env.pool, "rc_cf_1").await.len(),
        2,
        "a confirmation and a refund email"
    );
    assert_eq!(stock(&env.pool, "SKU_rc_cf_1").await, 9);
    assert!(
        payu.calls()
            .iter()
            .all(|c| c.starts_with("POST /merchant/postservice")),
        "{:?}",
        payu.calls()
    );
}

#[tokio::test]
async fn two_workers_make_one_pass_per_interval() {
    let mut env = TestEnv::new().await;
    let cf = GatewayApi::start(Gateway::Cashfree).await;
    Shop::own_product("rc_two_1").seed(&env.pool).await;
    backdate(&env).await;
    reconcile_often(&mut env, &[&cf]);
    env.set_env("ONCEHOOK_RECONCILE_INTERVAL", "2s");
    let started = std::time::Instant::now();
    let p = env
        .pipeline_with(PipelineSpec::default().workers(2).without_mailer())
        .await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let mut completed = 0.0;
    let mut skipped = 0.0;
    for w in &p.workers {
        let text = scrape(w.metrics_url()).await;
        completed += series(
            &text,
            "oncehook_reconcile_runs_total",
            &[("outcome", "completed")],
        );
        skipped += series(
            &text,
            "oncehook_reconcile_runs_total",
            &[("outcome", "skipped")],
        );
    }
    // Each pass asks for the order's payments and its refunds (a pass in
    // flight while the counters were read may have made its calls).
    let calls = cf.call_count() as f64;
    assert!(
        calls >= 2.0 * completed && calls <= 2.0 * completed + 2.0,
        "{calls} calls for {completed} passes: {:?}",
        cf.calls()
    );
    // Between them at most one pass per interval, plus the first of each
    // (they started within a second).
    let max = (elapsed / 2.0).ceil() + 2.0;
    assert!(
        completed >= 3.0 && completed <= max,
        "{completed} passes in {elapsed:.1}s (at most {max})"
    );
    assert!(skipped >= 1.0, "the other worker skipped");
}

#[tokio::test]
async fn an_event_stripe_failed_to_deliver_is_applied_once_and_other_businesses_events_are_left_alone()
 {
    let mut env = TestEnv::new().await;
    let stripe = GatewayApi::start(Gateway::Stripe).await;
    Shop::new()
        .product("RC_S", 5)
        .order_of("rc_st_1", 4990, "EUR", &[("RC_S", 1)])
        .seed(&env.pool)
        .await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let intent = shapes::stripe_intent("pi_RCst1", "rc_st_1", "succeeded", 4990, "s@example.com");
    stripe.undelivered(shapes::stripe_event(
        "evt_RCother",
        "payment_intent.succeeded",
        now - 60,
        shapes::stripe_intent(
            "pi_RCother",
            "not_ours_9",
            "succeeded",
            100,
            "x@example.com",
        ),
    ));
    stripe.undelivered(shapes::stripe_event(
        "evt_RCcust",
        "customer.created",
        now - 50,
        serde_json::json!({"id": "cus_1", "object": "customer"}),
    ));
    stripe.undelivered(shapes::stripe_event(
        "evt_RCst1",
        "payment_intent.succeeded",
        now - 40,
        intent,
    ));
    stripe.page_size(1);
    backdate(&env).await;
    reconcile_often(&mut env, &[&stripe]);
    let p = env.pipeline().await;

    wait_paid_and_mailed(&env.pool, "rc_st_1").await;
    let rows = deliveries(&env, "rc_st_1").await;
    assert_eq!(
        rows,
        [(
            "evt_RCst1".to_owned(),
            "applied".to_owned(),
            "reconciliation".to_owned()
        )]
    );
    let calls = stripe.calls();
    assert!(
        calls.iter().any(
            |c| c.contains("delivery_success=false") && c.contains("starting_after=evt_RCcust")
        ),
        "pages followed: {calls:?}"
    );
    env.wait_events_drained().await;
    // Published, it would wait for an order that never comes, then be
    // dead-lettered (after 2 s here).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let other: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM processed_webhooks WHERE event_id IN ('evt_RCother', 'evt_RCcust')",
    )
    .fetch_one(&env.pool)
    .await
    .expect("count");
    assert_eq!(other, 0, "another business's event is not published");
    assert_eq!(
        broker::depth_on(&env.amqp_urls, &dead_queue(&env)).await,
        Some(0)
    );
    // The event's own id: a late webhook of it is a plain duplicate.
    let late = env.sign(
        Gateway::Stripe,
        "payment_intent.succeeded",
        &env.spec("rc_st_1", "pi_RCst1", "evt_RCst1", 4990),
    );
    env.post_ok(&p.url, "stripe", &late).await;
    env.wait_events_drained().await;
    assert_eq!(emails(&env.pool, "rc_st_1").await.len(), 1);
    assert_eq!(stock(&env.pool, "RC_S").await, 4);
}

#[tokio::test]
async fn on_demand_a_dry_run_publishes_nothing_and_an_order_already_right_changes_nothing() {
    let mut env = TestEnv::new().await;
    let cf = GatewayApi::start(Gateway::Cashfree).await;
    Shop::own_product("rc_cli_1").seed(&env.pool).await;
    Shop::own_product("rc_cli_2").seed(&env.pool).await;
    cf.add(
        "/pg/orders/rc_cli_1/payments",
        shapes::cashfree_payment(8001, "rc_cli_1", "SUCCESS", 500.0),
    );
    cf.add(
        "/pg/orders/rc_cli_2/payments",
        shapes::cashfree_payment(8002, "rc_cli_2", "SUCCESS", 500.0),
    );
    env.use_gateway_apis(&[&cf]);
    // No scheduled pass in this test's time: only the tool asks.
    env.set_env("ONCEHOOK_RECONCILE_INTERVAL", "1h");
    env.set_env("ONCEHOOK_RECONCILE_AFTER", "1h");
    let p = env.pipeline().await;

    let dry = ctl_json(&env, &["reconcile", "--since", "1h", "--dry-run"]).await;
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["published"], 0);
    let facts = facts_of(&dry);
    assert_eq!(facts.len(), 2, "{dry}");
    assert!(
        facts
            .iter()
            .all(|f| f["found"] == "missing_webhook" && f["published"] == false),
        "{dry}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        order_status(&env.pool, "rc_cli_1").await,
        "pending",
        "a dry run changes nothing"
    );

    // The shop's webhook pays rc_cli_1; then one order is asked about on demand.
    let success = env.sign(
        Gateway::Cashfree,
        "PAYMENT_SUCCESS_WEBHOOK",
        &env.spec("rc_cli_1", "8001", "cfevt_1", 50_000),
    );
    env.post_ok(&p.url, "cashfree", &success).await;
    wait_paid_and_mailed(&env.pool, "rc_cli_1").await;
    let right = ctl_json(&env, &["reconcile", "--order", "rc_cli_1"]).await;
    assert_eq!(right["published"], 0, "{right}");
    assert_eq!(
        right["sources"][0]["calls"][0]["facts"][0]["found"], "already_recorded",
        "{right}"
    );
    env.wait_events_drained().await;
    assert_eq!(
        emails(&env.pool, "rc_cli_1").await.len(),
        1,
        "no second email"
    );
    assert_eq!(
        deliveries(&env, "rc_cli_1").await.len(),
        1,
        "no new delivery"
    );

    // A real pass over the window: rc_cli_2 is found and paid.
    let (code, out, err) = env
        .ctl(&["reconcile", "--since", "1h", "--source", "cashfree"])
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("missing (no webhook brought it), published"),
        "{out}"
    );
    wait_paid_and_mailed(&env.pool, "rc_cli_2").await;

    // A budget of 3 calls is 3 calls, however many orders wait.
    for r in ["rc_cli_b1", "rc_cli_b2", "rc_cli_b3"] {
        Shop::own_product(r).seed(&env.pool).await;
    }
    backdate(&env).await;
    let before = cf.call_count();
    env.set_env("ONCEHOOK_RECONCILE_CALLS_PER_RUN", "3");
    let budget = ctl_json(&env, &["reconcile", "--since", "1h", "--dry-run"]).await;
    assert_eq!(cf.call_count() - before, 3, "{:?}", cf.calls());
    assert!(
        budget["sources"][0]["stopped"]
            .as_str()
            .is_some_and(|s| s.contains("budget")),
        "{budget}"
    );
    assert_eq!(
        budget["sources"][0]["not_asked"],
        serde_json::json!(["rc_cli_b2", "rc_cli_b3"]),
        "{budget}"
    );
    let (code, _, err) = env.ctl(&["reconcile", "--source", "nope"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("no source \"nope\" with a [source.api]") && err.contains("cashfree"),
        "{err}"
    );
}

#[tokio::test]
async fn api_faults_cost_a_metric_and_a_retry_and_the_order_settles_when_the_api_recovers() {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    Shop::own_product("rc_fault_1").seed(&env.pool).await;
    captured_at_razorpay(
        &env,
        &rzp,
        "rc_fault_1",
        "order_RCfault1",
        "pay_RCfault1",
        "f@example.com",
    )
    .await;
    // A revoked key first.
    rzp.refuse_credentials(true);
    backdate(&env).await;
    reconcile_often(&mut env, &[&rzp]);
    let p = env.pipeline().await;
    let metrics = p.worker().metrics_url().to_owned();
    eventually("401s counted", WAIT, || async {
        (series(
            &scrape(&metrics).await,
            "oncehook_reconcile_api_errors_total",
            &[("source", "razorpay"), ("status", "401")],
        ) >= 2.0)
            .then_some(())
    })
    .await;
    assert_eq!(order_status(&env.pool, "rc_fault_1").await, "pending");
    assert_eq!(
        series(
            &scrape(&metrics).await,
            "oncehook_reconcile_last_success_timestamp_seconds",
            &[("source", "razorpay")]
        ),
        0.0
    );
    assert!(
        p.worker()
            .log_text()
            .contains("refused the reconciler's credentials"),
        "the log names it"
    );
    env.wait_ready(&metrics, "/readyz").await;

    // The key works again, but the API limits, fails and is slow first.
    rzp.faults(&[
        Fault::RateLimited(1),
        Fault::Status(500),
        Fault::Slow(Duration::from_secs(3)),
        Fault::Status(503),
    ]);
    rzp.refuse_credentials(false);
    wait_paid_and_mailed(&env.pool, "rc_fault_1").await;
    let text = scrape(&metrics).await;
    for status in ["429", "500", "timeout", "503"] {
        assert!(
            series(
                &text,
                "oncehook_reconcile_api_errors_total",
                &[("source", "razorpay"), ("status", status)]
            ) >= 1.0,
            "{status}: {text}"
        );
    }
    assert!(
        series(
            &text,
            "oncehook_reconcile_last_success_timestamp_seconds",
            &[("source", "razorpay")]
        ) > 0.0
    );
    assert_eq!(emails(&env.pool, "rc_fault_1").await.len(), 1);
    assert_eq!(stock(&env.pool, "SKU_rc_fault_1").await, 9);
}

/// Passes every second over paid orders only (a pending order is younger
/// than `after` here), each paid order asked about at most once an hour,
/// and calls that wait as long as a test holds an answer back.
fn reconcile_paid_orders(env: &mut TestEnv, apis: &[&GatewayApi]) {
    reconcile_often(env, apis);
    env.set_env("ONCEHOOK_RECONCILE_AFTER", "1h");
    env.set_env("ONCEHOOK_RECONCILE_PAID_INTERVAL", "1h");
    env.set_env("ONCEHOOK_RECONCILE_TIMEOUT", "30s");
}

/// Makes an order paid `minutes` ago: due on the paid schedule (asked at
/// most once an hour) from the next pass on.
async fn paid_minutes_ago(env: &TestEnv, order_ref: &str, minutes: i32) {
    sqlx::query(
        "UPDATE orders SET paid_at = now() - make_interval(mins => $2) WHERE order_ref = $1",
    )
    .bind(order_ref)
    .bind(minutes)
    .execute(&env.pool)
    .await
    .expect("backdate paid_at");
}

/// Waits until `order_ref`'s status is `status`.
async fn wait_status(env: &TestEnv, order_ref: &str, status: &str) {
    eventually(&format!("{order_ref} {status}"), WAIT, || async {
        (order_status(&env.pool, order_ref).await == status).then_some(())
    })
    .await;
}

/// Pays `order_ref` by the webhook of Razorpay's order `order_{tag}`
/// (payment `pay_{tag}`, 500.00), then lets Razorpay know its refund
/// `rfnd_{tag}` of `refund_minor`, whose webhook never comes.
async fn refunded_at_razorpay(
    env: &TestEnv,
    p: &oncehook_e2e::Pipeline,
    rzp: &GatewayApi,
    order_ref: &str,
    tag: &str,
    refund_minor: i64,
) {
    let (rzp_order, payment) = (format!("order_{tag}"), format!("pay_{tag}"));
    gateway_ref(env, order_ref, "razorpay", &rzp_order).await;
    env.post_ok(
        &p.url,
        "razorpay",
        &env.captured(&rzp_order, &payment, &format!("evt_{tag}")),
    )
    .await;
    wait_paid_and_mailed(&env.pool, order_ref).await;
    rzp.add(
        &format!("/v1/orders/{rzp_order}/payments"),
        shapes::razorpay_payment(&payment, &rzp_order, "captured", 50_000, "g@example.com"),
    );
    rzp.add(
        &format!("/v1/payments/{payment}/refunds"),
        shapes::razorpay_refund(&format!("rfnd_{tag}"), &payment, refund_minor),
    );
}

/// Razorpay's API fails while a pass asks about the first of two paid
/// orders: its four attempts (the retry policy's) and not one call more in
/// that pass — neither that order's refunds nor the other order — and
/// the pass ends; the order none of whose calls was answered is not marked
/// as asked, so the very next pass asks it first (not `paid_interval`
/// later), and finds both refunds.
#[tokio::test]
async fn a_source_failing_mid_pass_gets_no_call_after_its_retries_and_its_order_is_asked_on_the_very_next_pass()
 {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    Shop::mugs(10, &["rc_give_1", "rc_give_2"])
        .seed(&env.pool)
        .await;
    reconcile_paid_orders(&mut env, &[&rzp]);
    let p = env.pipeline().await;
    let metrics = p.worker().metrics_url().to_owned();
    refunded_at_razorpay(&env, &p, &rzp, "rc_give_1", "RCgive1", 50_000).await;
    refunded_at_razorpay(&env, &p, &rzp, "rc_give_2", "RCgive2", 50_000).await;
    assert_eq!(
        rzp.call_count(),
        0,
        "nothing asked before the orders are due"
    );

    // The first attempt fails once the test has counted the passes, the
    // three retries fail at once, and whatever is asked next is held.
    let (first, next) = (Gate::default(), Gate::default());
    rzp.faults(&[
        Fault::HeldStatus(first.clone(), 500),
        Fault::Status(500),
        Fault::Status(500),
        Fault::Status(500),
        Fault::Gated(next.clone()),
    ]);
    paid_minutes_ago(&env, "rc_give_1", 120).await;
    paid_minutes_ago(&env, "rc_give_2", 119).await;
    rzp.wait_calls_over(0).await;
    let during = passes(&metrics).await;
    first.open();
    rzp.wait_calls_over(4).await;
    let after_retries = passes(&metrics).await;
    let calls = rzp.calls();
    let payments_1 = "GET /v1/orders/order_RCgive1/payments";
    assert_eq!(
        calls[..4],
        [payments_1; 4],
        "the first order's payments, tried four times"
    );
    assert_eq!(
        after_retries,
        during + 1.0,
        "the pass gave Razorpay up after the retries and ended: the call after them came from the next pass ({calls:?})"
    );
    assert_eq!(
        calls[4], payments_1,
        "the order whose calls failed is not marked asked: the very next pass asks it first ({calls:?})"
    );

    next.open();
    wait_status(&env, "rc_give_1", "refunded").await;
    wait_status(&env, "rc_give_2", "refunded").await;
    eventually("the next pass ended", WAIT, || async {
        (passes(&metrics).await >= during + 2.0).then_some(())
    })
    .await;
    let calls = rzp.calls();
    assert_eq!(
        calls[5..],
        [
            "GET /v1/payments/pay_RCgive1/refunds",
            "GET /v1/orders/order_RCgive2/payments",
            "GET /v1/payments/pay_RCgive2/refunds",
        ],
        "the next pass asked both orders in full: {calls:?}"
    );
    // Both were answered in full by then: marked, not asked again within
    // the hour.
    wait_more_reconcile_passes(&metrics, "completed", 2.0).await;
    assert_eq!(rzp.call_count(), calls.len(), "{:?}", rzp.calls());
    env.wait_events_drained().await;
    for order_ref in ["rc_give_1", "rc_give_2"] {
        assert_eq!(
            emails(&env.pool, order_ref).await.len(),
            2,
            "{order_ref}: a confirmation and one refund email"
        );
    }
}

/// A fact found is published when it is found: while Razorpay's API holds
/// a pass with an answer that comes late and fails, the refund Cashfree
/// answered in the same pass is applied before that pass ends. The
/// Cashfree order, answered in full, is marked asked; the Razorpay one is
/// asked again by the next pass, which finds its refund.
#[tokio::test]
async fn a_fact_found_is_applied_before_the_pass_ends_while_another_source_fails() {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    let cf = GatewayApi::start(Gateway::Cashfree).await;
    Shop::mugs(10, &["rc_mid_rzp", "rc_mid_cf"])
        .seed(&env.pool)
        .await;
    reconcile_paid_orders(&mut env, &[&rzp, &cf]);
    let p = env.pipeline().await;
    let metrics = p.worker().metrics_url().to_owned();
    refunded_at_razorpay(&env, &p, &rzp, "rc_mid_rzp", "RCmid1", 50_000).await;
    let success = env.sign(
        Gateway::Cashfree,
        "PAYMENT_SUCCESS_WEBHOOK",
        &env.spec("rc_mid_cf", "9301", "cfevt_RCmid", 50_000),
    );
    env.post_ok(&p.url, "cashfree", &success).await;
    wait_paid_and_mailed(&env.pool, "rc_mid_cf").await;
    cf.add(
        "/pg/orders/rc_mid_cf/refunds",
        shapes::cashfree_refund(9301, "rf_RCmid", "rc_mid_cf", 125.5),
    );

    let failing = Gate::default();
    rzp.faults(&[
        Fault::HeldStatus(failing.clone(), 500),
        Fault::Status(500),
        Fault::Status(500),
        Fault::Status(500),
    ]);
    paid_minutes_ago(&env, "rc_mid_rzp", 120).await;
    paid_minutes_ago(&env, "rc_mid_cf", 120).await;
    rzp.wait_calls_over(0).await;
    let during = passes(&metrics).await;
    eventually(
        "Cashfree's refund applied while Razorpay holds the pass",
        WAIT,
        || async {
            (order_status(&env.pool, "rc_mid_cf").await == "partially_refunded").then_some(())
        },
    )
    .await;
    assert_eq!(
        passes(&metrics).await,
        during,
        "applied before the pass that found it ended"
    );
    assert_eq!(rzp.call_count(), 1, "Razorpay's first answer still held");

    failing.open();
    eventually("the failing pass ended", WAIT, || async {
        (passes(&metrics).await > during).then_some(())
    })
    .await;
    let cf_calls = cf.calls();
    assert_eq!(
        cf_calls,
        [
            "GET /pg/orders/rc_mid_cf/payments",
            "GET /pg/orders/rc_mid_cf/refunds"
        ],
        "Cashfree was asked once"
    );
    assert_eq!(
        order_status(&env.pool, "rc_mid_rzp").await,
        "paid",
        "nothing found at Razorpay yet"
    );
    wait_status(&env, "rc_mid_rzp", "refunded").await;
    wait_more_reconcile_passes(&metrics, "completed", 1.0).await;
    assert_eq!(
        cf.calls(),
        cf_calls,
        "the Cashfree order, answered in full, was marked asked"
    );
    env.wait_events_drained().await;
    assert_eq!(emails(&env.pool, "rc_mid_cf").await.len(), 2);
    assert_eq!(emails(&env.pool, "rc_mid_rzp").await.len(), 2);
}

/// A call refused for its own sake (a 4xx that is not the gateway's "no
/// such id") is that call's trouble, not the source's: the source is asked
/// on in the same pass (that order's refunds, the other order), but the
/// order one of whose calls went unanswered is not marked as asked, so the
/// very next pass asks it again — and only it (both orders stay
/// `partially_refunded`, in the paid window: only the mark keeps one out).
#[tokio::test]
async fn an_order_with_a_call_unanswered_is_asked_again_on_the_very_next_pass() {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    Shop::mugs(10, &["rc_part_1", "rc_part_2"])
        .seed(&env.pool)
        .await;
    reconcile_paid_orders(&mut env, &[&rzp]);
    let p = env.pipeline().await;
    let metrics = p.worker().metrics_url().to_owned();
    refunded_at_razorpay(&env, &p, &rzp, "rc_part_1", "RCpart1", 10_000).await;
    refunded_at_razorpay(&env, &p, &rzp, "rc_part_2", "RCpart2", 10_000).await;

    rzp.faults(&[Fault::Status(400)]);
    paid_minutes_ago(&env, "rc_part_1", 120).await;
    paid_minutes_ago(&env, "rc_part_2", 119).await;
    rzp.wait_calls_over(0).await;
    // The pass under way (or just ended) and two more: the next one asks
    // the unanswered order again, the one after asks nothing.
    let first = passes(&metrics).await;
    eventually("three passes", WAIT, || async {
        (passes(&metrics).await >= first + 3.0).then_some(())
    })
    .await;
    assert_eq!(
        rzp.calls(),
        [
            "GET /v1/orders/order_RCpart1/payments",
            "GET /v1/payments/pay_RCpart1/refunds",
            "GET /v1/orders/order_RCpart2/payments",
            "GET /v1/payments/pay_RCpart2/refunds",
            "GET /v1/orders/order_RCpart1/payments",
            "GET /v1/payments/pay_RCpart1/refunds",
        ],
        "one pass asked both orders in full despite the refused call, the next asked rc_part_1 again"
    );
    wait_status(&env, "rc_part_1", "partially_refunded").await;
    wait_status(&env, "rc_part_2", "partially_refunded").await;
    let text = scrape(&metrics).await;
    assert_eq!(
        series(
            &text,
            "oncehook_reconcile_api_errors_total",
            &[("source", "razorpay"), ("status", "400")]
        ),
        1.0,
        "refused once, not retried: {text}"
    );
}

/// Registers `reference` at Razorpay for tenant `tenant`'s order `order_ref`.
async fn tenant_gateway_ref(env: &TestEnv, tenant: &str, order_ref: &str, reference: &str) {
    sqlx::query(
        "INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id, tenant_id)
         SELECT 'razorpay', $2, id, tenant_id FROM orders WHERE order_ref = $1 AND tenant_id = $3",
    )
    .bind(order_ref)
    .bind(reference)
    .bind(tenant)
    .execute(&env.pool)
    .await
    .expect("gateway ref");
}

/// Two shops, each with its own Razorpay account and the same order
/// reference, neither capture's webhook ever came: each account is asked
/// about its own shop's order only, and each order is paid by its own
/// capture (docs/tenants.md).
#[tokio::test]
async fn each_tenants_source_is_asked_about_its_own_orders_only() {
    let mut env = TestEnv::new().await;
    let (code, out, err) = env
        .ctl(&["tenants", "create", "globex", "--name", "Globex"])
        .await;
    assert_eq!(code, 0, "{out}{err}");
    let ours = GatewayApi::start(Gateway::Razorpay).await;
    let theirs = GatewayApi::start(Gateway::Razorpay).await;
    Shop::basket("rc_t1").seed(&env.pool).await;
    Shop::basket("rc_t1").seed_in(&env.pool, "globex").await;
    for (tenant, api, rzp_order, payment) in [
        ("default", &ours, "order_RCdef", "pay_RCdef"),
        ("globex", &theirs, "order_RCglx", "pay_RCglx"),
    ] {
        tenant_gateway_ref(&env, tenant, "rc_t1", rzp_order).await;
        api.add(
            &format!("/v1/orders/{rzp_order}/payments"),
            shapes::razorpay_payment(payment, rzp_order, "captured", 50_000, "a@example.com"),
        );
    }
    backdate(&env).await;
    env.use_gateway_apis(&[&ours]);
    env.append_config(&format!(
        "[[source]]\nname = \"globex-razorpay\"\ngateway = \"razorpay\"\nsecrets = [\"{}\"]\ntenant = \"globex\"\n{}",
        oncehook_e2e::Secrets::RAZORPAY,
        theirs.source_api_toml()
    ));
    reconcile_every_second(&mut env);
    let _p = env.pipeline().await;

    let paid: Vec<(String, String, Option<String>)> =
        eventually("both orders paid", WAIT, || async {
            let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
                "SELECT o.tenant_id, o.status, p.tenant_id FROM orders o
                 LEFT JOIN payments p ON p.order_id = o.id
                 WHERE o.order_ref = 'rc_t1' ORDER BY o.tenant_id",
            )
            .fetch_all(&env.pool)
            .await
            .expect("orders");
            rows.iter().all(|r| r.1 == "paid").then_some(rows)
        })
        .await;
    assert_eq!(
        paid,
        [
            ("default".into(), "paid".into(), Some("default".into())),
            ("globex".into(), "paid".into(), Some("globex".into()))
        ]
    );
    let by: Vec<(String, String)> = sqlx::query_as(
        "SELECT o.tenant_id, p.payment_id FROM orders o JOIN payments p ON p.order_id = o.id
         WHERE o.order_ref = 'rc_t1' ORDER BY 1",
    )
    .fetch_all(&env.pool)
    .await
    .expect("payments");
    assert_eq!(
        by,
        [
            ("default".into(), "pay_RCdef".into()),
            ("globex".into(), "pay_RCglx".into())
        ]
    );
    // Neither account was asked about the other shop's order.
    let (mine, other) = (ours.calls(), theirs.calls());
    assert!(
        mine.iter().all(|c| !c.contains("RCglx")) && other.iter().all(|c| !c.contains("RCdef")),
        "ours: {mine:?}\ntheirs: {other:?}"
    );
    assert!(other.iter().any(|c| c.contains("order_RCglx")), "{other:?}");
}
