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
//! - [`audit`]: `console_audit`, what operators did through the console.
//! - [`shop`]: the shop API's writes and reads — products and stock
//!   deltas (`stock_adjustments`), orders with items and
//!   `order_gateway_refs`, `api_idempotency`, `api_audit`, order pages.
//! - [`reconcile`]: what the reconciler reads (pending orders, their
//!   references and known payments, recorded facts) and `reconcile_checks`,
//!   `reconcile_runs` and its advisory lock.
//! - [`order_events`]: `order_events`, what the ledger tells the shop,
//!   written with the effect, published and paged.
//! - [`notify`]: `notify_deliveries` and `notify_endpoints`, what the
//!   notifier owes each of the shop's endpoints.
//! - [`schema`]: `_sqlx_migrations`, which migrations are applied.
//! - [`ping`]: whether the database answers at all.
//!
//! A function that runs one statement on its own (not inside a caller's
//! transaction) takes a [`Pooled`]: whether that statement needs a
//! transaction of its own is decided in one place, [`Pooled::single`].

use std::ops::{Deref, DerefMut};

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::config::Pooler;

pub mod audit;
pub mod dedup;
pub mod ledger;
pub mod notify;
pub mod order_events;
pub mod outbox;
pub mod parking;
pub mod reconcile;
pub mod retention;
pub mod schema;
pub mod shop;

/// A pool and the [`Pooler`] between it and Postgres.
#[derive(Debug, Clone)]
pub struct Pooled {
    pub pool: PgPool,
    pub pooler: Pooler,
}

impl Pooled {
    pub fn new(pool: PgPool, pooler: Pooler) -> Pooled {
        Pooled { pool, pooler }
    }

    /// A connection for one statement run on its own; end it with
    /// [`Single::finish`]. Behind a transaction-mode pooler the statement
    /// runs in a transaction of its own: with no statement cached, sqlx
    /// runs a `query!` in two exchanges, each closed by a Sync (Parse and
    /// Describe, then Bind and Execute), and at the first one's
    /// ReadyForQuery (idle) the pooler may hand the server connection on,
    /// dropping the prepared statement (`DEALLOCATE ALL`), so the Bind fails
    /// ("prepared statement sqlx_s_N does not exist"; a test in
    /// `tests/tests/pooler.rs` shows it). Straight to Postgres, or behind a
    /// session-mode pooler, the statement is cached per connection and runs
    /// in one exchange: there a transaction would only add a BEGIN and a
    /// COMMIT round trip.
    pub(crate) async fn single(&self) -> Result<Single, sqlx::Error> {
        Ok(match self.pooler {
            Pooler::None => Single::Direct(self.pool.acquire().await?),
            Pooler::Transaction => Single::InTransaction(self.pool.begin().await?),
        })
    }
}

/// A connection from [`Pooled::single`]: deref it to run the statement.
pub(crate) enum Single {
    Direct(PoolConnection<Postgres>),
    InTransaction(Transaction<'static, Postgres>),
}

impl Single {
    /// Commits the statement's own transaction, if it has one. Dropped
    /// without this (after an error), that transaction rolls back.
    pub(crate) async fn finish(self) -> Result<(), sqlx::Error> {
        match self {
            Single::Direct(_) => Ok(()),
            Single::InTransaction(tx) => tx.commit().await,
        }
    }
}

impl Deref for Single {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Single::Direct(conn) => conn,
            Single::InTransaction(tx) => tx,
        }
    }
}

impl DerefMut for Single {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Single::Direct(conn) => conn,
            Single::InTransaction(tx) => tx,
        }
    }
}

/// Whether the database answers (`SELECT 1`). Always in a transaction,
/// which a transaction-mode pooler needs (see [`Pooled::single`]): it takes
/// a bare pool and runs only when a session starts or the database was
/// unreachable, never per event.
pub async fn ping(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query_scalar!("SELECT 1 AS one")
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
