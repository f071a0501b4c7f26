//! The store of the plumbing several binaries share, and nothing of a
//! feature's: each feature's tables live with it (the ledger's in
//! `oncehook_ledger::store`, the API's in `oncehook_api::store`, the
//! reconciler's in `oncehook_reconcile::store`, the operators' audit in
//! `oncehook_ops::store`). One module per table or aggregate, checked
//! against the schema at compile time (`sqlx::query!`, with the query data
//! committed in `.sqlx/`; `make sqlx-prepare` refreshes it). A schema change
//! is a migration plus the module that owns the table; the compiler finds
//! the rest. Every table has one writing crate and SQL stays in the stores
//! (enforced by `tests/tests/architecture.rs`).
//!
//! - [`dedup`]: `processed_webhooks`, the delivery-dedup record under every
//!   consumer.
//! - [`outbox`]: `email_outbox`, written with the effect, sent by the mailer.
//! - [`retention`]: trimming `processed_webhooks`, sent or failed
//!   `email_outbox` rows and old deliveries (the worker's schedule and
//!   `oncehookctl retention`).
//! - [`notify`]: `notify_deliveries` and `notify_endpoints`, what the
//!   notifier owes each of the shop's endpoints.
//! - [`schema`]: `_sqlx_migrations` and `schema_rollouts`, which
//!   migrations are applied and the rollout window.
//! - [`scope`]: whose rows a transaction sees (the tenants' row-level
//!   security, docs/tenants.md) and the role the binaries connect as.
//! - [`ping`]: whether the database answers at all.
//!
//! A function that runs one statement on its own (not inside a caller's
//! transaction) takes a [`Pooled`]: whether that statement needs a
//! transaction of its own is decided in one place, [`Pooled::single`].

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use backon::Retryable;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

use crate::config::{DatabaseConfig, Pooler};
use crate::retry::RetryPolicy;

pub mod advisory;
pub mod dedup;
pub mod notify;
pub mod outbox;
pub mod retention;
pub mod schema;
pub mod scope;

/// The database as the binaries see it: a pool and the [`Pooler`] between
/// it and Postgres. The pool itself never leaves the store (the field is
/// private and nothing hands it out), so every statement a binary runs goes
/// through [`Pooled::begin`] (a transaction) or [`Pooled::single`] (one
/// statement, in a transaction of its own behind a transaction-mode
/// pooler). A bare `pool.acquire()` or `query.execute(&pool)` outside the
/// store cannot be written: behind PgBouncer in transaction mode it fails
/// ("prepared statement sqlx_s_N does not exist"), so the type rules it out.
/// `tests/tests/architecture.rs` keeps `PgPool` out of the binaries.
#[derive(Debug, Clone)]
pub struct Pooled {
    pool: PgPool,
    pooler: Pooler,
    /// Whether each connection opens in the platform's scope ([`Pooled::open`]
    /// straight to Postgres: a startup option), so a platform transaction
    /// need not name it.
    session_platform: bool,
    /// The scope of [`Pooled::begin`] and [`Pooled::single`]: the
    /// platform's ([`Pooled::open`]), none ([`Pooled::open_tenant_facing`]:
    /// a forgotten scope sees nothing), or one tenant's ([`Pooled::scoped`]).
    default: scope::Scope,
}

impl Pooled {
    /// Wraps `pool`, which reaches Postgres through `pooler`. The pool must
    /// have been opened for that pooler ([`Pooled::open`] and
    /// [`Pooled::connect`] do it from the configuration): behind a
    /// transaction-mode pooler, with no statement cache.
    pub fn new(pool: PgPool, pooler: Pooler) -> Pooled {
        Pooled {
            pool,
            pooler,
            session_platform: true,
            default: scope::Scope::Platform,
        }
    }

