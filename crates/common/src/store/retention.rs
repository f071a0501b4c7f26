//! Retention: delete `processed_webhooks` rows older than N days,
//! `email_outbox` rows that were sent or failed more than N days ago (they
//! hold customer addresses; unsent rows are never touched), and the
//! notifier's `notify_deliveries` rows delivered or failed more than N days
//! ago (pending ones never; the order events themselves are kept: the
//! ledger re-derives an order's events from its facts, and a deleted event
//! would be minted and sent again by the order's next fact), in small batches
//! (short transactions, no long locks). Used by `oncehookctl retention` and
//! by the worker on a schedule; a transaction-scoped advisory lock keeps
//! scheduled runs in several worker copies from overlapping. Every
//! statement runs in a transaction (safe behind a transaction-mode pooler).

use std::time::Duration;

use serde::Serialize;
use sqlx::PgConnection;

const BATCH: i64 = 5_000;
/// Advisory lock key for scheduled retention ("oncehook" in ASCII, truncated).
const LOCK_KEY: i64 = 0x6f6e_6365_686f_6f6b;

/// Rows per table that retention deleted (or would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub processed_webhooks: u64,
    pub email_outbox: u64,
    pub notify_deliveries: u64,
}

/// Rows that retention would delete.
pub async fn count_older(db: &super::Pooled, days: u32) -> Result<Counts, sqlx::Error> {
    let mut tx = db.begin().await?;
    let webhooks = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM processed_webhooks
           WHERE processed_at < now() - make_interval(days => $1)"#,
        days_param(days)
    )
    .fetch_one(&mut *tx)
    .await?;
    let emails = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM email_outbox
           WHERE coalesce(sent_at, failed_at) < now() - make_interval(days => $1)"#,
        days_param(days)
    )
    .fetch_one(&mut *tx)
    .await?;
    let deliveries = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM notify_deliveries
           WHERE status <> 'pending'
             AND coalesce(delivered_at, updated_at) < now() - make_interval(days => $1)"#,
        days_param(days)
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Counts {
        processed_webhooks: u64::try_from(webhooks).unwrap_or(0),
        email_outbox: u64::try_from(emails).unwrap_or(0),
        notify_deliveries: u64::try_from(deliveries).unwrap_or(0),
    })
}

/// Days as the `make_interval` parameter (saturating: more than 2^31 days
/// keeps everything, as any larger number would).
fn days_param(days: u32) -> i32 {
    i32::try_from(days).unwrap_or(i32::MAX)
}

/// Deletes rows of both tables older than `days`, batch by batch. Returns how many.
pub async fn delete_older(db: &super::Pooled, days: u32) -> Result<Counts, sqlx::Error> {
    let counts = in_batches(db, days, Lock::None).await?;
    Ok(counts.unwrap_or_default())
}

/// [`delete_older`] under an advisory lock, taken by every batch's
/// transaction: `None` when another process holds it as the pass starts (a
/// retention pass is already running elsewhere); a pass that finds it taken
/// later stops there and leaves the rest to the other. Transaction-scoped,
/// so it also holds behind a transaction-mode pooler.
pub async fn delete_older_locked(
    db: &super::Pooled,
    days: u32,
) -> Result<Option<Counts>, sqlx::Error> {
    in_batches(db, days, Lock::Advisory).await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lock {
    None,
    Advisory,
}

#[derive(Clone, Copy)]
enum Table {
    ProcessedWebhooks,
    EmailOutbox,
    NotifyDeliveries,
}

/// Deletes `DELETE … LIMIT BATCH` batches, each in a short transaction of
/// its own, table by table, until a batch deletes fewer than `BATCH` rows,
/// pausing between batches so retention never holds locks for long.
/// `None` only when `lock` is advisory and the first batch could not take it.
async fn in_batches(
    db: &super::Pooled,
    days: u32,
    lock: Lock,
) -> Result<Option<Counts>, sqlx::Error> {
    let mut counts = Counts::default();
    let mut first = true;
    for table in [
        Table::ProcessedWebhooks,
        Table::EmailOutbox,
        Table::NotifyDeliveries,
    ] {
        loop {
            let mut tx = db.begin().await?;
            if lock == Lock::Advisory && !try_lock(&mut tx).await? {
                return Ok((!first).then_some(counts));
            }
            first = false;
            let deleted = table.delete_batch(&mut tx, days).await?;
            tx.commit().await?;
            table.count(&mut counts, deleted);
            if deleted < BATCH as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(Some(counts))
}

/// The retention lock, for the rest of this transaction; false if another holds it.
async fn try_lock(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(r#"SELECT pg_try_advisory_xact_lock($1) AS "ok!""#, LOCK_KEY)
        .fetch_one(conn)
        .await
}

impl Table {
    /// One batch of this table's rows older than `days`; how many it deleted.
    async fn delete_batch(self, conn: &mut PgConnection, days: u32) -> Result<u64, sqlx::Error> {
        let done = match self {
            // By `ctid`: the table has no single-column key to batch on.
            Table::ProcessedWebhooks => {
                sqlx::query!(
                    "DELETE FROM processed_webhooks WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM processed_webhooks
             WHERE processed_at < now() - make_interval(days => $1)
             LIMIT $2))",
                    days_param(days),
                    BATCH
                )
                .execute(conn)
                .await?
            }
            // Rows sent (or given up on) before the horizon; a row neither
            // sent nor failed is never deleted.
            Table::EmailOutbox => {
                sqlx::query!(
                    "DELETE FROM email_outbox WHERE id = ANY(ARRAY(
             SELECT id FROM email_outbox
             WHERE coalesce(sent_at, failed_at) < now() - make_interval(days => $1)
             LIMIT $2))",
                    days_param(days),
                    BATCH
                )
                .execute(conn)
                .await?
            }
            // Settled deliveries (a 2xx, or given up on) before the horizon;
            // a pending one is never deleted.
            Table::NotifyDeliveries => {
                sqlx::query!(
                    "DELETE FROM notify_deliveries WHERE ctid = ANY(ARRAY(
             SELECT ctid FROM notify_deliveries
             WHERE status <> 'pending'
               AND coalesce(delivered_at, updated_at) < now() - make_interval(days => $1)
             LIMIT $2))",
                    days_param(days),
                    BATCH
                )
                .execute(conn)
                .await?
            }
        };
        Ok(done.rows_affected())
    }

    /// Adds `deleted` to this table's count.
    fn count(self, counts: &mut Counts, deleted: u64) {
        match self {
            Table::ProcessedWebhooks => counts.processed_webhooks += deleted,
            Table::EmailOutbox => counts.email_outbox += deleted,
            Table::NotifyDeliveries => counts.notify_deliveries += deleted,
        }
    }
}
