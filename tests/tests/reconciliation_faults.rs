//! Faults during a reconciliation pass (docs/reconciliation.md, "Limits
//! and faults"), each against the real worker with a stand-in of
//! Razorpay's API whose first answer is held back, so the fault lands while
//! the pass is asking: the broker stopped, a publish the broker refuses to
//! confirm, Postgres stopped, the worker SIGKILLed and SIGTERMed. After
//! each, every capture the webhooks lost is applied exactly once (lost 0,
//! doubled 0: one payment, one delivery, one email, stock once per order)
//! and the pass is recorded as it ended. A last test holds a pass on a slow
//! gateway while webhooks flow, and compares a delivery's median time
//! through the worker with and without it. The refunder publishes through
//! the same publisher: a last test stops the broker after the gateway made
//! a refund and before the refunder heard, and the refund is made once.
//!
//! These tests stop the machine's shared RabbitMQ and Postgres: they run one
//! at a time, and an [`Outage`] brings its service back even when an
//! assertion fails.

use std::time::{Duration, Instant};

use oncehook_e2e::gateway_api::{
    Fault, GatewayApi, backdate_orders, reconcile_every_second, reconcile_passes, refund_passes,
    register_gateway_ref, shapes, wait_reconcile_passes,
};
use oncehook_e2e::services::{MemoryAlarm, Outage, Service};
use oncehook_e2e::shop::{self, emails, order_status, stock};
use oncehook_e2e::{Proc, TestEnv, WAIT, eventually};
use oncehook_gateways::Gateway;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long the stand-in holds its first answer back: the window in which
/// each fault lands.
const HELD: Duration = Duration::from_secs(4);

/// Orders whose captures Razorpay knows and no webhook delivered: `n`
/// orders of one mug each (100 mugs in stock), each with its Razorpay order
/// registered. Returns their references.
async fn lost_captures(env: &TestEnv, rzp: &GatewayApi, tag: &str, n: usize) -> Vec<String> {
    shop::product(&env.pool, "MUG", 100).await;
    let mut refs = Vec::new();
    for i in 0..n {
        let order_ref = format!("{tag}_{i}");
        shop::order(&env.pool, &order_ref, 50_000, "INR", &[("MUG", 1)]).await;
        lost_capture(env, rzp, &order_ref).await;
        refs.push(order_ref);
    }
    backdate_orders(env).await;
    refs
}

/// Registers the order's Razorpay order and lets Razorpay know its capture.
async fn lost_capture(env: &TestEnv, rzp: &GatewayApi, order_ref: &str) {
    let (rzp_order, payment) = names(order_ref);
    register_gateway_ref(env, order_ref, "razorpay", &rzp_order).await;
    rzp.add(
        &format!("/v1/orders/{rzp_order}/payments"),
        shapes::razorpay_payment(&payment, &rzp_order, "captured", 50_000, "f@example.com"),
    );
}

/// The Razorpay order and payment of an order.
fn names(order_ref: &str) -> (String, String) {
    (format!("order_{order_ref}"), format!("pay_{order_ref}"))
}

/// The worker's settings for these tests: a pass every second, calls that
/// may take longer than the held answer.
fn configure(env: &mut TestEnv, rzp: &GatewayApi) {
    env.use_gateway_apis(&[rzp]);
    reconcile_every_second(env);
    env.set_env("ONCEHOOK_RECONCILE_TIMEOUT", "20s");
}

/// The next pass's first answer is held back for `held`; returns once the
/// pass is waiting for it.
async fn hold_next_pass(rzp: &GatewayApi, held: Duration) {
    let before = rzp.call_count();
    rzp.faults(&[Fault::Slow(held)]);
    rzp.wait_calls_over(before).await;
}

/// Passes of `outcome` on a worker's `/metrics` (0 while it does not answer).
async fn passes(metrics: &str, outcome: &str) -> f64 {
    reconcile_passes(metrics, outcome).await
}

/// Waits for `n` passes of `outcome` on `worker`.
async fn wait_passes(worker: &Proc, outcome: &str, n: f64) {
    wait_reconcile_passes(worker.metrics_url(), outcome, n).await;
}

/// How many of `refs` reconciliation has marked as asked about.
async fn marked(env: &TestEnv, refs: &[String]) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM reconcile_checks c JOIN orders o ON o.id = c.order_id
         WHERE o.order_ref = ANY($1)",
    )
    .bind(refs)
    .fetch_one(&env.pool)
    .await
    .expect("reconcile_checks")
}

/// Whether a scheduled pass was ever recorded as finished.
async fn finished_runs(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT COALESCE(max(runs), 0) FROM reconcile_runs")
        .fetch_one(&env.pool)
        .await
        .expect("reconcile_runs")
}

