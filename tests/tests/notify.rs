//! Order events to the shop (docs/shop-integration.md#order-events) against
//! the real binaries and a real HTTP receiver (`support::receiver`) that
//! verifies every signature with the `standardwebhooks` crate: every event
//! type from real gateway webhooks, also on `P.order-events`; retries keep
//! the `webhook-id` and carry the order's latest snapshot; a 410 disables
//! the endpoint and its events stay replayable; a hanging endpoint delays
//! neither the emails nor another endpoint; SIGKILL mid-delivery loses
//! nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use lapin::options::{BasicGetOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use oncehook_e2e::ops::{ctl_json, ctl_ok};
use oncehook_e2e::process::Proc;
use oncehook_e2e::receiver::{Answer, Receiver, SECRET};
use oncehook_e2e::shop::{self, Shop, wait_paid};
use oncehook_e2e::{TestEnv, WAIT, broker, eventually};
use oncehook_gateways::Gateway;
use serde_json::Value;

/// `[[notify.endpoint]]` entries for these `(name, url, events)`.
fn endpoints(list: &[(&str, &str, &str)]) -> String {
    list.iter()
        .map(|(name, url, events)| {
            format!(
                "[[notify.endpoint]]\nname = \"{name}\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nevents = [{events}]\n"
            )
        })
        .collect()
}

/// Ingest, a worker and a notifier with a short schedule; returns ingest's URL.
async fn pipeline(env: &mut TestEnv, extra: &[(&str, &str)]) -> (Vec<Proc>, String) {
    let (ingest, base) = env.start_ingest().await;
    let worker = env.start_worker().await;
    let notifier = start_notifier(env, extra).await;
    (vec![ingest, worker, notifier], base)
}

async fn start_notifier(env: &mut TestEnv, extra: &[(&str, &str)]) -> Proc {
    let mut all = vec![
        ("ONCEHOOK_NOTIFY_RETRY_SCHEDULE", "1s,1s,1s,1s"),
        ("ONCEHOOK_NOTIFY_TIMEOUT", "2s"),
    ];
    all.extend_from_slice(extra);
    env.start_consumer("oncehook-notifier", &all).await
}

/// `(id, type)` of every order event of `order_ref`.
async fn order_events(env: &TestEnv, order_ref: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT e.id, e.type FROM order_events e JOIN orders o ON o.id = e.order_id
         WHERE o.order_ref = $1 ORDER BY e.seq",
    )
    .bind(order_ref)
    .fetch_all(&env.pool)
    .await
    .expect("order events")
}

