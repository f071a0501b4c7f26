//! The operators' side, end to end through the real binaries: dead letters
//! listed, shown, replayed and purged with `oncehookctl dlq`, `stats`,
//! `retention`, `trace`, and the Prometheus endpoints of every process.

use std::collections::BTreeSet;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use oncehook_common::dead_letter::{
    DeadLetter, DeadLetterKind as Kind, HEADER_ERROR_KIND, HEADER_ORIGIN, HEADER_REPLAYS, Writer,
};
use oncehook_e2e::{Secrets, TestEnv, broker, eventually, shop};
use oncehook_gateways::sample::SignedDelivery;
use oncehook_gateways::{Gateway, Headers};
use serde_json::Value;
use sha2::Sha256;

const WAIT: Duration = Duration::from_secs(30);

fn dead_queue(env: &TestEnv) -> String {
    format!("{}.dead", env.prefix)
}

async fn wait_dead(env: &TestEnv, n: u32) {
    let queue = dead_queue(env);
    eventually(&format!("{n} dead letter(s) in {queue}"), WAIT, || async {
        (broker::depth(&queue).await == Some(n)).then_some(())
    })
    .await;
}

async fn wait_paid(env: &TestEnv, order_ref: &str) {
    eventually(&format!("order {order_ref} paid"), WAIT, || async {
        (shop::order_status(&env.pool, order_ref).await == "paid").then_some(())
    })
    .await;
}

/// Runs `oncehookctl` and insists on exit code 0.
async fn ctl_ok(env: &TestEnv, args: &[&str]) -> String {
    let (code, stdout, stderr) = env.ctl(args).await;
    assert_eq!(
        code, 0,
        "oncehookctl {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// `oncehookctl --json …` parsed.
async fn ctl_json(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let stdout = ctl_ok(env, &all).await;
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{stdout}"))
}

/// `dlq list --json` with extra arguments.
async fn dlq_list(env: &TestEnv, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["dlq", "list"];
    args.extend_from_slice(extra);
    match ctl_json(env, &args).await {
        Value::Array(items) => items,
        other => panic!("dlq list --json must print an array, got {other}"),
    }
}

fn ids(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| i["id"].as_str().expect("id is a string").to_owned())
        .collect()
}

/// The one item with `field == value`.
fn find<'a>(items: &'a [Value], field: &str, value: &str) -> &'a Value {
    let found: Vec<&Value> = items.iter().filter(|i| i[field] == value).collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one dead letter with {field}={value}: {items:#?}"
    );
    found[0]
}