/// Lost 0, doubled 0: every order paid, with one capture recorded from one
/// delivery, one email, and the stock moved once for each (`paid` mugs
/// sold in all).
async fn applied_once(env: &TestEnv, refs: &[String], paid: usize) {
    for order_ref in refs {
        eventually(&format!("{order_ref} paid"), WAIT, || async {
            (order_status(&env.pool, order_ref).await == "paid").then_some(())
        })
        .await;
    }
    env.wait_events_drained().await;
    for order_ref in refs {
        let (_, payment) = names(order_ref);
        let payments: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM payments WHERE provider = 'razorpay' AND payment_id = $1",
        )
        .bind(&payment)
        .fetch_one(&env.pool)
        .await
        .expect("payments");
        assert_eq!(payments, 1, "{order_ref}: one capture recorded");
        let deliveries: i64 =
            sqlx::query_scalar("SELECT count(*) FROM processed_webhooks WHERE event_id = $1")
                .bind(format!("reconciliation:{payment}:captured"))
                .fetch_one(&env.pool)
                .await
                .expect("deliveries");
        assert_eq!(deliveries, 1, "{order_ref}: applied from one delivery");
        assert_eq!(
            emails(&env.pool, order_ref).await.len(),
            1,
            "{order_ref}: one email"
        );
    }
    assert_eq!(
        stock(&env.pool, "MUG").await,
        100 - paid as i32,
        "stock moved once per paid order"
    );
}

#[tokio::test]
async fn the_broker_stopped_mid_pass_fails_the_pass_marks_nothing_and_the_next_pass_applies_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    let refs = lost_captures(&env, &rzp, "rf_broker", 3).await;
    configure(&mut env, &rzp);
    rzp.faults(&[Fault::Slow(HELD)]);
    let worker = env.start_worker().await;
    rzp.wait_calls_over(0).await;

    let outage = Outage::begin(Service::RabbitMq).await;
    wait_passes(&worker, "failed", 1.0).await;
    let marked_during = marked(&env, &refs).await;
    let finished_during = finished_runs(&env).await;
    let pending_during = order_status(&env.pool, &refs[0]).await;
    outage.end().await;

    assert_eq!(
        marked_during, 0,
        "a pass that could not publish marks nothing"
    );
    assert_eq!(finished_during, 0, "and is not recorded as finished");
    assert_eq!(pending_during, "pending");
    applied_once(&env, &refs, refs.len()).await;
    wait_passes(&worker, "completed", 1.0).await;
    assert!(finished_runs(&env).await >= 1, "the next pass is recorded");
}

#[tokio::test]
async fn a_publish_the_broker_does_not_confirm_fails_the_pass_and_the_next_pass_applies_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    let refs = lost_captures(&env, &rzp, "rf_nack", 2).await;
    configure(&mut env, &rzp);
    // The broker's memory alarm: it stops reading what publishers send, so
    // no publish is confirmed within the publish timeout.
    env.set_env("ONCEHOOK_PUBLISH_TIMEOUT_MS", "2000");
    let alarm = MemoryAlarm::raise().await;
    let worker = env.start_worker().await;
    wait_passes(&worker, "failed", 1.0).await;
    let marked_during = marked(&env, &refs).await;
    let statuses: Vec<String> = {
        let mut all = Vec::new();
        for r in &refs {
            all.push(order_status(&env.pool, r).await);
        }
        all
    };
    alarm.lower().await;

    assert_eq!(
        marked_during, 0,
        "a pass with an unconfirmed publish marks nothing"
    );
    assert!(
        statuses.iter().all(|s| s == "pending"),
        "nothing unconfirmed was applied: {statuses:?}"
    );
    assert!(
        worker.log_text().contains("reconciliation pass failed"),
        "the failure is logged: {}",
        worker.log_text()
    );
    applied_once(&env, &refs, refs.len()).await;
    wait_passes(&worker, "completed", 1.0).await;
}

#[tokio::test]
async fn postgres_stopped_mid_pass_fails_the_pass_and_consuming_goes_on() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    let refs = lost_captures(&env, &rzp, "rf_pg", 2).await;
    shop::order(&env.pool, "rf_pg_hook", 50_000, "INR", &[("MUG", 1)]).await;
    configure(&mut env, &rzp);
    rzp.faults(&[Fault::Slow(HELD)]);
    let (_ingest, ingest_url) = env.start_ingest().await;
    let worker = env.start_worker().await;
    rzp.wait_calls_over(0).await;

    let outage = Outage::begin(Service::Postgres).await;
    // A webhook arrives meanwhile: ingest takes it without the database.
    env.post_ok(
        &ingest_url,
        "razorpay",
        &env.captured("rf_pg_hook", "pay_rf_pg_hook", "evt_rf_pg_hook"),
    )
    .await;
    wait_passes(&worker, "failed", 1.0).await;
    outage.end().await;

    eventually(
        "the webhook taken during the outage applied",
        WAIT,
        || async { (order_status(&env.pool, "rf_pg_hook").await == "paid").then_some(()) },
    )
    .await;
    applied_once(&env, &refs, refs.len() + 1).await;
    wait_passes(&worker, "completed", 1.0).await;
}

