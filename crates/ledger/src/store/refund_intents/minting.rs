//! `refund_intents` as the ledger's tail writes them: one statement per
//! batch that mints the intents the recomputed orders owe and moves each
//! one's refunded amount, settling or cancelling the intents nothing is
//! owed on any more; and what a catch-up finds and counts.

use sqlx::PgConnection;

/// A refund the books owe: what the ledger mints an intent from (not a
/// row read back: that is [`super::Intent`]).
#[derive(Debug, Clone)]
pub struct OwedRefund {
    pub id: String,
    pub order_id: i64,
    pub provider: String,
    pub payment_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    pub refunded_minor: i64,
    /// The traceparent of the delivery that minted it (kept from the first).
    pub trace_parent: Option<String>,
}

/// Mints the intents not written yet (`cancelled` at once when nothing is
/// outstanding: refunded from elsewhere first) and, on the others, moves
/// `refunded_minor` and the reason where they changed (what a sent attempt
/// carries is its own `sent_reason`). An intent nothing is outstanding on
/// becomes `settled` where oncehook sent (or may have sent: `in_doubt`,
/// whatever its state) its refund, `cancelled` where it had not; settled and cancelled intents
/// stay as they are. Returns the ids whose state changed, with the new state.
pub async fn write(
    conn: &mut PgConnection,
    intents: &[OwedRefund],
) -> Result<Vec<(String, String)>, sqlx::Error> {
    if intents.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query!(
        r#"WITH t AS (
               SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[],
                                    $6::text[], $7::text[], $8::bigint[], $9::text[])
                   AS t(id, order_id, provider, payment_id, amount_minor, currency, reason, refunded_minor,
                        trace_parent)),
           before AS (SELECT i.id, i.state FROM refund_intents i JOIN t USING (id)),
           written AS (
               INSERT INTO refund_intents AS i
                   (id, order_id, provider, payment_id, amount_minor, currency, reason, refunded_minor,
                    trace_parent, state)
               SELECT id, order_id, provider, payment_id, amount_minor, currency, reason, refunded_minor,
                      trace_parent, CASE WHEN refunded_minor >= amount_minor THEN 'cancelled' ELSE 'owed' END
               FROM t ORDER BY id
               ON CONFLICT (id) DO UPDATE SET
                   refunded_minor = EXCLUDED.refunded_minor,
                   reason = EXCLUDED.reason,
                   state = CASE
                       WHEN i.state IN ('settled', 'cancelled') THEN i.state
                       WHEN EXCLUDED.refunded_minor < i.amount_minor THEN i.state
                       WHEN i.state IN ('sending', 'sent') OR i.in_doubt THEN 'settled'
                       ELSE 'cancelled' END,
                   lease_until = CASE WHEN EXCLUDED.refunded_minor >= i.amount_minor
                                      THEN NULL ELSE i.lease_until END,
                   updated_at = now()
               WHERE i.refunded_minor IS DISTINCT FROM EXCLUDED.refunded_minor
                  OR i.reason IS DISTINCT FROM EXCLUDED.reason
               RETURNING i.id, i.state)
           SELECT w.id AS "id!", w.state AS "state!"
           FROM written w LEFT JOIN before b USING (id)
           WHERE b.state IS DISTINCT FROM w.state"#,
        &intents.iter().map(|i| i.id.clone()).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.order_id).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.provider.clone()).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.payment_id.clone()).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.amount_minor).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.currency.clone()).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.reason.clone()).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.refunded_minor).collect::<Vec<_>>(),
        &intents.iter().map(|i| i.trace_parent.clone()).collect::<Vec<_>>() as &[Option<String>],
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.state)).collect())
}

/// The references of orders with a captured payment owed back (flagged
/// `needs_refund` or `amount_mismatch`, its amount known) that has no
/// intent, after `after`, in reference order (the `payments_owed` index
/// holds only such payments).
pub async fn orders_owing_without_intent(
    conn: &mut PgConnection,
    after: &str,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "SELECT DISTINCT o.order_ref
         FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE p.status = 'captured' AND p.flag IN ('needs_refund', 'amount_mismatch')
           AND p.amount_minor IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM refund_intents ri
                           WHERE ri.provider = p.provider AND ri.payment_id = p.payment_id)
           AND o.order_ref > $1
         ORDER BY o.order_ref
         LIMIT $2",
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// How many intents the orders `order_refs` have (a catch-up counts what
/// it minted, a page of orders at a time, through `refund_intents_order`).
pub async fn count_of_orders(
    conn: &mut PgConnection,
    order_refs: &[String],
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM refund_intents
           WHERE order_id IN (SELECT id FROM orders WHERE order_ref = ANY($1))"#,
        order_refs
    )
    .fetch_one(conn)
    .await
}
