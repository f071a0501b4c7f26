//! Retention of the dedup table: delete `processed_webhooks` rows older than
//! N days in small batches (short transactions, no long locks). Used by
//! `oncehookctl retention` and by the worker on a schedule; an advisory lock
//! keeps scheduled runs in several worker copies from overlapping.

use std::time::Duration;

use sqlx::{PgPool, Row};

const BATCH: i64 = 5_000;
/// Advisory lock key for scheduled retention ("oncehook" in ASCII, truncated).
const LOCK_KEY: i64 = 0x6f6e_6365_686f_6f6b;

/// Rows that retention would delete.
pub async fn count_older(pool: &PgPool, days: u32) -> Result<i64, sqlx::Error> {
    let row = sqlx::query(
        "SELECT count(*) AS n FROM processed_webhooks
         WHERE processed_at < now() - make_interval(days => $1)",
    )
    .bind(days as i32)
    .fetch_one(pool)
    .await?;
    row.try_get("n")
}

/// Deletes rows older than `days`, batch by batch. Returns how many.
pub async fn delete_older(pool: &PgPool, days: u32) -> Result<u64, sqlx::Error> {
    let mut total = 0;
    loop {
        let deleted = sqlx::query(
            "DELETE FROM processed_webhooks WHERE ctid = ANY(ARRAY(
                 SELECT ctid FROM processed_webhooks
                 WHERE processed_at < now() - make_interval(days => $1)
                 LIMIT $2))",
        )
        .bind(days as i32)
        .bind(BATCH)
        .execute(pool)
        .await?
        .rows_affected();
        total += deleted;
        if deleted < BATCH as u64 {
            return Ok(total);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`delete_older`] under an advisory lock: `None` when another process
/// holds it (a retention pass is already running elsewhere).
pub async fn delete_older_locked(pool: &PgPool, days: u32) -> Result<Option<u64>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let locked: bool = sqlx::query("SELECT pg_try_advisory_lock($1) AS ok")
        .bind(LOCK_KEY)
        .fetch_one(&mut *conn)
        .await?
        .try_get("ok")?;
    if !locked {
        return Ok(None);
    }
    let result = delete_older(pool, days).await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    result.map(Some)
}
