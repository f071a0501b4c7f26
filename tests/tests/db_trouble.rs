//! Database trouble holds work; it never dead-letters it. Each test makes
//! the trouble happen for real against a worker whose delivery limit and
//! retry budget are tiny (`ONCEHOOK_DELIVERY_LIMIT=2`,
//! `ONCEHOOK_MAX_ATTEMPTS=2`), so a worker that requeued on transient
//! errors would dead-letter the event within seconds: lock timeouts, real
//! deadlocks (40P01), a role out of connections (53300), a long table lock,
//! and a schema the worker is newer than. Each ends with the event applied
//! once and the dead-letter queue empty. (A Postgres restart lives in
//! `chaos.rs`, which serialises the scenarios that restart services.)
//!
//! In the PgBouncer pass every worker and mailer here goes through the
//! pooler — the worker too, although the deploy files connect it straight
//! to Postgres (`TestEnv::pool_worker_too`: behind the pooler is still a
//! supported configuration, and its trouble differs there) — whichever
//! database URL a test gives it (`TestEnv` routes it:
//! the same database, as the same user; the lock timeout of
//! `?options=-c lock_timeout=…` set by the pooler's database entry), and
//! the test fails if one of them connects straight to Postgres. What
//! differs there: a role out of connections reaches the worker as
//! PgBouncer's "server login has been failing" (08P01) instead of 53300,
//! and the worker resumes at PgBouncer's next login attempt (at most
//! `server_login_retry`, 15 s, after the slots are free).

use std::time::Duration;

use oncehook_e2e::{Proc, Shop, TestEnv, broker, eventually, shop};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, Postgres, Transaction};

const WAIT: Duration = Duration::from_secs(40);
/// A fresh environment whose binaries all get the settings that make a
/// requeueing worker dead-letter quickly (the queue is declared with them);
/// in the PgBouncer pass the worker goes behind the pooler too.
async fn tight_env() -> TestEnv {
    let mut env = TestEnv::new().await;
    env.pool_worker_too();
    env.set_env("ONCEHOOK_DELIVERY_LIMIT", "2");
    env.set_env("ONCEHOOK_MAX_ATTEMPTS", "2");
    env
}

/// Order `order_ref` for 2 x MUG (stock 10), 500.00 INR.
fn mug_order(order_ref: &str) -> Shop {
    Shop::new()
        .product("MUG", 10)
        .order(order_ref, &[("MUG", 2)])
}

/// Posts a payment.captured for `order_ref` through ingest.
async fn post_payment(env: &TestEnv, url: &str, order_ref: &str) {
    let pay = format!("pay_{order_ref}");
    let evt = format!("evt_{order_ref}");
    env.post_ok(url, "razorpay", &env.captured(order_ref, &pay, &evt))
        .await;
}

async fn dead_depth(env: &TestEnv) -> Option<u32> {
    broker::depth(&format!("{}.dead", env.prefix)).await
}

/// The event was applied exactly once and nothing was dead-lettered.
async fn assert_applied_once(env: &TestEnv, order_ref: &str) {
    shop::wait_paid_within(&env.pool, order_ref, WAIT).await;
    env.wait_events_drained().await;
    assert_eq!(shop::stock(&env.pool, "MUG").await, 8, "stock moved once");
    assert_eq!(shop::payments(&env.pool, order_ref).await.len(), 1);
    let webhooks = shop::webhooks(&env.pool, order_ref).await;
    assert_eq!(webhooks.len(), 1, "{webhooks:?}");
    assert_eq!(webhooks[0].1, "applied", "{webhooks:?}");
    assert_eq!(dead_depth(env).await, Some(0), "nothing dead-lettered");
}

/// What the table-lock tests start from: an order for 2 x MUG seeded,
/// ingest and a worker running, and the `products` table locked by the
/// test. Fields drop in order: the lock first, the environment last.
struct ProductsLocked {
    /// `LOCK TABLE products IN ACCESS EXCLUSIVE MODE`, held on a connection
    /// of the test's own until this transaction ends.
    lock: Transaction<'static, Postgres>,
    worker: Proc,
    _ingest: Proc,
    /// Ingest's base URL.
    url: String,
    /// The `ONCEHOOK_DATABASE_URL` the worker was started with.
    worker_url: String,
    env: TestEnv,
}

