//! Every gateway end to end through the real binaries: duplicates absorbed,
//! failure-then-success paying once, stale timestamps refused, bodies
//! carried byte-exact to the worker, refunds, and a second distinct payment
//! for a paid order flagged instead of applied.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use oncehook_common::Envelope;
use oncehook_e2e::{PipelineSpec, Secrets, Shop, TestEnv, broker, eventually, shop};
use oncehook_gateways::Gateway;
use sha2::{Digest, Sha256, Sha512};

const WAIT: Duration = Duration::from_secs(30);

async fn processed(env: &TestEnv, n: i64) {
    eventually(&format!("{n} webhook(s) processed"), WAIT, || async {
        (env.count("SELECT count(*) FROM processed_webhooks").await == n).then_some(())
    })
    .await;
}

async fn drained(env: &TestEnv) {
    env.wait_events_drained().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The same captured event 3 times → one effect; failed then captured → paid
/// once with the failure recorded; a stale timestamp → 401.
async fn scenario(gateway: Gateway) {
    let source = gateway.as_str();
    let mut env = TestEnv::new().await;
    Shop::mugs(10, &["ord_a", "ord_b"]).seed(&env.pool).await;
    let app = env.pipeline().await;

    let captured = env.sign(
        gateway,
        "captured",
        &env.spec("ord_a", "pay_a", "evt_a", 50_000),
    );
    for i in 0..3 {
        let (status, body) = env.post(&app.url, source, &captured).await;
        assert_eq!(status, 200, "{source} copy {i}: {body}");
    }
    shop::wait_paid_and_mailed(&env.pool, "ord_a").await;

    let failed = env.sign(
        gateway,
        "failed",
        &env.spec("ord_b", "pay_b1", "evt_b1", 50_000),
    );
    assert_eq!(env.post(&app.url, source, &failed).await.0, 200);
    eventually("failure recorded", WAIT, || async {
        (!shop::payments(&env.pool, "ord_b").await.is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        shop::order_status(&env.pool, "ord_b").await,
        "pending",
        "{source}: a failure does not pay"
    );
    let success = env.sign(
        gateway,
        "captured",
        &env.spec("ord_b", "pay_b2", "evt_b2", 50_000),
    );
    assert_eq!(env.post(&app.url, source, &success).await.0, 200);
    shop::wait_paid(&env.pool, "ord_b").await;

    if gateway.signs_timestamp() {
        let mut stale_spec = env.spec("ord_a", "pay_a", "evt_stale", 50_000);
        stale_spec.timestamp -= 301;
        let stale = env.sign(gateway, "captured", &stale_spec);
        let (status, body) = env.post(&app.url, source, &stale).await;
        assert_eq!(status, 401, "{source} stale: {body}");
        assert!(body.contains("stale_timestamp"), "{body}");
        let mut future_spec = env.spec("ord_a", "pay_a", "evt_future", 50_000);
        future_spec.timestamp += 301;
        let future = env.sign(gateway, "captured", &future_spec);
        assert_eq!(
            env.post(&app.url, source, &future).await.0,
            401,
            "{source}: future timestamps are refused too"
        );
    }

    drained(&env).await;
    let a = shop::webhooks(&env.pool, "ord_a").await;
    assert_eq!(
        a.len(),
        1,
        "{source}: one delivery identity for ord_a: {a:?}"
    );
    assert_eq!(
        (a[0].1.as_str(), a[0].2),
        ("applied", 3),
        "{source}: applied once, 3 copies seen"
    );
    assert_eq!(
        shop::payments(&env.pool, "ord_a").await,
        vec![("captured".to_owned(), None)]
    );
    assert_eq!(
        shop::payments(&env.pool, "ord_b").await,
        vec![("failed".to_owned(), None), ("captured".to_owned(), None)],
        "{source}"
    );
    assert_eq!(
        shop::stock(&env.pool, "MUG").await,
        8,
        "{source}: one unit per paid order"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox").await,
        2,
        "{source}: one email per paid order"
    );
}

#[tokio::test]
async fn razorpay_end_to_end() {
    scenario(Gateway::Razorpay).await;
}

#[tokio::test]
async fn cashfree_end_to_end() {
    scenario(Gateway::Cashfree).await;
}

#[tokio::test]
async fn payu_end_to_end() {
    scenario(Gateway::Payu).await;
}

#[tokio::test]
async fn stripe_end_to_end() {
    scenario(Gateway::Stripe).await;
}

#[tokio::test]
async fn standard_webhooks_end_to_end() {
    scenario(Gateway::Standard).await;
}

/// Ingest checks a PayU form's `key` against the source's `merchant_key`,
/// and refuses a hash-covered value containing the `|` separator.
#[tokio::test]
async fn payu_another_merchant_key_or_a_separator_in_a_field_is_refused() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let mut spec = env.spec("ord_k", "txn_k", "unused", 50_000);
    spec.merchant_key = Some("another_merchant".to_owned());
    let other_key = env.sign(Gateway::Payu, "success", &spec);
    let (status, body) = env.post(&url, "payu", &other_key).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("invalid_signature"), "{body}");

    // A correctly hashed form whose first name carries separators.
    let fields = [
        ("key", oncehook_gateways::sample::SAMPLE_PAYU_KEY),
        ("txnid", "txn_k"),
        ("amount", "1.00"),
        ("productinfo", "mug"),
        ("firstname", "A|B|500.00|ord_k"),
        ("email", "a@b.c"),
        ("udf1", "ord_k"),
        ("status", "success"),
    ];
    let get = |k: &str| fields.iter().find(|(n, _)| *n == k).map_or("", |(_, v)| *v);
    let mut input = Secrets::PAYU.to_owned();
    for k in [
        "status",
        "udf10",
        "udf9",
        "udf8",
        "udf7",
        "udf6",
        "udf5",
        "udf4",
        "udf3",
        "udf2",
        "udf1",
        "email",
        "firstname",
        "productinfo",
        "amount",
        "txnid",
        "key",
    ] {
        input.push('|');
        input.push_str(get(k));
    }
    // The values need no escaping beyond `|` and `@`.
    let mut form: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", v.replace('|', "%7C").replace('@', "%40")))
        .collect();
    form.push(format!(
        "hash={}",
        hex::encode(Sha512::digest(input.as_bytes()))
    ));
    let delivery = oncehook_gateways::sample::SignedDelivery {
        headers: oncehook_gateways::Headers::new()
            .with("content-type", "application/x-www-form-urlencoded"),
        body: form.join("&").into_bytes(),
    };
    let (status, body) = env.post(&url, "payu", &delivery).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("firstname"), "{body}");
    assert!(
        broker::peek(&format!("{}.events", env.prefix))
            .await
            .is_empty(),
        "nothing published"
    );
}

