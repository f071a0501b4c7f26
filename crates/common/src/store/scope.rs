//! Whose rows a transaction sees, and the role the binaries connect as
//! (docs/tenants.md, "Isolation").
//!
//! Every tenant table has row-level security with one policy: a row is
//! visible, and may be written, only inside a transaction whose scope —
//! the setting [`SETTING`] — names its tenant, or is the platform's
//! ([`PLATFORM`]: the worker, relays, mailer, notifier, reconciler and
//! refunder work for every tenant). A transaction with no scope sees no
//! row. The binaries connect as [`SERVICE_ROLE`], which owns no table and
//! is no superuser, so PostgreSQL holds the policies against it; the
//! migrations run as the tables' owner.

use super::Pooled;
use crate::tenant::TenantId;

/// The setting that holds a transaction's scope: a tenant's id, several
/// separated by commas, or [`PLATFORM`].
pub const SETTING: &str = "oncehook.tenants";

/// The platform's scope: every tenant.
pub const PLATFORM: &str = "*";

/// The `BEGIN` of a transaction in the platform's scope behind a
/// transaction-mode pooler: the scope is set for this transaction only,
/// in the same message (no round trip of its own).
pub const BEGIN_PLATFORM: &str = "BEGIN; SET LOCAL oncehook.tenants = '*'";

/// Whose rows a transaction sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every tenant's: the binaries that work for all of them.
    Platform,
    /// These tenants' only (none: no row at all). A row inserted in the
    /// scope of exactly one tenant is that tenant's without naming it.
    Tenants(Vec<TenantId>),
}

impl Scope {
    /// One tenant's scope.
    pub fn tenant(id: TenantId) -> Scope {
        Scope::Tenants(vec![id])
    }

    /// Whether a row of tenant `id` is seen in this scope (what the
    /// policies let through, for what is read outside the database: the
    /// configuration's endpoints and sources).
    pub fn includes(&self, id: &TenantId) -> bool {
        match self {
            Scope::Platform => true,
            Scope::Tenants(ids) => ids.contains(id),
        }
    }

    /// The value of [`SETTING`] for this scope.
    pub fn setting(&self) -> String {
        match self {
            Scope::Platform => PLATFORM.to_owned(),
            Scope::Tenants(ids) => ids
                .iter()
                .map(TenantId::as_str)
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// The `BEGIN` of a transaction in this scope, the scope set for it
    /// alone in the same message. A tenant id holds no quote
    /// ([`TenantId::parse`]), so the literal is safe.
    pub fn begin_statement(&self) -> String {
        format!("BEGIN; SET LOCAL {SETTING} = '{}'", self.setting())
    }
}

/// Switches the current transaction to scope `setting` (a [`Scope::setting`]
/// value) and returns the one it replaced, to switch back: for work inside
/// a platform transaction that reads one tenant's rows by their tenant's
/// keys (rendering an order event by its order's reference). Outside a
/// transaction the switch would end with the statement: callers hold one.
pub async fn switch(conn: &mut sqlx::PgConnection, setting: &str) -> Result<String, sqlx::Error> {
    sqlx::query_scalar!(
        r#"WITH before AS MATERIALIZED (
               SELECT coalesce(current_setting('oncehook.tenants', true), '') AS scope)
           SELECT before.scope AS "scope!" FROM before, set_config('oncehook.tenants', $1, true)"#,
        setting
    )
    .fetch_one(conn)
    .await
}

/// The role the binaries connect as: it reads and writes every table the
/// migrations grant it, owns none, and cannot bypass row-level security.
pub const SERVICE_ROLE: &str = "oncehook_service";

/// Creates [`SERVICE_ROLE`] if the cluster has none (a role belongs to the
/// cluster, not to a database, so no migration can make it twice safely):
/// `LOGIN`, without a password (set one for password authentication:
/// docs/tenants.md). Run by `oncehookctl migrate` before the migrations,
/// which grant it its privileges. Two databases of one cluster migrating
/// at once may both try: the one that loses finds the role made.
pub async fn ensure_service_role(db: &Pooled) -> Result<(), sqlx::Error> {
    let exists = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = 'oncehook_service') AS "exists!""#
    )
    .fetch_one(db.pool())
    .await?;
    if exists {
        return Ok(());
    }
    match sqlx::query!(
        "CREATE ROLE oncehook_service LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE"
    )
    .execute(db.pool())
    .await
    {
        Ok(_) => {
            tracing::info!(role = SERVICE_ROLE, "created the binaries' database role");
            Ok(())
        }
        // 42710 duplicate_object, 23505 unique_violation: made meanwhile.
        Err(sqlx::Error::Database(e)) if e.code().is_some_and(|c| c == "42710" || c == "23505") => {
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// Gives [`SERVICE_ROLE`] the password `password` (for password
/// authentication: docs/tenants.md, "The binaries' role"). Run by
/// `oncehookctl migrate` as the tables' owner, after the role exists; the
/// owner needs `CREATEROLE` (and, from PostgreSQL 16, the admin option on
/// the role, which its creator has).
///
/// `ALTER ROLE … PASSWORD` takes no bind parameter, so PostgreSQL itself
/// quotes the value as a literal (`format`'s `%L`) and the statement it
/// returns is run as it is. Both go over a connection of their own that
/// logs no statement, slow or not, so the password never reaches this
/// process's log (the server's own `log_statement` is the operator's:
/// docs/tenants.md).
pub async fn set_service_role_password(
    db: &crate::config::DatabaseConfig,
    password: &crate::secret::Secret,
) -> Result<(), sqlx::Error> {
    use sqlx::{ConnectOptions, Connection};
    let options = super::connect_options(db)?.disable_statement_logging();
    let mut conn = sqlx::PgConnection::connect_with(&options).await?;
    let statement = sqlx::query_scalar!(
        r#"SELECT format('ALTER ROLE oncehook_service PASSWORD %L', $1::text) AS "statement!""#,
        password.expose()
    )
    .fetch_one(&mut conn)
    .await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    tracing::info!(
        role = SERVICE_ROLE,
        "set the password of the binaries' database role"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_begin_names_the_setting_and_scope() {
        assert_eq!(BEGIN_PLATFORM, Scope::Platform.begin_statement());
    }

    #[test]
    fn a_scope_names_its_tenants() {
        let id = |s: &str| TenantId::parse(s).expect("an id");
        assert_eq!(Scope::tenant(id("acme")).setting(), "acme");
        assert_eq!(
            Scope::Tenants(vec![id("acme"), id("globex")]).begin_statement(),
            "BEGIN; SET LOCAL oncehook.tenants = 'acme,globex'"
        );
        assert_eq!(Scope::Tenants(Vec::new()).setting(), "");
    }
}
