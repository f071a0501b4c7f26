//! The worker's pipeline and ledger in process (real Postgres, the
//! in-memory queue seam, no broker, no sleeps): what a group shares, what a
//! group costs in statements, and a second effect through the same pipeline.

use oncehook_common::consume::memory::Settled;
use oncehook_common::store::dedup::DeliveryKey;
use oncehook_e2e::in_process::{InProcess, commit_group, envelope};
use oncehook_e2e::statements::StatementCounter;
use oncehook_e2e::{TestEnv, shop};
use oncehook_gateways::Gateway;
use oncehook_ledger::Ledger;
use oncehook_pipeline::{
    Applied, Delivery, Effect, EffectError, Effects, Outcome, ProcessError, Processed,
};
use sqlx::{PgConnection, PgPool};

const SOURCE: &str = "razorpay";

fn captured(env: &TestEnv, order: &str, payment: &str, event: &str) -> oncehook_common::Envelope {
    envelope(
        SOURCE,
        Gateway::Razorpay,
        &env.captured(order, payment, event),
    )
}

fn refunded(
    env: &TestEnv,
    order: &str,
    payment: &str,
    event: &str,
    amount: i64,
) -> oncehook_common::Envelope {
    let signed = env.sign(
        Gateway::Razorpay,
        "refund.processed",
        &env.spec(order, payment, event, amount),
    );
    envelope(SOURCE, Gateway::Razorpay, &signed)
}

async fn order_books(pool: &PgPool, order_ref: &str) -> (String, i64, bool) {
    sqlx::query_as("SELECT status, refunded_minor, stock_applied FROM orders WHERE order_ref = $1")
        .bind(order_ref)
        .fetch_one(pool)
        .await
        .expect("order")
}

fn outcomes(processed: &[Processed]) -> Vec<&str> {
    processed
        .iter()
        .map(|p| match p {
            Processed::Done(applied) => applied.outcome.as_str(),
            Processed::Duplicate { .. } => "duplicate",
        })
        .collect()
}

#[tokio::test]
async fn one_group_pays_refunds_and_links_as_one_by_one_would() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_a", 10).await;
    shop::order(&env.pool, "ip_1", 50_000, "INR", &[("ip_a", 2)]).await;
    shop::order(&env.pool, "ip_2", 50_000, "INR", &[("ip_a", 1)]).await;
    // One group: order 1's capture and a refund of it; a refund of order
    // 2's payment naming no order (placed by the link the capture behind it
    // makes in the same group), that capture; a copy of order 1's capture
    // under another event id (the same signed body: a duplicate), and
    // Razorpay's order.paid for it (another body, the same fact: ignored).
    let group = [
        captured(&env, "ip_1", "pay_ip1", "evt_ip1"),
        refunded(&env, "ip_1", "pay_ip1", "evt_ip1_r", 10_000),
        refunded(&env, "", "pay_ip2", "evt_ip2_r", 50_000),
        captured(&env, "ip_2", "pay_ip2", "evt_ip2"),
        captured(&env, "ip_1", "pay_ip1", "evt_ip1_again"),
        envelope(
            SOURCE,
            Gateway::Razorpay,
            &env.sign(
                Gateway::Razorpay,
                "order.paid",
                &env.spec("ip_1", "pay_ip1", "evt_ip1_paid", 50_000),
            ),
        ),
    ];
    let processed = commit_group(&env.pool, &Ledger::default(), &group)
        .await
        .expect("committed");
    assert_eq!(
        outcomes(&processed),
        [
            "applied",
            "applied",
            "applied",
            "applied",
            "duplicate",
            "ignored"
        ]
    );
    assert_eq!(
        order_books(&env.pool, "ip_1").await,
        ("partially_refunded".into(), 10_000, true)
    );
    assert_eq!(
        order_books(&env.pool, "ip_2").await,
        ("refunded".into(), 50_000, true)
    );
    assert_eq!(
        shop::stock(&env.pool, "ip_a").await,
        7,
        "each order's stock moved once"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox WHERE kind = 'confirmation'")
            .await,
        2
    );
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox WHERE kind = 'refund'")
            .await,
        2
    );
    // The same group again: every delivery is a duplicate, nothing moves.
    let again = commit_group(&env.pool, &Ledger::default(), &group)
        .await
        .expect("committed");
    assert_eq!(outcomes(&again), ["duplicate"; 6]);
    assert_eq!(shop::stock(&env.pool, "ip_a").await, 7);
}

