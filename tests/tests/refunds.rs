//! Money owed back is refunded through the gateway once (docs/refunds.md),
//! against the real worker (ledger and refunder), ingest and mailer, with
//! stand-ins of each gateway's refund API that check idempotency keys the
//! way the gateway does and count the refunds they make. A customer who
//! paid twice is refunded the second capture exactly once, whichever capture
//! came first, with the refunder killed after the gateway refunded and
//! before it recorded the answer, and whichever of the refund's webhook and
//! the refunder's answer comes first; `propose` waits for an operator,
//! `auto` keeps to its ceilings and reasons, a refusal is parked with the
//! gateway's words, and the kill switch stops sending without losing an
//! intent.

use std::time::Duration;

use oncehook_e2e::gateway_api::{Fault, GatewayApi, shapes};
use oncehook_e2e::metrics::{scrape, series, sum};
use oncehook_e2e::ops::ctl_json;
use oncehook_e2e::refunds::{
    Paid, refund_emails, refunded_once, refunds_on, wait_intent, wait_passes,
};
use oncehook_e2e::shop::Shop;
use oncehook_e2e::{TestEnv, WAIT, eventually};
use oncehook_gateways::Gateway;
use serde_json::Value;

/// Paid twice through `gateway`, in both orders of the captures: one refund
/// each time, of the second payment.
async fn paid_twice(gateway: Gateway, tag: &str) {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(gateway).await;
    refunds_on(&mut env, "auto", &[&api]);
    let (a, b) = (format!("rf_{tag}_ab"), format!("rf_{tag}_ba"));
    Shop::mugs(10, &[a.as_str(), b.as_str()])
        .seed(&env.pool)
        .await;
    let p = env.pipeline().await;
    let paid_a = Paid::twice(gateway, &format!("{tag}1"));
    paid_a.post(&env, &p, &api, &a, &paid_a.first.clone()).await;
    paid_a
        .post(&env, &p, &api, &a, &paid_a.second.clone())
        .await;
    let paid_b = Paid::twice(gateway, &format!("{tag}2"));
    paid_b
        .post(&env, &p, &api, &b, &paid_b.second.clone())
        .await;
    paid_b.post(&env, &p, &api, &b, &paid_b.first.clone()).await;
    refunded_once(&env, &api, &paid_a, &a).await;
    refunded_once(&env, &api, &paid_b, &b).await;
    // Later passes send nothing more.
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert_eq!(api.refund_posts().len(), 2, "{:?}", api.refund_posts());
}

#[tokio::test]
async fn razorpay_paid_twice_is_refunded_once_in_either_order() {
    paid_twice(Gateway::Razorpay, "rzp").await;
}

#[tokio::test]
async fn stripe_paid_twice_is_refunded_once_in_either_order() {
    paid_twice(Gateway::Stripe, "st").await;
}

#[tokio::test]
async fn cashfree_paid_twice_is_refunded_once_in_either_order() {
    paid_twice(Gateway::Cashfree, "77").await;
}

#[tokio::test]
async fn payu_paid_twice_is_refunded_once_in_either_order() {
    paid_twice(Gateway::Payu, "pu").await;
}

/// The refunder is SIGKILLed after the gateway made the refund and before
/// it heard: a worker started afterwards takes the intent over when its
/// lease runs out and the gateway still makes one refund, by the lookup
/// before the retry (the keys are forgotten first, so only the lookup
/// stands between the retry and a second refund).
async fn killed_after_sending(gateway: Gateway, tag: &str) {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(gateway).await;
    refunds_on(&mut env, "auto", &[&api]);
    let order = format!("rf_{tag}_kill");
    Shop::mugs(10, &[&order]).seed(&env.pool).await;
    let mut p = env.pipeline().await;
    api.hold_refund_answer(Duration::from_secs(60));
    let paid = Paid::twice(gateway, tag);
    paid.post(&env, &p, &api, &order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, &order, &paid.second.clone())
        .await;
    eventually("the refund made at the gateway", WAIT, || async {
        (api.refunds_made(&paid.second) == 1).then_some(())
    })
    .await;
    p.workers[0].kill();
    api.forget_refund_keys();
    wait_intent(&env, &order, "sending").await;
    let worker = env.start_worker().await;
    refunded_once(&env, &api, &paid, &order).await;
    wait_passes(worker.metrics_url(), 2.0).await;
    assert_eq!(
        api.refunds_made(&paid.second),
        1,
        "{:?}",
        api.refund_posts()
    );
}