/// Seeds `order_ref`, starts ingest and a worker (connected by the test
/// database's URL plus `url_suffix`) and then locks `products`.
async fn lock_products_under_a_worker(order_ref: &str, url_suffix: &str) -> ProductsLocked {
    let mut env = tight_env().await;
    mug_order(order_ref).seed(&env.pool).await;
    let (ingest, url) = env.start_ingest().await;
    let worker_url = format!("{}{url_suffix}", env.database_url);
    let worker = env
        .start_consumer(
            "oncehook-worker",
            &[("ONCEHOOK_DATABASE_URL", worker_url.as_str())],
        )
        .await;

    let locker = PgPoolOptions::new()
        .max_connections(1)
        .connect(&env.database_url)
        .await
        .expect("connect");
    let mut lock = locker.begin().await.expect("begin");
    sqlx::query("LOCK TABLE products IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock products");
    ProductsLocked {
        lock,
        worker,
        _ingest: ingest,
        url,
        worker_url,
        env,
    }
}

/// Holds the `products` lock for `hold` while a payment for a MUG order
/// waits, with the worker connected by the database URL plus `url_suffix`.
/// Returns the worker's log.
async fn table_lock_scenario(url_suffix: &str, hold: Duration) -> String {
    let s = lock_products_under_a_worker("o_lock", url_suffix).await;
    post_payment(&s.env, &s.url, "o_lock").await;
    tokio::time::sleep(hold).await;
    let dead_while_locked = dead_depth(&s.env).await;
    s.lock.rollback().await.expect("release the lock");
    assert_eq!(
        dead_while_locked,
        Some(0),
        "nothing dead-lettered while locked"
    );
    assert_applied_once(&s.env, "o_lock").await;
    s.worker.log_text()
}

#[tokio::test]
async fn a_table_lock_held_for_20s_holds_the_event() {
    table_lock_scenario("", Duration::from_secs(20)).await;
}

/// With `lock_timeout` every attempt fails (55P03) while the lock is held:
/// many times the retry budget and the delivery limit.
#[tokio::test]
async fn lock_timeouts_for_20s_hold_the_event() {
    let log = table_lock_scenario(
        "?options=-c%20lock_timeout%3D200ms",
        Duration::from_secs(20),
    )
    .await;
    assert!(
        log.contains("still failing after retries"),
        "the lock timeouts outlasted the retry budget (a requeueing worker would have dead-lettered)"
    );
}

/// SIGTERM while a delivery is held through database trouble (every attempt
/// hits `lock_timeout`): the worker stops promptly with exit 0 and gives the
/// delivery back; the next worker applies it once the trouble is over, and
/// nothing is dead-lettered.
#[tokio::test]
async fn sigterm_during_a_held_delivery_leaves_it_for_the_next_worker() {
    let mut s = lock_products_under_a_worker("o_term", "?options=-c%20lock_timeout%3D200ms").await;
    post_payment(&s.env, &s.url, "o_term").await;
    eventually("the worker holds the delivery", WAIT, || async {
        s.worker.log_text().contains("lock timeout").then_some(())
    })
    .await;
    s.worker.signal("TERM");
    let exit = s.worker.wait_exit(Duration::from_secs(30));
    let pending = shop::order_status(&s.env.pool, "o_term").await;
    s.lock.rollback().await.expect("release the lock");
    assert_eq!(exit, Some(0), "the holding worker stops on SIGTERM");
    assert_eq!(pending, "pending", "nothing applied while locked");
    assert_eq!(dead_depth(&s.env).await, Some(0), "nothing dead-lettered");

    let extra = [("ONCEHOOK_DATABASE_URL", s.worker_url.as_str())];
    let _next = s.env.start_consumer("oncehook-worker", &extra).await;
    assert_applied_once(&s.env, "o_term").await;
}

