//! A release rolling out over a database an older release runs on
//! (docs/operations.md, "Deploying a new version"): `oncehookctl migrate`
//! (the expand step) while the older release still writes, the older
//! release's writes during the window (made here as release 0.4.0's SQL
//! makes them, relying on the touch triggers), the worker's refund-intent
//! sweep, and `oncehookctl migrate --finish` (the contract step and its
//! catch-up); and a database that applied release 0.5.0's text of the
//! migrations 0.6.0 rewrote. The roll of real binaries built from git is
//! `make upgrade-test`.

use std::time::Duration;

use oncehook_e2e::{TestEnv, eventually, shop};
use serde_json::Value;
use sqlx::PgPool;

/// The last migration of release 0.4.0.
const RELEASE_0_4_0: i64 = 20261215000001;
/// The last migration before tenants (this release's own): the test of
/// 0.5.0's texts starts from the schema up to it, both steps.
const BEFORE_TENANTS: i64 = 20261221000001;

/// How long the worker's refund-intent sweep may take (it runs every 5 s).
const SWEEP: Duration = Duration::from_secs(20);

async fn version(pool: &PgPool, order_ref: &str) -> (i64, time::OffsetDateTime) {
    sqlx::query_as("SELECT version, updated_at FROM orders WHERE order_ref = $1")
        .bind(order_ref)
        .fetch_one(pool)
        .await
        .expect("order's version")
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Records a capture of `order_ref` as release 0.4.0's ledger did: the
/// payment row (flagged when it is not the order's payment) and, for the
/// order's payment, its state and stock, in one transaction, with no
/// version of its own (the touch triggers moved it) and no refund intent.
async fn capture_as_0_4_0(pool: &PgPool, order_ref: &str, payment_id: &str, flag: Option<&str>) {
    let paid = flag.is_none();
    let flag = flag.map_or("NULL".to_owned(), |f| format!("'{f}'"));
    let mut sql = format!(
        "BEGIN;
         INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id, flag)
           SELECT 'razorpay', '{payment_id}', id, 'captured', amount_minor, currency, 'evt_{payment_id}', {flag}
           FROM orders WHERE order_ref = '{order_ref}';
         INSERT INTO payment_links (provider, payment_id, order_id, event_id)
           SELECT 'razorpay', '{payment_id}', id, 'evt_{payment_id}' FROM orders WHERE order_ref = '{order_ref}'
           ON CONFLICT DO NOTHING;"
    );
    if paid {
        sql.push_str(&format!(
            "UPDATE orders SET status = 'paid', paid_by = 'razorpay:{payment_id}', paid_at = now(),
                               stock_applied = true
             WHERE order_ref = '{order_ref}';
             UPDATE products p SET stock = p.stock - i.qty
             FROM order_items i JOIN orders o ON o.id = i.order_id
             WHERE o.order_ref = '{order_ref}' AND p.sku = i.sku;"
        ));
    }
    sql.push_str("COMMIT;");
    exec(pool, &sql).await;
}

/// The owed payments (captures flagged for a refund, their amount known)
/// that have no refund intent.
async fn owed_without_intent(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT p.payment_id FROM payments p
         WHERE p.status = 'captured' AND p.flag IN ('needs_refund', 'amount_mismatch')
           AND p.amount_minor IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM refund_intents ri
                           WHERE ri.provider = p.provider AND ri.payment_id = p.payment_id)
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("owed payments")
}

async fn events_of(pool: &PgPool, order_ref: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT e.type FROM order_events e JOIN orders o ON o.id = e.order_id
         WHERE o.order_ref = $1 ORDER BY e.type",
    )
    .bind(order_ref)
    .fetch_all(pool)
    .await
    .expect("order events")
}

async fn triggers(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE '%touch%'",
    )
    .fetch_one(pool)
    .await
    .expect("triggers")
}

async fn ctl_json(env: &TestEnv, args: &[&str]) -> Value {
    let (code, out, err) = env.ctl(args).await;
    assert_eq!(code, 0, "oncehookctl {args:?}: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} answered {out}: {e}"))
}

