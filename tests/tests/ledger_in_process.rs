//! The order ledger's decisions (docs/ledger.md) on the worker in process:
//! cases that came out wrong when the order's state followed the arrival
//! order of events — a refund before its capture, events that wait for
//! the link to their order, Stripe's cumulative refund totals, PayU's new
//! transaction id per attempt, a gateway's own order id. Each delivery
//! runs through the real pipeline and ledger against the test's own
//! Postgres database over the in-memory queue, and returns after its
//! commit, so the books are read at once: no broker, no binaries, no
//! sleeps. What needs processes (ingest's dedup, the sweeper's dead
//! letters, `oncehookctl`) stays in `ledger.rs`; the random, model-based
//! proof is `confluence.rs`.

use oncehook_common::consume::memory::Settled;
use oncehook_e2e::in_process::{InProcess, envelope};
use oncehook_e2e::{TestEnv, shop};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SampleSpec;
use oncehook_ledger::Ledger;
use sqlx::{PgPool, Row};

/// A worker over the test's database, with the default settings.
fn worker(env: &TestEnv) -> InProcess<Ledger> {
    InProcess::start(&env.pool, Ledger::default(), &[])
}

/// Signs `event` for `spec` with `gateway`'s test secret and runs it from
/// `source` through the worker; insists the message was acked (neither
/// retried nor dead-lettered).
async fn deliver(
    worker: &InProcess<Ledger>,
    env: &TestEnv,
    (source, gateway): (&str, Gateway),
    event: &str,
    spec: &SampleSpec,
) {
    let signed = env.sign(gateway, event, spec);
    let settled = worker.deliver(&envelope(source, gateway, &signed)).await;
    assert_eq!(settled, [Settled::Acked], "{event} {}", spec.event_id);
}

const RAZORPAY: (&str, Gateway) = ("razorpay", Gateway::Razorpay);
const STRIPE: (&str, Gateway) = ("stripe", Gateway::Stripe);
const PAYU: (&str, Gateway) = ("payu", Gateway::Payu);

/// (status, refunded_minor, paid_by, oversold)
async fn books(pool: &PgPool, order_ref: &str) -> (String, i64, Option<String>, bool) {
    let r = sqlx::query(
        "SELECT status, refunded_minor, paid_by, oversold FROM orders WHERE order_ref = $1",
    )
    .bind(order_ref)
    .fetch_one(pool)
    .await
    .expect("order");
    (
        r.get("status"),
        r.get("refunded_minor"),
        r.get("paid_by"),
        r.get("oversold"),
    )
}

/// The types of the order events told about an order, sorted.
async fn order_events(pool: &PgPool, order_ref: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT e.type FROM order_events e JOIN orders o ON o.id = e.order_id
         WHERE o.order_ref = $1 ORDER BY e.type",
    )
    .bind(order_ref)
    .fetch_all(pool)
    .await
    .expect("order events")
}

/// The kinds of an order's emails, sorted.
async fn email_kinds(pool: &PgPool, order_ref: &str) -> Vec<String> {
    let mut kinds: Vec<String> = shop::emails(pool, order_ref)
        .await
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    kinds.sort();
    kinds
}

#[tokio::test]
async fn a_refund_that_overtakes_its_capture_is_not_forgotten() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_r", 10).await;
    shop::order(&env.pool, "order_r", 50000, "INR", &[("sku_r", 2)]).await;
    let worker = worker(&env);

    let refund = env.spec("order_r", "pay_r", "evt_refund", 50000);
    deliver(&worker, &env, RAZORPAY, "refund.processed", &refund).await;
    let (status, refunded, _, _) = books(&env.pool, "order_r").await;
    assert_eq!((status.as_str(), refunded), ("pending", 50000));

    let capture = env.spec("order_r", "pay_r", "evt_capture", 50000);
    deliver(&worker, &env, RAZORPAY, "payment.captured", &capture).await;
    let (status, refunded, paid_by, _) = books(&env.pool, "order_r").await;
    assert_eq!(
        (status.as_str(), refunded, paid_by.as_deref()),
        ("refunded", 50000, Some("razorpay:pay_r"))
    );
    // Stock moved once; one confirmation and one refund email.
    assert_eq!(shop::stock(&env.pool, "sku_r").await, 8);
    assert_eq!(
        email_kinds(&env.pool, "order_r").await,
        ["confirmation", "refund"]
    );
    assert_eq!(
        order_events(&env.pool, "order_r").await,
        ["order.paid", "order.refunded"]
    );
}