/// A Razorpay delivery with a hand-made body, signed with the test secret.
fn razorpay_raw(body: &str, event_id: Option<&str>) -> SignedDelivery {
    let mut mac = Hmac::<Sha256>::new_from_slice(Secrets::RAZORPAY.as_bytes()).expect("hmac key");
    mac.update(body.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    let mut headers = Headers::new()
        .with("Content-Type", "application/json")
        .with("X-Razorpay-Signature", &signature);
    if let Some(id) = event_id {
        headers.insert("X-Razorpay-Event-Id", id);
    }
    SignedDelivery {
        headers,
        body: body.as_bytes().to_vec(),
    }
}

async fn post_ok(env: &TestEnv, url: &str, source: &str, d: &SignedDelivery) {
    let (status, body) = env.post(url, source, d).await;
    assert_eq!(status, 200, "{source}: {body}");
}

/// A captured Razorpay payment for `order_ref` (which may not exist).
fn captured(env: &TestEnv, order_ref: &str, payment: &str, event: &str) -> SignedDelivery {
    env.sign(
        Gateway::Razorpay,
        "payment.captured",
        &env.spec(order_ref, payment, event, 50_000),
    )
}

/// A failed PayU attempt `txnid` for `order_ref` (`udf1`, which may not exist).
fn payu_failure(env: &TestEnv, order_ref: &str, txnid: &str) -> SignedDelivery {
    env.sign(
        Gateway::Payu,
        "failure",
        &env.spec(order_ref, txnid, "unused", 50_000),
    )
}

async fn seed(env: &TestEnv, order_ref: &str) {
    shop::product(&env.pool, &format!("SKU_{order_ref}"), 10).await;
    shop::order(
        &env.pool,
        order_ref,
        50_000,
        "INR",
        &[(&format!("SKU_{order_ref}"), 1)],
    )
    .await;
}

#[tokio::test]
async fn dlq_list_and_show_describe_each_failure_without_consuming_it() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;

    // 1. A genuine capture for an order oncehook does not know.
    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_gone", "pay_L1", "evt_L1"),
    )
    .await;
    // 2. Authentic, but nothing in it can be read as a payment.
    let unparseable = r#"{"event":"payment.captured","payload":{}}"#;
    post_ok(&env, &url, "razorpay", &razorpay_raw(unparseable, None)).await;
    // 3. A capture without a payment id.
    let no_payment = r#"{"event":"payment.captured","payload":{"payment":{"entity":{"order_id":"order_gone","amount":50000,"currency":"INR"}}}}"#;
    post_ok(
        &env,
        &url,
        "razorpay",
        &razorpay_raw(no_payment, Some("evt_L3")),
    )
    .await;
    // 4. A PayU failure (form-encoded) for an unknown transaction.
    post_ok(
        &env,
        &url,
        "payu",
        &payu_failure(&env, "order_payu_gone", "403993715531"),
    )
    .await;
    wait_dead(&env, 4).await;

    let items = dlq_list(&env, &[]).await;
    assert_eq!(items.len(), 4, "{items:#?}");
    let events = format!("{}.events", env.prefix);
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
    let all_ids = ids(&items);
    assert!(
        all_ids
            .iter()
            .all(|id| id.len() == 12 && id.chars().all(|c| c.is_ascii_hexdigit())),
        "{all_ids:?}"
    );
    assert_eq!(
        all_ids.iter().collect::<BTreeSet<_>>().len(),
        4,
        "IDs are unique: {all_ids:?}"
    );

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
async fn dlq_replay_after_the_fix_applies_once_and_a_second_copy_is_a_duplicate() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;

    // The gateway delivers the same capture twice before the order exists.
    let capture = captured(&env, "order_late", "pay_R1", "evt_R1");
    post_ok(&env, &url, "razorpay", &capture).await;
    post_ok(&env, &url, "razorpay", &capture).await;
    post_ok(
        &env,
        &url,
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
    seed(&env, "order_late").await;
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
    wait_paid(&env, "order_late").await;
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
    let back = eventually("the PayU failure back in the DLQ", WAIT, || async {
        let items = dlq_list(&env, &[]).await;
        (items.len() == 1 && items[0]["headers"][HEADER_REPLAYS] == 1).then_some(items)
    })
    .await;
    assert_eq!(back[0]["kind"], Kind::UnknownOrder.as_str());
    assert!(
        back[0]["headers"].get("x-death").is_none(),
        "bookkeeping headers are not carried over: {:#}",
        back[0]
    );

    // Fixed: replay by kind; the failed attempt is recorded against the order.
    seed(&env, "order_payu_late").await;
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

/// Puts a dead letter into `P.dead` as the worker would have written it,
/// `age` ago (only the headers `dlq` reads; the body is not an envelope).
async fn publish_old_dead_letter(env: &TestEnv, event_id: &str, age: time::Duration) {
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    broker::put_dead_letter(
        &ch,
        &dead_queue(env),
        &unknown_order(env, "no order order_long_gone"),
        "razorpay.payment.captured",
        time::OffsetDateTime::now_utc() - age,
        lapin::BasicProperties::default().with_message_id(format!("razorpay:{event_id}").into()),
        b"{}",
    )
    .await;
    let _ = conn.close(200, "bye".into()).await;
}

/// What the worker writes for an event whose order does not exist.
fn unknown_order(env: &TestEnv, error: &str) -> DeadLetter {
    DeadLetter {
        kind: Kind::UnknownOrder,
        error: error.to_owned(),
        origin: format!("{}.events", env.prefix),
        attempts: 1,
    }
}

#[tokio::test]
async fn dlq_since_leaves_out_dead_letters_that_failed_before_the_window() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_since", "pay_S1", "evt_S1"),
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
    seed(&env, "order_since").await;
    let out = ctl_ok(&env, &["dlq", "replay", "--since", "1h"]).await;
    assert!(out.contains("replayed 1, failed 0"), "{out}");
    wait_paid(&env, "order_since").await;
    let left = dlq_list(&env, &[]).await;
    assert_eq!(
        ids(&left),
        vec![old.as_str().unwrap_or_default().to_owned()],
        "{left:#?}"
    );
    assert_eq!(left[0]["replays"], 0, "the old letter was not touched");
}

