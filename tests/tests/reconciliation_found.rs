//! What reconciliation must find that no webhook brought
//! (docs/reconciliation.md), against the real worker, mailer and notifier
//! with stand-ins of the gateways' APIs: a Razorpay order linked to the
//! shop's order only by its `receipt`, a second Razorpay account that knows
//! nothing (a success, not a failure), and a refund lost for an order
//! already paid, found on the paid schedule. Each is checked as the shop
//! sees it: stock once, one email, the order event delivered.

use oncehook_e2e::gateway_api::{
    GatewayApi, backdate_orders as backdate, reconcile_every_second as reconcile_often,
    register_gateway_ref, shapes, wait_more_reconcile_passes,
};
use oncehook_e2e::metrics::{scrape, series};
use oncehook_e2e::ops::ctl_json;
use oncehook_e2e::process::Proc;
use oncehook_e2e::receiver::{Receiver, SECRET};
use oncehook_e2e::shop::{Shop, emails, order_status, stock, wait_paid_and_mailed};
use oncehook_e2e::{TestEnv, WAIT, eventually};
use oncehook_gateways::Gateway;
use serde_json::Value;

/// A shop endpoint for every order event, and a notifier delivering to it.
async fn shop_endpoint(env: &mut TestEnv) -> (Receiver, Proc) {
    let rx = Receiver::start(SECRET).await;
    env.append_config(&format!(
        "[[notify.endpoint]]\nname = \"shop\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"order.*\"]\n",
        rx.url
    ));
    let notifier = env
        .start_consumer(
            "oncehook-notifier",
            &[
                ("ONCEHOOK_NOTIFY_RETRY_SCHEDULE", "1s,1s,1s"),
                ("ONCEHOOK_NOTIFY_TIMEOUT", "2s"),
            ],
        )
        .await;
    (rx, notifier)
}