/// Real deadlocks: the test locks the MUG row, waits until the worker (which
/// locks the order first) waits for it, then locks the order row inside a
/// savepoint; Postgres aborts the worker's transaction (40P01). Rolling back
/// to the savepoint frees the order for the worker's next try, and the
/// cycle repeats, six deadlocks in all.
#[tokio::test]
async fn repeated_deadlocks_hold_the_event() {
    let mut env = tight_env().await;
    mug_order("o_dead").seed(&env.pool).await;
    let (_ingest, url) = env.start_ingest().await;
    let worker = env.start_worker().await;

    let mut locker = PgConnection::connect(&env.database_url)
        .await
        .expect("connect");
    let mut tx = locker.begin().await.expect("begin");
    sqlx::query("SELECT 1 AS one FROM products WHERE sku = 'MUG' FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("lock MUG");
    post_payment(&env, &url, "o_dead").await;
    let mut deadlocks = 0;
    let started = std::time::Instant::now();
    while deadlocks < 6 && started.elapsed() < Duration::from_secs(60) {
        eventually("the worker waits for the MUG row", WAIT, || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&env.pool)
            .await
            .expect("pg_stat_activity");
            (waiting > 0).then_some(())
        })
        .await;
        sqlx::query("SAVEPOINT s")
            .execute(&mut *tx)
            .await
            .expect("savepoint");
        let ours = sqlx::query("SELECT 1 AS one FROM orders WHERE order_ref = 'o_dead' FOR UPDATE")
            .execute(&mut *tx)
            .await;
        // Ok: the worker was the deadlock's victim. Err: we were (rare).
        if ours.is_ok() {
            deadlocks += 1;
        }
        sqlx::query("ROLLBACK TO SAVEPOINT s")
            .execute(&mut *tx)
            .await
            .expect("rollback to savepoint");
    }
    let dead_meanwhile = dead_depth(&env).await;
    tx.rollback().await.expect("release MUG");
    assert_eq!(deadlocks, 6, "the worker lost six deadlocks");
    assert_eq!(dead_meanwhile, Some(0), "nothing dead-lettered meanwhile");
    assert_applied_once(&env, "o_dead").await;
    assert!(
        worker.log_text().contains("still failing after retries"),
        "the deadlocks outlasted the retry budget"
    );
}

/// 53300: the worker's role may open two connections; the test ends the
/// worker's sessions and takes both slots for 20 s. (Behind PgBouncer the
/// sessions ended are the pooler's server connections for the role, and
/// the worker is told "server login has been failing" until a login
/// succeeds again.)
#[tokio::test]
async fn a_role_out_of_connections_holds_the_event() {
    let mut env = tight_env().await;
    mug_order("o_conn").seed(&env.pool).await;
    let role = format!("oncehook_lim_{}", env.id);
    for sql in [
        format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 2"),
        format!("GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"),
        format!("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&env.pool)
            .await
            .expect("role setup");
    }
    let role_url = env
        .database_url
        .replacen("postgres@", &format!("{role}@"), 1);
    let (_ingest, url) = env.start_ingest().await;
    let extra = [("ONCEHOOK_DATABASE_URL", role_url.as_str())];
    let mut worker = env.start_consumer("oncehook-worker", &extra).await;

    let held = take_every_slot(&env, &role, &role_url).await;
    post_payment(&env, &url, "o_conn").await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let dead_meanwhile = dead_depth(&env).await;
    let pending = shop::order_status(&env.pool, "o_conn").await;
    for conn in held {
        let _ = conn.close().await;
    }
    assert_eq!(pending, "pending", "nothing applied without a connection");
    assert_eq!(dead_meanwhile, Some(0), "nothing dead-lettered meanwhile");
    assert_applied_once(&env, "o_conn").await;
    worker.kill();
    for sql in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&env.pool)
            .await;
    }
}

/// Ends the role's sessions and opens its two connections from here.
async fn take_every_slot(env: &TestEnv, role: &str, role_url: &str) -> Vec<PgConnection> {
    eventually(
        "both of the role's slots held by the test",
        WAIT,
        || async {
            let _ = sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1",
            )
            .bind(role)
            .execute(&env.pool)
            .await;
            let mut held = Vec::new();
            for _ in 0..2 {
                if let Ok(conn) = PgConnection::connect(role_url).await {
                    held.push(conn);
                }
            }
            (held.len() == 2).then_some(held)
        },
    )
    .await
}