#[tokio::test]
async fn dlq_purge_removes_exactly_the_chosen_dead_letters() {
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    for n in 1..=3 {
        let d = captured(
            &env,
            &format!("order_p{n}"),
            &format!("pay_P{n}"),
            &format!("evt_P{n}"),
        );
        post_ok(&env, &url, "razorpay", &d).await;
    }
    wait_dead(&env, 3).await;
    let all = ids(&dlq_list(&env, &[]).await);
    assert_eq!(all.len(), 3);

    // Without --yes and without a terminal to ask on: refused, nothing gone.
    let (code, stdout, stderr) = env.ctl(&["dlq", "purge", &all[1]]).await;
    assert_ne!(code, 0, "{stdout}");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert!(
        stdout.contains(&all[1]),
        "shows what would be purged: {stdout}"
    );
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(3));

    let out = ctl_ok(&env, &["dlq", "purge", &all[1], "--yes"]).await;
    assert!(out.contains("purged 1 dead letter(s)"), "{out}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(2));
    assert_eq!(
        ids(&dlq_list(&env, &[]).await),
        vec![all[0].clone(), all[2].clone()],
        "exactly that one is gone; the rest keep their order"
    );

    let (code, _, stderr) = env.ctl(&["dlq", "purge", "ffffffffffff", "--yes"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("ffffffffffff"), "{stderr}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(2));

    let (code, _, stderr) = env.ctl(&["dlq", "purge", "--all"]).await;
    assert_ne!(code, 0, "--all without --yes is refused too");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(2));

    let out = ctl_json(&env, &["dlq", "purge", "--all", "--yes"]).await;
    assert_eq!(out["purged"], 2);
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(0));
}

#[tokio::test]
async fn a_crash_looping_event_is_listed_as_delivery_limit_and_replays_after_the_fix() {
    let mut env = TestEnv::new().await;
    seed(&env, "order_crash").await;
    let (_ingest, url) = env.start_ingest().await;
    let mut faulty = env
        .start_consumer(
            "oncehook-worker",
            &[("ONCEHOOK_FAULT_PANIC_ORDER_REF", "order_crash")],
        )
        .await;
    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_crash", "pay_X1", "evt_X1"),
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
    wait_paid(&env, "order_crash").await;
    assert_eq!(broker::depth(&dead_queue(&env)).await, Some(0));
    assert_eq!(shop::payments(&env.pool, "order_crash").await.len(), 1);
}

#[tokio::test]
async fn an_email_dead_letter_is_sent_after_replay_once_smtp_works() {
    let mut env = TestEnv::new().await;
    seed(&env, "order_mail").await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
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
    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_mail", "pay_M1", "evt_M1"),
    )
    .await;
    wait_paid(&env, "order_mail").await;
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