#[tokio::test]
async fn payu_form_and_cashfree_decimal_bodies_reach_the_worker_byte_exact() {
    let mut env = TestEnv::new().await;
    Shop::mugs(10, &["ord_p", "ord_c"]).seed(&env.pool).await;
    let (_ingest, url) = env.start_ingest().await;
    let payu = env.sign(
        Gateway::Payu,
        "success",
        &env.spec("ord_p", "pay_p", "evt_p", 50_000),
    );
    let cashfree = env.sign(
        Gateway::Cashfree,
        "PAYMENT_SUCCESS_WEBHOOK",
        &env.spec("ord_c", "pay_c", "evt_c", 50_000),
    );
    assert!(
        String::from_utf8_lossy(&payu.body).contains("amount=500.00"),
        "form body as PayU posts it"
    );
    assert!(
        String::from_utf8_lossy(&cashfree.body).contains("500.00"),
        "decimal amount as Cashfree sends it"
    );
    assert_eq!(env.post(&url, "payu", &payu).await.0, 200);
    assert_eq!(env.post(&url, "cashfree", &cashfree).await.0, 200);

    // What the worker will receive: the broker holds both envelopes.
    let queued = broker::peek(&format!("{}.events", env.prefix)).await;
    assert_eq!(queued.len(), 2);
    let bodies: Vec<Vec<u8>> = queued
        .iter()
        .map(|m| {
            Envelope::from_bytes(&m.body)
                .expect("envelope")
                .body()
                .expect("body")
        })
        .collect();
    assert!(bodies.contains(&payu.body), "PayU form body byte-exact");
    assert!(
        bodies.contains(&cashfree.body),
        "Cashfree JSON body byte-exact"
    );

    let _worker = env.start_worker().await;
    processed(&env, 2).await;
    let amounts: Vec<i64> =
        sqlx::query_scalar("SELECT amount_minor FROM payments ORDER BY provider")
            .fetch_all(&env.pool)
            .await
            .expect("amounts");
    assert_eq!(
        amounts,
        vec![50_000, 50_000],
        "500.00 → 50000 minor units for both"
    );
    assert_eq!(shop::order_status(&env.pool, "ord_p").await, "paid");
    assert_eq!(shop::order_status(&env.pool, "ord_c").await, "paid");
}

