//! Postgres: the embedded migrations from `migrations/`, the classification of errors
//! (transient or not, connection trouble or not), waiting for an
//! unreachable database, waiting for a schema at least as new as the
//! binary ([`wait_for_schema`]) and holding a delivery through transient
//! trouble ([`Hold`]). Session supervision lives in `consume::session`.

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

/// Whether an error says the transaction lost to another one — a
/// deadlock (`40P01`) or a serialization failure (`40001`): Postgres rolled
/// it back whole, and the same transaction run again from its start can
/// succeed. Whoever owns the transaction retries it rather than handing
/// the failure to its caller: the worker its group (as any transient
/// error, by `RetryPolicy::DELIVERY`), the shop API its request (by
/// `RetryPolicy::TRANSACTION`). A subset of [`is_transient`].
pub fn is_contention(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => db.code().is_some_and(|c| c == "40001" || c == "40P01"),
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
    let mut hold = Hold::new(db, shutdown);
    let mut warned: Option<String> = None;
    loop {
        let err = match crate::store::ping(db).await {
            Ok(()) => {
                if warned.is_some() {
                    tracing::info!("database reachable again; resuming");
                }
                return true;
            }
            Err(err) => err.to_string(),
        };
        // Said once, and again when the reason changes.
        if warned.as_deref() != Some(err.as_str()) {
            match pooler_hint(&err, db.pooler()) {
                Some(hint) => {
                    tracing::error!(error = %err, hint, "database unreachable; consumption paused")
                }
                None => tracing::warn!(error = %err, "database unreachable; consumption paused"),
            }
            warned = Some(err);
        }
        if !hold.sleep().await {
            return false;
        }
    }
}

/// What to change when `err` says a transaction-mode pooler sits in front
/// of a binary configured for none: PgBouncer refuses the startup option
/// that opens a connection in the platform's scope.
fn pooler_hint(err: &str, pooler: crate::config::Pooler) -> Option<&'static str> {
    (pooler == crate::config::Pooler::None && err.contains("unsupported startup parameter")).then_some(
        "a pooler refused the connection's startup options: behind PgBouncer in transaction mode set ONCEHOOK_DATABASE_POOLER=transaction",
    )
}

/// How the applied migrations compare with the binary's [`MIGRATOR`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaGap {
    /// Versions the binary needs that the database has not applied.
    pub missing: Vec<i64>,
    /// Versions applied that the binary does not know (a newer schema; the
    /// contract step's own are known).
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
        // The contract step's migrations are this release's too (applied
        // once every binary runs it), not a newer schema.
        unknown: applied
            .iter()
            .copied()
            .filter(|v| !known.contains(v) && !crate::store::schema::CONTRACT.version_exists(*v))
            .collect(),
    }
}

/// Waits until every migration of [`MIGRATOR`] (the expand step) is applied, polling by
/// [`RetryPolicy::DATABASE_WAIT`] and logging what is missing; a newer
/// schema (versions this binary does not know) is accepted with a warning.
/// `false` if shutdown came first.
pub async fn wait_for_schema(db: &Pooled, shutdown: &crate::shutdown::Shutdown) -> bool {
    let mut hold = Hold::new(db, shutdown);
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
        if !hold.sleep().await {
            return false;
        }
    }
}

/// Holding a piece of work through database trouble — the one way every
/// binary does it (a delivery's transaction, locking and marking an
/// email, the notifier's writes, waiting for Postgres or its schema before
/// consuming). After a failed call: when Postgres is unreachable, wait
/// until it answers again (polling by [`RetryPolicy::DATABASE_WAIT`]);
/// otherwise (contention) wait the next delay of the hold's policy, and
/// its longest delay once they are used up, so the work is held for as
/// long as the trouble lasts. Only shutdown ends a hold.
#[derive(Debug)]
pub struct Hold<'a> {
    db: &'a Pooled,
    shutdown: &'a crate::shutdown::Shutdown,
    policy: RetryPolicy,
    delays: backon::ExponentialBackoff,
}

impl<'a> Hold<'a> {
    /// A hold by [`RetryPolicy::DATABASE_WAIT`].
    pub fn new(db: &'a Pooled, shutdown: &'a crate::shutdown::Shutdown) -> Self {
        Self::by(RetryPolicy::DATABASE_WAIT, db, shutdown)
    }

    /// A hold whose pauses after contention follow `policy` (a delivery's
    /// configured retries); an unreachable database is still waited for by
    /// [`RetryPolicy::DATABASE_WAIT`].
    pub fn by(
        policy: RetryPolicy,
        db: &'a Pooled,
        shutdown: &'a crate::shutdown::Shutdown,
    ) -> Self {
        Hold {
            db,
            shutdown,
            policy,
            delays: policy.backoff(),
        }
    }

    /// Waits before the next try of a call that failed with `err`: until
    /// Postgres answers again when it is unreachable, otherwise the next
    /// delay. `false` if shutdown came first.
    pub async fn pause(&mut self, err: &sqlx::Error) -> bool {
        if is_connection_problem(err) {
            return wait_for_database(self.db, self.shutdown).await;
        }
        self.sleep().await
    }

    /// Waits the next delay of the policy (its longest once they are used
    /// up); `false` if shutdown came first.
    pub async fn sleep(&mut self) -> bool {
        let delay = self.delays.next().unwrap_or(self.policy.max_delay);
        self.shutdown.sleep(delay).await
    }

    /// Runs `call` until it succeeds, telling `failed` of each error and
    /// pausing after it; `None` if shutdown came first.
    pub async fn retry<T, F, Fut>(
        &mut self,
        mut call: F,
        mut failed: impl FnMut(&sqlx::Error),
    ) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        loop {
            match call().await {
                Ok(value) => return Some(value),
                Err(err) => {
                    failed(&err);
                    if !self.pause(&err).await {
                        return None;
                    }
                }
            }
        }
    }
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
        // The contract step's migrations are known, not a newer schema.
        let mut finished = all.clone();
        finished.extend(crate::store::schema::CONTRACT.iter().map(|m| m.version));
        assert_eq!(schema_gap(&finished, &MIGRATOR), SchemaGap::default());
    }
}
