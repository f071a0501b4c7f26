//! `oncehookctl dlq list` and `dlq show` end to end through the real
//! binaries: each failure described (kind, origin, routing key, attempts,
//! a stable ID, the headers, the payload pretty-printed or decoded) without
//! consuming it, the filters and the limit, lists run at the same time, and
//! a list that waits for another operator's peek instead of showing nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use oncehook_common::Topology;
use oncehook_common::dead_letter::{DeadLetterKind as Kind, HEADER_ERROR_KIND, HEADER_ORIGIN};
use oncehook_e2e::ops::{
    ctl_json, ctl_ok, dead_queue, dlq_list, find, ids, payu_failure, publish_dead_letters,
    razorpay_raw, wait_dead,
};
use oncehook_e2e::{PipelineSpec, TestEnv, broker};

#[tokio::test]
async fn dlq_list_and_show_describe_each_failure_without_consuming_it() {
    let mut env = TestEnv::new().await;
    let app = env
        .pipeline_with(PipelineSpec::default().without_mailer())
        .await;

    // 1. A genuine capture for an order oncehook does not know.
    env.post_ok(
        &app.url,
        "razorpay",
        &env.captured("order_gone", "pay_L1", "evt_L1"),
    )
    .await;
    // 2. Authentic, but nothing in it can be read as a payment.
    let unparseable = r#"{"event":"payment.captured","payload":{}}"#;
    env.post_ok(&app.url, "razorpay", &razorpay_raw(unparseable, None))
        .await;
    // 3. A capture without a payment id.
    let no_payment = r#"{"event":"payment.captured","payload":{"payment":{"entity":{"order_id":"order_gone","amount":50000,"currency":"INR"}}}}"#;
    env.post_ok(
        &app.url,
        "razorpay",
        &razorpay_raw(no_payment, Some("evt_L3")),
    )
    .await;
    // 4. A PayU failure (form-encoded) for an unknown transaction.
    env.post_ok(
        &app.url,
        "payu",
        &payu_failure(&env, "order_payu_gone", "403993715531"),
    )
    .await;
    wait_dead(&env, 4).await;

    let items = dlq_list(&env, &[]).await;
    assert_eq!(items.len(), 4, "{items:#?}");
    let events = Topology::new(env.prefix.clone()).events();
    let unknown = find(&items, "event_id", "evt_L1");
    assert_eq!(unknown["gateway"], "razorpay");
    assert_eq!(unknown["kind"], Kind::UnknownOrder.as_str());
    assert_eq!(unknown["event_type"], "payment.captured");
    assert_eq!(unknown["origin"], events.as_str());
    assert_eq!(unknown["routing_key"], "razorpay.payment.captured");
    assert_eq!(unknown["attempts"], 1);
    assert_eq!(unknown["dead_lettered_by"], "oncehook");
    assert!(
        unknown["error"]
            .as_str()
            .is_some_and(|e| e.contains("order_gone")),
        "{unknown:#}"
    );
    assert!(
        unknown["failed_at"]
            .as_str()
            .is_some_and(|t| t.contains('T'))
    );
    assert_eq!(
        unknown["headers"][HEADER_ERROR_KIND],
        Kind::UnknownOrder.as_str()
    );
    let parse_failure = find(&items, "kind", Kind::Unparseable.as_str());
    assert_eq!(parse_failure["gateway"], "razorpay");
    assert!(parse_failure["event_id"].is_null(), "{parse_failure:#}");
    let missing = find(&items, "kind", Kind::MissingPaymentId.as_str());
    assert_eq!(missing["event_id"], "evt_L3");
    let payu = find(&items, "gateway", "payu");
    assert_eq!(payu["kind"], Kind::UnknownOrder.as_str());
    assert!(
        payu["event_id"]
            .as_str()
            .is_some_and(|e| e == "403993715531:failure"),
        "{payu:#}"
    );
    // The IDs are those the shared code gives each message in the queue
    // (the console's, replay's and purge's too), one per letter.
    let all_ids = ids(&items);
    let queued: BTreeSet<String> = broker::peek(&dead_queue(&env))
        .await
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(
        all_ids.iter().cloned().collect::<BTreeSet<_>>(),
        queued,
        "{all_ids:?}"
    );
    assert_eq!(queued.len(), 4, "IDs are unique: {all_ids:?}");

    // Peeking again sees the same messages, in the same order, with the same IDs.
    assert_eq!(ids(&dlq_list(&env, &[]).await), all_ids);
    assert_eq!(ids(&dlq_list(&env, &[]).await), all_ids);
    assert_eq!(
        broker::depth(&dead_queue(&env)).await,
        Some(4),
        "nothing consumed"
    );

    // The table for people.
    let text = ctl_ok(&env, &["dlq", "list"]).await;
    for column in [
        "ID",
        "GATEWAY",
        "EVENT",
        "TYPE",
        "KIND",
        "ERROR",
        "FAILED AT",
        "ATTEMPTS",
    ] {
        assert!(text.contains(column), "column {column}:\n{text}");
    }
    for id in &all_ids {
        assert!(text.contains(id.as_str()), "{id}:\n{text}");
    }
    assert!(
        text.contains(&format!(
            "4 dead letter(s) in {} (showing 4)",
            dead_queue(&env)
        )),
        "{text}"
    );
    let limited = ctl_ok(&env, &["dlq", "list", "--limit", "1"]).await;
    assert!(limited.contains("(showing 1)"), "{limited}");
    assert!(limited.contains(all_ids[0].as_str()), "{limited}");
    assert!(!limited.contains(all_ids[1].as_str()), "{limited}");

    // Filters.
    let by_gateway = dlq_list(&env, &["--gateway", "payu"]).await;
    assert_eq!(
        ids(&by_gateway),
        vec![payu["id"].as_str().unwrap_or_default().to_owned()]
    );
    let by_kind = dlq_list(&env, &["--error-kind", Kind::UnknownOrder.as_str()]).await;
    assert_eq!(by_kind.len(), 2, "{by_kind:#?}");
    assert!(
        by_kind
            .iter()
            .all(|i| i["kind"] == Kind::UnknownOrder.as_str())
    );
    assert_eq!(
        ids(&dlq_list(&env, &["--limit", "2"]).await),
        all_ids[..2].to_vec()
    );
    assert_eq!(dlq_list(&env, &["--since", "1h"]).await.len(), 4);
    let (code, _, stderr) = env.ctl(&["dlq", "list", "--since", "soon"]).await;
    assert_ne!(code, 0, "a bad duration is refused");
    assert!(stderr.contains("soon"), "{stderr}");

    // One in full: headers, error, the payload pretty-printed.
    let unknown_id = unknown["id"].as_str().unwrap_or_default();
    let shown = ctl_ok(&env, &["dlq", "show", unknown_id]).await;
    for needle in [
        unknown_id,
        Kind::UnknownOrder.as_str(),
        "order_gone",
        "pay_L1",
        "evt_L1",
        format!("{HEADER_ERROR_KIND}: {}", Kind::UnknownOrder).as_str(),
        format!("{HEADER_ORIGIN}:").as_str(),
        "razorpay.payment.captured",
        "\"entity\": \"payment\"",
    ] {
        assert!(
            shown.contains(needle),
            "`dlq show` lacks {needle:?}:\n{shown}"
        );
    }
    // PayU posts a form: shown decoded, and raw.
    let payu_shown = ctl_ok(
        &env,
        &["dlq", "show", payu["id"].as_str().unwrap_or_default()],
    )
    .await;
    for needle in [
        "txnid=403993715531",
        "udf1=order_payu_gone",
        "status=failure",
        "mihpayid=",
        "Raw:",
    ] {
        assert!(payu_shown.contains(needle), "{needle:?}:\n{payu_shown}");
    }
    let as_json = ctl_json(
        &env,
        &[
            "dlq",
            "show",
            parse_failure["id"].as_str().unwrap_or_default(),
        ],
    )
    .await;
    assert_eq!(
        as_json["payload"],
        serde_json::json!({"event": "payment.captured", "payload": {}})
    );
    assert_eq!(as_json["kind"], Kind::Unparseable.as_str());

    let (code, _, stderr) = env.ctl(&["dlq", "show", "0123456789ab"]).await;
    assert_eq!(code, 1, "an unknown ID is an error");
    assert!(stderr.contains("no dead letter"), "{stderr}");

    assert_eq!(
        broker::depth(&dead_queue(&env)).await,
        Some(4),
        "show consumed nothing"
    );
    assert_eq!(ids(&dlq_list(&env, &[]).await), all_ids, "order kept");
}