    /// [`Pooled::open`] for a binary that serves tenants (the shop's API,
    /// the console): no connection opens in a scope, and [`Pooled::begin`]
    /// and [`Pooled::single`] name none, so a statement whose transaction
    /// names no scope sees no tenant's row — a forgotten scope fails
    /// closed. Work for every tenant names the platform's
    /// ([`Pooled::begin_in`] with [`scope::Scope::Platform`]).
    pub fn open_tenant_facing(
        db: &DatabaseConfig,
        max_connections: u32,
    ) -> Result<Pooled, sqlx::Error> {
        let options: PgConnectOptions = db.url.expose().parse()?;
        let options = match db.pooler {
            Pooler::None => options,
            Pooler::Transaction => options.statement_cache_capacity(0),
        };
        Ok(Pooled {
            pool: PgPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(5))
                .connect_lazy_with(options),
            pooler: db.pooler,
            session_platform: false,
            default: scope::Scope::Tenants(Vec::new()),
        })
    }

    /// The same pool, its [`Pooled::begin`] and [`Pooled::single`] in
    /// `scope` (the reconciler and the refunder: the default tenant's).
    pub fn scoped(&self, scope: scope::Scope) -> Pooled {
        Pooled {
            default: scope,
            ..self.clone()
        }
    }

    /// Whether a transaction in `scope` may leave it unnamed: the
    /// platform's, on a connection that opens in it.
    fn implied(&self, scope: &scope::Scope) -> bool {
        *scope == scope::Scope::Platform && self.session_platform && self.pooler == Pooler::None
    }

    /// A long-running binary's database, opened lazily (no connection until
    /// the first statement): `max_connections` connections, set up for
    /// whatever [`Pooler`] the configuration names.
    pub fn open(db: &DatabaseConfig, max_connections: u32) -> Result<Pooled, sqlx::Error> {
        Ok(Pooled::new(
            PgPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(5))
                .connect_lazy_with(connect_options(db)?),
            db.pooler,
        ))
    }

    /// A command's database (`oncehookctl`): connected now, retrying with
    /// backoff ([`RetryPolicy::DATABASE_CONNECT`]) until the database
    /// answers or `retries` retries after the first attempt run out.
    pub async fn connect(
        db: &DatabaseConfig,
        max_connections: u32,
        retries: usize,
    ) -> Result<Pooled, sqlx::Error> {
        let options = connect_options(db)?;
        let attempts = u32::try_from(retries).unwrap_or(u32::MAX).saturating_add(1);
        let policy = RetryPolicy::DATABASE_CONNECT.with_max_attempts(attempts);
        let open = || async {
            PgPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(options.clone())
                .await
        };
        let pool = open
            .retry(policy.builder())
            .notify(|err, delay| {
                tracing::warn!(%err, retry_in_ms = delay.as_millis() as u64, "database not reachable; retrying");
            })
            .await?;
        Ok(Pooled::new(pool, db.pooler))
    }

    /// The pooler between this pool and Postgres.
    pub fn pooler(&self) -> Pooler {
        self.pooler
    }

    /// A transaction: every statement in it runs on one server connection,
    /// whatever the pooler, in the pool's scope (the platform's, [`scope`];
    /// none on a [`Pooled::open_tenant_facing`] pool).
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin_in(&self.default.clone()).await
    }

    /// A transaction in `scope` (docs/tenants.md, "Isolation"): a
    /// tenant's transaction sees and writes that tenant's rows only,
    /// whatever its statements say. The scope goes with the `BEGIN`, in
    /// one message.
    pub async fn begin_in(
        &self,
        scope: &scope::Scope,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        if self.implied(scope) {
            self.pool.begin().await
        } else {
            self.pool
                .begin_with(sqlx::AssertSqlSafe(scope.begin_statement()))
                .await
        }
    }

    /// A transaction whose statements run on generic plans
    /// (`plan_cache_mode = force_generic_plan`, for this transaction only,
    /// sent with its `BEGIN` in one message). PostgreSQL plans a prepared
    /// statement anew at every execution while a plan for the values at
    /// hand looks cheaper than one for any values — and for statements
    /// over bound arrays it always does — so each execution paid its
    /// planning again (most of the worker's PostgreSQL time per event at
    /// batch 1, docs/scaling.md). With a generic plan a statement is
    /// planned once per connection and again only when the tables'
    /// statistics or schema change. Behind a transaction-mode pooler no
    /// statement is cached and each one is planned anyway: a plain
    /// transaction (in the pool's scope).
    pub async fn begin_generic(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin_generic_in(&self.default.clone()).await
    }

    /// [`Pooled::begin_generic`] in `scope` (the worker's transaction, in
    /// its deliveries' tenant's scope): still one message before the first
    /// statement.
    pub async fn begin_generic_in(
        &self,
        scope: &scope::Scope,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        match self.pooler {
            Pooler::Transaction => self.begin_in(scope).await,
            Pooler::None if self.implied(scope) => self.pool.begin_with(BEGIN_GENERIC).await,
            Pooler::None => {
                let statement = format!(
                    "{BEGIN_GENERIC}; SET LOCAL {} = '{}'",
                    scope::SETTING,
                    scope.setting()
                );
                self.pool.begin_with(sqlx::AssertSqlSafe(statement)).await
            }
        }
    }

    /// Closes the pool: waits for the connections in use to come back.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The pool, for the store's own functions and the embedded migrations.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A connection for statements run on their own (reads, mostly), in
    /// the pool's scope; end it with [`Single::finish`]. Behind a
    /// transaction-mode pooler the
    /// statements run in a transaction of their own: with no statement
    /// cached, sqlx runs a `query!` in two exchanges, each closed by a Sync
    /// (Parse and Describe, then Bind and Execute), and at the first one's
    /// ReadyForQuery (idle) the pooler may hand the server connection on,
    /// dropping the prepared statement (`DEALLOCATE ALL`), so the Bind fails
    /// ("prepared statement sqlx_s_N does not exist"; a test in
    /// `tests/tests/pooler.rs` shows it). Straight to Postgres, or behind a
    /// session-mode pooler, the statement is cached per connection and runs
    /// in one exchange: there a transaction would only add a BEGIN and a
    /// COMMIT round trip — unless the scope must be set, which takes one.
    pub async fn single(&self) -> Result<Single, sqlx::Error> {
        self.single_in(&self.default.clone()).await
    }

    /// [`Pooled::single`] in `scope`.
    pub async fn single_in(&self, scope: &scope::Scope) -> Result<Single, sqlx::Error> {
        Ok(if self.implied(scope) {
            Single::Direct(self.pool.acquire().await?)
        } else {
            Single::InTransaction(self.begin_in(scope).await?)
        })
    }
}