#[tokio::test]
async fn an_older_release_is_seen_during_the_roll_and_caught_up_by_the_finish() {
    let mut env = TestEnv::at_schema(RELEASE_0_4_0).await;
    let pool = env.pool.clone();
    shop::Shop::mugs(
        20,
        &[
            "o_before", "o_window", "o_owed", "o_late", "o_cancel", "o_new",
        ],
    )
    .seed(&pool)
    .await;
    // Release 0.4.0 at work before the migration: paid twice, and the
    // second capture flagged for a refund with no intent.
    capture_as_0_4_0(&pool, "o_before", "pay_b1", None).await;
    capture_as_0_4_0(&pool, "o_before", "pay_b2", Some("needs_refund")).await;

    let expanded = ctl_json(&env, &["migrate", "--json"]).await;
    assert_eq!(expanded["status"], "migrated", "{expanded}");
    assert_eq!(expanded["fresh"], false, "{expanded}");
    assert!(
        expanded["window_since"].is_string(),
        "a rollout window is open: {expanded}"
    );
    assert_eq!(
        triggers(&pool).await,
        5,
        "the touch triggers stay for 0.4.0"
    );

    // 0.4.0's writes in the window move the version and `updated_at`, as
    // the shop sees them: once for a transaction of facts, whatever else it
    // writes for the order.
    let (v0, at0) = version(&pool, "o_window").await;
    capture_as_0_4_0(&pool, "o_window", "pay_w1", None).await;
    let (v1, at1) = version(&pool, "o_window").await;
    assert!(
        v1 > v0 && at1 > at0,
        "a paid order moved: {v0}→{v1}, {at0}→{at1}"
    );
    exec(
        &pool,
        "BEGIN;
         INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency, event_id)
           SELECT 'razorpay', 'pay_w0', id, 'failed', amount_minor, currency, 'evt_w0'
           FROM orders WHERE order_ref = 'o_window';
         INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body)
           SELECT gen_random_uuid(), id, 'note', 'note:o_window', 'a@example.com', 's', 'b'
           FROM orders WHERE order_ref = 'o_window';
         COMMIT;",
    )
    .await;
    let (v2, _) = version(&pool, "o_window").await;
    assert_eq!(
        v2,
        v1 + 1,
        "one transaction of facts moves the version once"
    );
    // 0.4.0's API cancels an order (its row, then a capture for it).
    exec(
        &pool,
        "BEGIN;
         INSERT INTO order_cancellations (order_id, cancelled_by)
           SELECT id, 'shop' FROM orders WHERE order_ref = 'o_cancel';
         UPDATE orders SET status = 'cancelled' WHERE order_ref = 'o_cancel';
         COMMIT;",
    )
    .await;
    let (vc, _) = version(&pool, "o_cancel").await;
    assert!(vc > 1, "the cancellation moved the version");
    capture_as_0_4_0(&pool, "o_cancel", "pay_c1", Some("needs_refund")).await;

    // This release's worker beside it: its own writes, and the intents 0.4.0
    // never mints, swept.
    let (_ingest, url) = env.start_ingest().await;
    let mut worker = env.start_worker().await;
    env.post_ok(&url, "razorpay", &env.captured("o_new", "pay_n1", "evt_n1"))
        .await;
    shop::wait_paid(&pool, "o_new").await;
    let (vn, _) = version(&pool, "o_new").await;
    assert!(vn > 1, "the new worker's write moved the version: {vn}");
    assert_eq!(
        shop::stock(&pool, "MUG").await,
        20 - 3,
        "three orders took stock"
    );
    capture_as_0_4_0(&pool, "o_owed", "pay_o1", None).await;
    capture_as_0_4_0(&pool, "o_owed", "pay_o2", Some("needs_refund")).await;
    eventually("the sweep mints the intents 0.4.0 owed", SWEEP, || async {
        owed_without_intent(&pool).await.is_empty().then_some(())
    })
    .await;
    assert!(
        worker
            .log_text()
            .contains("owed payments had no refund intent"),
        "the worker says what it caught up"
    );
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(Duration::from_secs(30)), Some(0));

    // A last 0.4.0 write nobody sweeps: the finish catches it up.
    capture_as_0_4_0(&pool, "o_late", "pay_l1", None).await;
    capture_as_0_4_0(&pool, "o_late", "pay_l2", Some("amount_mismatch")).await;
    assert_eq!(owed_without_intent(&pool).await, ["pay_l2"]);

    let finished = ctl_json(&env, &["migrate", "--finish", "--json"]).await;
    assert_eq!(finished["status"], "finished", "{finished}");
    assert_eq!(finished["intents_minted"], 1, "{finished}");
    assert!(
        finished["orders_caught_up"].as_u64().unwrap_or(0) >= 5,
        "the orders changed in the window: {finished}"
    );
    assert_eq!(
        owed_without_intent(&pool).await,
        Vec::<String>::new(),
        "every owed payment has a refund intent after the contract step"
    );
    assert_eq!(triggers(&pool).await, 0, "the contract step dropped them");
    let old_index: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_indexes WHERE indexname = 'payments_order_id'")
            .fetch_one(&pool)
            .await
            .expect("indexes");
    assert_eq!(old_index, 0, "the index the contract step replaces");
    // The events 0.4.0's rules left out, caught up: an order cancelled
    // before its capture is paid and owes that capture back.
    let cancelled = events_of(&pool, "o_cancel").await;
    for owed in ["order.cancelled", "order.needs_refund", "order.paid"] {
        assert!(
            cancelled.iter().any(|e| e == owed),
            "{owed} in {cancelled:?}"
        );
    }
    assert!(
        events_of(&pool, "o_window")
            .await
            .contains(&"order.paid".to_owned())
    );
    // Nothing moved twice: the stock as the books say, one intent each.
    assert_eq!(shop::stock(&pool, "MUG").await, 20 - 5, "five paid orders");
    let intents: i64 = sqlx::query_scalar("SELECT count(*) FROM refund_intents")
        .fetch_one(&pool)
        .await
        .expect("intents");
    assert_eq!(intents, 4, "pay_b2, pay_c1, pay_o2, pay_l2");

    // The finish again: nothing to do, and it says so.
    let again = ctl_json(&env, &["migrate", "--finish", "--json"]).await;
    assert_eq!(again["orders_caught_up"], 0, "{again}");
    assert_eq!(again["intents_minted"], 0, "{again}");
    assert_eq!(again["applied"], serde_json::json!([]), "{again}");
    let expanded = ctl_json(&env, &["migrate", "--json"]).await;
    assert!(expanded["window_since"].is_null(), "closed: {expanded}");
}

