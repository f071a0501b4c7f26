//! Delivery dedup on `processed_webhooks`: insert first, never check then
//! insert. A conflicting insert means another copy of this delivery was (or
//! is being) processed; Postgres makes the second inserter wait for the first
//! transaction and then reports the conflict. The conflict bumps the row's
//! `deliveries` counter (so operators see how often a gateway retried), and
//! `xmax = 0` tells a fresh insert from that update.
//!
//! The key is [`DeliveryKey`]: the source (two accounts of one gateway never
//! share a namespace), the gateway's event id, and a digest of the signed
//! body bytes, so an unsigned event-id header cannot make a different body
//! look like a duplicate (docs/ledger.md).

use oncehook_common::Envelope;
use oncehook_gateways::NormalizedEvent;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, Row};

use crate::effect::Outcome;

/// The identity of one delivery, as keyed in `processed_webhooks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryKey {
    pub source: String,
    pub event_id: String,
    /// The first 128 bits of the body's SHA-256, hex.
    pub body_sha256: String,
}

impl DeliveryKey {
    pub fn new(source: &str, event_id: &str, body: &[u8]) -> Self {
        let digest = Sha256::digest(body);
        DeliveryKey {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
            body_sha256: hex::encode(digest.get(..16).unwrap_or_default()),
        }
    }
}

/// Claims the delivery; `false` means it is a duplicate (whose sighting is counted).
pub async fn claim(
    conn: &mut PgConnection,
    key: &DeliveryKey,
    envelope: &Envelope,
    event: &NormalizedEvent,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query(
        "INSERT INTO processed_webhooks
             (source, event_id, body_sha256, provider, event_type, order_ref, receipt_id, outcome, received_at, payment_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'applied', $8, $9)
         ON CONFLICT (source, event_id, body_sha256) DO UPDATE
             SET deliveries = processed_webhooks.deliveries + 1, last_seen_at = now()
         RETURNING (xmax = 0) AS inserted",
    )
    .bind(&key.source)
    .bind(&key.event_id)
    .bind(&key.body_sha256)
    .bind(event.provider.as_str())
    .bind(&event.event_type)
    .bind(&event.order_ref)
    .bind(envelope.receipt_id)
    .bind(envelope.received_at)
    .bind(&event.payment_id)
    .fetch_one(conn)
    .await?;
    row.try_get("inserted")
}

/// Records the final outcome of a claimed delivery (same transaction).
pub async fn finish(
    conn: &mut PgConnection,
    key: &DeliveryKey,
    outcome: Outcome,
    detail: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE processed_webhooks SET outcome = $4, detail = $5, processed_at = now()
         WHERE source = $1 AND event_id = $2 AND body_sha256 = $3",
    )
    .bind(&key.source)
    .bind(&key.event_id)
    .bind(&key.body_sha256)
    .bind(outcome.as_str())
    .bind(detail)
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes a delivery's record, so a replay of it is processed, not absorbed
/// (used when a parked event is dead-lettered).
pub async fn forget(conn: &mut PgConnection, key: &DeliveryKey) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM processed_webhooks WHERE source = $1 AND event_id = $2 AND body_sha256 = $3",
    )
    .bind(&key.source)
    .bind(&key.event_id)
    .bind(&key.body_sha256)
    .execute(conn)
    .await?;
    Ok(())
}