/// The deliveries of `notify list --json`.
async fn deliveries(env: &TestEnv, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["notify", "list"];
    all.extend_from_slice(args);
    ctl_json(env, &all).await["deliveries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn post(
    env: &TestEnv,
    base: &str,
    event: &str,
    order: &str,
    payment: &str,
    id: &str,
    amount: i64,
) {
    let d = env.sign(
        Gateway::Razorpay,
        event,
        &env.spec(order, payment, id, amount),
    );
    env.post_ok(base, "razorpay", &d).await;
}

#[tokio::test]
async fn every_event_type_reaches_the_shop_signed_and_on_the_broker() {
    let mut env = TestEnv::new().await;
    let shop_rx = Receiver::start(SECRET).await;
    env.append_config(&endpoints(&[("shop", &shop_rx.url, "\"order.*\"")]));
    Shop::new()
        .product("MUG", 10)
        .product("RARE", 0)
        .order("ne_paid", &[("MUG", 1)])
        .order("ne_odd", &[("MUG", 1)])
        .order("ne_fail", &[("MUG", 1)])
        .order("ne_over", &[("RARE", 1)])
        .order("ne_cancel", &[("MUG", 1)])
        .seed(&env.pool)
        .await;
    // An in-house consumer's queue on the exchange, bound before anything happens.
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let tap = format!("{}.tap", env.prefix);
    ch.queue_declare(
        tap.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("declare the tap");
    let (procs, base) = pipeline(&mut env, &[]).await;
    ch.queue_bind(
        tap.as_str().into(),
        format!("{}.order-events", env.prefix).as_str().into(),
        "order.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind the tap");

    post(
        &env,
        &base,
        "payment.captured",
        "ne_paid",
        "pay_a",
        "evt_a1",
        50_000,
    )
    .await;
    post(
        &env,
        &base,
        "payment.captured",
        "ne_paid",
        "pay_b",
        "evt_a2",
        50_000,
    )
    .await;
    post(
        &env,
        &base,
        "refund.processed",
        "ne_paid",
        "pay_a",
        "evt_a3",
        10_000,
    )
    .await;
    post(
        &env,
        &base,
        "payment.captured",
        "ne_odd",
        "pay_c",
        "evt_b1",
        999,
    )
    .await;
    post(
        &env,
        &base,
        "payment.failed",
        "ne_fail",
        "pay_d",
        "evt_c1",
        50_000,
    )
    .await;
    post(
        &env,
        &base,
        "payment.captured",
        "ne_over",
        "pay_e",
        "evt_d1",
        50_000,
    )
    .await;
    post(
        &env,
        &base,
        "payment.captured",
        "ne_cancel",
        "pay_f",
        "evt_e1",
        50_000,
    )
    .await;
    wait_paid(&env.pool, "ne_cancel").await;
    {
        let mut tx = env.pool.begin().await.expect("begin");
        let cancel = oncehook_ledger::Cancel {
            order_ref: "ne_cancel",
            by: "test",
            reason: "customer left",
            trace_parent: None,
        };
        oncehook_ledger::Ledger::default()
            .apply(&mut tx, cancel)
            .await
            .expect("cancel");
        tx.commit().await.expect("commit");
    }

    let wanted: BTreeSet<(&str, &str)> = [
        ("ne_paid", "order.paid"),
        ("ne_paid", "order.needs_refund"),
        ("ne_paid", "order.refunded"),
        ("ne_odd", "order.amount_mismatch"),
        ("ne_fail", "order.payment_failed"),
        ("ne_over", "order.paid"),
        ("ne_over", "order.oversold"),
        ("ne_cancel", "order.paid"),
        ("ne_cancel", "order.cancelled"),
        ("ne_cancel", "order.needs_refund"),
    ]
    .into_iter()
    .collect();
    let got = eventually("every order event at the receiver", WAIT, || async {
        let got: BTreeSet<(String, String)> = shop_rx
            .received()
            .iter()
            .map(|r| {
                (
                    r.event["order"]["order_ref"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    r.event["type"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        (got.len() >= wanted.len()).then_some(got)
    })
    .await;
    let got: BTreeSet<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, wanted);
    for r in shop_rx.received() {
        assert!(
            r.verified,
            "signature of {} did not verify: {}",
            r.webhook_id, r.signature
        );
        assert_eq!(r.event["id"].as_str(), Some(r.webhook_id.as_str()));
        assert!(
            r.event["order"]["version"].as_i64().unwrap_or(0) >= 1,
            "{}",
            r.event
        );
    }
    // One event per fact: the ledger wrote exactly these, and each came once.
    let mut written = 0;
    for order in ["ne_paid", "ne_odd", "ne_fail", "ne_over", "ne_cancel"] {
        for (id, _) in order_events(&env, order).await {
            written += 1;
            assert_eq!(shop_rx.of(&id).len(), 1, "{id} delivered once");
        }
    }
    assert_eq!(written, wanted.len());
    let refund = shop_rx
        .received()
        .into_iter()
        .find(|r| r.event["type"] == "order.refunded")
        .expect("the refund event");
    assert_eq!(refund.event["data"]["amount_minor"], 10_000);
    // The same events on the broker, routed by type, with the snapshot.
    let mut on_broker = BTreeSet::new();
    while let Some(m) = ch
        .basic_get(tap.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        let event: Value = serde_json::from_slice(&m.delivery.data).expect("JSON event");
        assert_eq!(
            m.delivery.routing_key.as_str(),
            event["type"].as_str().unwrap_or("")
        );
        assert!(event["order"]["status"].is_string());
        on_broker.insert(event["id"].as_str().unwrap_or("").to_owned());
    }
    assert_eq!(on_broker.len(), wanted.len());
    let _ = ch
        .queue_delete(
            tap.as_str().into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await;
    // A duplicate of every webhook mints nothing new.
    post(
        &env,
        &base,
        "payment.captured",
        "ne_paid",
        "pay_b",
        "evt_a2",
        50_000,
    )
    .await;
    post(
        &env,
        &base,
        "payment.failed",
        "ne_fail",
        "pay_d",
        "evt_c1b",
        50_000,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(order_events(&env, "ne_paid").await.len(), 3);
    assert_eq!(order_events(&env, "ne_fail").await.len(), 1);
    drop(procs);
}

#[tokio::test]
async fn a_failing_endpoint_gets_the_same_id_every_time_and_the_final_snapshot() {
    let mut env = TestEnv::new().await;
    let rx = Receiver::start(SECRET).await;
    rx.answer([
        Answer::Status(500),
        Answer::Status(503),
        Answer::RetryAfter(429, 2),
    ]);
    env.append_config(&endpoints(&[("shop", &rx.url, "\"order.paid\"")]));
    Shop::basket("nf_1").seed(&env.pool).await;
    let (_procs, base) = pipeline(&mut env, &[]).await;
    post(
        &env,
        &base,
        "payment.captured",
        "nf_1",
        "pay_1",
        "evt_1",
        50_000,
    )
    .await;
    wait_paid(&env.pool, "nf_1").await;
    // Meanwhile the order moves on: a refund.
    post(
        &env,
        &base,
        "refund.processed",
        "nf_1",
        "pay_1",
        "evt_2",
        50_000,
    )
    .await;
    let (id, _) = order_events(&env, "nf_1")
        .await
        .into_iter()
        .find(|(_, t)| t == "order.paid")
        .expect("paid event");
    let attempts = eventually("the fourth attempt answered 200", WAIT, || async {
        let got = rx.of(&id);
        (got.iter().any(|r| r.answered == Some(200))).then_some(got)
    })
    .await;
    assert_eq!(attempts.len(), 4, "three refusals, then the delivery");
    assert!(attempts.iter().all(|r| r.verified && r.webhook_id == id));
    // The 429's Retry-After (2 s) is honoured over the 1 s step.
    let gap = attempts[3].at - attempts[2].at;
    assert!(gap >= Duration::from_millis(1_900), "retried after {gap:?}");
    let last = &attempts[3].event["order"];
    let (status, version): (String, i64) =
        sqlx::query_as("SELECT status, version FROM orders WHERE order_ref = 'nf_1'")
            .fetch_one(&env.pool)
            .await
            .expect("order");
    assert_eq!(last["status"].as_str(), Some(status.as_str()));
    assert_eq!(status, "refunded");
    assert_eq!(
        last["version"].as_i64(),
        Some(version),
        "the final snapshot"
    );
    // The notifier records the answer after the shop gave it.
    let row = eventually("the delivery recorded", WAIT, || async {
        let rows = deliveries(&env, &["--endpoint", "shop"]).await;
        rows.into_iter()
            .find(|d| d["event_id"] == id.as_str() && d["status"] != "pending")
    })
    .await;
    assert_eq!(
        (row["status"].as_str(), row["attempts"].as_i64()),
        (Some("delivered"), Some(4))
    );
}

#[tokio::test]
async fn a_410_disables_the_endpoint_and_its_events_stay_replayable() {
    let mut env = TestEnv::new().await;
    let rx = Receiver::start(SECRET).await;
    rx.answer([Answer::Status(410)]);
    env.append_config(&endpoints(&[("shop", &rx.url, "\"order.*\"")]));
    Shop::new()
        .product("MUG", 10)
        .order("ng_1", &[("MUG", 1)])
        .order("ng_2", &[("MUG", 1)])
        .seed(&env.pool)
        .await;
    let (mut procs, base) = pipeline(&mut env, &[]).await;
    post(
        &env,
        &base,
        "payment.captured",
        "ng_1",
        "pay_1",
        "evt_1",
        50_000,
    )
    .await;
    eventually("the endpoint disabled", WAIT, || async {
        let e = ctl_json(&env, &["notify", "endpoints"]).await;
        e["endpoints"][0]["disabled_at"].is_string().then_some(())
    })
    .await;
    // Events while disabled are kept as failed, not sent.
    post(
        &env,
        &base,
        "payment.captured",
        "ng_2",
        "pay_2",
        "evt_2",
        50_000,
    )
    .await;
    let failed = eventually("both events failed", WAIT, || async {
        let rows = deliveries(&env, &["--status", "failed"]).await;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    assert!(
        failed.iter().all(|d| d["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("endpoint disabled")),
        "{failed:?}"
    );
    assert_eq!(rx.received().len(), 1);
    // Disabled across a restart; a replay alone enables nothing.
    let mut notifier = procs.pop().expect("notifier");
    notifier.signal("TERM");
    assert_eq!(
        notifier.wait_exit(Duration::from_secs(20)),
        Some(0),
        "{}",
        notifier.log_text()
    );
    let _notifier = start_notifier(&mut env, &[]).await;
    let (code, _, err) = env.ctl(&["notify", "replay", "--endpoint", "shop"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("notify enable shop"), "{err}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.received().len(), 1);
    ctl_ok(&env, &["notify", "enable", "shop"]).await;
    let replayed = ctl_json(&env, &["notify", "replay", "--endpoint", "shop"]).await;
    assert_eq!(replayed["replayed"], 2);
    eventually("both events delivered after the replay", WAIT, || async {
        let rows = deliveries(&env, &["--status", "delivered"]).await;
        (rows.len() == 2).then_some(())
    })
    .await;
    assert!(rx.received().iter().all(|r| r.verified));
    drop(procs);
}

#[tokio::test]
async fn a_hanging_endpoint_delays_neither_emails_nor_another_endpoint() {
    let mut env = TestEnv::new().await;
    let slow = Receiver::start(SECRET).await;
    slow.always(Answer::Hang);
    let fast = Receiver::start(SECRET).await;
    env.append_config(&endpoints(&[
        ("hanging", &slow.url, "\"order.paid\""),
        ("fast", &fast.url, "\"order.paid\""),
    ]));
    let orders: Vec<String> = (0..6).map(|i| format!("nh_{i}")).collect();
    Shop::mugs(100, &orders).seed(&env.pool).await;
    let (_procs, base) = pipeline(
        &mut env,
        &[
            ("ONCEHOOK_NOTIFY_TIMEOUT", "5s"),
            ("ONCEHOOK_NOTIFY_CONCURRENCY", "1"),
        ],
    )
    .await;
    let _mailer = env.start_mailer().await;
    let started = Instant::now();
    for (i, o) in orders.iter().enumerate() {
        post(
            &env,
            &base,
            "payment.captured",
            o,
            &format!("pay_{i}"),
            &format!("evt_{i}"),
            50_000,
        )
        .await;
    }
    for o in &orders {
        shop::wait_emails_sent(&env.pool, o, 1).await;
    }
    let mailed = started.elapsed();
    eventually("every event at the fast endpoint", WAIT, || async {
        (fast.received().len() == orders.len()).then_some(())
    })
    .await;
    let fast_done = started.elapsed();
    // The hanging endpoint holds one request at a time, each for its 5 s
    // timeout: sending in turn would need 30 s for the six.
    println!(
        "emails sent after {mailed:?}; fast endpoint had all six after {fast_done:?}; hanging endpoint got {} request(s)",
        slow.received().len()
    );
    assert!(
        fast_done < Duration::from_secs(15),
        "the fast endpoint waited: {fast_done:?}"
    );
    assert!(
        mailed < Duration::from_secs(15),
        "emails waited: {mailed:?}"
    );
    assert!(
        slow.received().len() <= 4,
        "concurrency 1 for the hanging endpoint"
    );
}

#[tokio::test]
async fn sigkill_of_the_notifier_mid_delivery_loses_nothing() {
    let mut env = TestEnv::new().await;
    let rx = Receiver::start(SECRET).await;
    rx.answer([Answer::Slow(Duration::from_secs(30))]);
    env.append_config(&endpoints(&[("shop", &rx.url, "\"order.paid\"")]));
    Shop::basket("nk_1").seed(&env.pool).await;
    let (ingest, base) = env.start_ingest().await;
    let _worker = env.start_worker().await;
    let mut notifier = start_notifier(&mut env, &[]).await;
    post(
        &env,
        &base,
        "payment.captured",
        "nk_1",
        "pay_1",
        "evt_1",
        50_000,
    )
    .await;
    eventually("the delivery in flight", WAIT, || async {
        (!rx.received().is_empty()).then_some(())
    })
    .await;
    notifier.signal("KILL");
    let _ = notifier.wait_exit(Duration::from_secs(10));
    let _again = start_notifier(&mut env, &[]).await;
    let id = rx.received()[0].webhook_id.clone();
    eventually("delivered by the next notifier", WAIT, || async {
        rx.of(&id)
            .iter()
            .any(|r| r.answered == Some(200))
            .then_some(())
    })
    .await;
    let rows = deliveries(&env, &[]).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "delivered");
    drop(ingest);
}

/// The snapshot without what depends on when things happened.
fn timeless(order: &Value) -> Value {
    let mut o = order.clone();
    for key in ["version", "created_at", "updated_at", "paid_at"] {
        o[key] = Value::Null;
    }
    for list in ["payments", "refunds", "emails"] {
        if let Some(items) = o[list].as_array_mut() {
            for item in items {
                for key in ["created_at", "sent_at", "status"] {
                    if item.get(key).is_some() && !(list == "payments" && key == "status") {
                        item[key] = Value::Null;
                    }
                }
            }
        }
    }
    // Emails are listed as they were written (a history, not a fact).
    if let Some(emails) = o["emails"].as_array_mut() {
        emails.sort_by_key(|e| e.to_string());
    }
    o
}

#[tokio::test]
async fn two_permutations_of_the_same_webhooks_tell_the_same_events_and_end_in_the_same_snapshot() {
    let webhooks = [
        ("payment.failed", "pay_0", "evt_p0", 50_000),
        ("payment.captured", "pay_2", "evt_p1", 50_000),
        ("payment.captured", "pay_1", "evt_p2", 50_000),
        ("refund.processed", "pay_2", "evt_p3", 50_000),
        ("payment.captured", "pay_3", "evt_p4", 777),
    ];
    let mut runs = Vec::new();
    for reversed in [false, true] {
        let mut env = TestEnv::new().await;
        Shop::basket("np_1").seed(&env.pool).await;
        let (_ingest, base) = env.start_ingest().await;
        let _worker = env.start_worker().await;
        let mut order: Vec<_> = webhooks.to_vec();
        if reversed {
            order.reverse();
        }
        for (event, payment, id, amount) in order {
            post(&env, &base, event, "np_1", payment, id, amount).await;
        }
        eventually("every webhook processed", WAIT, || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM processed_webhooks")
                .fetch_one(&env.pool)
                .await
                .ok()?;
            (n == webhooks.len() as i64).then_some(())
        })
        .await;
        let events: BTreeSet<(String, String)> =
            order_events(&env, "np_1").await.into_iter().collect();
        let first = events.iter().next().expect("an event").0.clone();
        let shown = ctl_json(&env, &["notify", "show", &first]).await;
        runs.push((events, timeless(&shown["event"]["order"])));
    }
    let kinds: BTreeSet<&str> = runs[0].0.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "order.amount_mismatch",
            "order.needs_refund",
            "order.paid",
            "order.payment_failed",
            "order.refunded"
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(
        runs[0].0, runs[1].0,
        "the same event ids in both permutations"
    );
    assert_eq!(runs[0].1, runs[1].1, "the same final snapshot");
}

#[tokio::test]
async fn a_claim_never_takes_more_rows_than_it_asks_for() {
    use oncehook_common::config::Pooler;
    use oncehook_common::store::{Pooled, notify};
    let env = TestEnv::new().await;
    let orders: Vec<String> = (0..60).map(|i| format!("nc_{i}")).collect();
    Shop::mugs(100, &orders).seed(&env.pool).await;
    for sql in [
        "INSERT INTO order_events (id, type, order_id) SELECT 'evt_' || order_ref, 'order.paid', id FROM orders",
        "INSERT INTO notify_deliveries (event_id, endpoint) SELECT id, 'shop' FROM order_events",
    ] {
        sqlx::query(sql).execute(&env.pool).await.expect("due rows");
    }
    let db = Pooled::new(env.pool.clone(), Pooler::None);
    let mut seen = BTreeSet::new();
    for _ in 0..15 {
        let due = notify::lease_due(&db, "shop", 4, Duration::from_secs(60))
            .await
            .expect("claim");
        assert_eq!(due.len(), 4, "a claim of 4");
        seen.extend(due.into_iter().map(|d| d.event_id));
    }
    assert_eq!(seen.len(), 60, "every row once");
    let left = notify::lease_due(&db, "shop", 4, Duration::from_secs(60))
        .await
        .expect("claim");
    assert!(left.is_empty(), "held rows are not claimed twice");
}
