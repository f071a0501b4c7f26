//! One payment's story through the real binaries, event by event: a failure
//! then a capture pays once and keeps the failure, authorized + captured +
//! order.paid move stock once, and `oncehookctl send` signs a delivery for
//! every gateway that the pipeline takes.

use std::time::Duration;

use oncehook_e2e::{PipelineSpec, Shop, TestEnv, WAIT, eventually, shop};
use oncehook_gateways::Gateway;

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
        // The order exists: its own amount is signed, not a made-up one
        // (behind PgBouncer the read once failed and fell back silently).
        assert!(!err.contains("note:"), "{source}: {err}");
    }
    for order in ["ord_s1", "ord_s2", "ord_s3", "ord_s4", "ord_s5"] {
        shop::wait_paid(&env.pool, order).await;
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