/// An owed payment recorded before the window (its order unchanged since)
/// gets its intent from the contract step even if no worker of this
/// release swept it yet.
#[tokio::test]
async fn the_contract_step_mints_the_intents_of_payments_owed_before_the_window() {
    let env = TestEnv::at_schema(RELEASE_0_4_0).await;
    let pool = env.pool.clone();
    shop::Shop::mugs(5, &["o_history", "o_plain"])
        .seed(&pool)
        .await;
    capture_as_0_4_0(&pool, "o_history", "pay_h1", None).await;
    capture_as_0_4_0(&pool, "o_history", "pay_h2", Some("needs_refund")).await;
    capture_as_0_4_0(&pool, "o_plain", "pay_p1", None).await;
    ctl_json(&env, &["migrate", "--json"]).await;
    let (version_before, _) = version(&pool, "o_plain").await;
    assert_eq!(owed_without_intent(&pool).await, ["pay_h2"]);
    let finished = ctl_json(&env, &["migrate", "--finish", "--json"]).await;
    assert_eq!(finished["intents_minted"], 1, "{finished}");
    assert_eq!(
        finished["orders_caught_up"], 1,
        "o_history alone: {finished}"
    );
    assert!(owed_without_intent(&pool).await.is_empty());
    let reason: String = sqlx::query_scalar(
        "SELECT reason FROM refund_intents WHERE payment_id = 'pay_h2' AND state = 'owed'",
    )
    .fetch_one(&pool)
    .await
    .expect("the intent");
    assert_eq!(reason, "duplicate_capture");
    assert_eq!(
        version(&pool, "o_plain").await.0,
        version_before,
        "an order that owes nothing and did not change is left alone"
    );
}

