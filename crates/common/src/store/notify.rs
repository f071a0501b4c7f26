//! `notify_deliveries` and `notify_endpoints`: the notifier's book of what
//! it owes each of the shop's endpoints. A delivery row is made when an
//! order event reaches the notifier (`fan_out`, idempotent), leased while
//! it is sent (`lease_due`; a killed notifier's rows come due
//! again), and ends delivered, due again later, or failed — kept, never
//! dropped, until `replay` makes it due again. A 410 Gone disables its
//! endpoint (`disable`) until `enable`; a disabled endpoint's rows fail.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

use super::Pooled;

/// The last error written on rows of a disabled endpoint.
pub const DISABLED_ERROR: &str = "endpoint disabled";

/// Makes sure every configured endpoint (`(name, tenant)`) has its row,
/// its tenant's (disabled ones stay so).
pub async fn ensure_endpoints(
    db: &Pooled,
    endpoints: &[(String, String)],
) -> Result<(), sqlx::Error> {
    let (names, tenants): (Vec<String>, Vec<String>) = endpoints.iter().cloned().unzip();
    let mut conn = db.single().await?;
    sqlx::query!(
        "INSERT INTO notify_endpoints (name, tenant_id) SELECT * FROM unnest($1::text[], $2::text[])
         ON CONFLICT (tenant_id, name) DO NOTHING",
        &names,
        &tenants
    )
    .execute(&mut *conn)
    .await?;
    conn.finish().await
}

/// An endpoint's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointState {
    pub name: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub disabled_at: Option<OffsetDateTime>,
    pub disabled_reason: Option<String>,
    pub pending: i64,
    pub failed: i64,
    pub delivered: i64,
    /// Age of the oldest pending delivery, in seconds (0 when none).
    pub oldest_pending_secs: f64,
}

/// Every endpoint the notifier has known, with its counts.
pub async fn endpoints(conn: &mut PgConnection) -> Result<Vec<EndpointState>, sqlx::Error> {
    sqlx::query_as!(
        EndpointState,
        r#"SELECT e.name, e.disabled_at, e.disabled_reason,
                  count(*) FILTER (WHERE d.status = 'pending') AS "pending!",
                  count(*) FILTER (WHERE d.status = 'failed') AS "failed!",
                  count(*) FILTER (WHERE d.status = 'delivered') AS "delivered!",
                  COALESCE(EXTRACT(EPOCH FROM now() - min(d.created_at) FILTER (WHERE d.status = 'pending')), 0)::float8
                      AS "oldest_pending_secs!"
           FROM notify_endpoints e LEFT JOIN notify_deliveries d ON d.endpoint = e.name
           GROUP BY e.name, e.disabled_at, e.disabled_reason ORDER BY e.name"#
    )
    .fetch_all(conn)
    .await
}

/// Disables `name` (a 410 Gone): its pending rows fail with `reason`.
pub async fn disable(db: &Pooled, name: &str, reason: &str) -> Result<u64, sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query!(
        "INSERT INTO notify_endpoints (name, disabled_at, disabled_reason) VALUES ($1, now(), $2)
         ON CONFLICT (tenant_id, name) DO UPDATE SET disabled_at = now(), disabled_reason = $2",
        name,
        reason
    )
    .execute(&mut *tx)
    .await?;
    let failed = sqlx::query!(
        "UPDATE notify_deliveries SET status = 'failed', last_error = $2, locked_until = NULL,
                updated_at = now()
         WHERE endpoint = $1 AND status = 'pending'",
        name,
        format!("{DISABLED_ERROR}: {reason}")
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(failed.rows_affected())
}