#[tokio::test]
async fn razorpay_refunder_killed_after_sending_refunds_once() {
    killed_after_sending(Gateway::Razorpay, "rzpk").await;
}

#[tokio::test]
async fn stripe_refunder_killed_after_sending_refunds_once() {
    killed_after_sending(Gateway::Stripe, "stk").await;
}

#[tokio::test]
async fn cashfree_refunder_killed_after_sending_refunds_once() {
    killed_after_sending(Gateway::Cashfree, "66").await;
}

#[tokio::test]
async fn payu_refunder_killed_after_sending_refunds_once() {
    killed_after_sending(Gateway::Payu, "puk").await;
}

/// A Razorpay payment with more refunds than one page of its list (100):
/// the refund made while its answer was lost is found on the second page
/// (`skip`), and nothing is sent again (the stand-in's keys are forgotten,
/// so only the lookup stands between the retry and a second refund).
#[tokio::test]
async fn a_razorpay_payment_with_a_full_page_of_refunds_is_paged_through_and_refunded_once() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "auto", &[&api]);
    let order = "rf_paged";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Razorpay, "paged");
    let list = format!("/v1/payments/{}/refunds", paid.second);
    for i in 0..150 {
        api.add(
            &list,
            shapes::razorpay_refund(&format!("rfnd_Others{i:08}"), &paid.second, 1),
        );
    }
    api.refund_faults(&[Fault::Dropped]);
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    eventually("the refund made at the gateway", WAIT, || async {
        (api.refunds_made(&paid.second) == 1).then_some(())
    })
    .await;
    api.forget_refund_keys();
    refunded_once(&env, &api, &paid, order).await;
    let calls = api.calls();
    assert!(
        calls
            .iter()
            .any(|c| c.contains("refunds?count=100&skip=100")),
        "the second page asked: {calls:?}"
    );
    assert_eq!(api.refund_posts().len(), 1, "{:?}", api.refund_posts());
}

#[tokio::test]
async fn the_refund_webhook_before_the_refunders_answer_settles_once() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "auto", &[&api]);
    // The refunder waits up to 8 s for the answer, which comes after 4 s:
    // the refund's webhook arrives in between. The lease outlasts one send
    // (three calls of 8 s).
    env.set_env("ONCEHOOK_RECONCILE_TIMEOUT", "8s");
    env.set_env("ONCEHOOK_REFUNDS_LEASE", "25s");
    let order = "rf_webhook_first";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    api.hold_refund_answer(Duration::from_secs(4));
    let paid = Paid::twice(Gateway::Razorpay, "wh");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    eventually("the refund made at the gateway", WAIT, || async {
        (api.refunds_made(&paid.second) == 1).then_some(())
    })
    .await;
    let refund_id = api.refund_ids(&paid.second).pop().expect("the refund's id");
    // Razorpay's sample names its refund `rfnd_{event id}`.
    let event_id = refund_id.trim_start_matches("rfnd_");
    let spec = env.spec(order, &paid.second, event_id, 50_000);
    assert_eq!(spec.refund_id(Gateway::Razorpay), refund_id);
    let webhook = env.sign(Gateway::Razorpay, "refund.processed", &spec);
    env.post_ok(&p.url, "razorpay", &webhook).await;
    // Settled by the webhook while the refunder still waits for its answer.
    let settled = wait_intent(&env, order, "settled").await;
    assert!(settled["gateway_refund_id"].is_null(), "{settled}");
    // Then the answer: recorded on the settled intent, its fact a duplicate.
    let intent = eventually("the refund's id on the intent", WAIT, || async {
        let i = wait_intent(&env, order, "settled").await;
        (i["gateway_refund_id"] == refund_id.as_str()).then_some(i)
    })
    .await;
    assert_eq!(intent["state"], "settled");
    refunded_once(&env, &api, &paid, order).await;
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert_eq!(api.refunds_made(&paid.second), 1);
    assert_eq!(refund_emails(&env, order).await, 1);
}

