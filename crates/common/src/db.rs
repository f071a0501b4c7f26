//! Postgres: the connection pool (retried with backoff at start) and the
//! embedded migrations from `migrations/`.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;

/// The schema, embedded at build time from the workspace's `migrations/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// Opens a pool without waiting for the database (connections are made lazily).
pub fn lazy_pool(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(url)
}

/// Opens a pool, retrying with backoff until the database answers or `attempts` run out.
pub async fn connect(
    url: &str,
    max_connections: u32,
    attempts: usize,
) -> Result<PgPool, sqlx::Error> {
    let open = || async {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await
    };
    open.retry(
        ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(5))
            .with_max_times(attempts)
            .with_jitter(),
    )
    .notify(|err, delay| {
        tracing::warn!(%err, retry_in_ms = delay.as_millis() as u64, "database not reachable; retrying");
    })
    .await
}

/// Whether an error is worth retrying (connection trouble, serialization
/// failure, deadlock, lock timeout, shutdown) rather than a permanent fault.
pub fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            // 40001 serialization_failure, 40P01 deadlock_detected, 55P03 lock_not_available,
            // 57P01..57P03 admin/crash shutdown, cannot_connect_now, 08* connection exceptions,
            // 53* insufficient resources.
            code == "40001"
                || code == "40P01"
                || code == "55P03"
                || code.starts_with("57P")
                || code.starts_with("08")
                || code.starts_with("53")
        }
        _ => false,
    }
}

/// Whether an error means Postgres itself is unreachable (as opposed to
/// contention): the caller should wait for the database rather than burn
/// retries. A subset of [`is_transient`].
pub fn is_connection_problem(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("57P") || c.starts_with("08")),
        _ => false,
    }
}

/// Waits until `SELECT 1` works; `false` if shutdown came first.
pub async fn wait_for_database(pool: &PgPool, shutdown: &crate::shutdown::Shutdown) -> bool {
    let mut delay = Duration::from_millis(200);
    let mut warned = false;
    loop {
        if crate::store::ping(pool).await.is_ok() {
            if warned {
                tracing::info!("database reachable again; resuming");
            }
            return true;
        }
        if !warned {
            tracing::warn!("database unreachable; consumption paused");
            warned = true;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.wait() => return false,
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// A broker session: works on the connection until it breaks or shutdown.
pub type SessionFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = lapin::Result<()>> + Send + 'a>>;

/// The supervision loop of the consuming binaries: wait for the database,
/// connect to the broker with backoff, run `session`, and when it ends
/// (connection lost, consumer cancelled) close up and start over — until
/// shutdown. Readiness is cleared whenever no session runs.
pub async fn run_sessions<F>(
    amqp_url: &str,
    name: &str,
    pool: &PgPool,
    readiness: &crate::health::Readiness,
    shutdown: &crate::shutdown::Shutdown,
    mut session: F,
) where
    F: for<'a> FnMut(&'a lapin::Connection) -> SessionFuture<'a>,
{
    while !shutdown.is_triggered() {
        if !wait_for_database(pool, shutdown).await {
            break;
        }
        let Some(conn) = crate::amqp::connect_with_backoff(amqp_url, name, shutdown.wait()).await
        else {
            break;
        };
        if let Err(err) = session(&conn).await {
            tracing::warn!(%err, "broker session ended; reconnecting");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        readiness.set(false);
        let _ = conn.close(200, "session ends".into()).await;
    }
}
