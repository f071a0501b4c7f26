//! `email_outbox`: emails written in the same transaction as the effect
//! that causes them (so "order committed" and "email due" are one fact),
//! published by the worker's relay and sent by the mailer. `dedup_key`
//! makes "one confirmation per order" a constraint.

use sqlx::PgConnection;
use uuid::Uuid;

/// An email to write.
#[derive(Debug, Clone, Copy)]
pub struct NewEmail<'a> {
    pub order_id: i64,
    pub kind: &'a str,
    pub dedup_key: &'a str,
    pub to: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
}

/// Writes an email; a second write with the same `dedup_key` is a no-op
/// (`false`).
pub async fn write(conn: &mut PgConnection, e: NewEmail<'_>) -> Result<bool, sqlx::Error> {
    let row = sqlx::query_scalar!(
        "INSERT INTO email_outbox (id, order_id, kind, dedup_key, to_addr, subject, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (dedup_key) DO NOTHING
         RETURNING id",
        Uuid::new_v4(),
        e.order_id,
        e.kind,
        e.dedup_key,
        e.to,
        e.subject,
        e.body
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}