#[tokio::test]
async fn propose_waits_for_an_operator_and_the_approval_is_sent_once() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Stripe).await;
    refunds_on(&mut env, "propose", &[&api]);
    let order = "rf_propose";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Stripe, "prop");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    let intent = eventually("the intent held for an operator", WAIT, || async {
        let i = wait_intent(&env, order, "owed").await;
        i["held_because"].as_str().is_some().then_some(i)
    })
    .await;
    assert!(
        intent["held_because"]
            .as_str()
            .is_some_and(|h| h.contains("approval")),
        "{intent}"
    );
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert!(api.refund_posts().is_empty(), "nothing sent unapproved");
    let id = intent["id"].as_str().expect("id").to_owned();
    let approved = ctl_json(&env, &["refunds", "approve", &id]).await;
    assert_eq!(approved["state"], "approved");
    refunded_once(&env, &api, &paid, order).await;
    let audit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM console_audit WHERE action = 'refund.approve' AND $1 = ANY(letters)
           AND actor = 'unknown@oncehookctl'",
    )
    .bind(&id)
    .fetch_one(&env.pool)
    .await
    .expect("audit");
    // The test runs the tool without $USER: the audit says so.
    assert_eq!(audit, 1, "the approval is audited, naming the operator");
    // The order's trace tells the story too.
    let trace = oncehook_e2e::ops::ctl_ok(&env, &["trace", "order", order]).await;
    let line = trace
        .lines()
        .find(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("the intent in the trace:\n{trace}"));
    assert!(
        line.contains("settled") && line.contains("duplicate_capture"),
        "{line}"
    );
    // A settled intent cannot be approved or cancelled again.
    let (code, _, stderr) = env.ctl(&["refunds", "cancel", &id]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("is settled"), "{stderr}");
}