#[tokio::test]
async fn stats_reports_queues_dead_letters_outbox_and_outcomes_per_gateway() {
    let mut env = TestEnv::new().await;
    seed(&env, "order_s1").await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let _mailer = env.start_mailer().await;

    let paid = captured(&env, "order_s1", "pay_S1", "evt_S1");
    post_ok(&env, &url, "razorpay", &paid).await;
    post_ok(&env, &url, "razorpay", &paid).await;
    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_nope", "pay_S2", "evt_S2"),
    )
    .await;
    post_ok(
        &env,
        &url,
        "payu",
        &payu_failure(&env, "order_payu_nope", "payu_S3"),
    )
    .await;
    wait_paid(&env, "order_s1").await;
    eventually("duplicate counted", WAIT, || async {
        (shop::webhooks(&env.pool, "order_s1")
            .await
            .first()
            .map(|w| w.2)
            == Some(2))
        .then_some(())
    })
    .await;
    wait_dead(&env, 2).await;
    eventually("email sent", WAIT, || async {
        (shop::emails(&env.pool, "order_s1")
            .await
            .iter()
            .all(|e| e.1))
        .then_some(())
    })
    .await;

    let stats = ctl_json(&env, &["stats"]).await;
    assert_eq!(stats["broker"]["available"], true, "{stats:#}");
    assert_eq!(stats["database"]["available"], true, "{stats:#}");
    let queue = |role: &str| {
        stats["queues"]
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["role"] == role))
            .cloned()
            .unwrap_or_else(|| panic!("queue {role} in {stats:#}"))
    };
    assert_eq!(
        queue("events")["queue"],
        format!("{}.events", env.prefix).as_str()
    );
    assert!(
        queue("events")["consumers"].as_u64() >= Some(1),
        "{stats:#}"
    );
    assert!(
        queue("emails")["consumers"].as_u64() >= Some(1),
        "{stats:#}"
    );
    assert_eq!(queue("dead")["messages"], 2, "{stats:#}");
    let dead = &stats["dead_letters"];
    assert_eq!(dead["depth"], 2, "{stats:#}");
    assert_eq!(dead["by_gateway"]["razorpay"], 1);
    assert_eq!(dead["by_gateway"]["payu"], 1);
    assert_eq!(dead["by_kind"][Kind::UnknownOrder.as_str()], 2);
    let age = dead["oldest_age_secs"].as_i64().expect("oldest age");
    assert!((0..300).contains(&age), "{age}");
    assert_eq!(stats["outbox"]["backlog"], 0, "{stats:#}");
    assert_eq!(stats["outbox"]["failed"], 0, "{stats:#}");
    let gateway = |name: &str| {
        stats["gateways"]
            .as_array()
            .and_then(|gs| gs.iter().find(|g| g["gateway"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("gateway {name} in {stats:#}"))
    };
    let rzp = gateway("razorpay");
    assert_eq!(rzp["applied"], 1, "{rzp}");
    assert_eq!(rzp["duplicates"], 1, "{rzp}");
    assert_eq!(rzp["flagged"], 0, "{rzp}");
    assert_eq!(rzp["dead"], 1, "{rzp}");
    let payu = gateway("payu");
    assert_eq!(payu["applied"], 0, "{payu}");
    assert_eq!(payu["dead"], 1, "{payu}");

    let text = ctl_ok(&env, &["stats"]).await;
    for needle in [
        format!("{}.events", env.prefix),
        format!("{}.dead", env.prefix),
        "Dead letters: 2".to_owned(),
        "Outbox: backlog 0".to_owned(),
        "razorpay".to_owned(),
        "DUPLICATES".to_owned(),
    ] {
        assert!(text.contains(&needle), "{needle:?}:\n{text}");
    }

    // The window applies: outcomes from two hours ago are outside the last hour.
    sqlx::query("UPDATE processed_webhooks SET processed_at = now() - interval '2 hours'")
        .execute(&env.pool)
        .await
        .expect("backdate");
    let recent = ctl_json(&env, &["stats", "--since", "1h"]).await;
    let rzp = recent["gateways"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["gateway"] == "razorpay"))
        .cloned()
        .expect("razorpay still listed for its dead letter");
    assert_eq!(rzp["applied"], 0, "{recent:#}");
    assert_eq!(rzp["duplicates"], 0, "{recent:#}");
    assert_eq!(rzp["dead"], 1, "{recent:#}");
    assert_eq!(recent["window_secs"], 3_600);
}

#[tokio::test]
async fn stats_reports_an_unreachable_database_and_still_shows_the_broker() {
    let mut env = TestEnv::new().await;
    let port = oncehook_e2e::free_port();
    env.set_env(
        "ONCEHOOK_DATABASE_URL",
        &format!("postgres://postgres@127.0.0.1:{port}/nowhere"),
    );
    let (code, stdout, stderr) = env.ctl(&["--json", "stats"]).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    let stats: Value = serde_json::from_str(&stdout).expect("JSON even when degraded");
    assert_eq!(stats["database"]["available"], false, "{stats:#}");
    assert!(
        stats["database"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("database")),
        "{stats:#}"
    );
    assert!(stats["outbox"].is_null(), "{stats:#}");
    assert_eq!(stats["broker"]["available"], true, "{stats:#}");
    let queues = stats["queues"].as_array().expect("queues");
    assert_eq!(queues.len(), 3);
    // Nothing declared this prefix's queues: they are reported missing, not a crash.
    assert!(queues.iter().all(|q| q["exists"] == false), "{stats:#}");

    let (code, stdout, stderr) = env.ctl(&["stats"]).await;
    assert_eq!(code, 1);
    assert!(stdout.contains("missing"), "{stdout}");
    assert!(stdout.contains("unavailable"), "{stdout}");
    assert!(stderr.contains("database"), "{stderr}");
}

