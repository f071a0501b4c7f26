//! The pipeline behind a real PgBouncer in transaction mode (Debian's
//! package): with `ONCEHOOK_DATABASE_POOLER=transaction` the worker and the
//! mailer keep every promise through it, and PgBouncer's own counters show
//! the traffic went through it. Without the setting the same PgBouncer
//! breaks them, which is why the setting exists; and a statement run on its
//! own needs a transaction there, which is why the store gives it one
//! behind this pooler. (`make test` also runs all of
//! tests/tests/pipeline_*.rs through PgBouncer.)

use std::time::Duration;

use oncehook_e2e::pgbouncer::PgBouncer;
use oncehook_e2e::{PipelineSpec, Shop, TestEnv, eventually, shop};
use oncehook_gateways::Gateway;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_pipeline_runs_through_pgbouncer_in_transaction_mode() {
    let mut env = TestEnv::through_pgbouncer().await;
    let orders: Vec<String> = (0..12).map(|i| format!("order_pool_{i}")).collect();
    let refs: Vec<&str> = orders.iter().map(String::as_str).collect();
    Shop::mugs(100, &refs).seed(&env.pool).await;
    let app = env.pipeline_with(PipelineSpec::default().workers(2)).await;

    for (i, order_ref) in refs.iter().enumerate() {
        let spec = env.spec(
            order_ref,
            &format!("pay_P{i}"),
            &format!("evt_P{i}"),
            50_000,
        );
        let d = env.sign(Gateway::Razorpay, "payment.captured", &spec);
        // Every event twice: the dedup record works through the pooler too.
        for _ in 0..2 {
            let (status, body) = env.post(&app.url, "razorpay", &d).await;
            assert_eq!(status, 200, "{body}");
        }
    }
    for order_ref in &refs {
        shop::wait_paid_and_mailed(&env.pool, order_ref).await;
    }
    env.wait_events_drained().await;
    assert_eq!(shop::stock(&env.pool, "MUG").await, 100 - refs.len() as i32);
    assert_eq!(env.mail_files().len(), refs.len(), "one email per order");

    let (xacts, queries) = env.pooler_counts().expect("a pgbouncer");
    assert!(
        xacts >= refs.len() as u64 * 2 && queries > xacts,
        "the binaries' transactions went through PgBouncer: {xacts} transactions, {queries} queries"
    );
}

#[tokio::test]
async fn without_the_pooler_setting_pgbouncer_breaks_prepared_statements() {
    let mut env = TestEnv::through_pgbouncer().await;
    Shop::mugs(100, &["order_nopool"]).seed(&env.pool).await;
    let (_ingest, url) = env.start_ingest().await;
    // The worker told it talks to Postgres directly: statements are cached
    // per connection, and PgBouncer drops them between transactions, so
    // the second use of any statement fails (the relay's outbox query, one
    // of the first to run twice).
    let worker = env.spawn(
        "oncehook-worker",
        &[("ONCEHOOK_DATABASE_POOLER", "none")],
        &[],
    );
    let spec = env.spec("order_nopool", "pay_N", "evt_N", 50_000);
    let d = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let (status, body) = env.post(&url, "razorpay", &d).await;
    assert_eq!(status, 200, "{body}");
    eventually(
        "the worker reports the missing prepared statement",
        WAIT,
        || async {
            worker
                .log_text()
                .contains("prepared statement")
                .then_some(())
        },
    )
    .await;
}

/// Why the store runs a statement of its own inside a transaction behind
/// this pooler (`store::Pooled::single`): with no statement cached (as
/// `ONCEHOOK_DATABASE_POOLER=transaction` sets sqlx up), sqlx parses a
/// statement and then executes it, each exchange ending in a Sync, and
/// PgBouncer hands the server connection on at the first one's
/// ReadyForQuery, dropping the prepared statement. A transaction keeps the
/// server connection for both. Should sqlx ever send both in one exchange,
/// the bare statement would work here and the store could drop the
/// transaction.
#[tokio::test]
async fn behind_pgbouncer_a_statement_of_its_own_needs_a_transaction() {
    let env = TestEnv::new().await;
    let pgbouncer = PgBouncer::start(&env.dir, &env.database_url);
    let options: PgConnectOptions = pgbouncer
        .url(&env.db_name)
        .parse()
        .expect("a PgBouncer URL");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.statement_cache_capacity(0))
        .await
        .expect("connect through PgBouncer");
    let bare = sqlx::query_scalar::<_, i32>("SELECT $1::int4")
        .bind(7)
        .fetch_one(&pool)
        .await;
    let err = bare.expect_err("a bare statement fails behind PgBouncer");
    assert!(
        err.to_string().contains("prepared statement"),
        "the prepared statement is gone by the time it is executed: {err}"
    );

    let mut tx = pool.begin().await.expect("begin");
    let inside = sqlx::query_scalar::<_, i32>("SELECT $1::int4")
        .bind(7)
        .fetch_one(&mut *tx)
        .await
        .expect("the same statement inside a transaction");
    tx.commit().await.expect("commit");
    assert_eq!(inside, 7);
    pool.close().await;
}