#[tokio::test]
async fn an_unlinked_event_parked_by_one_group_is_applied_by_the_group_that_links_it() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_b", 10).await;
    shop::order(&env.pool, "ip_3", 50_000, "INR", &[("ip_b", 1)]).await;
    let refund = refunded(&env, "", "pay_ip3", "evt_ip3_r", 20_000);
    let parked = commit_group(&env.pool, &Ledger::default(), &[refund])
        .await
        .expect("parked");
    assert_eq!(outcomes(&parked), ["parked"]);
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 1);

    let capture = captured(&env, "ip_3", "pay_ip3", "evt_ip3");
    let linked = commit_group(&env.pool, &Ledger::default(), &[capture])
        .await
        .expect("linked");
    let Processed::Done(Applied { outcome, detail }) = &linked[0] else {
        panic!("{linked:?}");
    };
    assert_eq!(*outcome, Outcome::Applied);
    assert!(detail.contains("1 parked fact(s) applied"), "{detail}");
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    assert_eq!(
        order_books(&env.pool, "ip_3").await,
        ("partially_refunded".into(), 20_000, true)
    );
    let detail: String = sqlx::query_scalar(
        "SELECT outcome || ': ' || detail FROM processed_webhooks WHERE event_id = 'evt_ip3_r'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("the parked delivery's record");
    assert!(
        detail.starts_with("applied: applied when evt_ip3 linked payment pay_ip3"),
        "{detail}"
    );
}

/// The orders' lock takes out the events parked for the group's payments;
/// one whose payment the group does not link goes back, still as old as it
/// was (its wait for the link ends when it would have).
#[tokio::test]
async fn a_parked_event_its_group_does_not_link_stays_parked_as_old_as_it_was() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_k", 10).await;
    shop::order(&env.pool, "ip_9", 50_000, "INR", &[("ip_k", 1)]).await;
    let first = refunded(&env, "", "pay_ip_lone", "evt_ip_lone_1", 10_000);
    commit_group(&env.pool, &Ledger::default(), &[first])
        .await
        .expect("parked");
    sqlx::query("UPDATE parked_events SET parked_at = now() - interval '50 minutes'")
        .execute(&env.pool)
        .await
        .expect("age the parked event");
    // A group that locks an order (ip_9) and names the lone payment again,
    // still without its order.
    let group = [
        refunded(&env, "", "pay_ip_lone", "evt_ip_lone_2", 5_000),
        captured(&env, "ip_9", "pay_ip9", "evt_ip9"),
    ];
    let processed = commit_group(&env.pool, &Ledger::default(), &group)
        .await
        .expect("committed");
    assert_eq!(outcomes(&processed), ["parked", "applied"]);
    let waiting: Vec<(String, bool)> = sqlx::query_as(
        "SELECT event_id, parked_at < now() - interval '49 minutes' FROM parked_events
         WHERE payment_id = 'pay_ip_lone' ORDER BY event_id",
    )
    .fetch_all(&env.pool)
    .await
    .expect("parked events");
    assert_eq!(
        waiting,
        [
            ("evt_ip_lone_1".to_owned(), true),
            ("evt_ip_lone_2".to_owned(), false)
        ]
    );
}