#[tokio::test]
async fn auto_keeps_to_its_ceilings_and_reasons() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "auto", &[&api]);
    // One refund of 500.00 fits the day; the second would not.
    env.append_config(
        "[refunds.source.razorpay]\nmax_refund_minor = 60000\nmax_daily_minor = 80000\n",
    );
    let (one, two, big, wrong) = ("rf_ceil_1", "rf_ceil_2", "rf_ceil_big", "rf_ceil_wrong");
    Shop::mugs(10, &[one, two, wrong]).seed(&env.pool).await;
    Shop::new()
        .order_of(big, 70_000, "INR", &[("MUG", 1)])
        .seed(&env.pool)
        .await;
    let p = env.pipeline().await;
    // Both owed within the same moment (most likely decided in one page
    // of one pass): the older one fits the day, the other does not. Older
    // is the intent's `created_at`, its transaction's start: captures of
    // both orders are committed side by side, so which began first is the
    // database's to say, not the order of the posts.
    let mut paid_for = Vec::new();
    for (order, tag) in [(one, "c1"), (two, "c2")] {
        let paid = Paid::twice(Gateway::Razorpay, tag);
        paid.post(&env, &p, &api, order, &paid.first.clone()).await;
        paid.post(&env, &p, &api, order, &paid.second.clone()).await;
        paid_for.push((order, paid));
    }
    let by_age: Vec<String> = eventually("both intents minted", WAIT, || async {
        let refs: Vec<String> = sqlx::query_scalar(
            "SELECT o.order_ref FROM refund_intents i JOIN orders o ON o.id = i.order_id
             WHERE o.order_ref = ANY($1) ORDER BY i.created_at, i.id",
        )
        .bind(vec![one.to_owned(), two.to_owned()])
        .fetch_all(&env.pool)
        .await
        .unwrap_or_default();
        (refs.len() == 2).then_some(refs)
    })
    .await;
    let (older, younger) = (by_age[0].as_str(), by_age[1].as_str());
    let older_paid = &paid_for
        .iter()
        .find(|(order, _)| *order == older)
        .expect("the older intent's order")
        .1;
    refunded_once(&env, &api, older_paid, older).await;
    let two = younger;
    let held = wait_intent(&env, two, "owed").await;
    let why = |i: &Value| i["held_because"].as_str().unwrap_or("").to_owned();
    let held = if why(&held).is_empty() {
        eventually("the second intent held", WAIT, || async {
            let i = wait_intent(&env, two, "owed").await;
            (!why(&i).is_empty()).then_some(i)
        })
        .await
    } else {
        held
    };
    assert!(why(&held).contains("daily ceiling"), "{held}");
    // Over the per-refund ceiling: 700.00 captured twice.
    let big_paid = Paid::twice(Gateway::Razorpay, "cbig");
    for payment in [&big_paid.first, &big_paid.second] {
        let d = env.sign(
            Gateway::Razorpay,
            "payment.captured",
            &env.spec(big, payment, &format!("evt_{payment}"), 70_000),
        );
        env.post_ok(&p.url, "razorpay", &d).await;
    }
    // A capture of the wrong amount: not a reason refunded automatically.
    let d = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec(wrong, "pay_cwrong", "evt_pay_cwrong", 100),
    );
    env.post_ok(&p.url, "razorpay", &d).await;
    for (order, words) in [(big, "per-refund ceiling"), (wrong, "amount_mismatch")] {
        let i = eventually(&format!("{order} held"), WAIT, || async {
            let i = wait_intent(&env, order, "owed").await;
            why(&i).contains(words).then_some(i)
        })
        .await;
        assert_eq!(i["state"], "owed", "{i}");
    }
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert_eq!(api.refund_posts().len(), 1, "{:?}", api.refund_posts());
}

/// The daily ceiling counts each currency on its own: 500.00 INR refunded
/// automatically today leaves all of the day's USD ceiling (paise and cents
/// never add up).
#[tokio::test]
async fn the_daily_ceiling_is_per_currency() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "auto", &[&api]);
    env.append_config(
        "[refunds.source.razorpay]\nmax_refund_minor = 60000\nmax_daily_minor = 60000\n",
    );
    let (inr, usd) = ("rf_cur_inr", "rf_cur_usd");
    Shop::mugs(10, &[inr]).seed(&env.pool).await;
    Shop::new()
        .order_of(usd, 20_000, "USD", &[("MUG", 1)])
        .seed(&env.pool)
        .await;
    let p = env.pipeline().await;
    let rupees = Paid::twice(Gateway::Razorpay, "curinr");
    rupees
        .post(&env, &p, &api, inr, &rupees.first.clone())
        .await;
    rupees
        .post(&env, &p, &api, inr, &rupees.second.clone())
        .await;
    refunded_once(&env, &api, &rupees, inr).await;
    let dollars = Paid::twice(Gateway::Razorpay, "curusd");
    for payment in [&dollars.first, &dollars.second] {
        let mut spec = env.spec(usd, payment, &format!("evt_{payment}"), 20_000);
        spec.currency = "USD".into();
        let d = env.sign(Gateway::Razorpay, "payment.captured", &spec);
        env.post_ok(&p.url, "razorpay", &d).await;
    }
    let intent = wait_intent(&env, usd, "settled").await;
    assert_eq!(intent["currency"], "USD", "{intent}");
    assert_eq!(api.refunds_made(&dollars.second), 1);
}

