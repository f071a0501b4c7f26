//! Delivery dedup on `processed_webhooks`: insert first, never check then
//! insert. A conflicting insert means another copy of this delivery was (or
//! is being) processed; Postgres makes the second inserter wait for the first
//! transaction and then reports the conflict. The conflict bumps the row's
//! `deliveries` counter (so operators see how often a gateway retried), and
//! `xmax = 0` tells a fresh insert from that update.

use oncehook_common::Envelope;
use oncehook_gateways::NormalizedEvent;
use sqlx::{PgConnection, Row};

use crate::effect::Outcome;

/// Claims the event; `false` means it is a duplicate (whose sighting is counted).
pub async fn claim(
    conn: &mut PgConnection,
    envelope: &Envelope,
    event: &NormalizedEvent,
) -> Result<bool, sqlx::Error> {
    let row = sqlx::query(
        "INSERT INTO processed_webhooks
             (provider, event_id, event_type, order_ref, receipt_id, outcome, received_at, source, payment_id)
         VALUES ($1, $2, $3, $4, $5, 'applied', $6, $7, $8)
         ON CONFLICT (provider, event_id) DO UPDATE
             SET deliveries = processed_webhooks.deliveries + 1, last_seen_at = now()
         RETURNING (xmax = 0) AS inserted",
    )
    .bind(event.provider.as_str())
    .bind(&event.event_id)
    .bind(&event.event_type)
    .bind(&event.order_ref)
    .bind(envelope.receipt_id)
    .bind(envelope.received_at)
    .bind(&envelope.source)
    .bind(&event.payment_id)
    .fetch_one(conn)
    .await?;
    row.try_get("inserted")
}

/// Records the final outcome of a claimed event (same transaction).
pub async fn finish(
    conn: &mut PgConnection,
    event: &NormalizedEvent,
    outcome: Outcome,
    detail: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE processed_webhooks SET outcome = $3, detail = $4, processed_at = now()
         WHERE provider = $1 AND event_id = $2",
    )
    .bind(event.provider.as_str())
    .bind(&event.event_id)
    .bind(outcome.as_str())
    .bind(detail)
    .execute(conn)
    .await?;
    Ok(())
}