#[tokio::test]
async fn statements_per_group_do_not_grow_with_its_size() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_c", 1_000).await;
    for n in 0..9 {
        shop::order(
            &env.pool,
            &format!("ip_s{n}"),
            50_000,
            "INR",
            &[("ip_c", 1)],
        )
        .await;
    }
    let counter = StatementCounter::start(&env.database_url).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(counter.url())
        .await
        .expect("a pool through the counter");
    // Warm the connection (and sqlx's prepared statements) first.
    commit_group(
        &pool,
        &Ledger::default(),
        &[captured(&env, "ip_s0", "pay_s0", "evt_s0")],
    )
    .await
    .expect("committed");
    let measure = |envelopes: Vec<oncehook_common::Envelope>| {
        let pool = pool.clone();
        let counter = &counter;
        async move {
            let before = counter.counted();
            let processed = commit_group(&pool, &Ledger::default(), &envelopes)
                .await
                .expect("committed");
            assert!(
                outcomes(&processed).iter().all(|o| *o == "applied"),
                "{processed:?}"
            );
            let after = counter.counted();
            (
                after.statements - before.statements,
                after.commits - before.commits,
            )
        }
    };
    let one = measure(vec![captured(&env, "ip_s1", "pay_s1", "evt_s1")]).await;
    let eight = measure(
        (2..9)
            .map(|n| {
                captured(
                    &env,
                    &format!("ip_s{n}"),
                    &format!("pay_s{n}"),
                    &format!("evt_s{n}"),
                )
            })
            .chain([refunded(&env, "ip_s1", "pay_s1", "evt_s1_r", 100)])
            .collect(),
    )
    .await;
    println!("statements per group: 1 delivery {one:?}, 8 deliveries {eight:?}");
    assert_eq!(one.1, 1, "one commit");
    assert_eq!(eight.1, 1, "one commit");
    // BEGIN (with its SET LOCAL), the claim with the advisory locks, the
    // orders locked with their products and parked events, the facts
    // written and read back, the orders' write with flags, stock and order
    // events, the outcomes with the emails, COMMIT (docs/scaling.md).
    assert_eq!(
        one.0, 7,
        "the worker's transaction for one captured payment: {one:?}"
    );
    assert_eq!(
        one.0, eight.0,
        "a group of eight runs as many statements as a group of one"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await,
        8
    );
}

#[tokio::test]
async fn a_bad_delivery_fails_alone_and_the_others_of_its_group_commit() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_d", 10).await;
    shop::order(&env.pool, "ip_g", 50_000, "INR", &[("ip_d", 1)]).await;
    let worker = InProcess::start(
        &env.pool,
        Ledger::default(),
        &[
            ("ONCEHOOK_WORKER_BATCH_SIZE", "8"),
            ("ONCEHOOK_PREFETCH", "8"),
        ],
    );
    let good = captured(&env, "ip_g", "pay_g", "evt_g");
    // A capture without a payment id can never be recorded.
    let mut bad = captured(&env, "ip_g", "pay_bad", "evt_bad");
    if let Some(event) = bad.event.as_mut() {
        event.payment_id = None;
    }
    let (a, b, c) = tokio::join!(
        worker.deliver(&good),
        worker.deliver(&bad),
        worker.deliver(&good)
    );
    assert_eq!([a, b, c], [[Settled::Acked]; 3]);
    let letters = worker.dead_letters.published();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].kind, "missing_payment_id");
    assert!(letters[0].error.contains("evt_bad"), "{}", letters[0].error);
    assert_eq!(order_books(&env.pool, "ip_g").await.0, "paid");
    assert_eq!(
        env.count("SELECT sum(deliveries)::bigint FROM processed_webhooks")
            .await,
        2,
        "the good delivery once, its copy counted; the bad one left no record"
    );
}

/// A second effect, written without touching the pipeline: it records
/// each fresh delivery's event id in a table of its own.
struct Tally;

impl Effect for Tally {
    async fn apply(
        &self,
        conn: &mut PgConnection,
        deliveries: &[&Delivery],
    ) -> Result<Effects, EffectError> {
        let ids: Vec<String> = deliveries
            .iter()
            .map(|d| d.event.event_id.clone())
            .collect();
        sqlx::query("INSERT INTO tally (event_id) SELECT unnest($1::text[])")
            .bind(&ids)
            .execute(&mut *conn)
            .await?;
        Ok(Effects {
            applied: deliveries
                .iter()
                .map(|_| Applied::new(Outcome::Applied, "tallied"))
                .collect(),
            completed_earlier: Vec::<(DeliveryKey, Applied)>::new(),
            emails: Vec::new(),
        })
    }
}