#[tokio::test]
async fn retention_counts_then_deletes_only_rows_older_than_the_cutoff() {
    let env = TestEnv::new().await;
    for n in 1..=5 {
        sqlx::query(
            "INSERT INTO processed_webhooks (source, provider, event_id, event_type, outcome, received_at)
             VALUES ('razorpay', 'razorpay', $1, 'payment.captured', 'applied', now())",
        )
        .bind(format!("evt_old_{n}"))
        .execute(&env.pool)
        .await
        .expect("insert processed webhook");
    }
    sqlx::query(
        "UPDATE processed_webhooks SET processed_at = now() - interval '40 days'
         WHERE event_id IN ('evt_old_1', 'evt_old_2', 'evt_old_3')",
    )
    .execute(&env.pool)
    .await
    .expect("backdate");

    let all = ctl_json(&env, &["retention", "--days", "0", "--dry-run"]).await;
    assert_eq!(all["would_delete"], 5, "{all}");
    let old = ctl_json(&env, &["retention", "--days", "30", "--dry-run"]).await;
    assert_eq!(old["would_delete"], 3, "{old}");
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks").await,
        5,
        "dry run deletes nothing"
    );

    let text = ctl_ok(&env, &["retention", "--days", "30"]).await;
    assert!(text.contains("deleted 3"), "{text}");
    let left: Vec<String> =
        sqlx::query_scalar("SELECT event_id FROM processed_webhooks ORDER BY event_id")
            .fetch_all(&env.pool)
            .await
            .expect("rows");
    assert_eq!(left, vec!["evt_old_4", "evt_old_5"]);
    let again = ctl_json(&env, &["retention", "--days", "30"]).await;
    assert_eq!(again["deleted"], 0, "{again}");
}

#[tokio::test]
async fn trace_shows_a_failed_and_a_successful_attempt_for_one_order() {
    let mut env = TestEnv::new().await;
    seed(&env, "order_t1").await;
    let (_ingest, url) = env.start_ingest().await;
    let _worker = env.start_worker().await;

    let failed = env.sign(
        Gateway::Razorpay,
        "payment.failed",
        &env.spec("order_t1", "pay_T1", "evt_T1", 50_000),
    );
    post_ok(&env, &url, "razorpay", &failed).await;
    eventually("failure recorded", WAIT, || async {
        (!shop::payments(&env.pool, "order_t1").await.is_empty()).then_some(())
    })
    .await;
    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_t1", "pay_T2", "evt_T2"),
    )
    .await;
    wait_paid(&env, "order_t1").await;

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

