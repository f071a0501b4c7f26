//! The API's own tables: the `Idempotency-Key` record (`api_idempotency`:
//! a request's answer kept for its retries) and the audit of every write
//! (`api_audit`; `oncehookctl trace` reads it back). The books it writes
//! (orders, products) are the ledger's (`oncehook_ledger::store::shop`).

use serde_json::Value;
use sqlx::PgConnection;

/// What an `Idempotency-Key` already holds.
#[derive(Debug, Clone)]
pub enum KeyUse {
    /// The key is new: this transaction owns it (see [`finish_idempotency`]).
    Fresh,
    /// The key was used: for a request with this digest, answered so.
    Used {
        request_sha256: String,
        status_code: Option<i32>,
        response: Option<Value>,
    },
}

/// Takes `(key_name, key)` for a request with digest `sha` (insert first).
/// A concurrent request with the same key waits for the first transaction
/// and then sees its row (or, if it rolled back, takes the key itself).
pub async fn take_idempotency_key(
    conn: &mut PgConnection,
    key_name: &str,
    key: &str,
    sha: &str,
) -> Result<KeyUse, sqlx::Error> {
    // Twice at most: a key pruned between the insert and the read is
    // taken again, as the new request it now is.
    for _ in 0..2 {
        let fresh = sqlx::query_scalar!(
            "INSERT INTO api_idempotency (key_name, idempotency_key, request_sha256) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING RETURNING 1 AS one",
            key_name,
            key,
            sha
        )
        .fetch_optional(&mut *conn)
        .await?;
        if fresh.is_some() {
            return Ok(KeyUse::Fresh);
        }
        let row = sqlx::query!(
            "SELECT request_sha256, status_code, response FROM api_idempotency
             WHERE key_name = $1 AND idempotency_key = $2",
            key_name,
            key
        )
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(row) = row {
            return Ok(KeyUse::Used {
                request_sha256: row.request_sha256,
                status_code: row.status_code,
                response: row.response,
            });
        }
    }
    Err(sqlx::Error::RowNotFound)
}

/// Deletes at most `batch` idempotency keys older than `ttl` (their
/// answers with them); how many went. A retry under a deleted key is a new
/// request (its `order_ref` still finds the order it made).
pub async fn prune_idempotency(
    conn: &mut PgConnection,
    ttl: std::time::Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "DELETE FROM api_idempotency WHERE (key_name, idempotency_key) IN (
             SELECT key_name, idempotency_key FROM api_idempotency
             WHERE created_at < now() - make_interval(secs => $1)
             LIMIT $2)",
        ttl.as_secs_f64(),
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Stores the answer of a key just taken (in the transaction that took it).
pub async fn finish_idempotency(
    conn: &mut PgConnection,
    key_name: &str,
    key: &str,
    status: i32,
    response: &Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE api_idempotency SET status_code = $3, response = $4
         WHERE key_name = $1 AND idempotency_key = $2",
        key_name,
        key,
        status,
        response
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One API write to record.
#[derive(Debug, Clone)]
pub struct NewApiAudit<'a> {
    pub key_name: &'a str,
    pub action: &'a str,
    pub order_ref: Option<&'a str>,
    pub sku: Option<&'a str>,
    pub ok: bool,
    pub result: &'a str,
}

/// Records an API write.
pub async fn record_audit(conn: &mut PgConnection, e: &NewApiAudit<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO api_audit (key_name, action, order_ref, sku, ok, result)
         VALUES ($1, $2, $3, $4, $5, $6)",
        e.key_name,
        e.action,
        e.order_ref,
        e.sku,
        e.ok,
        e.result
    )
    .execute(conn)
    .await?;
    Ok(())
}
