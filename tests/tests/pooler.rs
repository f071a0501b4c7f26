//! The pipeline behind a real PgBouncer in transaction mode (Debian's
//! package): with `ONCEHOOK_DATABASE_POOLER=transaction` the worker and the
//! mailer keep every promise through it, and PgBouncer's own counters show
//! the traffic went through it. Without the setting the same PgBouncer
//! breaks them, which is why the setting exists; a statement run on its
//! own needs a transaction there, which is why the store gives it one
//! behind this pooler; and without `server_reset_query = DEALLOCATE ALL`
//! two clients' statement names collide, which is why both deploy files
//! set it. (`make test` also runs all of tests/tests/pipeline_*.rs through
//! PgBouncer, with the worker straight to Postgres as the deploy files run
//! it; the worker behind the pooler, still a supported configuration, is
//! run here, `TestEnv::pool_worker_too`.)

use std::time::Duration;

use oncehook_e2e::pgbouncer::PgBouncer;
use oncehook_e2e::{PipelineSpec, Shop, TestEnv, eventually, shop};
use oncehook_gateways::Gateway;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_pipeline_runs_through_pgbouncer_in_transaction_mode() {
    let mut env = TestEnv::through_pgbouncer().await;
    // The worker too: the deploy files connect it straight to Postgres,
    // and behind the pooler it must keep every promise all the same.
    env.pool_worker_too();
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
async fn without_the_pooler_setting_a_worker_behind_pgbouncer_says_what_to_set() {
    let mut env = TestEnv::through_pgbouncer().await;
    Shop::mugs(100, &["order_nopool"]).seed(&env.pool).await;
    let (_ingest, url) = env.start_ingest().await;
    // The worker told it talks to Postgres directly opens each connection
    // in the platform's scope with a startup option, which PgBouncer
    // refuses: it never gets to run a statement (had it, the cached
    // statements PgBouncer drops between transactions would fail their
    // second use). It says so, and what to set. Naming
    // ONCEHOOK_DATABASE_POOLER in the spawn puts the worker behind the
    // pooler, with that value.
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
        "the worker reports the refused connection and what to set",
        WAIT,
        || async {
            let log = worker.log_text();
            (log.contains("unsupported startup parameter")
                && log.contains("set ONCEHOOK_DATABASE_POOLER=transaction"))
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

/// Why both deploy files (and the harness, `pgbouncer::SHIPPED_SETTINGS`)
/// set `server_reset_query = DEALLOCATE ALL` with
/// `server_reset_query_always = 1`: with its cache off, as
/// `ONCEHOOK_DATABASE_POOLER=transaction` sets it, sqlx still prepares
/// every statement under a name counted from 1 on each client connection
/// (`sqlx_s_1`, …) and never closes it. Two such clients taking turns on
/// one server connection work with the shipped settings; with the reset
/// dropped, the second one's first statement meets the first one's
/// `sqlx_s_1` on that server connection and fails.
#[tokio::test]
async fn without_the_reset_query_two_clients_statement_names_collide() {
    let env = TestEnv::new().await;
    // One server connection, so the two clients share it.
    let one = ("default_pool_size", "1");
    let shipped = PgBouncer::start_with(&env.dir.join("shipped"), &env.database_url, &[one]);
    two_clients_take_turns(&shipped, &env.db_name)
        .await
        .expect("with DEALLOCATE ALL on every hand-over, both clients' statements work");

    let no_reset = PgBouncer::start_with(
        &env.dir.join("no-reset"),
        &env.database_url,
        &[
            one,
            ("server_reset_query", ""),
            ("server_reset_query_always", "0"),
        ],
    );
    let err = two_clients_take_turns(&no_reset, &env.db_name)
        .await
        .expect_err("without the reset the second client meets the first one's statement");
    assert!(
        err.contains("prepared statement \"sqlx_s_1\"")
            && (err.contains("already exists") || err.contains("does not exist")),
        "the statement names collide: {err}"
    );
}

/// Two clients of `pgbouncer` set up as `ONCEHOOK_DATABASE_POOLER=transaction`
/// sets sqlx up (no statement cache), each running three transactions of
/// one parameterised statement, taking turns.
async fn two_clients_take_turns(pgbouncer: &PgBouncer, db: &str) -> Result<(), String> {
    let options: PgConnectOptions = pgbouncer.url(db).parse().expect("a PgBouncer URL");
    let options = options.statement_cache_capacity(0);
    let mut clients = Vec::new();
    for _ in 0..2 {
        let conn = sqlx::PgConnection::connect_with(&options)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        clients.push(conn);
    }
    for round in 0..3 {
        for (i, conn) in clients.iter_mut().enumerate() {
            let mut tx = conn.begin().await.map_err(|e| format!("begin: {e}"))?;
            let got = sqlx::query_scalar::<_, i32>("SELECT $1::int4")
                .bind(round)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| format!("client {i}, round {round}: {e}"))?;
            tx.commit().await.map_err(|e| format!("commit: {e}"))?;
            assert_eq!(got, round);
        }
    }
    for conn in clients {
        let _ = conn.close().await;
    }
    Ok(())
}