#[tokio::test]
async fn a_worker_sigkilled_mid_pass_releases_the_lock_and_another_worker_makes_the_pass() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    let refs = lost_captures(&env, &rzp, "rf_kill", 3).await;
    configure(&mut env, &rzp);
    rzp.faults(&[Fault::Slow(Duration::from_secs(10))]);
    let mut first = env.start_worker().await;
    rzp.wait_calls_over(0).await;
    let second = env.start_worker().await;
    // While the first holds the lock, the second's passes are skipped.
    wait_passes(&second, "skipped", 1.0).await;
    assert_eq!(passes(second.metrics_url(), "completed").await, 0.0);

    first.kill();
    wait_passes(&second, "completed", 1.0).await;
    applied_once(&env, &refs, refs.len()).await;
}

#[tokio::test]
async fn a_worker_sigtermed_mid_pass_stops_at_once_and_what_it_published_stays_published() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    // One lost capture found and published by a first, whole pass.
    let mut refs = lost_captures(&env, &rzp, "rf_term", 1).await;
    configure(&mut env, &rzp);
    let mut first = env.start_worker().await;
    applied_once(&env, &refs, refs.len()).await;

    // Two more are lost; the pass that would find them is held, and the
    // worker is told to stop.
    for i in 1..3 {
        let order_ref = format!("rf_term_{i}");
        shop::order(&env.pool, &order_ref, 50_000, "INR", &[("MUG", 1)]).await;
        lost_capture(&env, &rzp, &order_ref).await;
        refs.push(order_ref);
    }
    backdate_orders(&env).await;
    let held = Duration::from_secs(15);
    hold_next_pass(&rzp, held).await;
    let asked = Instant::now();
    first.signal("TERM");
    let code = first.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "a clean stop: {}", first.log_text());
    assert!(
        asked.elapsed() < held,
        "the pass was cancelled, not waited for ({:?})",
        asked.elapsed()
    );

    let second = env.start_worker().await;
    wait_passes(&second, "completed", 1.0).await;
    applied_once(&env, &refs, refs.len()).await;
}

/// The median of `samples`.
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Posts captures for `orders` one at a time, each once the previous one
/// was processed; returns each delivery's time through the worker in ms
/// (`processed_at - received_at`).
async fn deliver_one_by_one(env: &TestEnv, ingest: &str, orders: &[String]) -> Vec<f64> {
    let mut times = Vec::new();
    for order_ref in orders {
        let event = format!("evt_{order_ref}");
        env.post_ok(
            ingest,
            "razorpay",
            &env.captured(order_ref, &format!("pay_{order_ref}"), &event),
        )
        .await;
        let ms = eventually(&format!("{event} processed"), WAIT, || async {
            sqlx::query_scalar::<_, f64>(
                "SELECT (extract(epoch FROM processed_at - received_at) * 1000)::float8
                 FROM processed_webhooks WHERE event_id = $1",
            )
            .bind(&event)
            .fetch_optional(&env.pool)
            .await
            .expect("the delivery")
        })
        .await;
        times.push(ms);
    }
    times
}

#[tokio::test]
async fn a_pass_held_by_a_slow_gateway_does_not_delay_consuming() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    let refs = lost_captures(&env, &rzp, "rf_slow", 1).await;
    let hooks: Vec<String> = (0..14).map(|i| format!("rf_slow_hook_{i}")).collect();
    for h in &hooks {
        shop::order(&env.pool, h, 50_000, "INR", &[("MUG", 1)]).await;
    }
    let (without, with) = hooks.split_at(7);
    let (_ingest, ingest_url) = env.start_ingest().await;

    // Without reconciliation.
    let mut plain = env.start_worker().await;
    let before = deliver_one_by_one(&env, &ingest_url, without).await;
    plain.signal("TERM");
    assert_eq!(plain.wait_exit(Duration::from_secs(30)), Some(0));

    // With a pass held by a gateway that takes 15 s to answer.
    configure(&mut env, &rzp);
    let held = Duration::from_secs(15);
    rzp.faults(&[Fault::Slow(held)]);
    let worker = env.start_worker().await;
    rzp.wait_calls_over(0).await;
    let asked = Instant::now();
    let during = deliver_one_by_one(&env, &ingest_url, with).await;
    assert!(
        asked.elapsed() < held,
        "every delivery was measured while the pass was held ({:?})",
        asked.elapsed()
    );
    assert_eq!(
        passes(worker.metrics_url(), "completed").await,
        0.0,
        "still held"
    );

    let (p50_before, p50_during) = (median(before.clone()), median(during.clone()));
    println!(
        "delivery through the worker, p50: {p50_before:.0} ms without a pass, {p50_during:.0} ms with one held ({before:?} / {during:?})"
    );
    assert!(
        p50_during < p50_before + 500.0 && p50_during < 1_000.0,
        "a held pass delayed consuming: p50 {p50_during:.0} ms against {p50_before:.0} ms"
    );
    wait_passes(&worker, "completed", 1.0).await;
    applied_once(&env, &refs, refs.len() + hooks.len()).await;
}

