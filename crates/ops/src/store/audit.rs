//! `console_audit`: what operators did through the console (replays,
//! purges, logins and logouts), written once per action and read by the
//! console's Audit page.

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

/// One action to record.
#[derive(Debug, Clone)]
pub struct NewAuditEntry<'a> {
    pub actor: &'a str,
    pub role: &'a str,
    pub action: &'a str,
    pub letters: &'a [String],
    pub scope: Option<&'a str>,
    pub ok: bool,
    pub result: &'a str,
    pub address: Option<&'a str>,
}

/// One recorded action.
#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub actor: String,
    pub role: String,
    pub action: String,
    pub letters: Vec<String>,
    pub scope: Option<String>,
    pub ok: bool,
    pub result: String,
    pub address: Option<String>,
}

/// Records an action; returns its id.
pub async fn record(conn: &mut PgConnection, e: &NewAuditEntry<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        "INSERT INTO console_audit (actor, role, action, letters, scope, ok, result, address)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        e.actor,
        e.role,
        e.action,
        e.letters,
        e.scope,
        e.ok,
        e.result,
        e.address
    )
    .fetch_one(conn)
    .await
}

/// The newest `limit` actions, newest first, skipping `offset`.
pub async fn recent(
    conn: &mut PgConnection,
    limit: i64,
    offset: i64,
) -> Result<Vec<AuditEntry>, sqlx::Error> {
    sqlx::query_as!(
        AuditEntry,
        "SELECT id, at, actor, role, action, letters, scope, ok, result, address
         FROM console_audit ORDER BY at DESC, id DESC LIMIT $1 OFFSET $2",
        limit,
        offset
    )
    .fetch_all(conn)
    .await
}
