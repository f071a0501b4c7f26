//! The tenants' tables, one module each, checked against the schema at
//! compile time (`sqlx::query!`, query data in `.sqlx/`).
//!
//! - [`tenants`]: `tenants`, one row per shop.
//! - [`sources`]: `sources` and `source_secrets`, gateway accounts made at
//!   runtime and their sealed signing secrets.
//! - [`keys`]: `api_keys`, tenants' API keys issued at runtime.

use sqlx::PgConnection;

pub mod keys;
pub mod sources;
pub mod tenants;

/// One change at a time: every write to what the running binaries read
/// back by change number (`admin_changes`: sources, their secrets, API
/// keys) takes this lock first, so numbers are taken and committed in the
/// same order and a reader that saw change N has seen every change before
/// it.
pub(crate) async fn serialise(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("SELECT pg_advisory_xact_lock(hashtext('oncehook:admin_changes'))")
        .execute(&mut *conn)
        .await?;
    Ok(())
}
