//! The operators' own table, `console_audit` (`audit`: what operators did,
//! through the console or `oncehookctl`), and what the operators' tool
//! reads of tables other binaries write where no library below it owns the
//! read: the API's audit of its writes (`api_audit`, written by
//! `oncehook-api`), for `oncehookctl trace`.

pub mod audit;

use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

/// One recorded API write (the API writes `api_audit`; the trace reads it).
#[derive(Debug, Clone, Serialize)]
pub struct ApiAuditEntry {
    pub id: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub key_name: String,
    pub action: String,
    pub order_ref: Option<String>,
    pub sku: Option<String>,
    pub ok: bool,
    pub result: String,
}

/// The API writes about one order, oldest first.
pub async fn audit_of_order(
    conn: &mut PgConnection,
    order_ref: &str,
) -> Result<Vec<ApiAuditEntry>, sqlx::Error> {
    sqlx::query_as!(
        ApiAuditEntry,
        "SELECT id, at, key_name, action, order_ref, sku, ok, result
         FROM api_audit WHERE order_ref = $1 ORDER BY at, id",
        order_ref
    )
    .fetch_all(conn)
    .await
}