#[tokio::test]
async fn a_second_effect_runs_through_the_same_pipeline_exactly_once() {
    let env = TestEnv::new().await;
    sqlx::query("CREATE TABLE tally (event_id text NOT NULL)")
        .execute(&env.pool)
        .await
        .expect("tally table");
    let worker = InProcess::start(&env.pool, Tally, &[("ONCEHOOK_WORKER_BATCH_SIZE", "4")]);
    // No order exists: the tally does not care, the ledger would.
    let deliveries: Vec<_> = (0..6)
        .map(|n| {
            captured(
                &env,
                &format!("t_{n}"),
                &format!("pay_t{n}"),
                &format!("evt_t{n}"),
            )
        })
        .collect();
    let twice: Vec<_> = deliveries.iter().chain(&deliveries).cloned().collect();
    let all = worker.deliver_all(&twice).await;
    assert!(all.iter().all(|s| *s == [Settled::Acked]), "{all:?}");
    assert_eq!(env.count("SELECT count(*) FROM tally").await, 6);
    assert_eq!(
        env.count("SELECT count(DISTINCT event_id) FROM tally")
            .await,
        6
    );
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks WHERE detail = 'tallied'")
            .await,
        6
    );
    assert!(worker.dead_letters.published().is_empty());
    // A failing effect rolls the claim back: nothing is absorbed later.
    let mut bad = captured(&env, "t_0", "pay_x", "evt_x");
    if let Some(event) = bad.event.as_mut() {
        event.payment_id = None;
    }
    let err = commit_group(&env.pool, &Ledger::default(), &[bad])
        .await
        .expect_err("a capture without a payment id");
    assert!(matches!(err, ProcessError::Permanent(_)), "{err:?}");
    assert_eq!(
        env.count("SELECT count(*) FROM processed_webhooks WHERE event_id = 'evt_x'")
            .await,
        0
    );
}

#[tokio::test]
async fn a_webhook_finds_its_order_by_a_gateway_reference_of_its_own_gateway_only() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_r", 10).await;
    shop::order(&env.pool, "shop_42", 50_000, "INR", &[("ip_r", 1)]).await;
    shop::order(&env.pool, "shop_77", 50_000, "INR", &[("ip_r", 1)]).await;
    sqlx::query(
        "INSERT INTO order_gateway_refs (gateway, gateway_ref, order_id)
         SELECT 'razorpay', 'order_RZP42', id FROM orders WHERE order_ref = 'shop_42'
         UNION ALL SELECT 'cashfree', 'cf_77', id FROM orders WHERE order_ref = 'shop_77'",
    )
    .execute(&env.pool)
    .await
    .expect("gateway references");
    // Razorpay echoes its own order id: the shop keeps its own reference.
    let paid = commit_group(
        &env.pool,
        &Ledger::default(),
        &[captured(&env, "order_RZP42", "pay_42", "evt_42")],
    )
    .await
    .expect("committed");
    assert_eq!(outcomes(&paid), ["applied"]);
    assert_eq!(
        order_books(&env.pool, "shop_42").await,
        ("paid".into(), 0, true)
    );
    // A reference registered for another gateway names nothing here: the
    // event waits for an order with that reference.
    let waiting = commit_group(
        &env.pool,
        &Ledger::default(),
        &[captured(&env, "cf_77", "pay_77", "evt_77")],
    )
    .await
    .expect("committed");
    assert_eq!(outcomes(&waiting), ["parked"]);
    assert_eq!(
        env.count("SELECT count(*) FROM parked_events WHERE order_ref = 'cf_77'")
            .await,
        1
    );
    assert_eq!(order_books(&env.pool, "shop_77").await.0, "pending");
}