/// The finish refuses to run before the expand step.
#[tokio::test]
async fn the_contract_step_waits_for_the_expand_step() {
    let env = TestEnv::at_schema(RELEASE_0_4_0).await;
    let (code, out, err) = env.ctl(&["migrate", "--finish"]).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("run `oncehookctl migrate`"),
        "the error says what to do: {err}"
    );
    assert_eq!(triggers(&env.pool).await, 5, "nothing dropped");
}

/// The versions of the expand step's migrations (`migrations/*.sql`) after
/// `version`, in order.
fn expand_versions_after(version: i64) -> Vec<i64> {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut versions: Vec<i64> = std::fs::read_dir(&folder)
        .expect("migrations/")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".sql")?.split('_').next()?.parse().ok()
        })
        .filter(|v| *v > version)
        .collect();
    versions.sort_unstable();
    versions
}

/// A database that applied release 0.5.0's text of the migrations 0.6.0
/// rewrote (its recorded checksums are those of the old text) migrates.
#[tokio::test]
async fn a_database_that_ran_release_0_5_0_is_recognised() {
    // From the schema before tenants, both steps (what this release made
    // before them is undone below, the tenants' is never there): then
    // every migration after 0.5.0's is applied afresh.
    let env = TestEnv::at_finished_release(BEFORE_TENANTS).await;
    // The checksums of the texts 0.5.0 applied, as 0.5.0 recorded them:
    // written out here on purpose, not read from store::schema's list, so
    // a wrong entry there fails this test.
    let released = [
        (
            20261216000001_i64,
            "31d3ad3b30b2a86fbe87d00c9fc141f296a842d3e5b5cfac53bde4c5a82b8ecb3035f7517144f1120f0d907679f5b312",
        ),
        (
            20261217000001,
            "016ed5419a0321b1a75b7a777afa88301a9fae30c76e4bba4c0678b7907d32d6d141783ff2b358964232de6aed0727b7",
        ),
        (
            20261218000001,
            "15e657218a658d41804b735af8c117f6d07ef0d804ca46083cc37e6b42047f7e0dc789160212bc3ca7a9f086361105c2",
        ),
        (
            20261219000001,
            "18f3fe25f16e619a56d217510c38d598e37a9a16ecbb7d532e13b63eb0e919b6151888fd303c24faf2cf23ee087645c3",
        ),
    ];
    for (version, checksum) in released {
        sqlx::query("UPDATE _sqlx_migrations SET checksum = decode($2, 'hex') WHERE version = $1")
            .bind(version)
            .bind(checksum)
            .execute(&env.pool)
            .await
            .expect("0.5.0's checksum");
    }
    // And, as at 0.5.0, without what this release's expand and contract
    // migrations made (the triggers are gone already: 0.5.0 dropped them).
    exec(
        &env.pool,
        "DROP TABLE schema_rollouts;
         DROP INDEX payments_owed;
         ALTER TABLE refund_intents
             DROP COLUMN attempt_no, DROP COLUMN sent_reason, DROP COLUMN in_doubt;",
    )
    .await;
    let newer: Vec<i64> = sqlx::query_scalar(
        "DELETE FROM _sqlx_migrations WHERE version > 20261219000001 RETURNING version",
    )
    .fetch_all(&env.pool)
    .await
    .expect("forget the newer migrations");
    assert!(newer.contains(&20261220000001), "{newer:?}");
    let expanded = ctl_json(&env, &["migrate", "--json"]).await;
    assert_eq!(
        expanded["applied"],
        serde_json::json!(expand_versions_after(20261219000001)),
        "{expanded}"
    );
    assert!(expanded["window_since"].is_string(), "{expanded}");
    let recognised: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM _sqlx_migrations
         WHERE version IN (20261216000001, 20261217000001, 20261218000001, 20261219000001)
           AND encode(checksum, 'hex') NOT IN ($1, $2, $3, $4)",
    )
    .bind(released[0].1)
    .bind(released[1].1)
    .bind(released[2].1)
    .bind(released[3].1)
    .fetch_one(&env.pool)
    .await
    .expect("checksums");
    assert_eq!(recognised, 4, "the checksums are this release's texts'");
    assert_eq!(triggers(&env.pool).await, 5, "made again for the window");
    let finished = ctl_json(&env, &["migrate", "--finish", "--json"]).await;
    assert_eq!(finished["status"], "finished", "{finished}");
    assert_eq!(triggers(&env.pool).await, 0);
}