#[tokio::test]
async fn a_refusal_is_parked_with_the_gateways_words_and_not_retried() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "auto", &[&api]);
    let order = "rf_refused";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Razorpay, "refused");
    let words = "Your account does not have enough balance to carry out the refund operation.";
    api.refuse_refunds(&paid.second, "BAD_REQUEST_ERROR", words);
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    let failed = wait_intent(&env, order, "failed").await;
    assert_eq!(failed["gateway_code"], "BAD_REQUEST_ERROR", "{failed}");
    assert_eq!(failed["gateway_message"], words, "{failed}");
    let worker = p.worker().metrics_url().to_owned();
    wait_passes(&worker, 2.0).await;
    assert_eq!(api.refund_posts().len(), 1, "never retried blindly");
    assert_eq!(
        series(
            &scrape(&worker).await,
            "oncehook_refund_refusals_total",
            &[("gateway", "razorpay"), ("code", "BAD_REQUEST_ERROR")]
        ),
        1.0
    );
    // The operator fixes the balance and approves it again: sent once.
    api.accept_refunds(&paid.second);
    let id = failed["id"].as_str().expect("id").to_owned();
    ctl_json(&env, &["refunds", "approve", &id]).await;
    refunded_once(&env, &api, &paid, order).await;
    assert_eq!(api.refund_posts().len(), 2);
}

#[tokio::test]
async fn the_kill_switch_stops_sending_and_loses_nothing() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Stripe).await;
    refunds_on(&mut env, "auto", &[&api]);
    let order = "rf_paused";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let paused = ctl_json(&env, &["refunds", "pause"]).await;
    assert_eq!(paused["paused"], true);
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Stripe, "pause");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    wait_intent(&env, order, "approved").await;
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert!(api.refund_posts().is_empty(), "nothing sent while paused");
    let text = scrape(p.worker().metrics_url()).await;
    assert_eq!(sum(&text, "oncehook_refunds_paused"), 1.0);
    let listed = ctl_json(&env, &["refunds", "list"]).await;
    assert_eq!(listed["paused"], true);
    ctl_json(&env, &["refunds", "resume"]).await;
    refunded_once(&env, &api, &paid, order).await;
}

#[tokio::test]
async fn the_refund_joins_the_trace_of_the_capture_that_made_it_owed() {
    use oncehook_e2e::env::with_header;
    use oncehook_e2e::otlp::OtlpReceiver;
    const TRACE: &str = "5cf92f3577b34da6a3ce929d0e0e4799";
    let receiver = OtlpReceiver::start().await;
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "auto", &[&api]);
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint);
    env.set_env("OTEL_BSP_SCHEDULE_DELAY", "200");
    let order = "rf_traced";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Razorpay, "tr");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    // The first capture applied on its own: the second is the fact that
    // makes money owed, in a group of its own (a group's consequences join
    // the trace of its first delivery for the order).
    eventually("the order paid", WAIT, || async {
        (oncehook_e2e::shop::order_status(&env.pool, order).await == "paid").then_some(())
    })
    .await;
    let second = env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec(order, &paid.second, "evt_tr2", 50_000),
    );
    let second = with_header(
        &second,
        "traceparent",
        &format!("00-{TRACE}-00f067aa0ba902b7-01"),
    );
    env.post_ok(&p.url, "razorpay", &second).await;
    refunded_once(&env, &api, &paid, order).await;
    let intent = wait_intent(&env, order, "settled").await;
    let refund = eventually("the refund's span in the capture's trace", WAIT, || async {
        receiver
            .trace(TRACE)
            .into_iter()
            .find(|s| s.service == "oncehook-worker" && s.name == "refund")
    })
    .await;
    assert_eq!(
        refund.attributes["oncehook.intent"],
        intent["id"].as_str().unwrap_or("")
    );
    assert_eq!(refund.kind, 3, "client");
    assert!(!refund.parent_span_id.is_empty(), "a child, not a new root");
}