#[tokio::test]
async fn an_event_naming_only_its_payment_waits_for_the_link_then_applies() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_p", 10).await;
    shop::order(&env.pool, "order_p", 50000, "INR", &[("sku_p", 1)]).await;
    let worker = worker(&env);

    // A refund whose payload names no order: parked, not dead-lettered.
    let refund = env.spec("", "pay_p", "evt_refund_p", 20000);
    deliver(&worker, &env, RAZORPAY, "refund.processed", &refund).await;
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 1);
    let (status, refunded, _, _) = books(&env.pool, "order_p").await;
    assert_eq!((status.as_str(), refunded), ("pending", 0));

    // The capture links pay_p to order_p: the parked refund applies with it.
    let capture = env.spec("order_p", "pay_p", "evt_capture_p", 50000);
    deliver(&worker, &env, RAZORPAY, "payment.captured", &capture).await;
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    assert_eq!(env.count("SELECT count(*) FROM refunds").await, 1);
    let (status, refunded, _, _) = books(&env.pool, "order_p").await;
    assert_eq!((status.as_str(), refunded), ("partially_refunded", 20000));
    let outcomes: Vec<String> =
        sqlx::query_scalar("SELECT outcome FROM processed_webhooks ORDER BY event_id")
            .fetch_all(&env.pool)
            .await
            .expect("outcomes");
    assert_eq!(outcomes, vec!["applied", "applied"]);
    assert_eq!(
        email_kinds(&env.pool, "order_p").await,
        ["confirmation", "refund"]
    );
    assert_eq!(
        order_events(&env.pool, "order_p").await,
        ["order.paid", "order.refunded"]
    );
    assert!(worker.dead_letters.published().is_empty());
}

#[tokio::test]
async fn zero_decimal_currencies_are_mailed_with_their_own_exponent() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_j", 10).await;
    shop::order(&env.pool, "order_jpy", 5000, "JPY", &[("sku_j", 1)]).await;
    let worker = worker(&env);
    let mut spec = env.spec("order_jpy", "pay_jpy", "evt_jpy", 5000);
    spec.currency = "JPY".into();
    deliver(&worker, &env, RAZORPAY, "payment.captured", &spec).await;
    // The ledger writes the email's text; the mailer sends it as written.
    let body: String =
        sqlx::query_scalar("SELECT body FROM email_outbox WHERE kind = 'confirmation'")
            .fetch_one(&env.pool)
            .await
            .expect("confirmation");
    assert!(body.contains("5000 JPY"), "{body}");
    assert!(!body.contains("50.00"), "{body}");
}

#[tokio::test]
async fn a_sale_past_the_last_unit_is_recorded_as_oversold_on_one_order() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_last", 1).await;
    shop::order(&env.pool, "order_o1", 50000, "INR", &[("sku_last", 1)]).await;
    shop::order(&env.pool, "order_o2", 50000, "INR", &[("sku_last", 1)]).await;
    let worker = worker(&env);
    for (order, pay) in [("order_o1", "pay_o1"), ("order_o2", "pay_o2")] {
        let spec = env.spec(order, pay, &format!("evt_{pay}"), 50000);
        deliver(&worker, &env, RAZORPAY, "payment.captured", &spec).await;
    }
    assert_eq!(shop::stock(&env.pool, "sku_last").await, -1);
    let oversold: Vec<String> =
        sqlx::query_scalar("SELECT order_ref FROM orders WHERE oversold ORDER BY order_ref")
            .fetch_all(&env.pool)
            .await
            .expect("oversold");
    assert_eq!(oversold, ["order_o2"], "exactly the second sale oversold");
    for order in ["order_o1", "order_o2"] {
        assert_eq!(shop::order_status(&env.pool, order).await, "paid");
    }
    assert_eq!(order_events(&env.pool, "order_o1").await, ["order.paid"]);
    assert_eq!(
        order_events(&env.pool, "order_o2").await,
        ["order.oversold", "order.paid"]
    );
}