/// Enables `name` again; `false` if no endpoint has that name.
pub async fn enable(conn: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE notify_endpoints SET disabled_at = NULL, disabled_reason = NULL WHERE name = $1",
        name
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Whether `name` is disabled now.
pub async fn is_disabled(db: &Pooled, name: &str) -> Result<bool, sqlx::Error> {
    let mut conn = db.single().await?;
    let disabled = sqlx::query_scalar!(
        r#"SELECT disabled_at IS NOT NULL AS "disabled!" FROM notify_endpoints WHERE name = $1"#,
        name
    )
    .fetch_optional(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(disabled.unwrap_or(false))
}

/// Makes the rows for `event_id`, one per endpoint (`(name, tenant)`) it
/// is for — the endpoints of the event's own tenant only, each row that
/// tenant's; rows of a disabled endpoint are made failed. Existing rows
/// are left alone. Returns how many rows are new and due. `trace_parent`
/// is the fan-out's own span, the parent of every attempt the rows lead to.
pub async fn fan_out(
    db: &Pooled,
    event_id: &str,
    endpoints: &[(String, String)],
    trace_parent: Option<&str>,
) -> Result<u64, sqlx::Error> {
    if endpoints.is_empty() {
        return Ok(0);
    }
    let (names, tenants): (Vec<String>, Vec<String>) = endpoints.iter().cloned().unzip();
    let mut conn = db.single().await?;
    let done = sqlx::query!(
        "INSERT INTO notify_deliveries (event_id, endpoint, status, last_error, trace_parent, tenant_id)
         SELECT $1, t.name,
                CASE WHEN e.disabled_at IS NULL THEN 'pending' ELSE 'failed' END,
                CASE WHEN e.disabled_at IS NULL THEN NULL
                     ELSE $3 || ': ' || COALESCE(e.disabled_reason, '') END,
                $4, oe.tenant_id
         FROM unnest($2::text[], $5::text[]) AS t(name, tenant)
         JOIN order_events oe ON oe.id = $1 AND oe.tenant_id = t.tenant
         LEFT JOIN notify_endpoints e ON e.name = t.name AND e.tenant_id = t.tenant
         ON CONFLICT (event_id, endpoint) DO NOTHING",
        event_id,
        &names,
        DISABLED_ERROR,
        trace_parent,
        &tenants
    )
    .execute(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(done.rows_affected())
}

/// A delivery leased for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub event_id: String,
    /// Attempts made before this one.
    pub attempts: i32,
    /// The fan-out's span that made the row (the attempt's parent).
    pub trace_parent: Option<String>,
}

/// Claims up to `limit` due rows of an enabled `endpoint`, oldest first,
/// holding them for `lease`.
pub async fn lease_due(
    db: &Pooled,
    endpoint: &str,
    limit: i64,
    lease: Duration,
) -> Result<Vec<Due>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let rows = sqlx::query_as!(
        Due,
        // A materialized CTE: a subquery in UPDATE … FROM may be scanned
        // again for each row, and lease more rows than the limit.
        "WITH due AS MATERIALIZED (
             SELECT d2.event_id FROM notify_deliveries d2
             WHERE d2.endpoint = $1 AND d2.status = 'pending' AND d2.next_attempt_at <= now()
               AND (d2.locked_until IS NULL OR d2.locked_until < now())
               AND NOT EXISTS (SELECT 1 FROM notify_endpoints e
                               WHERE e.name = $1 AND e.disabled_at IS NOT NULL)
             ORDER BY d2.next_attempt_at, d2.created_at LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE notify_deliveries d SET locked_until = now() + make_interval(secs => $3)
         FROM due WHERE d.event_id = due.event_id AND d.endpoint = $1
         RETURNING d.event_id, d.attempts, d.trace_parent",
        endpoint,
        limit,
        lease.as_secs_f64()
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows)
}

/// How an attempt ended, as written to its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptEnd {
    Delivered,
    /// Due again after `after`.
    Retry {
        after: Duration,
    },
    /// The schedule is spent (or the endpoint refused it for good).
    Failed,
}

/// What the endpoint answered (or why there was no answer).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    pub status: Option<i32>,
    pub error: Option<String>,
    /// The start of the answer's body.
    pub body: Option<String>,
}

