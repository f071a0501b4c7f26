//! `refund_intents` and `refund_control` outside the ledger's tail (which
//! mints and settles intents, `oncehook_ledger::store::refund_intents`):
//! what the refunder reads and writes as it decides, claims, sends and
//! records an intent, what operators read and change (`oncehookctl
//! refunds`, the console), the kill switch, and the figures the gauges
//! show. Every function is one statement on the caller's connection, or a
//! transaction the caller holds.
//!
//! An intent is sent by one refunder at a time: claiming it sets a lease
//! (`lease_until`), and only an intent whose lease ran out is claimed
//! again — by the same worker after a retryable error, or by another after
//! a kill. The lease replaces a held lock, so it works the same behind a
//! transaction-mode pooler.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

/// The advisory lock the policy takes while it approves, so that two
/// workers never both fit an intent under the same day's ceiling.
pub const POLICY_LOCK_KEY: i64 = 0x6f6e_6365_7265_6675;

/// Who approved an intent the policy let go.
pub const BY_POLICY: &str = "policy";

/// A refund intent as the refunder and operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Intent {
    pub id: String,
    pub order_id: i64,
    pub order_ref: String,
    pub provider: String,
    pub payment_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    pub refunded_minor: i64,
    pub state: String,
    /// The source (account) that took the payment: the one recorded, else
    /// the one whose delivery recorded the capture.
    pub source: Option<String>,
    /// The order reference the capture's delivery named (Cashfree's order
    /// id, which it refunds by; an order paid twice may have two).
    pub payment_order_ref: Option<String>,
    pub sent_minor: Option<i64>,
    /// The attempt being sent (1, then one more per re-approval after a
    /// refusal): with the id, it names the idempotency key.
    pub attempt_no: i32,
    /// The reason the attempt's request carries, fixed at its first send.
    pub sent_reason: Option<String>,
    /// A request of the attempt may have reached the gateway and no answer
    /// has said what became of it.
    pub in_doubt: bool,
    pub approved_by: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub approved_at: Option<OffsetDateTime>,
    pub attempts: i32,
    pub gateway_refund_id: Option<String>,
    pub gateway_code: Option<String>,
    pub gateway_message: Option<String>,
    pub held_because: Option<String>,
    pub trace_parent: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl Intent {
    /// What is still owed.
    pub fn outstanding(&self) -> i64 {
        self.amount_minor.saturating_sub(self.refunded_minor).max(0)
    }
}

/// Reads [`Intent`]s: the columns, with the order's reference and the
/// source resolved (one place for the shape every read returns), then
/// `$tail` (the `WHERE` and `ORDER BY`) with its arguments; checked against
/// the schema at compile time like every other statement.
macro_rules! select_intents {
    ($tail:tt $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            Intent,
            r#"SELECT i.id, i.order_id, o.order_ref, i.provider, i.payment_id, i.amount_minor,
                    i.currency, i.reason, i.refunded_minor, i.state,
                    COALESCE(i.source, (
                        SELECT w.source FROM payments p
                        JOIN processed_webhooks w ON w.provider = p.provider AND w.event_id = p.event_id
                        WHERE p.provider = i.provider AND p.payment_id = i.payment_id
                          AND p.status = 'captured' LIMIT 1)) AS "source?",
                    (SELECT w.order_ref FROM payments p
                        JOIN processed_webhooks w ON w.provider = p.provider AND w.event_id = p.event_id
                        WHERE p.provider = i.provider AND p.payment_id = i.payment_id
                          AND p.status = 'captured' LIMIT 1) AS "payment_order_ref?",
                    i.sent_minor, i.attempt_no, i.sent_reason, i.in_doubt, i.approved_by, i.approved_at, i.attempts, i.gateway_refund_id,
                    i.gateway_code, i.gateway_message, i.held_because, i.trace_parent,
                    i.created_at, i.updated_at
             FROM refund_intents i JOIN orders o ON o.id = i.order_id "#
                + $tail
            $(, $arg)*
        )
    };
}

/// Intents, newest first: in `state` if given, at most `limit`.
pub async fn list(
    conn: &mut PgConnection,
    state: Option<&str>,
    limit: i64,
) -> Result<Vec<Intent>, sqlx::Error> {
    select_intents!(
        "WHERE ($1::text IS NULL OR i.state = $1) ORDER BY i.created_at DESC, i.id LIMIT $2",
        state,
        limit
    )
    .fetch_all(conn)
    .await
}

/// One intent by its id, or every intent of an order by the order's reference.
pub async fn find(conn: &mut PgConnection, id_or_order: &str) -> Result<Vec<Intent>, sqlx::Error> {
    // Both tests on `refund_intents`, so each can use its index.
    select_intents!(
        "WHERE i.id = $1 OR i.order_id = (SELECT id FROM orders WHERE order_ref = $1) ORDER BY i.id",
        id_or_order
    )
    .fetch_all(conn)
    .await
}

/// The intents waiting for a decision (`owed`), oldest first, at most
/// `limit`.
/// A page at a time: those after `after` (`created_at`, `id`), so a pass
/// reaches every one however many wait.
pub async fn owed(
    conn: &mut PgConnection,
    after: Option<(OffsetDateTime, String)>,
    limit: i64,
) -> Result<Vec<Intent>, sqlx::Error> {
    let (at, id) = after.unzip();
    select_intents!(
        "WHERE i.state = 'owed'
           AND ($1::timestamptz IS NULL OR (i.created_at, i.id) > ($1, $2::text))
         ORDER BY i.created_at, i.id LIMIT $3",
        at,
        id,
        limit
    )
    .fetch_all(conn)
    .await
}

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