#[tokio::test]
async fn metrics_endpoints_expose_the_documented_metrics_after_traffic() {
    let mut env = TestEnv::new().await;
    seed(&env, "order_metrics").await;
    let (ingest, url) = env.start_ingest().await;
    let ingest_metrics = ingest.metrics_url().to_owned();
    // The public port keeps only the load balancer's check.
    for (path, expected) in [("/healthz", 200), ("/metrics", 404), ("/readyz", 404)] {
        let status = env
            .http
            .get(format!("{url}{path}"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .ok();
        assert_eq!(status, Some(expected), "public {path}");
    }
    let (_worker, worker_metrics) = env
        .start_consumer_with_metrics("oncehook-worker", &[])
        .await;
    let (_mailer, mailer_metrics) = env
        .start_consumer_with_metrics("oncehook-mailer", &[])
        .await;

    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_metrics", "pay_Q1", "evt_Q1"),
    )
    .await;
    wait_paid(&env, "order_metrics").await;
    eventually("email sent", WAIT, || async {
        let emails = shop::emails(&env.pool, "order_metrics").await;
        (!emails.is_empty() && emails.iter().all(|e| e.1)).then_some(())
    })
    .await;

    for (base, names) in [
        (
            ingest_metrics.as_str(),
            &[
                "oncehook_ingest_requests_total",
                "oncehook_ingest_request_duration_seconds_bucket",
            ][..],
        ),
        (
            worker_metrics.as_str(),
            &[
                "oncehook_worker_events_total",
                "oncehook_worker_transaction_duration_seconds_bucket",
                "oncehook_outbox_backlog",
                "oncehook_queue_messages",
            ][..],
        ),
        (
            mailer_metrics.as_str(),
            &["oncehook_mailer_emails_total"][..],
        ),
    ] {
        let endpoint = format!("{base}/metrics");
        let body = eventually(&format!("{names:?} at {endpoint}"), WAIT, || async {
            let body = env
                .http
                .get(&endpoint)
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            names
                .iter()
                .all(|n| body.lines().any(|l| l.starts_with(n)))
                .then_some(body)
        })
        .await;
        if base == url {
            assert!(
                body.lines()
                    .any(|l| l.starts_with("oncehook_ingest_requests_total")
                        && l.contains("outcome=\"accepted\"")),
                "{body}"
            );
        }
        if base == mailer_metrics {
            assert!(
                body.lines()
                    .any(|l| l.starts_with("oncehook_mailer_emails_total") && l.contains("sent")),
                "{body}"
            );
        }
        // Every kind a service dead-letters with is counted from zero.
        let writer = if base == worker_metrics {
            Some(Writer::Worker)
        } else if base == mailer_metrics {
            Some(Writer::Mailer)
        } else {
            None
        };
        for kind in writer.into_iter().flat_map(Kind::written_by) {
            let line = format!("oncehook_dead_letters_total{{kind=\"{kind}\"}} 0");
            assert!(body.lines().any(|l| l == line), "{line}:\n{body}");
        }
        if base == worker_metrics {
            let dead_payu = |l: &&str| {
                l.starts_with("oncehook_worker_events_total{")
                    && l.contains("gateway=\"payu\"")
                    && l.contains("outcome=\"dead\"")
            };
            assert!(body.lines().any(|l| dead_payu(&l)), "{body}");
        }
    }
}

/// Inserts an `email_outbox` row `key` with the given state columns set
/// `age` ago (`None`: left null).
async fn outbox_row(env: &TestEnv, key: &str, sent: Option<i32>, failed: Option<i32>, age: i32) {
    sqlx::query(
        "INSERT INTO email_outbox (id, kind, dedup_key, to_addr, subject, body, created_at,
                                   published_at, sent_at, failed_at)
         VALUES ($1, 'confirmation', $2, 'customer@example.com', 's', 'b',
                 now() - make_interval(days => $5), now() - make_interval(days => $5),
                 now() - make_interval(days => $3), now() - make_interval(days => $4))",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(key)
    .bind(sent)
    .bind(failed)
    .bind(age)
    .execute(&env.pool)
    .await
    .expect("insert outbox row");
}

/// Old and new rows of both tables retention trims; returns nothing, the
/// caller counts.
async fn seed_retention_rows(env: &TestEnv) {
    for (event, days) in [("evt_ret_old", 40), ("evt_ret_new", 1)] {
        sqlx::query(
            "INSERT INTO processed_webhooks (source, provider, event_id, event_type, outcome, received_at, processed_at)
             VALUES ('razorpay', 'razorpay', $1, 'payment.captured', 'applied', now(), now() - make_interval(days => $2))",
        )
        .bind(event)
        .bind(days)
        .execute(&env.pool)
        .await
        .expect("insert processed webhook");
    }
    outbox_row(env, "sent_old", Some(40), None, 41).await;
    outbox_row(env, "failed_old", None, Some(40), 41).await;
    outbox_row(env, "sent_new", Some(1), None, 2).await;
    // Never sent, never failed (published long ago, or waiting): kept at any age.
    outbox_row(env, "unsent_old", None, None, 400).await;
}

async fn outbox_keys(env: &TestEnv) -> Vec<String> {
    sqlx::query_scalar("SELECT dedup_key FROM email_outbox ORDER BY dedup_key")
        .fetch_all(&env.pool)
        .await
        .expect("outbox keys")
}

#[tokio::test]
async fn retention_bounds_its_days_and_prunes_sent_or_failed_emails_but_never_unsent_ones() {
    let mut env = TestEnv::new().await;
    seed_retention_rows(&env).await;
    for days in ["4294967295", "3651", "-1"] {
        let (code, _, stderr) = env.ctl(&["retention", "--days", days]).await;
        assert_ne!(code, 0, "--days {days} must be refused: {stderr}");
    }
    // Everything, without a terminal to ask on: refused unless --yes.
    let (code, _, stderr) = env.ctl(&["retention", "--days", "0"]).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks").await,
        2
    );
    assert_eq!(env.count("SELECT count(*) FROM email_outbox").await, 4);

    let dry = ctl_json(&env, &["retention", "--days", "30", "--dry-run"]).await;
    assert_eq!(dry["processed_webhooks"], 1, "{dry}");
    assert_eq!(dry["email_outbox"], 2, "{dry}");
    assert_eq!(dry["would_delete"], 3, "{dry}");
    let text = ctl_ok(&env, &["retention", "--days", "30"]).await;
    assert!(
        text.contains("deleted 1 processed_webhooks") && text.contains("2 email_outbox"),
        "{text}"
    );
    assert_eq!(outbox_keys(&env).await, vec!["sent_new", "unsent_old"]);

    let all = ctl_json(&env, &["retention", "--days", "0", "--yes"]).await;
    assert_eq!(all["processed_webhooks"], 1, "{all}");
    assert_eq!(all["email_outbox"], 1, "{all}");
    assert_eq!(outbox_keys(&env).await, vec!["unsent_old"]);

    // The environment variable is bounded the same way (it used to wrap).
    env.set_env("ONCEHOOK_RETENTION_DAYS", "4294967295");
    let (code, _, stderr) = env.ctl(&["retention", "--dry-run"]).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("ONCEHOOK_RETENTION_DAYS"), "{stderr}");
}

