//! `_sqlx_migrations`: which migrations the database says are applied, so
//! a consuming binary can refuse to consume against a schema older than
//! itself (`db::wait_for_schema`).

/// Postgres' `undefined_table`: `_sqlx_migrations` does not exist yet.
const UNDEFINED_TABLE: &str = "42P01";

/// The versions of the migrations applied successfully, in order; empty
/// when nothing was ever migrated (no `_sqlx_migrations` table).
pub async fn applied_migrations(pool: &sqlx::PgPool) -> Result<Vec<i64>, sqlx::Error> {
    // In a transaction (a transaction-mode pooler needs it); a failed read
    // rolls back when `tx` drops.
    let mut tx = pool.begin().await?;
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