#[tokio::test]
async fn stripe_cumulative_refund_totals_are_not_added_up() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_s", 10).await;
    shop::order(&env.pool, "order_s", 500, "INR", &[("sku_s", 1)]).await;
    let worker = worker(&env);
    let capture = env.spec("order_s", "pi_s", "evt_s_paid", 500);
    deliver(&worker, &env, STRIPE, "payment_intent.succeeded", &capture).await;
    // Two partial refunds of 100 and 150: Stripe reports totals 100 and 250,
    // and here the later total arrives first.
    let total_250 = env.spec("order_s", "pi_s", "evt_s_r2", 250);
    deliver(&worker, &env, STRIPE, "charge.refunded", &total_250).await;
    let total_100 = env.spec("order_s", "pi_s", "evt_s_r1", 100);
    deliver(&worker, &env, STRIPE, "charge.refunded", &total_100).await;
    let (status, refunded, paid_by, _) = books(&env.pool, "order_s").await;
    assert_eq!(
        (status.as_str(), refunded, paid_by.as_deref()),
        ("partially_refunded", 250, Some("stripe:pi_s"))
    );
    assert_eq!(shop::stock(&env.pool, "sku_s").await, 9);
    // Each total is a refund fact of its own: told and mailed once each.
    assert_eq!(
        email_kinds(&env.pool, "order_s").await,
        ["confirmation", "refund", "refund"]
    );
    assert_eq!(
        order_events(&env.pool, "order_s").await,
        ["order.paid", "order.refunded", "order.refunded"]
    );
}

#[tokio::test]
async fn a_stripe_checkout_intent_that_overtakes_its_session_is_not_dead_lettered() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_c", 10).await;
    shop::order(&env.pool, "order_c", 2500, "INR", &[("sku_c", 1)]).await;
    let worker = worker(&env);
    // Checkout: the intents carry no order reference; only the session does.
    let failed = env.spec("", "pi_c", "evt_c_failed", 2500);
    deliver(
        &worker,
        &env,
        STRIPE,
        "payment_intent.payment_failed",
        &failed,
    )
    .await;
    let succeeded = env.spec("", "pi_c", "evt_c_succeeded", 2500);
    deliver(
        &worker,
        &env,
        STRIPE,
        "payment_intent.succeeded",
        &succeeded,
    )
    .await;
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 2);
    assert_eq!(shop::order_status(&env.pool, "order_c").await, "pending");

    let session = env.spec("order_c", "pi_c", "evt_c_session", 2500);
    deliver(
        &worker,
        &env,
        STRIPE,
        "checkout.session.completed",
        &session,
    )
    .await;
    assert_eq!(shop::order_status(&env.pool, "order_c").await, "paid");
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks WHERE outcome <> 'parked'")
            .await,
        3,
        "the parked intents were completed with the session"
    );
    let mut attempts: Vec<(String, Option<String>)> = shop::payments(&env.pool, "order_c").await;
    attempts.sort();
    assert_eq!(
        attempts,
        vec![("captured".to_owned(), None), ("failed".to_owned(), None)],
        "the failed attempt is recorded too, and the capture once"
    );
    assert_eq!(shop::stock(&env.pool, "sku_c").await, 9);
    assert_eq!(email_kinds(&env.pool, "order_c").await, ["confirmation"]);
    assert_eq!(
        order_events(&env.pool, "order_c").await,
        ["order.paid", "order.payment_failed"]
    );
    assert!(worker.dead_letters.published().is_empty());
}