/// Claims the next intent to send — approved and due, or being sent by a
/// refunder whose lease ran out — unless refunds are paused: `sending`,
/// one more try, leased for `lease`, in doubt, its amount and reason fixed
/// at the attempt's first send.
pub async fn claim(
    conn: &mut PgConnection,
    lease: Duration,
) -> Result<Option<Intent>, sqlx::Error> {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let claimed: Option<String> = sqlx::query_scalar!(
        "UPDATE refund_intents SET state = 'sending', attempts = attempts + 1,
                lease_until = now() + make_interval(secs => $1::bigint / 1000.0),
                sent_minor = COALESCE(sent_minor, amount_minor - refunded_minor),
                sent_reason = COALESCE(sent_reason, reason), in_doubt = true, updated_at = now()
         WHERE id = (
             SELECT id FROM refund_intents
             WHERE (state = 'approved' OR (state = 'sending' AND lease_until < now()))
             ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
           AND NOT (SELECT paused FROM refund_control)
         RETURNING id",
        lease_ms,
    )
    .fetch_optional(&mut *conn)
    .await?;
    claimed_intent(conn, claimed).await
}

/// The intent a claim returned the id of, read whole.
async fn claimed_intent(
    conn: &mut PgConnection,
    claimed: Option<String>,
) -> Result<Option<Intent>, sqlx::Error> {
    match claimed {
        Some(id) => {
            select_intents!("WHERE i.id = $1", id)
                .fetch_optional(conn)
                .await
        }
        None => Ok(None),
    }
}

/// The gateway holds the refund: `sent` (unless its fact settled it
/// already), with the gateway's refund id; asked about again after
/// `check_after` when the answer proved no refund fact yet (it is pending
/// at the gateway), never otherwise.
pub async fn mark_sent(
    conn: &mut PgConnection,
    id: &str,
    refund_id: &str,
    check_after: Option<Duration>,
) -> Result<(), sqlx::Error> {
    let ms = check_after.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    sqlx::query!(
        "UPDATE refund_intents SET gateway_refund_id = $2,
                lease_until = CASE WHEN state IN ('sending', 'sent') AND $3::bigint IS NOT NULL
                                   THEN now() + make_interval(secs => $3::bigint / 1000.0) END,
                gateway_code = NULL, gateway_message = NULL,
                state = CASE WHEN state = 'sending' THEN 'sent' ELSE state END, updated_at = now()
         WHERE id = $1",
        id,
        refund_id,
        ms,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Claims the next `sent` intent due to be asked about again (its refund
/// was pending at the gateway), unless refunds are paused; it is not
/// asked again for `lease`.
pub async fn claim_check(
    conn: &mut PgConnection,
    lease: Duration,
) -> Result<Option<Intent>, sqlx::Error> {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let claimed: Option<String> = sqlx::query_scalar!(
        "UPDATE refund_intents SET lease_until = now() + make_interval(secs => $1::bigint / 1000.0),
                updated_at = now()
         WHERE id = (
             SELECT id FROM refund_intents
             WHERE state = 'sent' AND lease_until < now()
             ORDER BY lease_until, id LIMIT 1 FOR UPDATE SKIP LOCKED)
           AND NOT (SELECT paused FROM refund_control)
         RETURNING id",
        lease_ms,
    )
    .fetch_optional(&mut *conn)
    .await?;
    claimed_intent(conn, claimed).await
}

/// Why an intent is marked `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The gateway's answer says nothing was refunded under the attempt
    /// (a refusal, a refund it reports failed): no longer in doubt, and a
    /// re-approval is a new attempt under a new key.
    Answered,
    /// Not sent this time (refunds off, no source can reach it) or no
    /// answer says what became of an earlier send: still in doubt where it
    /// was, and a re-approval keeps the attempt and key.
    Unanswered,
}

/// `failed`, with the gateway's (or the refunder's) words: an operator
/// decides.
pub async fn mark_failed(
    conn: &mut PgConnection,
    id: &str,
    code: &str,
    message: &str,
    why: Failure,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE refund_intents SET state = 'failed', gateway_code = $2, gateway_message = $3,
                lease_until = NULL, in_doubt = in_doubt AND NOT $4, updated_at = now()
         WHERE id = $1 AND state IN ('sending', 'sent')",
        id,
        code,
        message,
        why == Failure::Answered,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Nothing is known yet: stays `sending`, tried again (same key) after
/// `after`, with the reason noted.
pub async fn retry_later(
    conn: &mut PgConnection,
    id: &str,
    after: Duration,
    reason: &str,
) -> Result<(), sqlx::Error> {
    let ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
    sqlx::query!(
        "UPDATE refund_intents SET lease_until = now() + make_interval(secs => $2::bigint / 1000.0),
                gateway_message = $3, updated_at = now()
         WHERE id = $1 AND state IN ('sending', 'sent')",
        id,
        ms,
        reason,
    )
    .execute(conn)
    .await?;
    Ok(())
}

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