/// The `BEGIN` of [`Pooled::begin_generic`] (`deploy/bench/worker-tx.sql`
/// opens ceiling C's transaction the same way).
pub const BEGIN_GENERIC: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan";

/// How to reach the database `db` names: behind a transaction-mode pooler
/// no prepared statement is cached (a server connection is ours only inside
/// a transaction, and the pooler drops its statements when it hands it on).
///
/// A cache of 0 does not make sqlx send unnamed statements: it still
/// prepares each one under a name counted from 1 on every connection
/// (`sqlx_s_1`, `sqlx_s_2`, …) and never closes it. Behind PgBouncer that
/// is safe only because the pooler drops them whenever it hands a server
/// connection to another client (`server_reset_query = DEALLOCATE ALL`
/// with `server_reset_query_always = 1`, as both deploy files and the
/// tests' PgBouncer set it); without the reset the next client's first
/// statement meets the last one's `sqlx_s_1` ("already exists").
/// `tests/tests/pooler.rs` fails if the reset is dropped, and
/// `tests/tests/deploy_files.rs` holds the deploy files to the tests'
/// settings.
///
/// Straight to Postgres every connection opens in the platform's scope
/// (a session setting, [`scope`]); behind a transaction-mode pooler, where
/// a session setting would pass to whichever client gets the connection
/// next (and PgBouncer refuses startup options), each transaction sets it.
fn connect_options(db: &DatabaseConfig) -> Result<PgConnectOptions, sqlx::Error> {
    let options: PgConnectOptions = db.url.expose().parse()?;
    Ok(match db.pooler {
        Pooler::None => options.options([(scope::SETTING, scope::PLATFORM)]),
        Pooler::Transaction => options.statement_cache_capacity(0),
    })
}

/// A connection from [`Pooled::single`]: deref it to run the statements.
pub enum Single {
    Direct(PoolConnection<Postgres>),
    InTransaction(Transaction<'static, Postgres>),
}

impl Single {
    /// Commits the statement's own transaction, if it has one. Dropped
    /// without this (after an error), that transaction rolls back.
    pub async fn finish(self) -> Result<(), sqlx::Error> {
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
/// which a transaction-mode pooler needs (see [`Pooled::single`]); it runs
/// only when a session starts, on a readiness probe or while the database
/// is unreachable, never per event.
pub async fn ping(db: &Pooled) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query_scalar!("SELECT 1 AS one")
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
