//! Sending an intent: the refunder claims one under a lease (its amount and
//! reason fixed at the attempt's first send, in doubt from then on) and
//! records what the gateway answered: sent, failed, or tried again later
//! under the same key.

use std::time::Duration;

use sqlx::PgConnection;

use super::Intent;

/// Claims the next intent to send — approved and due, or being sent by a
/// refunder whose lease ran out — unless refunds are paused: `sending`,
/// one more try, leased for `lease`, in doubt, its amount and reason fixed
/// at the attempt's first send.
pub async fn claim(
    conn: &mut PgConnection,
    lease: Duration,
) -> Result<Option<Intent>, sqlx::Error> {
    let lease_ms = millis(lease);
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
    let ms = check_after.map(millis);
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
    let lease_ms = millis(lease);
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
    let ms = millis(after);
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

/// `d` in milliseconds, as the statements take a lease or a wait.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