/// Three `oncehookctl migrate` at once apply each migration once and open
/// one window; a `migrate --finish` SIGKILLed after its first page of
/// catch-up left the window open and lost nothing: run again, it catches
/// up the rest and closes the window, and a third run changes nothing.
#[tokio::test]
async fn concurrent_migrates_and_a_finish_killed_mid_run_end_as_one_clean_run() {
    const ORDERS: usize = 250; // more than one catch-up page (200)
    let mut env = TestEnv::at_schema(RELEASE_0_4_0).await;
    let pool = env.pool.clone();
    let refs: Vec<String> = (0..ORDERS).map(|i| format!("o_k{i:03}")).collect();
    shop::Shop::mugs(1_000, &refs).seed(&pool).await;
    for (i, order_ref) in refs.iter().enumerate() {
        capture_as_0_4_0(&pool, order_ref, &format!("pay_k{i:03}a"), None).await;
        let owed = format!("pay_k{i:03}b");
        capture_as_0_4_0(&pool, order_ref, &owed, Some("needs_refund")).await;
    }
    let (a, b, c) = tokio::join!(
        env.ctl(&["migrate", "--json"]),
        env.ctl(&["migrate", "--json"]),
        env.ctl(&["migrate", "--json"]),
    );
    for (code, out, err) in [a, b, c] {
        assert_eq!(code, 0, "every concurrent migrate succeeds: {out}{err}");
    }
    let twice: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT version FROM _sqlx_migrations
                               GROUP BY version HAVING count(*) > 1) t",
    )
    .fetch_one(&pool)
    .await
    .expect("migrations");
    assert_eq!(twice, 0);
    let open = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM schema_rollouts WHERE finished_at IS NULL",
        )
        .fetch_one(&pool)
        .await
        .expect("windows")
    };
    assert_eq!(open().await, 1, "one window");
    assert_eq!(owed_without_intent(&pool).await.len(), ORDERS);

    // The last order held by another road of the ledger (its reference's
    // lock, the first every road takes: docs/ledger.md, "One lock order"):
    // the finish stops there, its first page committed, and is killed.
    let mut hold = pool.begin().await.expect("begin");
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('order:' || $1, 7))")
        .bind(&refs[ORDERS - 1])
        .execute(&mut *hold)
        .await
        .expect("hold the last order");
    let mut finish = env.spawn("oncehookctl", &[], &["migrate", "--finish", "--json"]);
    eventually("the first page caught up", SWEEP, || async {
        let left = owed_without_intent(&pool).await.len();
        (left == ORDERS - 200).then_some(())
    })
    .await;
    assert!(finish.is_running(), "waiting on the held order");
    finish.kill();
    hold.rollback().await.expect("release");
    assert_eq!(open().await, 1, "the window stays open");
    assert_eq!(owed_without_intent(&pool).await.len(), ORDERS - 200);

    let finished = ctl_json(&env, &["migrate", "--finish", "--json"]).await;
    assert_eq!(finished["status"], "finished", "{finished}");
    assert_eq!(finished["intents_minted"], ORDERS - 200, "{finished}");
    assert!(owed_without_intent(&pool).await.is_empty());
    assert_eq!(open().await, 0, "the window closed");
    let intents: i64 = sqlx::query_scalar("SELECT count(*) FROM refund_intents")
        .fetch_one(&pool)
        .await
        .expect("intents");
    assert_eq!(intents, ORDERS as i64, "one intent per owed payment");
    let again = ctl_json(&env, &["migrate", "--finish", "--json"]).await;
    assert_eq!(again["intents_minted"], 0, "{again}");
    assert_eq!(triggers(&pool).await, 0);
}
