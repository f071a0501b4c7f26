//! `_sqlx_migrations`: which migrations the database says are applied, so
//! a consuming binary can refuse to consume against a schema older than
//! itself (`db::wait_for_schema`).

/// The schema, embedded at build time from the workspace's `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Postgres' `undefined_table`: `_sqlx_migrations` does not exist yet.
const UNDEFINED_TABLE: &str = "42P01";

/// The versions of the migrations applied successfully, in order; empty
/// when nothing was ever migrated (no `_sqlx_migrations` table).
pub async fn applied_migrations(db: &super::Pooled) -> Result<Vec<i64>, sqlx::Error> {
    // In a transaction (a transaction-mode pooler needs it); a failed read
    // rolls back when `tx` drops.
    let mut tx = db.begin().await?;
    let applied =
        sqlx::query_scalar!("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(&mut *tx)
            .await;
    if applied.is_ok() {
        tx.commit().await?;
    }
    match applied {
        Ok(versions) => Ok(versions),
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(UNDEFINED_TABLE) => {
            Ok(Vec::new())
        }
        Err(err) => Err(err),
    }
}

/// Why [`migrate`] did not run.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Migrations hold a session-level advisory lock for their whole run,
    /// which a transaction-mode pooler cannot keep.
    #[error(
        "migrations need a direct connection to Postgres (they hold a session-level lock), \
         not a transaction-mode pooler: run it with the server's URL and \
         ONCEHOOK_DATABASE_POOLER=none"
    )]
    BehindPooler,
    #[error("applying the migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// Applies the embedded migrations ([`MIGRATOR`]); idempotent.
pub async fn migrate(db: &super::Pooled) -> Result<(), MigrateError> {
    if db.pooler() == crate::config::Pooler::Transaction {
        return Err(MigrateError::BehindPooler);
    }
    MIGRATOR.run(db.pool()).await?;
    Ok(())
}
