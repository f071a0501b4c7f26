//! Retention: delete `processed_webhooks` rows older than N days, and
//! `email_outbox` rows that were sent or failed more than N days ago (they
//! hold customer addresses; unsent rows are never touched), in small batches
//! (short transactions, no long locks). Used by `oncehookctl retention` and
//! by the worker on a schedule; an advisory lock keeps scheduled runs in
//! several worker copies from overlapping.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

const BATCH: i64 = 5_000;
/// Advisory lock key for scheduled retention ("oncehook" in ASCII, truncated).
const LOCK_KEY: i64 = 0x6f6e_6365_686f_6f6b;

/// Rows per table that retention deleted (or would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub processed_webhooks: u64,
    pub email_outbox: u64,
}

/// Rows that retention would delete.
pub async fn count_older(pool: &PgPool, days: u32) -> Result<Counts, sqlx::Error> {
    let webhooks = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM processed_webhooks
           WHERE processed_at < now() - make_interval(days => $1)"#,
        days_param(days)
    )
    .fetch_one(pool)
    .await?;
    let emails = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM email_outbox
           WHERE coalesce(sent_at, failed_at) < now() - make_interval(days => $1)"#,
        days_param(days)
    )
    .fetch_one(pool)
    .await?;
    Ok(Counts {
        processed_webhooks: u64::try_from(webhooks).unwrap_or(0),
        email_outbox: u64::try_from(emails).unwrap_or(0),
    })
}

/// Days as the `make_interval` parameter (saturating: more than 2^31 days
/// keeps everything, as any larger number would).
fn days_param(days: u32) -> i32 {
    i32::try_from(days).unwrap_or(i32::MAX)
}

/// Deletes rows of both tables older than `days`, batch by batch. Returns how many.
pub async fn delete_older(pool: &PgPool, days: u32) -> Result<Counts, sqlx::Error> {
    Ok(Counts {
        processed_webhooks: delete_webhooks(pool, days).await?,
        email_outbox: delete_emails(pool, days).await?,
    })
}

/// Runs `batch` (one `DELETE … LIMIT BATCH`) until a batch deletes fewer
/// than `BATCH` rows, pausing between batches so retention never holds
/// locks for long; returns how many rows went.
async fn in_batches<F, Fut>(mut batch: F) -> Result<u64, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, sqlx::Error>>,
{
    let mut total = 0;
    loop {
        let deleted = batch().await?;
        total += deleted;
        if deleted < BATCH as u64 {
            return Ok(total);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `processed_webhooks` batch by batch (by `ctid`: the table has no
/// single-column key to batch on).
async fn delete_webhooks(pool: &PgPool, days: u32) -> Result<u64, sqlx::Error> {
    in_batches(|| async {
        let done = sqlx::query!(
            "DELETE FROM processed_webhooks WHERE ctid = ANY(ARRAY(
                 SELECT ctid FROM processed_webhooks
                 WHERE processed_at < now() - make_interval(days => $1)
                 LIMIT $2))",
            days_param(days),
            BATCH
        )
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    })
    .await
}

/// `email_outbox` rows sent (or given up on) before the horizon, batch by
/// batch; a row neither sent nor failed is never deleted.
async fn delete_emails(pool: &PgPool, days: u32) -> Result<u64, sqlx::Error> {
    in_batches(|| async {
        let done = sqlx::query!(
            "DELETE FROM email_outbox WHERE id = ANY(ARRAY(
                 SELECT id FROM email_outbox
                 WHERE coalesce(sent_at, failed_at) < now() - make_interval(days => $1)
                 LIMIT $2))",
            days_param(days),
            BATCH
        )
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    })
    .await
}

/// [`delete_older`] under an advisory lock: `None` when another process
/// holds it (a retention pass is already running elsewhere).
pub async fn delete_older_locked(pool: &PgPool, days: u32) -> Result<Option<Counts>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let locked = sqlx::query_scalar!(r#"SELECT pg_try_advisory_lock($1) AS "ok!""#, LOCK_KEY)
        .fetch_one(&mut *conn)
        .await?;
    if !locked {
        return Ok(None);
    }
    let result = delete_older(pool, days).await;
    sqlx::query_scalar!("SELECT pg_advisory_unlock($1)", LOCK_KEY)
        .fetch_one(&mut *conn)
        .await?;
    result.map(Some)
}