#[tokio::test]
async fn the_workers_scheduled_retention_prunes_both_tables() {
    let mut env = TestEnv::new().await;
    seed_retention_rows(&env).await;
    env.set_env("ONCEHOOK_RETENTION_DAYS", "30");
    env.set_env("ONCEHOOK_RETENTION_INTERVAL_SECS", "1");
    let _worker = env.start_worker().await;
    eventually("scheduled retention pass", WAIT, || async {
        (outbox_keys(&env).await == ["sent_new", "unsent_old"]).then_some(())
    })
    .await;
    let left: Vec<String> = sqlx::query_scalar("SELECT event_id FROM processed_webhooks")
        .fetch_all(&env.pool)
        .await
        .expect("rows");
    assert_eq!(left, vec!["evt_ret_new"]);
}

/// Publishes `n` dead letters straight into `P.dead` on one channel.
async fn publish_dead_letters(env: &TestEnv, n: usize) {
    use lapin::options::ConfirmSelectOptions;
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let why = unknown_order(env, "no order order_gone");
    for i in 0..n {
        broker::put_dead_letter(
            &ch,
            &dead_queue(env),
            &why,
            "razorpay.payment.captured",
            time::OffsetDateTime::now_utc(),
            lapin::BasicProperties::default()
                .with_message_id(format!("razorpay:evt_many_{i}").into()),
            format!("{{\"n\":{i}}}").as_bytes(),
        )
        .await;
    }
    let _ = conn.close(200, "bye".into()).await;
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
    use oncehook_common::{Topology, peek_lock};
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

#[tokio::test]
async fn a_deleted_queue_does_not_stop_the_outbox_relay() {
    use lapin::options::QueueDeleteOptions;
    let mut env = TestEnv::new().await;
    let (_ingest, url) = env.start_ingest().await;
    let worker = env.start_worker().await;
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_delete(
        dead_queue(&env).as_str().into(),
        QueueDeleteOptions::default(),
    )
    .await
    .expect("delete the dead-letter queue");
    let _ = conn.close(200, "bye".into()).await;
    // Let at least one gauge pass (every 5 s) fail its passive declare.
    tokio::time::sleep(Duration::from_secs(7)).await;

    seed(&env, "order_relay").await;
    post_ok(
        &env,
        &url,
        "razorpay",
        &captured(&env, "order_relay", "pay_relay", "evt_relay"),
    )
    .await;
    wait_paid(&env, "order_relay").await;
    eventually("the confirmation email published", WAIT, || async {
        (env.count("SELECT count(*) FROM email_outbox WHERE published_at IS NOT NULL")
            .await
            > 0)
        .then_some(())
    })
    .await;
    // Same session throughout: a restarted one would have declared the queue again.
    assert_eq!(broker::depth(&dead_queue(&env)).await, None);
    let log = worker.log_text();
    assert!(!log.contains("reconnecting"), "{log}");
}

#[tokio::test]
async fn stats_and_the_console_show_webhooks_accepted_and_refused_per_source_from_prometheus() {
    let mut env = TestEnv::new().await;
    let (ingest, url) = env.start_ingest().await;
    let target = ingest
        .metrics_url()
        .trim_start_matches("http://")
        .to_owned();
    let prometheus = oncehook_e2e::prometheus::Prometheus::start(&env.dir, &[&target]).await;
    // Ingest's counters exist at zero from its start, so Prometheus has a
    // sample before the first webhook (increase() cannot count a first sample).
    eventually("the zero counters scraped", WAIT, || async {
        prometheus
            .scalar("oncehook_ingest_requests_total{source=\"razorpay\",outcome=\"accepted\"}")
            .await
            .filter(|v| *v == 0.0)
    })
    .await;

    for i in 0..3 {
        post_ok(
            &env,
            &url,
            "razorpay",
            &captured(&env, "order_p", &format!("pay_P{i}"), &format!("evt_P{i}")),
        )
        .await;
    }
    for i in 0..2 {
        let mut forged = captured(&env, "order_p", "pay_F", &format!("evt_F{i}"));
        forged.body.push(b' ');
        let (status, body) = env.post(&url, "razorpay", &forged).await;
        assert_eq!(status, 401, "{body}");
    }
    let mut forged = env.sign(
        Gateway::Stripe,
        "payment_intent.succeeded",
        &env.spec("order_p", "pi_F", "evt_SF", 50_000),
    );
    forged.body.push(b' ');
    assert_eq!(env.post(&url, "stripe", &forged).await.0, 401);

    env.set_env("ONCEHOOK_PROMETHEUS_URL", &prometheus.url);
    let received = |stats: &Value, source: &str| -> Value {
        stats["received"]["sources"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["source"] == source).cloned())
            .unwrap_or(Value::Null)
    };
    let stats = eventually("stats shows the counts", WAIT, || async {
        let (_, stdout, _) = env.ctl(&["--json", "stats"]).await;
        let stats: Value = serde_json::from_str(&stdout).ok()?;
        let rzp = received(&stats, "razorpay");
        (rzp["accepted_1h"] == 3
            && rzp["refused_1h"] == 2
            && received(&stats, "stripe")["refused_1h"] == 1)
            .then_some(stats)
    })
    .await;
    let rzp = received(&stats, "razorpay");
    assert_eq!(rzp["accepted_24h"], 3, "{stats:#}");
    assert_eq!(rzp["refusals_24h"]["invalid_signature"], 2, "{stats:#}");
    assert_eq!(
        received(&stats, "payu")["accepted_1h"],
        0,
        "a quiet source shows zeros: {stats:#}"
    );
    let (code, text, _) = env.ctl(&["stats"]).await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("Webhooks received per source") && text.contains("invalid_signature 2"),
        "{text}"
    );

    // The console's Overview shows the same section.
    let console = oncehook_e2e::console::Console::start(&mut env, &[]).await;
    let cookie = console.login(oncehook_e2e::console::VIEWER).await;
    let overview = console.get("/", Some(&cookie)).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(
        overview.body.contains("Webhooks received per source")
            && overview.body.contains("invalid_signature"),
        "{}",
        overview.body
    );

    // Without the setting, stats says how to get the numbers; Prometheus
    // down, it says why they are missing and still exits 0.
    env.set_env("ONCEHOOK_PROMETHEUS_URL", "");
    let (_, text, _) = env.ctl(&["stats"]).await;
    assert!(text.contains("set ONCEHOOK_PROMETHEUS_URL"), "{text}");
    drop(prometheus);
    env.set_env(
        "ONCEHOOK_PROMETHEUS_URL",
        &format!("http://127.0.0.1:{}", oncehook_e2e::free_port()),
    );
    let (code, text, _) = env.ctl(&["stats"]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("Webhooks received: unavailable"), "{text}");
}