/// The order events of `order_ref` the shop received, by type.
fn received(rx: &Receiver, order_ref: &str) -> Vec<String> {
    rx.received()
        .iter()
        .filter(|r| r.event["order"]["order_ref"] == order_ref)
        .map(|r| r.event["type"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Waits until the shop received `kind` for `order_ref`; all it received.
async fn wait_received(rx: &Receiver, order_ref: &str, kind: &str) -> Vec<String> {
    eventually(
        &format!("{kind} of {order_ref} at the shop"),
        WAIT,
        || async {
            let got = received(rx, order_ref);
            got.iter().any(|k| k == kind).then_some(got)
        },
    )
    .await
}

/// The gateway references registered for an order.
async fn refs(env: &TestEnv, order_ref: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT g.gateway, g.gateway_ref FROM order_gateway_refs g JOIN orders o ON o.id = g.order_id
         WHERE o.order_ref = $1 ORDER BY 1, 2",
    )
    .bind(order_ref)
    .fetch_all(&env.pool)
    .await
    .expect("refs")
}

/// The sources of a `reconcile --json` report: `(source, ok)`.
fn sources_ok(report: &Value) -> Vec<(String, bool)> {
    report["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["source"].as_str().unwrap_or("").to_owned(),
                s["ok"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_razorpay_order_linked_only_by_its_receipt_is_paid_by_the_next_pass() {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    Shop::basket("rc_rcpt_1").seed(&env.pool).await;
    // The shop created the Razorpay order with its own reference as the
    // receipt and registered nothing; every webhook was lost.
    rzp.razorpay_order("order_RCrcpt1", "rc_rcpt_1", 50_000);
    rzp.add(
        "/v1/orders/order_RCrcpt1/payments",
        shapes::razorpay_payment(
            "pay_RCrcpt1",
            "order_RCrcpt1",
            "captured",
            50_000,
            "r@example.com",
        ),
    );
    backdate(&env).await;
    env.use_gateway_apis(&[&rzp]);
    reconcile_often(&mut env);
    let (shop_rx, _notifier) = shop_endpoint(&mut env).await;
    let p = env.pipeline().await;

    wait_paid_and_mailed(&env.pool, "rc_rcpt_1").await;
    let got = wait_received(&shop_rx, "rc_rcpt_1", "order.paid").await;
    assert_eq!(got, ["order.paid"], "order.paid once");
    assert_eq!(
        refs(&env, "rc_rcpt_1").await,
        [("razorpay".to_owned(), "order_RCrcpt1".to_owned())],
        "the Razorpay order found by receipt is registered with the order"
    );
    let calls = rzp.calls();
    assert!(
        calls
            .iter()
            .any(|c| c == "GET /v1/orders?receipt=rc_rcpt_1")
            && calls
                .iter()
                .any(|c| c == "GET /v1/orders/order_RCrcpt1/payments"),
        "looked up by receipt, then the order's payments: {calls:?}"
    );

    // The capture's webhook arrives at last, naming only Razorpay's order:
    // it finds the order by the registered reference and changes nothing.
    env.post_ok(
        &p.url,
        "razorpay",
        &env.captured("order_RCrcpt1", "pay_RCrcpt1", "evt_RCrcptLate"),
    )
    .await;
    let outcome = eventually("the late webhook processed", WAIT, || async {
        sqlx::query_scalar::<_, String>(
            "SELECT outcome FROM processed_webhooks WHERE event_id = 'evt_RCrcptLate'",
        )
        .fetch_optional(&env.pool)
        .await
        .expect("the late webhook's delivery")
    })
    .await;
    assert_eq!(outcome, "ignored");
    // Passes go on: the paid order is not asked again within paid_interval.
    let asked = rzp.call_count();
    wait_more_reconcile_passes(p.worker().metrics_url(), "completed", 2.0).await;
    assert_eq!(
        rzp.call_count(),
        asked,
        "nothing asked about a paid order within the hour"
    );
    assert_eq!(
        (
            stock(&env.pool, "MUG").await,
            stock(&env.pool, "TSHIRT").await
        ),
        (8, 9),
        "stock once"
    );
    assert_eq!(emails(&env.pool, "rc_rcpt_1").await.len(), 1, "one email");
    assert_eq!(received(&shop_rx, "rc_rcpt_1"), ["order.paid"]);
}

#[tokio::test]
async fn two_razorpay_accounts_one_of_which_knows_nothing_both_report_success() {
    let mut env = TestEnv::new().await;
    let knows = GatewayApi::start(Gateway::Razorpay).await;
    let blank = GatewayApi::start(Gateway::Razorpay).await;
    Shop::new()
        .product("MUG", 10)
        .order("rc_two_ref", &[("MUG", 1)])
        .order("rc_two_rcpt", &[("MUG", 1)])
        .seed(&env.pool)
        .await;
    register_gateway_ref(&env, "rc_two_ref", "razorpay", "order_RCtwo1").await;
    knows.add(
        "/v1/orders/order_RCtwo1/payments",
        shapes::razorpay_payment(
            "pay_RCtwo1",
            "order_RCtwo1",
            "failed",
            1_000,
            "t@example.com",
        ),
    );
    knows.razorpay_order("order_RCtwo2", "rc_two_rcpt", 1_000);
    backdate(&env).await;
    env.use_gateway_apis_and_second_razorpay(&[&knows], &blank);
    reconcile_often(&mut env);
    // No worker yet: the passes below are the CLI's (which declares the
    // broker's topology itself before it publishes).

    // The account that knows nothing answers Razorpay's "The id provided
    // does not exist" and an empty receipt list: nothing found, no failure.
    let (code, out, err) = env.ctl(&["reconcile", "--since", "1h"]).await;
    assert_eq!(code, 0, "a healthy pass exits 0: {out}{err}");
    assert!(
        out.contains("GET /v1/orders/order_RCtwo1/payments  400: the gateway knows nothing of it"),
        "{out}"
    );
    assert!(
        out.contains("the gateway's order order_RCtwo2 (registered with rc_two_rcpt)"),
        "{out}"
    );
    let report = ctl_json(&env, &["reconcile", "--since", "1h"]).await;
    assert_eq!(
        sources_ok(&report),
        [
            ("razorpay".to_owned(), true),
            ("razorpay_second".to_owned(), true)
        ],
        "{report}"
    );
    let blank_calls = blank.calls();
    assert!(
        blank_calls
            .iter()
            .any(|c| c == "GET /v1/orders/order_RCtwo1/payments")
            && blank_calls
                .iter()
                .any(|c| c == "GET /v1/orders?receipt=rc_two_rcpt"),
        "the second account was asked about both orders: {blank_calls:?}"
    );

    // The worker's scheduled passes mark both sources successful.
    let w = env.start_worker().await;
    let metrics = w.metrics_url().to_owned();
    eventually("both sources' last success set", WAIT, || async {
        let text = scrape(&metrics).await;
        let ok = |s: &str| {
            series(
                &text,
                "oncehook_reconcile_last_success_timestamp_seconds",
                &[("source", s)],
            ) > 0.0
        };
        (ok("razorpay") && ok("razorpay_second")).then_some(())
    })
    .await;
    let text = scrape(&metrics).await;
    assert_eq!(
        series(
            &text,
            "oncehook_reconcile_api_errors_total",
            &[("source", "razorpay_second")]
        ),
        0.0,
        "{text}"
    );
    assert_eq!(order_status(&env.pool, "rc_two_ref").await, "pending");
}

#[tokio::test]
async fn a_refund_lost_for_a_paid_order_is_found_on_the_paid_schedule() {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    Shop::basket("rc_paid_1").seed(&env.pool).await;
    register_gateway_ref(&env, "rc_paid_1", "razorpay", "order_RCpaid1").await;
    rzp.add(
        "/v1/orders/order_RCpaid1/payments",
        shapes::razorpay_payment(
            "pay_RCpaid1",
            "order_RCpaid1",
            "captured",
            50_000,
            "p@example.com",
        ),
    );
    env.use_gateway_apis(&[&rzp]);
    reconcile_often(&mut env);
    env.set_env("ONCEHOOK_RECONCILE_PAID_INTERVAL", "2s");
    let (shop_rx, _notifier) = shop_endpoint(&mut env).await;
    let p = env.pipeline().await;

    // Paid by its webhook, in time.
    env.post_ok(
        &p.url,
        "razorpay",
        &env.captured("order_RCpaid1", "pay_RCpaid1", "evt_RCpaid1"),
    )
    .await;
    wait_paid_and_mailed(&env.pool, "rc_paid_1").await;
    wait_received(&shop_rx, "rc_paid_1", "order.paid").await;

    // The merchant refunds at Razorpay; the refund's webhook never comes.
    rzp.add(
        "/v1/payments/pay_RCpaid1/refunds",
        shapes::razorpay_refund("rfnd_RCpaid1", "pay_RCpaid1", 50_000),
    );
    eventually("the order refunded", WAIT, || async {
        (order_status(&env.pool, "rc_paid_1").await == "refunded").then_some(())
    })
    .await;
    let got = wait_received(&shop_rx, "rc_paid_1", "order.refunded").await;
    assert_eq!(got, ["order.paid", "order.refunded"]);
    eventually("the refund email", WAIT, || async {
        (emails(&env.pool, "rc_paid_1").await.len() == 2).then_some(())
    })
    .await;
    let origin: (String,) = sqlx::query_as(
        "SELECT origin FROM processed_webhooks WHERE event_id = 'reconciliation:rfnd_RCpaid1:processed'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("the refund's delivery");
    assert_eq!(origin.0, "reconciliation");

    // A refunded order is not asked about again.
    let asked = rzp.call_count();
    wait_more_reconcile_passes(p.worker().metrics_url(), "completed", 3.0).await;
    assert_eq!(rzp.call_count(), asked);
    assert_eq!(emails(&env.pool, "rc_paid_1").await.len(), 2);
    assert_eq!(
        received(&shop_rx, "rc_paid_1"),
        ["order.paid", "order.refunded"]
    );
}

#[tokio::test]
async fn a_webhook_waiting_for_its_razorpay_order_is_applied_when_the_receipt_finds_it() {
    let mut env = TestEnv::new().await;
    let rzp = GatewayApi::start(Gateway::Razorpay).await;
    Shop::basket("rc_wait_1").seed(&env.pool).await;
    rzp.razorpay_order("order_RCwait1", "rc_wait_1", 50_000);
    rzp.add(
        "/v1/orders/order_RCwait1/payments",
        shapes::razorpay_payment(
            "pay_RCwait1",
            "order_RCwait1",
            "captured",
            50_000,
            "w@example.com",
        ),
    );
    let p = env.pipeline().await;
    // The capture's webhook names only Razorpay's order, which no order
    // has: it waits.
    env.post_ok(
        &p.url,
        "razorpay",
        &env.captured("order_RCwait1", "pay_RCwait1", "evt_RCwait1"),
    )
    .await;
    let outcome = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT outcome FROM processed_webhooks WHERE event_id = 'evt_RCwait1'",
        )
        .fetch_optional(&env.pool)
        .await
        .expect("the webhook's delivery")
    };
    let waiting = eventually("the webhook parked", WAIT, outcome).await;
    assert_eq!(waiting, "parked");
    assert_eq!(order_status(&env.pool, "rc_wait_1").await, "pending");

    // Asked about the order, the gateway finds its Razorpay order by the
    // receipt; registering it applies the webhook that waited.
    env.use_gateway_apis(&[&rzp]);
    let report = ctl_json(&env, &["reconcile", "--order", "rc_wait_1"]).await;
    assert_eq!(
        sources_ok(&report)[0],
        ("razorpay".to_owned(), true),
        "{report}"
    );
    assert_eq!(order_status(&env.pool, "rc_wait_1").await, "paid");
    assert_eq!(outcome().await.as_deref(), Some("applied"));
    assert_eq!(
        report["published"], 0,
        "the capture was recorded by then: {report}"
    );
    wait_paid_and_mailed(&env.pool, "rc_wait_1").await;
    assert_eq!(emails(&env.pool, "rc_wait_1").await.len(), 1);
    assert_eq!(
        (
            stock(&env.pool, "MUG").await,
            stock(&env.pool, "TSHIRT").await
        ),
        (8, 9),
        "stock once"
    );
}