#[tokio::test]
async fn refunds_mark_the_order_and_email_once_without_touching_stock() {
    let mut env = TestEnv::new().await;
    Shop::mugs(10, &["ord_r"]).seed(&env.pool).await;
    let app = env.pipeline().await;

    let paid = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("ord_r", "pay_r", "evt_r", 50_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &paid).await.0, 200);
    processed(&env, 1).await;
    assert_eq!(shop::stock(&env.pool, "MUG").await, 9);

    let partial = env.sign(
        Gateway::Razorpay,
        "refund.processed",
        &env.spec("ord_r", "pay_r", "evt_rf1", 20_000),
    );
    for _ in 0..2 {
        assert_eq!(env.post(&app.url, "razorpay", &partial).await.0, 200);
    }
    processed(&env, 2).await;
    drained(&env).await;
    assert_eq!(
        shop::order_status(&env.pool, "ord_r").await,
        "partially_refunded"
    );

    let rest = env.sign(
        Gateway::Razorpay,
        "refund.processed",
        &env.spec("ord_r", "pay_r", "evt_rf2", 30_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &rest).await.0, 200);
    eventually("fully refunded", WAIT, || async {
        (shop::order_status(&env.pool, "ord_r").await == "refunded").then_some(())
    })
    .await;
    shop::wait_emails_sent(&env.pool, "ord_r", 3).await;
    let kinds: Vec<String> = shop::emails(&env.pool, "ord_r")
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(kinds, vec!["confirmation", "refund", "refund"]);
    assert_eq!(
        env.count("SELECT count(*) FROM refunds").await,
        2,
        "the repeated partial refund recorded once"
    );
    assert_eq!(
        shop::stock(&env.pool, "MUG").await,
        9,
        "refunds do not restock"
    );
    assert_eq!(env.mail_files().len(), 3);
}

#[tokio::test]
async fn second_payment_for_a_paid_order_is_flagged_and_late_failures_do_not_unpay() {
    let mut env = TestEnv::new().await;
    Shop::mugs(10, &["ord_x"]).seed(&env.pool).await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    let first = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec("ord_x", "pay_x1", "evt_x1", 50_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &first).await.0, 200);
    processed(&env, 1).await;
    // The customer also paid through Stripe: a distinct successful payment.
    let second = env.sign(
        Gateway::Stripe,
        "payment_intent.succeeded",
        &env.spec("ord_x", "pi_x2", "evt_x2", 50_000),
    );
    assert_eq!(env.post(&app.url, "stripe", &second).await.0, 200);
    processed(&env, 2).await;
    // And a late failure for yet another attempt arrives after the capture.
    let late = env.sign(
        Gateway::Razorpay,
        "payment.failed",
        &env.spec("ord_x", "pay_x3", "evt_x3", 50_000),
    );
    assert_eq!(env.post(&app.url, "razorpay", &late).await.0, 200);
    processed(&env, 3).await;

    assert_eq!(shop::order_status(&env.pool, "ord_x").await, "paid");
    assert_eq!(
        shop::payments(&env.pool, "ord_x").await,
        vec![
            ("captured".to_owned(), None),
            ("captured".to_owned(), Some("needs_refund".to_owned())),
            ("failed".to_owned(), None),
        ]
    );
    let outcome: String =
        sqlx::query_scalar("SELECT outcome FROM processed_webhooks WHERE event_id = 'evt_x2'")
            .fetch_one(&env.pool)
            .await
            .expect("outcome");
    assert_eq!(outcome, "flagged");
    assert_eq!(
        shop::stock(&env.pool, "MUG").await,
        9,
        "no second decrement"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox").await,
        1,
        "no second confirmation"
    );

    // Refunding the duplicate settles the flag; the order stays paid.
    let refund = env.sign(
        Gateway::Stripe,
        "charge.refunded",
        &env.spec("ord_x", "pi_x2", "evt_x4", 50_000),
    );
    assert_eq!(env.post(&app.url, "stripe", &refund).await.0, 200);
    processed(&env, 4).await;
    assert_eq!(shop::order_status(&env.pool, "ord_x").await, "paid");
    let flags: Vec<Option<String>> = shop::payments(&env.pool, "ord_x")
        .await
        .into_iter()
        .map(|p| p.1)
        .collect();
    assert_eq!(flags[1].as_deref(), Some("refunded"));
}

#[tokio::test]
async fn unknown_event_types_are_recorded_as_ignored_and_deduped() {
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;
    let body = br#"{"entity":"event","event":"payment.dispute.created","payload":{"payment":{"entity":{"id":"pay_z","order_id":"ord_z","amount":100,"currency":"INR"}}}}"#.to_vec();
    let mut mac = Hmac::<Sha256>::new_from_slice(Secrets::RAZORPAY.as_bytes()).expect("key");
    mac.update(&body);
    let signature = hex::encode(mac.finalize().into_bytes());
    let delivery = oncehook_gateways::sample::SignedDelivery {
        headers: oncehook_gateways::Headers::new()
            .with("content-type", "application/json")
            .with("x-razorpay-signature", signature)
            .with("x-razorpay-event-id", "evt_dispute"),
        body,
    };
    for _ in 0..2 {
        assert_eq!(env.post(&app.url, "razorpay", &delivery).await.0, 200);
    }
    eventually("ignored and deduped", WAIT, || async {
        let row: Option<(String, i32)> = sqlx::query_as(
            "SELECT outcome, deliveries FROM processed_webhooks WHERE event_id = 'evt_dispute'",
        )
        .fetch_optional(&env.pool)
        .await
        .ok()
        .flatten();
        (row == Some(("ignored".to_owned(), 2))).then_some(())
    })
    .await;
    assert_eq!(
        broker::depth(&format!("{}.dead", env.prefix)).await,
        Some(0),
        "never dead-lettered"
    );
}