/// Writes one attempt's end.
pub async fn record_attempt(
    db: &Pooled,
    event_id: &str,
    endpoint: &str,
    end: &AttemptEnd,
    answer: &Answer,
) -> Result<(), sqlx::Error> {
    let (status, retry_secs) = match end {
        AttemptEnd::Delivered => ("delivered", 0.0),
        AttemptEnd::Retry { after } => ("pending", after.as_secs_f64()),
        AttemptEnd::Failed => ("failed", 0.0),
    };
    let mut conn = db.single().await?;
    sqlx::query!(
        "UPDATE notify_deliveries SET
             status = $3, attempts = attempts + 1, locked_until = NULL, updated_at = now(),
             next_attempt_at = now() + make_interval(secs => $4),
             delivered_at = CASE WHEN $3 = 'delivered' THEN now() ELSE delivered_at END,
             last_status = $5, last_error = $6, last_answer = $7
         WHERE event_id = $1 AND endpoint = $2",
        event_id,
        endpoint,
        status,
        retry_secs,
        answer.status,
        answer.error,
        answer.body
    )
    .execute(&mut *conn)
    .await?;
    conn.finish().await
}

/// Which deliveries to list or replay.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub endpoint: Option<String>,
    pub event_id: Option<String>,
    /// `pending`, `delivered` or `failed`.
    pub status: Option<String>,
    /// Only rows made at or after this time.
    pub since: Option<OffsetDateTime>,
    pub limit: i64,
}

/// A delivery as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryRecord {
    pub event_id: String,
    pub event_type: String,
    pub order_ref: String,
    pub endpoint: String,
    pub status: String,
    pub attempts: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub next_attempt_at: OffsetDateTime,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub last_answer: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub delivered_at: Option<OffsetDateTime>,
}

/// The deliveries `filter` names, newest first.
pub async fn list(
    conn: &mut PgConnection,
    filter: &Filter,
) -> Result<Vec<DeliveryRecord>, sqlx::Error> {
    sqlx::query_as!(
        DeliveryRecord,
        r#"SELECT d.event_id, e.type AS event_type, o.order_ref, d.endpoint, d.status, d.attempts,
                  d.next_attempt_at, d.last_status, d.last_error, d.last_answer, d.created_at,
                  d.delivered_at
           FROM notify_deliveries d
           JOIN order_events e ON e.id = d.event_id
           JOIN orders o ON o.id = e.order_id
           WHERE ($1::text IS NULL OR d.endpoint = $1)
             AND ($2::text IS NULL OR d.event_id = $2)
             AND ($3::text IS NULL OR d.status = $3)
             AND ($4::timestamptz IS NULL OR d.created_at >= $4)
           ORDER BY d.created_at DESC, d.event_id LIMIT $5"#,
        filter.endpoint,
        filter.event_id,
        filter.status,
        filter.since,
        filter.limit
    )
    .fetch_all(conn)
    .await
}

/// Makes the failed deliveries `filter` names due now, with a fresh
/// schedule (rows of disabled endpoints are left: enable the endpoint
/// first). Returns how many.
pub async fn replay(conn: &mut PgConnection, filter: &Filter) -> Result<u64, sqlx::Error> {
    let done = sqlx::query!(
        "UPDATE notify_deliveries d SET status = 'pending', attempts = 0, next_attempt_at = now(),
                locked_until = NULL, updated_at = now()
         WHERE d.status = 'failed'
           AND ($1::text IS NULL OR d.endpoint = $1)
           AND ($2::text IS NULL OR d.event_id = $2)
           AND ($3::timestamptz IS NULL OR d.created_at >= $3)
           AND NOT EXISTS (SELECT 1 FROM notify_endpoints e
                           WHERE e.name = d.endpoint AND e.disabled_at IS NOT NULL)",
        filter.endpoint,
        filter.event_id,
        filter.since
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