/// The refund intent of `payment`: its state and attempts.
async fn refund_intent(env: &TestEnv, payment: &str) -> Option<(String, i32)> {
    sqlx::query_as("SELECT state, attempts FROM refund_intents WHERE payment_id = $1")
        .bind(payment)
        .fetch_optional(&env.pool)
        .await
        .expect("refund_intents")
}

/// The refunder publishes the refund facts its answers prove through the
/// reconciler's publisher: with the broker stopped after the gateway made
/// the refund and before the refunder heard, the pass fails, the intent
/// stays `sending` (not lost, not parked), and once the broker is back the
/// next attempt finds the refund by the lookup before a retry (the
/// stand-in forgets its keys first, so only the lookup stands between the
/// retry and a second refund) and settles it: one refund at the gateway,
/// the payment refunded in the books, one refund email.
#[tokio::test]
async fn the_broker_stopped_before_a_refund_is_heard_loses_nothing_and_refunds_once() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    env.use_gateway_apis(&[&rzp]);
    env.set_env("ONCEHOOK_REFUNDS_MODE", "auto");
    env.set_env("ONCEHOOK_REFUNDS_INTERVAL", "1s");
    // The refunder waits for the held answer (opened once RabbitMQ has
    // stopped, within the 8 s a call may take), and the lease outlasts
    // one send (three calls of 8 s), as start-up requires.
    const LEASE: Duration = Duration::from_secs(25);
    env.set_env("ONCEHOOK_REFUNDS_LEASE", "25s");
    env.set_env("ONCEHOOK_RECONCILE_TIMEOUT", "8s");
    env.set_env("ONCEHOOK_RECONCILE_INTERVAL", "1h");
    let order = "rf_broker_refund";
    shop::Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let gate = rzp.gate_refund_answer();
    for payment in ["pay_rbr1", "pay_rbr2"] {
        let spec = env.spec(order, payment, &format!("evt_{payment}"), 50_000);
        let delivery = env.sign(Gateway::Razorpay, "payment.captured", &spec);
        env.post_ok(&p.url, "razorpay", &delivery).await;
    }
    eventually("the refund made at the gateway", WAIT, || async {
        (rzp.refunds_made("pay_rbr2") == 1).then_some(())
    })
    .await;

    let outage = Outage::begin(Service::RabbitMq).await;
    let failed_before = refund_passes(p.worker().metrics_url(), "failed").await;
    gate.open();
    eventually("the refunder's pass failed", WAIT, || async {
        (refund_passes(p.worker().metrics_url(), "failed").await > failed_before).then_some(())
    })
    .await;
    let during = refund_intent(&env, "pay_rbr2").await;
    rzp.forget_refund_keys();
    outage.end().await;
    assert_eq!(
        during.map(|(state, _)| state).as_deref(),
        Some("sending"),
        "the intent waits under its lease"
    );

    // The next attempt comes once the lease has run out.
    let attempts = eventually("the intent settled", LEASE + WAIT, || async {
        let (state, attempts) = refund_intent(&env, "pay_rbr2").await?;
        (state == "settled").then_some(attempts)
    })
    .await;
    assert!(
        attempts >= 2,
        "settled by a later attempt, after the lease: {attempts}"
    );
    let refunded: Option<String> =
        sqlx::query_scalar("SELECT flag FROM payments WHERE payment_id = 'pay_rbr2'")
            .fetch_one(&env.pool)
            .await
            .expect("the second payment");
    assert_eq!(refunded.as_deref(), Some("refunded"));
    eventually("one refund email", WAIT, || async {
        let all = emails(&env.pool, order).await;
        (all.iter()
            .filter(|(kind, sent)| kind == "refund" && *sent)
            .count()
            == 1)
            .then_some(())
    })
    .await;
    assert_eq!(rzp.refunds_made("pay_rbr2"), 1, "{:?}", rzp.refund_posts());
    assert_eq!(rzp.refunds_made("pay_rbr1"), 0);
    let refund_emails = emails(&env.pool, order).await;
    assert_eq!(
        refund_emails
            .iter()
            .filter(|(kind, _)| kind == "refund")
            .count(),
        1,
        "{refund_emails:?}"
    );
}
