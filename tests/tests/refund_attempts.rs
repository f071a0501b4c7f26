//! A refund is sent exactly once however its attempts go (docs/refunds.md,
//! "Attempts and keys"), against the real worker and ingest and Stripe's
//! stand-in, which saves every answer under its idempotency key (a refusal
//! included) and replays it, as Stripe does, and forgets keys after a
//! window: a re-approval after a refusal is a new attempt under a new key,
//! sent once; a retry after the key's window finds the first refund and
//! sends nothing; a reason the ledger rewrites between two tries of one
//! attempt changes nothing in the keyed request.

use std::time::Duration;

use oncehook_e2e::api::{Api, FULL_KEY};
use oncehook_e2e::gateway_api::{Fault, Gate, GatewayApi};
use oncehook_e2e::ops::ctl_json;
use oncehook_e2e::refunds::{Paid, intents, refunded_once, refunds_on, wait_intent, wait_passes};
use oncehook_e2e::{Shop, TestEnv, WAIT, eventually};
use oncehook_gateways::Gateway;
use serde_json::Value;

/// The keys of every refund request the stand-in took, in order.
fn keys(api: &GatewayApi) -> Vec<String> {
    api.refund_posts().into_iter().map(|(_, key)| key).collect()
}

#[tokio::test]
async fn a_reapproval_after_a_stripe_refusal_is_a_new_attempt_sent_once_and_settled() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Stripe).await;
    refunds_on(&mut env, "auto", &[&api]);
    let order = "ra_reapproved";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Stripe, "reap");
    let words = "This charge is disputed and cannot be refunded until the dispute closes.";
    api.refuse_refunds(&paid.second, "charge_disputed", words);
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    let failed = wait_intent(&env, order, "failed").await;
    assert_eq!(failed["gateway_code"], "charge_disputed", "{failed}");
    assert_eq!(failed["attempt_no"], 1, "{failed}");
    assert_eq!(
        failed["in_doubt"], false,
        "a refusal is an answer: {failed}"
    );
    let id = failed["id"].as_str().expect("id").to_owned();
    // The dispute closes: Stripe would refund now, and still answers the
    // first key with the refusal it saved.
    api.accept_refunds(&paid.second);
    let approved = ctl_json(&env, &["refunds", "approve", &id]).await;
    assert_eq!(
        approved["attempt_no"], 2,
        "recorded before it is sent: {approved}"
    );
    refunded_once(&env, &api, &paid, order).await;
    let settled = wait_intent(&env, order, "settled").await;
    assert_eq!(settled["attempt_no"], 2, "{settled}");
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert_eq!(keys(&api), [id.clone(), format!("{id}-2")]);
    assert_eq!(api.refunds_made(&paid.second), 1);
}

#[tokio::test]
async fn a_stripe_retry_after_the_keys_window_finds_the_first_refund_and_sends_nothing() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Stripe).await;
    refunds_on(&mut env, "auto", &[&api]);
    // Every retry comes after Stripe forgot the key (its 24 hours,
    // shortened to nothing): the key cannot save a second refund.
    api.refund_key_window(Duration::ZERO);
    // The refund is made and its answer lost.
    api.refund_faults(&[Fault::Lost(500)]);
    let order = "ra_window";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Stripe, "window");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    refunded_once(&env, &api, &paid, order).await;
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert_eq!(api.refund_bodies().len(), 1, "sent once: {:?}", api.calls());
    let lookup = format!("GET /v1/refunds?payment_intent={}&limit=100", paid.second);
    assert!(
        api.calls().contains(&lookup),
        "looked up first: {:?}",
        api.calls()
    );
    let settled = wait_intent(&env, order, "settled").await;
    assert_eq!(settled["attempt_no"], 1, "{settled}");
}

/// The intent of `payment`, as `oncehookctl` shows it, once `check` holds.
async fn intent_of(env: &TestEnv, order: &str, payment: &str, check: fn(&Value) -> bool) -> Value {
    eventually(&format!("{payment}'s intent"), WAIT, || async {
        intents(env, order)
            .await
            .into_iter()
            .find(|i| i["payment_id"] == payment && check(i))
    })
    .await
}

#[tokio::test]
async fn a_reason_the_ledger_rewrites_between_tries_changes_nothing_at_the_gateway() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Stripe).await;
    refunds_on(&mut env, "auto", &[&api]);
    // The refunder waits on a call as long as the test needs (the lease
    // outlasting three such calls).
    env.set_env("ONCEHOOK_RECONCILE_TIMEOUT", "30s");
    env.set_env("ONCEHOOK_REFUNDS_LEASE", "100s");
    // The first send fails (nothing made) once the test opens the gate.
    let gate = Gate::default();
    api.refund_faults(&[Fault::HeldStatus(gate.clone(), 503)]);
    let order = "ra_reason";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let shop_api = Api::start(&mut env, &[]).await;
    let paid = Paid::twice(Gateway::Stripe, "reason");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    eventually("the first send at the gateway", WAIT, || async {
        (api.refund_bodies().len() == 1).then_some(())
    })
    .await;
    // While it is in flight, the shop cancels the paid order: the ledger
    // rewrites the intent's reason.
    let cancelled = shop_api
        .call(
            "POST",
            &format!("/v1/orders/{order}/cancel"),
            Some(FULL_KEY),
            Some(r#"{"reason": "out of stock"}"#),
            &[],
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.json);
    intent_of(&env, order, &paid.second, |i| {
        i["reason"] == "cancelled_order"
    })
    .await;
    gate.open();
    let settled = intent_of(&env, order, &paid.second, |i| i["state"] == "settled").await;
    assert_eq!(settled["reason"], "cancelled_order", "{settled}");
    assert_eq!(settled["sent_reason"], "duplicate_capture", "{settled}");
    assert_eq!(api.refunds_made(&paid.second), 1);
    let sent: Vec<String> = api
        .refund_bodies()
        .into_iter()
        .filter(|b| b.contains(&format!("payment_intent={}", paid.second)))
        .collect();
    assert_eq!(sent.len(), 2, "the failed try and the one made: {sent:?}");
    assert_eq!(sent[0], sent[1], "the same request under the same key");
    assert!(
        sent[0].contains("oncehook_reason%5D=duplicate_capture"),
        "{}",
        sent[0]
    );
}