#[tokio::test]
async fn the_refunders_answer_then_the_webhook_settle_once_and_the_shop_hears_once() {
    use oncehook_e2e::receiver::{Receiver, SECRET};
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "auto", &[&api]);
    let shop_rx = Receiver::start(SECRET).await;
    env.append_config(&format!(
        "[[notify.endpoint]]\nname = \"shop\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"order.*\"]\n",
        shop_rx.url
    ));
    let order = "rf_answer_first";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let _notifier = env.start_consumer("oncehook-notifier", &[]).await;
    let paid = Paid::twice(Gateway::Razorpay, "af");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    // The refunder's answer settles it first.
    refunded_once(&env, &api, &paid, order).await;
    // Then the gateway's webhook of the same refund: a duplicate fact.
    let refund_id = api.refund_ids(&paid.second).pop().expect("the refund's id");
    let event_id = refund_id.trim_start_matches("rfnd_").to_owned();
    let spec = env.spec(order, &paid.second, &event_id, 50_000);
    let webhook = env.sign(Gateway::Razorpay, "refund.processed", &spec);
    env.post_ok(&p.url, "razorpay", &webhook).await;
    eventually("the refund's webhook processed", WAIT, || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM processed_webhooks WHERE event_id = $1")
                .bind(&event_id)
                .fetch_one(&env.pool)
                .await
                .ok()?;
        (n == 1).then_some(())
    })
    .await;
    let refunded = |rx: &Receiver| {
        rx.received()
            .iter()
            .filter(|r| {
                r.event["order"]["order_ref"] == order && r.event["type"] == "order.refunded"
            })
            .count()
    };
    eventually("order.refunded at the shop", WAIT, || async {
        (refunded(&shop_rx) >= 1).then_some(())
    })
    .await;
    // Everything owed to the shop delivered: still one order.refunded.
    eventually("every order event delivered", WAIT, || async {
        let pending: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM notify_deliveries WHERE status <> 'delivered'",
        )
        .fetch_one(&env.pool)
        .await
        .ok()?;
        (pending == 0).then_some(())
    })
    .await;
    assert_eq!(refunded(&shop_rx), 1, "order.refunded once");
    assert_eq!(refund_emails(&env, order).await, 1, "one refund email");
    assert_eq!(api.refunds_made(&paid.second), 1);
    assert_eq!(
        wait_intent(&env, order, "settled").await["state"],
        "settled"
    );
}

#[tokio::test]
async fn a_5xx_a_429_and_a_lost_answer_are_retried_under_the_same_key_and_refund_once() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Stripe).await;
    refunds_on(&mut env, "auto", &[&api]);
    let order = "rf_retried";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    // Nothing done (503), nothing done (429), then done with the answer
    // lost (the connection closed), then found by the lookup.
    api.refund_faults(&[Fault::Status(503), Fault::RateLimited(1), Fault::Dropped]);
    let paid = Paid::twice(Gateway::Stripe, "retry");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    refunded_once(&env, &api, &paid, order).await;
    let calls = api.calls();
    let asked = calls.iter().filter(|c| *c == "POST /v1/refunds").count();
    assert_eq!(asked, 3, "{calls:?}");
    // Every retry looked first; the last found the refund the lost
    // answer was of, and sent nothing.
    let lookup = format!("GET /v1/refunds?payment_intent={}&limit=100", paid.second);
    let looked = calls.iter().filter(|c| **c == lookup).count();
    assert_eq!(looked, 3, "{calls:?}");
    // One request for every try, under one key.
    let bodies = api.refund_bodies();
    assert!(
        bodies.len() == 3 && bodies.iter().all(|b| *b == bodies[0]),
        "{bodies:?}"
    );
    assert_eq!(api.refund_posts().len(), 1, "the one the stand-in took");
    let intent = wait_intent(&env, order, "settled").await;
    assert_eq!(intent["attempts"], 4, "{intent}");
    let worker = p.worker().metrics_url().to_owned();
    let text = scrape(&worker).await;
    assert_eq!(
        series(
            &text,
            "oncehook_refund_attempts_total",
            &[("gateway", "stripe"), ("outcome", "retry")]
        ),
        3.0
    );
}