#[tokio::test]
async fn a_webhook_before_its_order_waits_and_is_applied_by_the_transaction_that_creates_it() {
    use oncehook_ledger::store::shop::{GatewayRef, ShopItem, ShopOrder};
    use oncehook_ledger::{Create, Creation};

    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_w", 10).await;
    // The customer paid (and was refunded in part) before the shop's
    // create call landed; one capture names the shop's reference, the
    // other Razorpay's own order id.
    let early = [
        captured(&env, "order_RZPw1", "pay_w1", "evt_w1"),
        refunded(&env, "order_RZPw1", "pay_w1", "evt_w1_r", 5_000),
    ];
    let parked = commit_group(&env.pool, &Ledger::default(), &early)
        .await
        .expect("parked");
    assert_eq!(outcomes(&parked), ["parked", "parked"]);
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 0);

    let order = ShopOrder {
        order_ref: "shop_w1".into(),
        customer_email: "w@example.com".into(),
        currency: "INR".into(),
        amount_minor: 50_000,
        items: vec![ShopItem {
            sku: "ip_w".into(),
            qty: 1,
            unit_minor: Some(50_000),
        }],
        gateway_refs: vec![GatewayRef {
            gateway: "razorpay".into(),
            gateway_ref: "order_RZPw1".into(),
        }],
        metadata: serde_json::json!({}),
    };
    let mut tx = env.pool.begin().await.expect("begin");
    let created = Ledger::default()
        .apply(&mut tx, Create { order: &order })
        .await
        .expect("applied");
    let Creation::Created { applied } = created else {
        panic!("created: {created:?}");
    };
    tx.commit().await.expect("commit");
    assert_eq!(applied, 2);
    assert_eq!(
        order_books(&env.pool, "shop_w1").await,
        ("partially_refunded".into(), 5_000, true)
    );
    assert_eq!(shop::stock(&env.pool, "ip_w").await, 9);
    assert_eq!(env.count("SELECT count(*) FROM parked_events").await, 0);
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT outcome FROM processed_webhooks ORDER BY event_id")
            .fetch_all(&env.pool)
            .await
            .expect("outcomes");
    assert_eq!(recorded, ["applied", "applied"]);
    // The same webhooks again: duplicates, nothing moves.
    let again = commit_group(&env.pool, &Ledger::default(), &early)
        .await
        .expect("committed");
    assert_eq!(outcomes(&again), ["duplicate", "duplicate"]);
    assert_eq!(shop::stock(&env.pool, "ip_w").await, 9);
}

async fn cancel_order(pool: &PgPool, order_ref: &str) -> oncehook_ledger::cancel::Cancelled {
    let mut tx = pool.begin().await.expect("begin");
    let cancel = oncehook_ledger::Cancel {
        order_ref,
        by: "test",
        reason: "customer left",
        trace_parent: None,
    };
    let done = Ledger::default()
        .apply(&mut tx, cancel)
        .await
        .expect("cancel");
    tx.commit().await.expect("commit");
    done
}

async fn flag_of(pool: &PgPool, payment_id: &str) -> Option<String> {
    sqlx::query_scalar("SELECT flag FROM payments WHERE payment_id = $1 AND status = 'captured'")
        .bind(payment_id)
        .fetch_one(pool)
        .await
        .expect("the capture")
}

#[tokio::test]
async fn cancel_and_capture_give_the_same_books_in_either_order() {
    use oncehook_ledger::cancel::Cancelled;

    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_x", 10).await;
    shop::order(&env.pool, "cx_first", 50_000, "INR", &[("ip_x", 2)]).await;
    shop::order(&env.pool, "cx_then", 50_000, "INR", &[("ip_x", 3)]).await;
    // Paid, then cancelled: its stock comes back, its payment is owed back.
    commit_group(
        &env.pool,
        &Ledger::default(),
        &[captured(&env, "cx_first", "pay_cx1", "evt_cx1")],
    )
    .await
    .expect("paid");
    assert_eq!(shop::stock(&env.pool, "ip_x").await, 8);
    assert_eq!(cancel_order(&env.pool, "cx_first").await, Cancelled::Now);
    // Cancelled, then paid: recorded, owed back, no stock taken.
    assert_eq!(cancel_order(&env.pool, "cx_then").await, Cancelled::Now);
    let late = commit_group(
        &env.pool,
        &Ledger::default(),
        &[captured(&env, "cx_then", "pay_cx2", "evt_cx2")],
    )
    .await
    .expect("recorded");
    assert_eq!(outcomes(&late), ["flagged"]);
    for (order, payment) in [("cx_first", "pay_cx1"), ("cx_then", "pay_cx2")] {
        assert_eq!(
            order_books(&env.pool, order).await,
            ("cancelled".into(), 0, false),
            "{order}"
        );
        assert_eq!(
            flag_of(&env.pool, payment).await.as_deref(),
            Some("needs_refund"),
            "{order}"
        );
    }
    assert_eq!(
        shop::stock(&env.pool, "ip_x").await,
        10,
        "no stock taken for cancelled orders"
    );
    assert_eq!(cancel_order(&env.pool, "cx_then").await, Cancelled::Already);
    assert_eq!(cancel_order(&env.pool, "nobody").await, Cancelled::Unknown);
    // The payment owed back is refunded: settled, the same for both.
    commit_group(
        &env.pool,
        &Ledger::default(),
        &[
            refunded(&env, "cx_first", "pay_cx1", "evt_cx1_r", 50_000),
            refunded(&env, "cx_then", "pay_cx2", "evt_cx2_r", 50_000),
        ],
    )
    .await
    .expect("refunded");
    for (order, payment) in [("cx_first", "pay_cx1"), ("cx_then", "pay_cx2")] {
        assert_eq!(
            order_books(&env.pool, order).await,
            ("cancelled".into(), 50_000, false),
            "{order}"
        );
        assert_eq!(
            flag_of(&env.pool, payment).await.as_deref(),
            Some("refunded"),
            "{order}"
        );
    }
    // The one email that cannot differ: the confirmation sent while paid.
    assert_eq!(
        env.count("SELECT count(*) FROM email_outbox WHERE kind = 'confirmation'")
            .await,
        1
    );
}

