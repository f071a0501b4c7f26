//! `oncehookctl trace` end to end through the real binaries: an order's
//! attempts, failed and successful, and one event by its ID.

use oncehook_e2e::ops::ctl_ok;
use oncehook_e2e::{PipelineSpec, Shop, TestEnv, WAIT, eventually, shop};
use oncehook_gateways::Gateway;

#[tokio::test]
async fn trace_shows_a_failed_and_a_successful_attempt_for_one_order() {
    let mut env = TestEnv::new().await;
    Shop::own_product("order_t1").seed(&env.pool).await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    let failed = env.sign(
        Gateway::Razorpay,
        "payment.failed",
        &env.spec("order_t1", "pay_T1", "evt_T1", 50_000),
    );
    env.post_ok(&app.url, "razorpay", &failed).await;
    eventually("failure recorded", WAIT, || async {
        (!shop::payments(&env.pool, "order_t1").await.is_empty()).then_some(())
    })
    .await;
    env.post_ok(
        &app.url,
        "razorpay",
        &env.captured("order_t1", "pay_T2", "evt_T2"),
    )
    .await;
    shop::wait_paid(&env.pool, "order_t1").await;

    let trace = ctl_ok(&env, &["trace", "order", "order_t1"]).await;
    for needle in [
        "order_t1", "paid", "failed", "captured", "pay_T1", "pay_T2", "evt_T1", "evt_T2",
    ] {
        assert!(trace.contains(needle), "{needle:?}:\n{trace}");
    }
    let event = ctl_ok(&env, &["trace", "event", "razorpay", "evt_T2"]).await;
    for needle in ["evt_T2", "applied", "order_t1"] {
        assert!(event.contains(needle), "{needle:?}:\n{event}");
    }
    let (code, stdout, _) = env.ctl(&["trace", "event", "razorpay", "evt_never"]).await;
    assert_eq!(code, 1, "{stdout}");
    let (code, stdout, _) = env.ctl(&["trace", "order", "order_never"]).await;
    assert_eq!(code, 1, "{stdout}");
}