#[tokio::test]
async fn a_payu_retry_with_a_new_txnid_pays_the_order_named_in_udf1() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_u", 10).await;
    shop::order(&env.pool, "order_u", 50000, "INR", &[("sku_u", 1)]).await;
    let worker = worker(&env);
    // PayU needs a new txnid per attempt; the order reference is in udf1.
    let failed = env.spec("order_u", "txn_u_1", "evt_u_1", 50000);
    deliver(&worker, &env, PAYU, "failure", &failed).await;
    let retried = env.spec("order_u", "txn_u_2", "evt_u_2", 50000);
    deliver(&worker, &env, PAYU, "success", &retried).await;
    let (status, _, paid_by, _) = books(&env.pool, "order_u").await;
    assert_eq!(
        (status.as_str(), paid_by.as_deref()),
        ("paid", Some("payu:txn_u_2"))
    );
    assert_eq!(shop::stock(&env.pool, "sku_u").await, 9);
    assert_eq!(
        order_events(&env.pool, "order_u").await,
        ["order.paid", "order.payment_failed"]
    );
    assert!(worker.dead_letters.published().is_empty());
}

#[tokio::test]
async fn a_razorpay_shop_keeps_its_own_order_ids_through_a_gateway_reference() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_gr", 10).await;
    shop::order(&env.pool, "shop_1001", 50000, "INR", &[("sku_gr", 1)]).await;
    sqlx::query(
        "INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id)
         SELECT 'razorpay', 'order_RZPgr1', id FROM orders WHERE order_ref = 'shop_1001'",
    )
    .execute(&env.pool)
    .await
    .expect("gateway reference");
    let worker = worker(&env);
    // Razorpay's payload names its own order id, never the shop's.
    let capture = env.spec("order_RZPgr1", "pay_gr1", "evt_gr1", 50000);
    deliver(&worker, &env, RAZORPAY, "payment.captured", &capture).await;
    let (status, refunded, paid_by, oversold) = books(&env.pool, "shop_1001").await;
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
    assert_eq!(order_events(&env.pool, "shop_1001").await, ["order.paid"]);
}

/// The order's `version` (what the shop compares to know whether anything
/// changed).
async fn version(pool: &PgPool, order_ref: &str) -> i64 {
    sqlx::query_scalar("SELECT version FROM orders WHERE order_ref = $1")
        .bind(order_ref)
        .fetch_one(pool)
        .await
        .expect("version")
}

#[tokio::test]
async fn the_version_grows_once_per_transaction_that_records_something() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "sku_v", 10).await;
    shop::order(&env.pool, "order_v", 50000, "INR", &[("sku_v", 1)]).await;
    let worker = worker(&env);
    assert_eq!(version(&env.pool, "order_v").await, 1);

    // A failed attempt leaves the state as it is, but it is news: +1.
    let failed = env.spec("order_v", "pay_v1", "evt_failed_v", 50000);
    deliver(&worker, &env, RAZORPAY, "payment.failed", &failed).await;
    assert_eq!(version(&env.pool, "order_v").await, 2);
    // Its duplicate records nothing: unchanged.
    deliver(&worker, &env, RAZORPAY, "payment.failed", &failed).await;
    assert_eq!(version(&env.pool, "order_v").await, 2);

    // A capture records a payment, moves the state and the stock and
    // writes an email and an order event, in one write of the order: +1,
    // not one per table written.
    let capture = env.spec("order_v", "pay_v2", "evt_capture_v", 50000);
    deliver(&worker, &env, RAZORPAY, "payment.captured", &capture).await;
    assert_eq!(books(&env.pool, "order_v").await.0, "paid");
    assert_eq!(version(&env.pool, "order_v").await, 3);

    // A refund: one more.
    let refund = env.spec("order_v", "pay_v2", "evt_refund_v", 20000);
    deliver(&worker, &env, RAZORPAY, "refund.processed", &refund).await;
    assert_eq!(version(&env.pool, "order_v").await, 4);
    let updated_after_created: bool = sqlx::query_scalar(
        "SELECT updated_at > created_at FROM orders WHERE order_ref = 'order_v'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("updated_at");
    assert!(updated_after_created);
}