/// The worker's claim takes the advisory locks the ledger's other roads
/// take (the same names, the same keys): a capture for an order whose
/// reference another road holds waits for it, and goes on once it is
/// released.
#[tokio::test]
async fn the_claim_takes_the_same_advisory_locks_as_the_ledgers_roads() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_adv", 10).await;
    shop::order(&env.pool, "adv_1", 50_000, "INR", &[("ip_adv", 1)]).await;
    let mut holding = env.pool.begin().await.expect("begin");
    oncehook_ledger::store::books::lock_keys(&mut holding, &[], &["adv_1".to_owned()])
        .await
        .expect("the reference's lock");
    let pool = env.pool.clone();
    let capture = captured(&env, "adv_1", "pay_adv", "evt_adv");
    let applying =
        tokio::spawn(async move { commit_group(&pool, &Ledger::default(), &[capture]).await });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        )
        .fetch_one(&env.pool)
        .await
        .expect("pg_locks");
        if waiting > 0 {
            break;
        }
        assert!(
            !applying.is_finished(),
            "the capture did not wait for the lock"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "no advisory lock awaited"
        );
        tokio::task::yield_now().await;
    }
    holding.commit().await.expect("release");
    let processed = applying
        .await
        .expect("the applying task")
        .expect("committed");
    assert_eq!(outcomes(&processed), ["applied"]);
}

/// A road that locks an order without its reference's lock (found through
/// a payment) waits for a cancellation holding the order's row, then sees the order
/// cancelled: read from the row it waited for, not from its statement's
/// snapshot of `order_cancellations`, which predates the cancellation.
#[tokio::test]
async fn an_order_locked_while_a_cancellation_commits_is_seen_cancelled() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_race", 10).await;
    shop::order(&env.pool, "race_cancel", 50_000, "INR", &[("ip_race", 1)]).await;
    commit_group(
        &env.pool,
        &Ledger::default(),
        &[captured(&env, "race_cancel", "pay_race", "evt_race")],
    )
    .await
    .expect("paid");
    // The cancellation, as the Cancel road writes it, not committed yet.
    let mut cancelling = env.pool.begin().await.expect("begin");
    sqlx::raw_sql(
        "INSERT INTO order_cancellations (order_id, cancelled_by)
           SELECT id, 'shop' FROM orders WHERE order_ref = 'race_cancel';
         UPDATE orders SET status = 'cancelled' WHERE order_ref = 'race_cancel';",
    )
    .execute(&mut *cancelling)
    .await
    .expect("cancel");
    let pool = env.pool.clone();
    let locking = tokio::spawn(async move {
        let mut tx = pool.begin().await.expect("begin");
        // Without the order's reference lock, as a road that found the
        // order through a payment or a gateway reference takes it.
        let refs = ["race_cancel".to_owned()];
        let locked = oncehook_ledger::store::books::lock_orders(&mut tx, &refs, &[], &[])
            .await
            .expect("lock")
            .orders;
        tx.rollback().await.expect("rollback");
        locked
    });
    let deadline = tokio::time::Instant::now() + oncehook_e2e::WAIT;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE 'WITH batch AS%'",
        )
        .fetch_one(&env.pool)
        .await
        .expect("activity");
        if waiting > 0 {
            break;
        }
        assert!(!locking.is_finished(), "the lock was not awaited");
        assert!(tokio::time::Instant::now() < deadline, "the lock awaited");
        tokio::task::yield_now().await;
    }
    cancelling.commit().await.expect("commit");
    let locked = locking.await.expect("the locking task");
    assert_eq!(locked.len(), 1);
    assert!(
        locked[0].order.cancelled,
        "a cancellation committed while the lock was awaited: {:?}",
        locked[0].order
    );
}

