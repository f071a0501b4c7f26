//! `processed_webhooks`: one row per delivery identity, inserted first in
//! the worker's transaction (never checked, then inserted). A conflicting
//! insert waits for the first transaction and then reports a duplicate,
//! counting the sighting in `deliveries`; `xmax = 0` tells a fresh insert
//! from that update.

use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

/// The identity of one delivery: the source (two accounts of one gateway
/// never share a namespace), the gateway's event id, and a digest of the
/// signed body (an unsigned event-id header cannot make another body a
/// duplicate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryKey {
    pub source: String,
    pub event_id: String,
    pub body_sha256: String,
}

/// What is recorded about a delivery when it is claimed.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub key: &'a DeliveryKey,
    pub provider: &'a str,
    pub event_type: &'a str,
    pub order_ref: Option<&'a str>,
    pub payment_id: Option<&'a str>,
    pub receipt_id: Uuid,
    pub received_at: OffsetDateTime,
}

/// Claims the delivery; `false` means a duplicate (its sighting is counted).
pub async fn claim(conn: &mut PgConnection, c: Claim<'_>) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"INSERT INTO processed_webhooks
               (source, event_id, body_sha256, provider, event_type, order_ref, receipt_id, outcome, received_at, payment_id)
           VALUES ($1, $2, $3, $4, $5, $6, $7, 'applied', $8, $9)
           ON CONFLICT (source, event_id, body_sha256) DO UPDATE
               SET deliveries = processed_webhooks.deliveries + 1, last_seen_at = now()
           RETURNING (xmax = 0) AS "inserted!""#,
        c.key.source,
        c.key.event_id,
        c.key.body_sha256,
        c.provider,
        c.event_type,
        c.order_ref,
        c.receipt_id,
        c.received_at,
        c.payment_id,
    )
    .fetch_one(conn)
    .await
}

/// Records the outcome of a claimed delivery (same transaction).
pub async fn finish(
    conn: &mut PgConnection,
    key: &DeliveryKey,
    outcome: &str,
    detail: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE processed_webhooks SET outcome = $4, detail = $5, processed_at = now()
         WHERE source = $1 AND event_id = $2 AND body_sha256 = $3",
        key.source,
        key.event_id,
        key.body_sha256,
        outcome,
        detail,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes a delivery's record, so a replay of it is processed, not absorbed.
pub async fn forget(conn: &mut PgConnection, key: &DeliveryKey) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "DELETE FROM processed_webhooks WHERE source = $1 AND event_id = $2 AND body_sha256 = $3",
        key.source,
        key.event_id,
        key.body_sha256,
    )
    .execute(conn)
    .await?;
    Ok(())
}
