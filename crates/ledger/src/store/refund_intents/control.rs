//! The kill switch (`refund_control`: while paused, no refunder claims
//! anything) and the figures the refund gauges show.

use sqlx::PgConnection;

/// Whether refunds are paused (the kill switch).
pub async fn paused(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!("SELECT paused FROM refund_control")
        .fetch_one(conn)
        .await
}

/// Pauses or resumes every refunder at once, as `by`.
pub async fn set_paused(
    conn: &mut PgConnection,
    paused: bool,
    by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE refund_control SET paused = $1, changed_by = $2, changed_at = now()",
        paused,
        by,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The intents by state and reason, with their amounts, for the gauges.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Tally {
    pub state: String,
    pub reason: String,
    pub count: i64,
    pub amount_minor: i64,
    pub refunded_minor: i64,
}

/// [`Tally`] for every state and reason present.
pub async fn tally(conn: &mut PgConnection) -> Result<Vec<Tally>, sqlx::Error> {
    // A group is never empty: its count and sums are never NULL.
    sqlx::query_as!(
        Tally,
        r#"SELECT state, reason, count(*) AS "count!", sum(amount_minor)::bigint AS "amount_minor!",
                sum(refunded_minor)::bigint AS "refunded_minor!"
         FROM refund_intents GROUP BY state, reason"#,
    )
    .fetch_all(conn)
    .await
}

/// The age in seconds of the oldest intent not settled or cancelled (0 if none).
pub async fn oldest_open_secs(conn: &mut PgConnection) -> Result<f64, sqlx::Error> {
    let age: Option<f64> = sqlx::query_scalar!(
        "SELECT extract(epoch FROM now() - min(created_at))::float8 FROM refund_intents
         WHERE state IN ('owed', 'approved', 'sending', 'sent', 'failed')",
    )
    .fetch_one(conn)
    .await?;
    Ok(age.unwrap_or(0.0))
}
