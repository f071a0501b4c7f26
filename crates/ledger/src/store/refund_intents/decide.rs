//! Deciding an intent: the refunder's policy approves or holds an `owed`
//! one (under the policy's lock, so two workers never both fit an intent
//! under one day's ceiling), an operator approves or cancels one. A
//! re-approval after the gateway refused is a new attempt under a new key.

use sqlx::PgConnection;

/// The advisory lock the policy takes while it approves, so that two
/// workers never both fit an intent under the same day's ceiling.
pub const POLICY_LOCK_KEY: i64 = 0x6f6e_6365_7265_6675;

/// Who approved an intent the policy let go.
pub const BY_POLICY: &str = "policy";

/// Takes the policy's lock for the caller's transaction.
pub async fn lock_policy(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_xact_lock($1)", POLICY_LOCK_KEY)
        .execute(conn)
        .await?;
    Ok(())
}

/// What the policy approved for `source` in `currency` since the start of
/// the UTC day (the daily ceiling is per currency: minor units of two
/// currencies never add up).
pub async fn approved_by_policy_today(
    conn: &mut PgConnection,
    source: &str,
    currency: &str,
) -> Result<i64, sqlx::Error> {
    let sum: Option<i64> = sqlx::query_scalar!(
        "SELECT sum(COALESCE(sent_minor, amount_minor - refunded_minor))::bigint
         FROM refund_intents
         WHERE source = $1 AND approved_by = $2 AND currency = $3
           AND approved_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
           AND state <> 'cancelled'",
        source,
        BY_POLICY,
        currency,
    )
    .fetch_one(conn)
    .await?;
    Ok(sum.unwrap_or(0))
}

/// Approves an intent still `owed` (or `failed`, by an operator), as `by`;
/// records its source. A `failed` intent the gateway refused (not in
/// doubt) starts a new attempt: its number moves on, so its key is new,
/// and its amount and reason are fixed again at its first send. One in
/// doubt keeps its attempt and key. Whether it was approved.
pub async fn approve(
    conn: &mut PgConnection,
    id: &str,
    source: Option<&str>,
    by: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE refund_intents SET state = 'approved', approved_by = $3, approved_at = now(),
                source = COALESCE(source, $2), held_because = NULL, gateway_code = NULL,
                gateway_message = NULL, next_attempt_at = NULL, updated_at = now(),
                attempt_no = attempt_no + CASE WHEN state = 'failed' AND NOT in_doubt THEN 1 ELSE 0 END,
                sent_minor = CASE WHEN state = 'failed' AND NOT in_doubt THEN NULL ELSE sent_minor END,
                sent_reason = CASE WHEN state = 'failed' AND NOT in_doubt THEN NULL ELSE sent_reason END
         WHERE id = $1 AND state IN ('owed', 'failed')",
        id,
        source,
        by,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Notes why an `owed` intent waits for a person (where it changed).
pub async fn hold(
    conn: &mut PgConnection,
    id: &str,
    source: Option<&str>,
    because: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE refund_intents SET held_because = $3, source = COALESCE(source, $2), updated_at = now()
         WHERE id = $1 AND state = 'owed' AND held_because IS DISTINCT FROM $3",
        id,
        source,
        because,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Cancels an intent nothing was sent for yet, as `by`. Whether it was.
pub async fn cancel(conn: &mut PgConnection, id: &str, by: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE refund_intents SET state = 'cancelled', approved_by = $2,
                gateway_message = COALESCE(gateway_message, 'cancelled by ' || $2), updated_at = now()
         WHERE id = $1 AND state IN ('owed', 'approved', 'failed')",
        id,
        by,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}