#[tokio::test]
async fn concurrent_dlq_lists_each_see_every_dead_letter() {
    let mut env = TestEnv::new().await;
    let _worker = env.start_worker().await;
    let n = 300;
    publish_dead_letters(&env, n).await;
    wait_dead(&env, n as u32).await;
    for round in 0..4 {
        let (a, b, c) = tokio::join!(
            dlq_list(&env, &["--limit", "1000"]),
            dlq_list(&env, &["--limit", "1000"]),
            ctl_json(&env, &["stats"])
        );
        assert_eq!(a.len(), n, "round {round}: first list");
        assert_eq!(b.len(), n, "round {round}: second list");
        assert_eq!(c["dead_letters"]["depth"], n, "round {round}: stats {c}");
    }
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(n as u32));

    // Replaying everything needs --yes without a terminal; filtered
    // replays keep working as documented (here: a dry run).
    let (code, _, stderr) = env.ctl(&["dlq", "replay", "--all"]).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(n as u32));
}

#[tokio::test]
async fn a_dlq_list_waits_for_a_held_peek_instead_of_showing_nothing() {
    use lapin::options::BasicGetOptions;
    use oncehook_common::peek_lock;
    let mut env = TestEnv::new().await;
    let _worker = env.start_worker().await;
    publish_dead_letters(&env, 5).await;
    wait_dead(&env, 5).await;

    // Another operator mid-peek: the lock taken, every letter held unacked.
    let conn = broker::connect().await;
    let topology = Topology::new(env.prefix.clone());
    let lock = peek_lock::try_lock(&conn, &topology)
        .await
        .expect("lock")
        .expect("nobody holds the lock yet");
    let ch = conn.create_channel().await.expect("channel");
    for _ in 0..5 {
        let got = ch
            .basic_get(dead_queue(&env).as_str().into(), BasicGetOptions::default())
            .await
            .expect("get");
        assert!(got.is_some());
    }
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(0));
    let started = std::time::Instant::now();
    let (shown, ()) = tokio::join!(dlq_list(&env, &[]), async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = ch.close(200, "peek done".into()).await;
        lock.release().await;
    });
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "dlq list must wait for the held peek"
    );
    assert_eq!(shown.len(), 5, "{shown:#?}");
    let _ = conn.close(200, "bye".into()).await;
}
