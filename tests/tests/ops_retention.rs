//! `oncehookctl retention` and the worker's scheduled retention: delivery
//! records, sent or failed emails and the notifier's delivered or failed
//! deliveries older than the cutoff are counted, then deleted; unsent
//! emails and pending deliveries never are; the days are bounded.

use oncehook_e2e::ops::{ctl_json, ctl_ok};
use oncehook_e2e::{TestEnv, WAIT, eventually};

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
    notify_rows(env).await;
}

/// An order event with a delivery row per (endpoint, status, age in days):
/// delivered and failed long ago, delivered lately, and pending (being
/// retried) long ago.
async fn notify_rows(env: &TestEnv) {
    sqlx::query(
        "INSERT INTO orders (order_ref, customer_email, amount_minor, currency)
         VALUES ('ret_1', 'customer@example.com', 100, 'INR')",
    )
    .execute(&env.pool)
    .await
    .expect("insert order");
    sqlx::query(
        "INSERT INTO order_events (id, type, order_id, published_at)
         SELECT 'evt_ret_paid', 'order.paid', id, now() FROM orders WHERE order_ref = 'ret_1'",
    )
    .execute(&env.pool)
    .await
    .expect("insert order event");
    for (endpoint, status, age) in [
        ("delivered_old", "delivered", 40),
        ("failed_old", "failed", 40),
        ("delivered_new", "delivered", 1),
        ("pending_old", "pending", 400),
    ] {
        sqlx::query(
            "INSERT INTO notify_deliveries (event_id, endpoint, status, created_at, updated_at, delivered_at)
             VALUES ('evt_ret_paid', $1, $2, now() - make_interval(days => $3 + 1),
                     now() - make_interval(days => $3),
                     CASE WHEN $2 = 'delivered' THEN now() - make_interval(days => $3) END)",
        )
        .bind(endpoint)
        .bind(status)
        .bind(age)
        .execute(&env.pool)
        .await
        .expect("insert delivery");
    }
}

async fn delivery_endpoints(env: &TestEnv) -> Vec<String> {
    sqlx::query_scalar("SELECT endpoint FROM notify_deliveries ORDER BY endpoint")
        .fetch_all(&env.pool)
        .await
        .expect("deliveries")
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
    assert_eq!(dry["notify_deliveries"], 2, "{dry}");
    assert_eq!(dry["would_delete"], 5, "{dry}");
    let text = ctl_ok(&env, &["retention", "--days", "30"]).await;
    assert!(
        text.contains("deleted 1 processed_webhooks")
            && text.contains("2 email_outbox")
            && text.contains("2 notify_deliveries"),
        "{text}"
    );
    assert_eq!(outbox_keys(&env).await, vec!["sent_new", "unsent_old"]);
    assert_eq!(
        delivery_endpoints(&env).await,
        vec!["delivered_new", "pending_old"]
    );

    let all = ctl_json(&env, &["retention", "--days", "0", "--yes"]).await;
    assert_eq!(all["processed_webhooks"], 1, "{all}");
    assert_eq!(all["email_outbox"], 1, "{all}");
    assert_eq!(all["notify_deliveries"], 1, "{all}");
    assert_eq!(outbox_keys(&env).await, vec!["unsent_old"]);
    assert_eq!(delivery_endpoints(&env).await, vec!["pending_old"]);
    assert_eq!(
        env.count("SELECT count(*) FROM order_events").await,
        1,
        "the order events are kept"
    );

    // The environment variable is bounded the same way (it used to wrap).
    env.set_env("ONCEHOOK_RETENTION_DAYS", "4294967295");
    let (code, _, stderr) = env.ctl(&["retention", "--dry-run"]).await;
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("ONCEHOOK_RETENTION_DAYS"), "{stderr}");
}

#[tokio::test]
async fn the_workers_scheduled_retention_prunes_every_table() {
    let mut env = TestEnv::new().await;
    seed_retention_rows(&env).await;
    env.set_env("ONCEHOOK_RETENTION_DAYS", "30");
    env.set_env("ONCEHOOK_RETENTION_INTERVAL_SECS", "1");
    let _worker = env.start_worker().await;
    eventually("scheduled retention pass", WAIT, || async {
        (outbox_keys(&env).await == ["sent_new", "unsent_old"]
            && delivery_endpoints(&env).await == ["delivered_new", "pending_old"])
        .then_some(())
    })
    .await;
    let left: Vec<String> = sqlx::query_scalar("SELECT event_id FROM processed_webhooks")
        .fetch_all(&env.pool)
        .await
        .expect("rows");
    assert_eq!(left, vec!["evt_ret_new"]);
}
