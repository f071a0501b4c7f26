//! `order_events`: what the ledger tells the shop, written in the ledger's
//! transaction (with the orders' write, `orders::write`, idempotent on the event's id, which is derived
//! from the causing fact), published to `P.order-events` by the notifier's
//! relay (`lock_unpublished`, `mark_published`) and paged by
//! `GET /v1/events` (`page`) in commit order with a stable cursor.

use serde_json::Value;
use sqlx::PgConnection;
use time::OffsetDateTime;

/// An order event to write.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOrderEvent {
    pub id: String,
    pub kind: &'static str,
    pub order_id: i64,
    pub data: Value,
    pub trace_parent: Option<String>,
}

/// An event as stored, with its order's reference.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderEventRow {
    pub id: String,
    pub seq: i64,
    /// The writing transaction's id (the cursor's first half).
    pub txid: i64,
    pub kind: String,
    pub order_ref: String,
    pub data: Value,
    pub created_at: OffsetDateTime,
    pub published_at: Option<OffsetDateTime>,
    pub trace_parent: Option<String>,
    /// The tenant of the event's order: it is rendered in that tenant's
    /// scope (`render`).
    pub tenant_id: String,
}

/// The relay: locks up to `limit` unpublished events, oldest first,
/// skipping those another relay holds.
pub async fn lock_unpublished(
    conn: &mut PgConnection,
    limit: i64,
) -> Result<Vec<OrderEventRow>, sqlx::Error> {
    sqlx::query_as!(
        OrderEventRow,
        r#"SELECT e.id, e.seq, e.txid::text::bigint AS "txid!", e.type AS kind, o.order_ref,
                  e.data, e.created_at, e.published_at, e.trace_parent, e.tenant_id
           FROM order_events e JOIN orders o ON o.id = e.order_id
           WHERE e.published_at IS NULL
           ORDER BY e.seq LIMIT $1 FOR UPDATE OF e SKIP LOCKED"#,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The relay: the events are on the broker.
pub async fn mark_published(conn: &mut PgConnection, ids: &[String]) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE order_events SET published_at = now() WHERE id = ANY($1)",
        ids
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// One event by its id.
pub async fn by_id(
    conn: &mut PgConnection,
    id: &str,
) -> Result<Option<OrderEventRow>, sqlx::Error> {
    sqlx::query_as!(
        OrderEventRow,
        r#"SELECT e.id, e.seq, e.txid::text::bigint AS "txid!", e.type AS kind, o.order_ref,
                  e.data, e.created_at, e.published_at, e.trace_parent, e.tenant_id
           FROM order_events e JOIN orders o ON o.id = e.order_id
           WHERE e.id = $1"#,
        id
    )
    .fetch_optional(conn)
    .await
}

/// The events of one order, in the order they were written.
pub async fn of_order(
    conn: &mut PgConnection,
    order_ref: &str,
) -> Result<Vec<OrderEventRow>, sqlx::Error> {
    sqlx::query_as!(
        OrderEventRow,
        r#"SELECT e.id, e.seq, e.txid::text::bigint AS "txid!", e.type AS kind, o.order_ref,
                  e.data, e.created_at, e.published_at, e.trace_parent, e.tenant_id
           FROM order_events e JOIN orders o ON o.id = e.order_id
           WHERE o.order_ref = $1 ORDER BY e.seq"#,
        order_ref
    )
    .fetch_all(conn)
    .await
}

/// Where a page of `GET /v1/events` starts: after this event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub txid: i64,
    pub seq: i64,
}

impl Cursor {
    /// `<txid>-<seq>`, what the API hands out.
    pub fn encode(&self) -> String {
        format!("{}-{}", self.txid, self.seq)
    }

    /// Reads [`Cursor::encode`]'s form.
    pub fn decode(text: &str) -> Option<Cursor> {
        let (txid, seq) = text.split_once('-')?;
        Some(Cursor {
            txid: txid.parse().ok().filter(|t| *t >= 0)?,
            seq: seq.parse().ok().filter(|s| *s >= 0)?,
        })
    }
}

/// Up to `limit` events after `after` (from the start if `None`), in
/// `(txid, seq)` order, of the `types` given (every type if empty). Only
/// transactions older than every transaction still running are listed:
/// a row that becomes visible later always sorts after them, so a cursor
/// handed out never skips an event.
pub async fn page(
    conn: &mut PgConnection,
    after: Option<Cursor>,
    types: &[String],
    limit: i64,
) -> Result<Vec<OrderEventRow>, sqlx::Error> {
    let after = after.unwrap_or(Cursor { txid: 0, seq: 0 });
    sqlx::query_as!(
        OrderEventRow,
        r#"SELECT e.id, e.seq, e.txid::text::bigint AS "txid!", e.type AS kind, o.order_ref,
                  e.data, e.created_at, e.published_at, e.trace_parent, e.tenant_id
           FROM order_events e JOIN orders o ON o.id = e.order_id
           WHERE (e.txid, e.seq) > ($1::bigint::text::xid8, $2::bigint)
             AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
             AND (cardinality($3::text[]) = 0 OR e.type = ANY($3))
           ORDER BY e.txid, e.seq LIMIT $4"#,
        after.txid,
        after.seq,
        types,
        limit
    )
    .fetch_all(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn cursors_read_back_and_refuse_garbage() {
        let c = Cursor { txid: 812, seq: 44 };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for bad in ["", "812", "a-1", "1-b", "-1-2", "1--2", "1-2-3"] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }
}