/// The intent of `payment`: its state.
async fn intent_state(pool: &PgPool, payment: &str) -> String {
    sqlx::query_scalar("SELECT state FROM refund_intents WHERE payment_id = $1")
        .bind(payment)
        .fetch_one(pool)
        .await
        .expect("the payment's intent")
}

/// A refund fact settles an intent oncehook may have sent, whatever state
/// the refunder left it in (`failed` without an answer, in doubt), and
/// cancels one it never sent (the gateway refused it: not in doubt).
#[tokio::test]
async fn a_refund_fact_settles_an_intent_in_doubt_and_cancels_one_never_sent() {
    use oncehook_ledger::cancel::Cancelled;

    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_dx", 10).await;
    for order in ["dx_sent", "dx_refused"] {
        shop::order(&env.pool, order, 50_000, "INR", &[("ip_dx", 1)]).await;
    }
    for (order, payment) in [("dx_sent", "pay_dx1"), ("dx_refused", "pay_dx2")] {
        assert_eq!(cancel_order(&env.pool, order).await, Cancelled::Now);
        commit_group(
            &env.pool,
            &Ledger::default(),
            &[captured(&env, order, payment, &format!("evt_{payment}"))],
        )
        .await
        .expect("recorded");
        assert_eq!(intent_state(&env.pool, payment).await, "owed");
    }
    // As the refunder leaves them: one sent, then parked without an
    // answer (its source switched off); one the gateway refused.
    for (payment, in_doubt) in [("pay_dx1", true), ("pay_dx2", false)] {
        sqlx::query(
            "UPDATE refund_intents SET state = 'failed', in_doubt = $2 WHERE payment_id = $1",
        )
        .bind(payment)
        .bind(in_doubt)
        .execute(&env.pool)
        .await
        .expect("park");
    }
    commit_group(
        &env.pool,
        &Ledger::default(),
        &[
            refunded(&env, "dx_sent", "pay_dx1", "evt_dx1_r", 50_000),
            refunded(&env, "dx_refused", "pay_dx2", "evt_dx2_r", 50_000),
        ],
    )
    .await
    .expect("refunded");
    assert_eq!(intent_state(&env.pool, "pay_dx1").await, "settled");
    assert_eq!(intent_state(&env.pool, "pay_dx2").await, "cancelled");
}

/// The ledger, holding each of its first `hold` transactions open until
/// that many are open at once (or a deadline passes: then it fails them).
struct HeldOpen {
    ledger: Ledger,
    hold: usize,
    entered: std::sync::atomic::AtomicUsize,
    all_open: tokio::sync::Barrier,
    /// Set when the deadline passed before `hold` were open.
    missed: std::sync::atomic::AtomicBool,
}

impl Effect for HeldOpen {
    async fn apply(
        &self,
        conn: &mut PgConnection,
        deliveries: &[&Delivery],
    ) -> Result<Effects, EffectError> {
        let n = self
            .entered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n < self.hold {
            let met =
                tokio::time::timeout(std::time::Duration::from_secs(10), self.all_open.wait())
                    .await;
            if met.is_err() {
                self.missed.store(true, std::sync::atomic::Ordering::SeqCst);
                return Err(EffectError::Permanent(oncehook_pipeline::Rejection::new(
                    oncehook_common::dead_letter::DeadLetterKind::Unparseable,
                    format!(
                        "only some of {} transactions were ever open at once",
                        self.hold
                    ),
                )));
            }
        }
        Effect::apply(&self.ledger, conn, deliveries).await
    }
}

