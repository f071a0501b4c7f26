//! The store: every table's SQL, one module per table or aggregate, checked
//! against the schema at compile time (`sqlx::query!`, with the query data
//! committed in `.sqlx/`; `make sqlx-prepare` refreshes it). A schema change
//! is a migration plus the module that owns the table; the compiler finds
//! the rest. Nothing outside this module writes SQL (enforced by
//! `tests/tests/architecture.rs`).
//!
//! - [`dedup`]: `processed_webhooks`, the delivery-dedup record.
//! - [`ledger`]: orders, their items and products (stock), and the facts the
//!   order ledger records: `payments`, `refunds`, `payment_links`.
//! - [`parking`]: `parked_events`, events waiting for their payment's link.
//! - [`outbox`]: `email_outbox`, written with the effect, sent by the mailer.
//! - [`retention`]: trimming `processed_webhooks` and sent or failed
//!   `email_outbox` rows (the worker's schedule and `oncehookctl retention`).
//! - [`schema`]: `_sqlx_migrations`, which migrations are applied.
//! - [`ping`]: whether the database answers at all.

pub mod dedup;
pub mod ledger;
pub mod outbox;
pub mod parking;
pub mod retention;
pub mod schema;

/// Whether the database answers (`SELECT 1`, in a transaction like every
/// statement a pool runs: a transaction-mode pooler needs that).
pub async fn ping(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query_scalar!("SELECT 1 AS one")
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