/// A worker and a mailer started against an empty database do not consume:
/// `/readyz` stays 503, the event waits in the queue, nothing is
/// dead-lettered. Once the database is migrated (and the shop seeded, in the
/// same transaction) the worker consumes and applies it and the mailer
/// sends its email.
#[tokio::test]
async fn a_worker_and_a_mailer_wait_for_their_schema() {
    let mut env = tight_env().await;
    let empty = format!("{}_empty", env.db_name);
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{empty}\"")))
        .execute(&env.pool)
        .await
        .expect("create the empty database");
    let empty_url = env.database_url.replace(&env.db_name, &empty);
    let (_ingest, url) = env.start_ingest().await;
    let metrics = format!("127.0.0.1:{}", oncehook_e2e::free_port());
    let extra = [
        ("ONCEHOOK_DATABASE_URL", empty_url.as_str()),
        ("ONCEHOOK_METRICS_ADDR", metrics.as_str()),
    ];
    let mut worker = env.spawn("oncehook-worker", &extra, &[]);
    let mut mailer = env.spawn(
        "oncehook-mailer",
        &[("ONCEHOOK_DATABASE_URL", empty_url.as_str())],
        &[],
    );
    let mailer_readyz = format!("{}/readyz", mailer.metrics_url());
    let readyz = format!("http://{metrics}/readyz");
    let get = |u: String| {
        let http = env.http.clone();
        async move { http.get(u).send().await.map(|r| r.status().as_u16()).ok() }
    };
    let status = || get(readyz.clone());
    eventually("the metrics listener answers", WAIT, || async {
        status().await.is_some().then_some(())
    })
    .await;
    post_payment(&env, &url, "o_schema").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(status().await, Some(503), "not ready without a schema");
    assert_eq!(
        get(mailer_readyz.clone()).await,
        Some(503),
        "the mailer is not ready without a schema either"
    );
    assert_eq!(
        broker::events_depth(&env.prefix).await,
        Some(1),
        "the event waits"
    );
    assert_eq!(dead_depth(&env).await, Some(0), "nothing dead-lettered");
    assert!(
        worker.log_text().contains("older than this binary"),
        "the worker says why it waits"
    );
    assert!(
        mailer.log_text().contains("older than this binary"),
        "the mailer says why it waits: {}",
        mailer.log_text()
    );

    // The schema is built first, recorded under another name (some
    // migrations build an index CONCURRENTLY, which no transaction can
    // hold), then made visible with the shop's data in one transaction.
    let mut staged = oncehook_common::store::schema::both_steps();
    staged.dangerous_set_table_name("_staged_migrations");
    let mut conn = PgConnection::connect(&empty_url).await.expect("connect");
    staged.run(&mut conn).await.expect("migrate");
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query("ALTER TABLE _staged_migrations RENAME TO _sqlx_migrations")
        .execute(&mut *tx)
        .await
        .expect("the schema's record");
    sqlx::query("INSERT INTO products (sku, name, stock) VALUES ('MUG', 'MUG', 10)")
        .execute(&mut *tx)
        .await
        .expect("product");
    sqlx::query(
        "WITH o AS (INSERT INTO orders (order_ref, customer_email, amount_minor, currency)
                    VALUES ('o_schema', 'o@example.com', 50000, 'INR') RETURNING id)
         INSERT INTO order_items (order_id, sku, qty) SELECT id, 'MUG', 2 FROM o",
    )
    .execute(&mut *tx)
    .await
    .expect("order");
    tx.commit().await.expect("commit");

    eventually("ready once migrated", WAIT, || async {
        (status().await == Some(200)).then_some(())
    })
    .await;
    // "Drained" counts only ready messages: the delivery may still be in
    // flight, so wait for what a user checks, the order paid.
    env.wait_events_drained().await;
    eventually("order o_schema paid", WAIT, || async {
        let mut c = PgConnection::connect(&empty_url).await.ok()?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM orders WHERE order_ref = 'o_schema'")
                .fetch_optional(&mut c)
                .await
                .ok()
                .flatten();
        let _ = c.close().await;
        (status.as_deref() == Some("paid")).then_some(())
    })
    .await;
    eventually("the mailer ready and the email sent", WAIT, || async {
        let ready = get(mailer_readyz.clone()).await == Some(200);
        (ready && !env.mail_files().is_empty()).then_some(())
    })
    .await;
    assert_eq!(env.mail_files().len(), 1, "one email");
    assert_eq!(dead_depth(&env).await, Some(0), "nothing dead-lettered");
    worker.kill();
    mailer.kill();
    let _ = conn.close().await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS \"{empty}\" WITH (FORCE)"
    )))
    .execute(&env.pool)
    .await;
}