#[tokio::test]
async fn the_group_size_does_not_cap_the_transactions_in_flight() {
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_f", 1_000).await;
    let n = 32;
    for i in 0..n {
        shop::order(
            &env.pool,
            &format!("ip_f{i}"),
            50_000,
            "INR",
            &[("ip_f", 1)],
        )
        .await;
    }
    // Enough connections for every committer.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(12)
        .connect(&env.database_url)
        .await
        .expect("a pool");
    // Groups of up to 8 and 32 deliveries in flight: eight committers must
    // all hold a transaction at once (prefetch ÷ batch would allow four).
    let effect = HeldOpen {
        ledger: Ledger::default(),
        hold: 8,
        entered: Default::default(),
        all_open: tokio::sync::Barrier::new(8),
        missed: Default::default(),
    };
    let worker = InProcess::start(
        &pool,
        effect,
        &[
            ("ONCEHOOK_PREFETCH", "32"),
            ("ONCEHOOK_WORKER_BATCH_SIZE", "8"),
            ("ONCEHOOK_WORKER_COMMITTERS", "8"),
        ],
    );
    let envelopes: Vec<_> = (0..n)
        .map(|i| {
            captured(
                &env,
                &format!("ip_f{i}"),
                &format!("pay_f{i}"),
                &format!("evt_f{i}"),
            )
        })
        .collect();
    let settled = worker.deliver_all(&envelopes).await;
    let held = &worker.worker.effect;
    assert!(
        !held.missed.load(std::sync::atomic::Ordering::SeqCst),
        "eight transactions were never open at once"
    );
    assert!(
        settled.iter().all(|s| s == &[Settled::Acked]),
        "every delivery committed once eight transactions were open together: {settled:?}"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await,
        n as i64
    );
}

/// The ledger, but the first group it is handed panics (a bug in an
/// effect): the committer holding it dies.
struct PanicsOnce {
    ledger: Ledger,
    panicked: std::sync::atomic::AtomicBool,
}

impl Effect for PanicsOnce {
    async fn apply(
        &self,
        conn: &mut PgConnection,
        deliveries: &[&Delivery],
    ) -> Result<Effects, EffectError> {
        if !self
            .panicked
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("an effect's bug");
        }
        Effect::apply(&self.ledger, conn, deliveries).await
    }
}

#[tokio::test]
async fn a_committer_that_panics_is_counted_and_started_again() {
    // The process's metrics (no other test here makes a committer panic).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the test binary's metrics recorder");
    let env = TestEnv::new().await;
    shop::product(&env.pool, "ip_p", 10).await;
    shop::order(&env.pool, "ip_p1", 50_000, "INR", &[("ip_p", 1)]).await;
    let effect = PanicsOnce {
        ledger: Ledger::default(),
        panicked: Default::default(),
    };
    // One committer: without a restart, nothing would commit again.
    let worker = InProcess::start(&env.pool, effect, &[("ONCEHOOK_WORKER_COMMITTERS", "1")]);
    let capture = captured(&env, "ip_p1", "pay_p1", "evt_p1");
    // The committer panics in the group: the delivery fails as a panicking
    // handler's would (requeued as a failed delivery, toward its limit).
    assert_eq!(worker.deliver(&capture).await, [Settled::Requeued]);
    let failures = "oncehook_background_task_failures_total{task=\"committer\"} 1";
    let page = metrics.render();
    assert!(page.contains(failures), "{page}");
    // The redelivery is committed by the committer started again.
    let again = tokio::time::timeout(std::time::Duration::from_secs(10), worker.deliver(&capture))
        .await
        .expect("a committer answers again");
    assert_eq!(again, [Settled::Acked]);
    assert_eq!(order_books(&env.pool, "ip_p1").await.0, "paid");
    assert!(worker.dead_letters.published().is_empty());
}