#[tokio::test]
async fn a_refund_from_the_gateway_first_cancels_the_intent_and_nothing_is_sent() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Razorpay).await;
    refunds_on(&mut env, "propose", &[&api]);
    let order = "rf_refunded_elsewhere";
    Shop::mugs(10, &[order]).seed(&env.pool).await;
    let p = env.pipeline().await;
    let paid = Paid::twice(Gateway::Razorpay, "else");
    paid.post(&env, &p, &api, order, &paid.first.clone()).await;
    paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    let owed = wait_intent(&env, order, "owed").await;
    // The shop refunds the second payment from the gateway's dashboard.
    let spec = env.spec(order, &paid.second, "ElsewhereRefund1", 50_000);
    let webhook = env.sign(Gateway::Razorpay, "refund.processed", &spec);
    env.post_ok(&p.url, "razorpay", &webhook).await;
    let cancelled = wait_intent(&env, order, "cancelled").await;
    assert_eq!(
        cancelled["id"], owed["id"],
        "the same intent, cancelled, not deleted"
    );
    assert_eq!(cancelled["refunded_minor"], 50_000);
    // An operator's approval comes too late: refused, nothing sent.
    let id = owed["id"].as_str().expect("id").to_owned();
    let (code, _, stderr) = env.ctl(&["refunds", "approve", &id]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("is cancelled"), "{stderr}");
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert!(api.refund_posts().is_empty(), "{:?}", api.refund_posts());
    let text = scrape(p.worker().metrics_url()).await;
    assert_eq!(
        series(
            &text,
            "oncehook_refund_intents",
            &[("state", "cancelled"), ("reason", "duplicate_capture")]
        ),
        1.0
    );
}

#[tokio::test]
async fn a_source_turned_off_sends_nothing_even_approved_and_every_waiting_intent_is_decided() {
    let mut env = TestEnv::new().await;
    let api = GatewayApi::start(Gateway::Stripe).await;
    refunds_on(&mut env, "propose", &[&api]);
    env.append_config("[refunds.source.stripe]\nmode = \"off\"\n");
    // More intents than one page of the policy's pass: every one decided.
    let orders: Vec<String> = (0..120).map(|i| format!("rf_off_{i:03}")).collect();
    Shop::mugs(1_000, &orders).seed(&env.pool).await;
    let p = env.pipeline().await;
    for (i, order) in orders.iter().enumerate() {
        let paid = Paid::twice(Gateway::Stripe, &format!("off{i:03}"));
        paid.post(&env, &p, &api, order, &paid.first.clone()).await;
        paid.post(&env, &p, &api, order, &paid.second.clone()).await;
    }
    eventually("every intent held, with why", WAIT, || async {
        let held: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM refund_intents
             WHERE state = 'owed' AND held_because LIKE 'refunds are off for source stripe%'",
        )
        .fetch_one(&env.pool)
        .await
        .ok()?;
        (held == 120).then_some(())
    })
    .await;
    // An operator approves one anyway: the refunder refuses to send it.
    let intent = wait_intent(&env, &orders[0], "owed").await;
    let id = intent["id"].as_str().expect("id").to_owned();
    ctl_json(&env, &["refunds", "approve", &id]).await;
    let failed = wait_intent(&env, &orders[0], "failed").await;
    assert_eq!(failed["gateway_code"], "off", "{failed}");
    wait_passes(p.worker().metrics_url(), 2.0).await;
    assert!(api.refund_posts().is_empty(), "{:?}", api.refund_posts());
}
