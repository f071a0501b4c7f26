//! Postgres: the embedded migrations from `migrations/`, the classification of errors
//! (transient or not, connection trouble or not), waiting for an
//! unreachable database, waiting for a schema at least as new as the
//! binary ([`wait_for_schema`]) and holding a delivery through transient
//! trouble ([`hold`]). Session supervision lives in `consume::session`.

use std::time::Duration;

use sqlx::migrate::Migrator;

use crate::retry::RetryPolicy;
use crate::store::Pooled;

/// The schema, embedded at build time (defined with the store, which owns it).
pub use crate::store::schema::MIGRATOR;

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

/// Waits until `SELECT 1` works, polling by [`RetryPolicy::DATABASE_WAIT`];
/// `false` if shutdown came first.
pub async fn wait_for_database(db: &Pooled, shutdown: &crate::shutdown::Shutdown) -> bool {
    let mut delays = RetryPolicy::DATABASE_WAIT.backoff();
    let mut warned = false;
    loop {
        if crate::store::ping(db).await.is_ok() {
            if warned {
                tracing::info!("database reachable again; resuming");
            }
            return true;
        }
        if !warned {
            tracing::warn!("database unreachable; consumption paused");
            warned = true;
        }
        let delay = delays
            .next()
            .unwrap_or(RetryPolicy::DATABASE_WAIT.max_delay);
        if !shutdown.sleep(delay).await {
            return false;
        }
    }
}

/// How the applied migrations compare with the binary's [`MIGRATOR`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaGap {
    /// Versions the binary needs that the database has not applied.
    pub missing: Vec<i64>,
    /// Versions applied that the binary does not know (a newer schema).
    pub unknown: Vec<i64>,
}

/// Compares `applied` versions with the up-migrations of `migrator`.
pub fn schema_gap(applied: &[i64], migrator: &Migrator) -> SchemaGap {
    let known: Vec<i64> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| m.version)
        .collect();
    SchemaGap {
        missing: known
            .iter()
            .copied()
            .filter(|v| !applied.contains(v))
            .collect(),
        unknown: applied
            .iter()
            .copied()
            .filter(|v| !known.contains(v))
            .collect(),
    }
}

/// Waits until every migration of [`MIGRATOR`] is applied, polling by
/// [`RetryPolicy::DATABASE_WAIT`] and logging what is missing; a newer
/// schema (versions this binary does not know) is accepted with a warning.
/// `false` if shutdown came first.
pub async fn wait_for_schema(db: &Pooled, shutdown: &crate::shutdown::Shutdown) -> bool {
    let mut delays = RetryPolicy::DATABASE_WAIT.backoff();
    let mut reported = None;
    loop {
        match crate::store::schema::applied_migrations(db).await {
            Ok(applied) => {
                let gap = schema_gap(&applied, &MIGRATOR);
                if gap.missing.is_empty() {
                    if !gap.unknown.is_empty() {
                        tracing::warn!(unknown = ?gap.unknown, "the schema is newer than this binary (applied migrations it does not know); consuming anyway");
                    }
                    if reported.is_some() {
                        tracing::info!("schema migrated; resuming");
                    }
                    return true;
                }
                if reported.as_ref() != Some(&gap.missing) {
                    tracing::warn!(missing = ?gap.missing, "the database schema is older than this binary; not consuming until it is migrated (`oncehookctl migrate`)");
                    reported = Some(gap.missing);
                }
            }
            Err(err) => tracing::warn!(%err, "could not read the applied migrations; retrying"),
        }
        let delay = delays
            .next()
            .unwrap_or(RetryPolicy::DATABASE_WAIT.max_delay);
        if !shutdown.sleep(delay).await {
            return false;
        }
    }
}

/// Waits before the next try of a database call that failed transiently:
/// until Postgres answers again when it is unreachable, otherwise the next
/// delay of `delays` (`cap` once they are used up, so a delivery is held
/// for as long as the trouble lasts). `false` if shutdown came first.
pub async fn hold(
    db: &Pooled,
    err: &sqlx::Error,
    delays: &mut impl Iterator<Item = Duration>,
    cap: Duration,
    shutdown: &crate::shutdown::Shutdown,
) -> bool {
    if is_connection_problem(err) {
        return wait_for_database(db, shutdown).await;
    }
    shutdown.sleep(delays.next().unwrap_or(cap)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_gap_names_missing_and_unknown_versions() {
        let all: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        assert!(all.len() >= 2, "the workspace has migrations");
        assert_eq!(schema_gap(&all, &MIGRATOR), SchemaGap::default());
        assert_eq!(schema_gap(&[], &MIGRATOR).missing, all);
        let older = &all[..all.len() - 1];
        assert_eq!(
            schema_gap(older, &MIGRATOR).missing,
            [all[all.len() - 1]],
            "one migration behind"
        );
        let mut newer = all.clone();
        newer.push(99_999_999_999_999);
        let gap = schema_gap(&newer, &MIGRATOR);
        assert!(gap.missing.is_empty());
        assert_eq!(gap.unknown, [99_999_999_999_999]);
    }
}
