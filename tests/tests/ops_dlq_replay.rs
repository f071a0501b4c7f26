//! `oncehookctl dlq replay` end to end through the real binaries: a dry
//! run first, a replay after the fix applied once (a second copy absorbed as
//! a duplicate, one replayed too early back with a replay count), a replay
//! by time window, by kind after a crash loop (`delivery_limit`), and an
//! email dead letter sent once SMTP works.

use std::time::Duration;

use oncehook_common::dead_letter::DeadLetterKind as Kind;
use oncehook_e2e::ops::{
    ctl_json, ctl_ok, dead_queue, dlq_list, find, ids, payu_failure, publish_old_dead_letter,
    wait_dead,
};
use oncehook_e2e::{PipelineSpec, Shop, TestEnv, WAIT, broker, eventually, shop};

#[tokio::test]
async fn dlq_replay_after_the_fix_applies_once_and_a_second_copy_is_a_duplicate() {
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    // The gateway delivers a capture for an order that does not exist: it
    // waits for the order, then (the test's TTL is 2 s) is dead-lettered;
    // the gateway's retry after that waits and is dead-lettered again.
    let capture = env.captured("order_late", "pay_R1", "evt_R1");
    env.post_ok(&app.url, "razorpay", &capture).await;
    wait_dead(&env, 1).await;
    env.post_ok(&app.url, "razorpay", &capture).await;
    env.post_ok(
        &app.url,
        "payu",
        &payu_failure(&env, "order_payu_late", "payu_R2"),
    )
    .await;
    wait_dead(&env, 3).await;
    let items = dlq_list(&env, &[]).await;
    let copies: Vec<String> = items
        .iter()
        .filter(|i| i["event_id"] == "evt_R1")
        .map(|i| i["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(copies.len(), 2, "{items:#?}");
    assert_ne!(copies[0], copies[1], "each copy has its own ID");

    // A replay needs a selector.
    let (code, _, stderr) = env.ctl(&["dlq", "replay"]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("--all"), "{stderr}");

    // Fix the cause, then look before leaping: a dry run changes nothing.
    Shop::own_product("order_late").seed(&env.pool).await;
    let dry = ctl_ok(&env, &["dlq", "replay", "--all", "--dry-run"]).await;
    assert!(dry.contains("would replay 3"), "{dry}");
    for id in ids(&items) {
        assert!(dry.contains(&id), "{id} in {dry}");
    }
    let dry_json = ctl_json(
        &env,
        &[
            "dlq",
            "replay",
            "--error-kind",
            Kind::UnknownOrder.as_str(),
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(dry_json["would_replay"], 3);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(3));
    assert_eq!(shop::order_status(&env.pool, "order_late").await, "pending");
    assert_eq!(
        ids(&dlq_list(&env, &[]).await),
        ids(&items),
        "dry run kept the order"
    );

    // An ID that is not there: exit 1, nothing touched.
    let (code, stdout, stderr) = env.ctl(&["dlq", "replay", "ffffffffffff"]).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("ffffffffffff"), "{stderr}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(3));

    // Replay the first copy: the order gets paid, the DLQ shrinks by one.
    let out = ctl_ok(&env, &["dlq", "replay", &copies[0]]).await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    shop::wait_paid(&env.pool, "order_late").await;
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(2));
    let left = ids(&dlq_list(&env, &[]).await);
    assert!(
        !left.contains(&copies[0]) && left.contains(&copies[1]),
        "{left:?}"
    );
    assert_eq!(
        shop::webhooks(&env.pool, "order_late").await,
        vec![("evt_R1".to_owned(), "applied".to_owned(), 1)]
    );

    // Replaying the second copy of an applied event is absorbed as a duplicate.
    let out = ctl_ok(&env, &["dlq", "replay", &copies[1]]).await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    eventually("the copy counted as a duplicate", WAIT, || async {
        let hooks = shop::webhooks(&env.pool, "order_late").await;
        (hooks.len() == 1 && hooks[0].2 == 2).then_some(())
    })
    .await;
    assert_eq!(
        shop::payments(&env.pool, "order_late").await,
        vec![("captured".to_owned(), None)],
        "one payment"
    );
    assert_eq!(
        shop::stock(&env.pool, "SKU_order_late").await,
        9,
        "stock taken once"
    );
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(1));

    // Replayed before its cause is fixed: it comes back with a fresh error
    // and a replay count.
    let out = ctl_ok(&env, &["dlq", "replay", "--gateway", "payu"]).await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    // It waits for its order again and, after the TTL, is dead-lettered
    // afresh by the parked-event sweeper, which carries the replay count
    // the event was parked with.
    let back = eventually("the PayU failure back in the DLQ", WAIT, || async {
        let items = dlq_list(&env, &[]).await;
        (items.len() == 1 && items[0]["gateway"] == "payu").then_some(items)
    })
    .await;
    assert_eq!(back[0]["kind"], Kind::UnknownOrder.as_str());
    assert_eq!(back[0]["replays"], 1, "{:#}", back[0]);
    assert!(
        back[0]["headers"].get("x-death").is_none(),
        "bookkeeping headers are not carried over: {:#}",
        back[0]
    );

    // Fixed: replay by kind; the failed attempt is recorded against the order.
    Shop::own_product("order_payu_late").seed(&env.pool).await;
    let out = ctl_ok(
        &env,
        &["dlq", "replay", "--error-kind", Kind::UnknownOrder.as_str()],
    )
    .await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    eventually("PayU failure recorded", WAIT, || async {
        (shop::payments(&env.pool, "order_payu_late").await == vec![("failed".to_owned(), None)])
            .then_some(())
    })
    .await;
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(0));
    assert_eq!(
        shop::order_status(&env.pool, "order_payu_late").await,
        "pending"
    );
}

#[tokio::test]
async fn dlq_since_leaves_out_dead_letters_that_failed_before_the_window() {
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;
    env.post_ok(
        &app.url,
        "razorpay",
        &env.captured("order_since", "pay_S1", "evt_S1"),
    )
    .await;
    wait_dead(&env, 1).await;
    publish_old_dead_letter(&env, "evt_S0", time::Duration::hours(3)).await;
    wait_dead(&env, 2).await;
    let all = dlq_list(&env, &[]).await;
    let old = find(&all, "event_id", "evt_S0")["id"].clone();
    let recent = find(&all, "event_id", "evt_S1")["id"].clone();

    // Listing: the three-hour-old letter is outside `--since 1h`, inside `--since 4h`.
    assert_eq!(
        ids(&dlq_list(&env, &["--since", "1h"]).await),
        vec![recent.as_str().unwrap_or_default().to_owned()]
    );
    assert_eq!(dlq_list(&env, &["--since", "4h"]).await.len(), 2);

    // Replaying by window: the dry run names only the recent one…
    let dry = ctl_json(&env, &["dlq", "replay", "--since", "1h", "--dry-run"]).await;
    assert_eq!(dry["would_replay"], 1, "{dry:#}");
    assert_eq!(dry["ids"], serde_json::json!([recent]), "{dry:#}");

    // …and the replay takes only it: the order gets paid, the old letter stays.
    Shop::own_product("order_since").seed(&env.pool).await;
    let out = ctl_ok(&env, &["dlq", "replay", "--since", "1h"]).await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    shop::wait_paid(&env.pool, "order_since").await;
    let left = dlq_list(&env, &[]).await;
    assert_eq!(
        ids(&left),
        vec![old.as_str().unwrap_or_default().to_owned()],
        "{left:#?}"
    );
    assert_eq!(left[0]["replays"], 0, "the old letter was not touched");
}

#[tokio::test]
async fn a_crash_looping_event_is_listed_as_delivery_limit_and_replays_after_the_fix() {
    let mut env = TestEnv::new().await;
    Shop::own_product("order_crash").seed(&env.pool).await;
    let (_ingest, url) = env.start_ingest().await;
    let mut faulty = env
        .start_consumer(
            "oncehook-worker",
            &[("ONCEHOOK_FAULT_PANIC_ORDER_REF", "order_crash")],
        )
        .await;
    env.post_ok(
        &url,
        "razorpay",
        &env.captured("order_crash", "pay_X1", "evt_X1"),
    )
    .await;
    wait_dead(&env, 1).await;
    faulty.kill();

    let items = dlq_list(&env, &[]).await;
    assert_eq!(items.len(), 1);
    let item = &items[0];
    assert_eq!(item["kind"], Kind::DeliveryLimit.as_str(), "{item:#}");
    assert_eq!(item["dead_lettered_by"], "broker");
    assert_eq!(item["gateway"], "razorpay");
    assert_eq!(item["event_id"], "evt_X1");
    assert_eq!(item["origin"], format!("{}.events", env.prefix).as_str());
    assert_eq!(item["routing_key"], "razorpay.payment.captured");
    assert!(item["headers"].get("x-death").is_some(), "{item:#}");
    assert!(item["failed_at"].is_string(), "{item:#}");
    // The derived ID survives peeks (which bump the broker's delivery count).
    let id = item["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(ids(&dlq_list(&env, &[]).await), vec![id.clone()]);
    let shown = ctl_ok(&env, &["dlq", "show", &id]).await;
    assert!(shown.contains("delivery limit"), "{shown}");

    // The bug is fixed (a worker without the fault): replay pays the order once.
    let _worker = env.start_worker().await;
    let out = ctl_ok(
        &env,
        &[
            "dlq",
            "replay",
            "--error-kind",
            Kind::DeliveryLimit.as_str(),
        ],
    )
    .await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    shop::wait_paid(&env.pool, "order_crash").await;
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(0));
    assert_eq!(shop::payments(&env.pool, "order_crash").await.len(), 1);
}

#[tokio::test]
async fn an_email_dead_letter_is_sent_after_replay_once_smtp_works() {
    let mut env = TestEnv::new().await;
    Shop::own_product("order_mail").seed(&env.pool).await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;
    let nowhere = format!("smtp://127.0.0.1:{}", oncehook_e2e::free_port());
    let mut broken = env
        .start_consumer(
            "oncehook-mailer",
            &[
                ("ONCEHOOK_SMTP_URL", nowhere.as_str()),
                ("ONCEHOOK_MAX_ATTEMPTS", "1"),
            ],
        )
        .await;
    env.post_ok(
        &app.url,
        "razorpay",
        &env.captured("order_mail", "pay_M1", "evt_M1"),
    )
    .await;
    shop::wait_paid(&env.pool, "order_mail").await;
    wait_dead(&env, 1).await;
    broken.kill();

    let items = dlq_list(&env, &[]).await;
    let item = find(&items, "kind", Kind::SmtpFailed.as_str());
    assert_eq!(item["gateway"], "email");
    assert_eq!(item["origin"], format!("{}.emails", env.prefix).as_str());
    let failed = env
        .count("SELECT count(*) FROM email_outbox WHERE failed_at IS NOT NULL")
        .await;
    assert_eq!(failed, 1, "the outbox row is marked failed");

    // SMTP fixed (here: the file transport), replay: the failure mark is
    // cleared and the email goes out once.
    let _mailer = env.start_mailer().await;
    let out = ctl_ok(
        &env,
        &["dlq", "replay", "--error-kind", Kind::SmtpFailed.as_str()],
    )
    .await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    eventually("email sent", WAIT, || async {
        let emails = shop::emails(&env.pool, "order_mail").await;
        (emails.len() == 1 && emails[0].1 && env.mail_files().len() == 1).then_some(())
    })
    .await;
    assert_eq!(
        env.count(
            "SELECT count(*) FROM email_outbox WHERE failed_at IS NOT NULL OR sent_at IS NULL"
        )
        .await,
        0
    );
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(0));
}
