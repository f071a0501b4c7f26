//! `tenants`: one row per shop the deployment serves. `default` is made by
//! the migration that brought tenants (every earlier row is its). Rows are
//! never deleted: a tenant that leaves is disabled, and its books stay.
//! Each statement runs in the platform's scope (the platform admin's
//! view); in a tenant's scope the table shows that tenant's row only.

use oncehook_common::store::Pooled;
use oncehook_common::store::scope::Scope;
use oncehook_common::tenant::TenantId;
use serde::Serialize;
use time::OffsetDateTime;

/// Whether a tenant's webhooks, keys and operators are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    /// Its sources refuse webhooks and its keys are refused
    /// (docs/tenants.md, "Disabling a tenant"); its rows are kept.
    Disabled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Disabled => "disabled",
        }
    }

    pub(crate) fn from_db(s: &str) -> Status {
        if s == "disabled" {
            Status::Disabled
        } else {
            Status::Active
        }
    }
}

/// A tenant as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tenant {
    pub id: String,
    pub name: String,
    pub status: Status,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub disabled_at: Option<OffsetDateTime>,
    /// The sender of its customers' emails; `None`: the deployment's
    /// `mail.from`.
    pub mail_from: Option<String>,
    /// Each of its sources' rate at ingest's door, set at runtime
    /// (`oncehookctl tenants limits`); `None`: the configuration file's.
    pub rate: Option<TenantRate>,
}

/// A tenant's rate as set at runtime: webhooks per second for each of its
/// sources (0: no limit) and the burst (0: twice the rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TenantRate {
    pub per_second: u32,
    pub burst: u32,
}

/// Why a tenant could not be created or changed.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("tenant {0} already exists")]
    Exists(TenantId),
    #[error("no tenant {0}")]
    NotFound(TenantId),
    #[error("a tenant's name must be 1 to 200 characters without control characters")]
    BadName,
    #[error("the default tenant cannot be disabled: it holds what no tenant was named for")]
    DefaultStays,
    #[error("a sender must be one mailbox, `Name <address@host>` or `address@host`: {0}")]
    BadSender(String),
    #[error("reading or writing tenant {tenant}: {source}")]
    Database {
        tenant: String,
        #[source]
        source: sqlx::Error,
    },
}

fn db_error(tenant: &TenantId) -> impl FnOnce(sqlx::Error) -> TenantError + '_ {
    move |source| TenantError::Database {
        tenant: tenant.to_string(),
        source,
    }
}

struct Row {
    id: String,
    name: String,
    status: String,
    created_at: OffsetDateTime,
    disabled_at: Option<OffsetDateTime>,
    mail_from: Option<String>,
    rate_per_second: Option<i32>,
    rate_burst: Option<i32>,
}

impl From<Row> for Tenant {
    fn from(r: Row) -> Tenant {
        Tenant {
            id: r.id,
            name: r.name,
            status: Status::from_db(&r.status),
            created_at: r.created_at,
            disabled_at: r.disabled_at,
            mail_from: r.mail_from,
            rate: TenantRate::from_columns(r.rate_per_second, r.rate_burst),
        }
    }
}

impl TenantRate {
    /// The rate `tenants.rate_per_second` and `rate_burst` hold; `None`
    /// when the first is NULL (the file's rate).
    pub(crate) fn from_columns(per_second: Option<i32>, burst: Option<i32>) -> Option<TenantRate> {
        per_second.map(|per_second| TenantRate {
            per_second: u32::try_from(per_second).unwrap_or(0),
            burst: burst.and_then(|b| u32::try_from(b).ok()).unwrap_or(0),
        })
    }
}

/// Creates tenant `id` named `name`; refuses an id already taken.
pub async fn create(db: &Pooled, id: &TenantId, name: &str) -> Result<Tenant, TenantError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(TenantError::BadName);
    }
    let mut tx = db.begin_in(&Scope::Platform).await.map_err(db_error(id))?;
    let row = sqlx::query_as!(
        Row,
        "INSERT INTO tenants (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING
         RETURNING id, name, status, created_at, disabled_at, mail_from, rate_per_second, rate_burst",
        id.as_str(),
        name
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error(id))?;
    tx.commit().await.map_err(db_error(id))?;
    row.map(Tenant::from)
        .ok_or_else(|| TenantError::Exists(id.clone()))
}

/// Every tenant, by id.
pub async fn list(db: &Pooled) -> Result<Vec<Tenant>, sqlx::Error> {
    let mut conn = db.single_in(&Scope::Platform).await?;
    let rows = sqlx::query_as!(
        Row,
        "SELECT id, name, status, created_at, disabled_at, mail_from, rate_per_second, rate_burst
         FROM tenants ORDER BY id"
    )
    .fetch_all(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(rows.into_iter().map(Tenant::from).collect())
}

/// Tenant `id`, if there is one.
pub async fn get(db: &Pooled, id: &TenantId) -> Result<Option<Tenant>, sqlx::Error> {
    let mut conn = db.single_in(&Scope::Platform).await?;
    let row = sqlx::query_as!(
        Row,
        "SELECT id, name, status, created_at, disabled_at, mail_from, rate_per_second, rate_burst
         FROM tenants WHERE id = $1",
        id.as_str()
    )
    .fetch_optional(&mut *conn)
    .await?;
    conn.finish().await?;
    Ok(row.map(Tenant::from))
}

/// Disables or enables tenant `id`; the time it was disabled is kept
/// while it stays disabled.
pub async fn set_status(db: &Pooled, id: &TenantId, status: Status) -> Result<Tenant, TenantError> {
    if id.is_default() && status == Status::Disabled {
        return Err(TenantError::DefaultStays);
    }
    let mut tx = db.begin_in(&Scope::Platform).await.map_err(db_error(id))?;
    let row = sqlx::query_as!(
        Row,
        "UPDATE tenants SET status = $2,
             disabled_at = CASE WHEN $2 = 'disabled' THEN coalesce(disabled_at, now()) END
         WHERE id = $1
         RETURNING id, name, status, created_at, disabled_at, mail_from, rate_per_second, rate_burst",
        id.as_str(),
        status.as_str()
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error(id))?;
    // Ingest serves or refuses every source of the tenant from now on.
    super::sources::tenant_changed(&mut tx, id)
        .await
        .map_err(db_error(id))?;
    tx.commit().await.map_err(db_error(id))?;
    row.map(Tenant::from)
        .ok_or_else(|| TenantError::NotFound(id.clone()))
}

/// Sets the sender of tenant `id`'s customers' emails (`None`: the
/// deployment's `mail.from` again); refuses what is not one mailbox.
pub async fn set_mail_from(
    db: &Pooled,
    id: &TenantId,
    from: Option<&str>,
) -> Result<Tenant, TenantError> {
    let from = from.map(str::trim).filter(|f| !f.is_empty());
    if let Some(f) = from {
        f.parse::<lettre::message::Mailbox>()
            .map_err(|e| TenantError::BadSender(e.to_string()))?;
    }
    let mut tx = db.begin_in(&Scope::Platform).await.map_err(db_error(id))?;
    let row = sqlx::query_as!(
        Row,
        "UPDATE tenants SET mail_from = $2 WHERE id = $1
         RETURNING id, name, status, created_at, disabled_at, mail_from, rate_per_second, rate_burst",
        id.as_str(),
        from
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error(id))?;
    tx.commit().await.map_err(db_error(id))?;
    row.map(Tenant::from)
        .ok_or_else(|| TenantError::NotFound(id.clone()))
}

/// Sets each of tenant `id`'s sources' rate at ingest's door (`None`: the
/// configuration file's again); every ingest serves it within about two
/// seconds (its sources are marked changed for the sources feed).
pub async fn set_rate(
    db: &Pooled,
    id: &TenantId,
    rate: Option<TenantRate>,
) -> Result<Tenant, TenantError> {
    let as_db = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let (per_second, burst) = (
        rate.map(|r| as_db(r.per_second)),
        rate.map(|r| as_db(r.burst)),
    );
    let mut tx = db.begin_in(&Scope::Platform).await.map_err(db_error(id))?;
    let row = sqlx::query_as!(
        Row,
        "UPDATE tenants SET rate_per_second = $2, rate_burst = $3 WHERE id = $1
         RETURNING id, name, status, created_at, disabled_at, mail_from, rate_per_second, rate_burst",
        id.as_str(),
        per_second,
        burst
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error(id))?;
    super::sources::tenant_changed(&mut tx, id)
        .await
        .map_err(db_error(id))?;
    tx.commit().await.map_err(db_error(id))?;
    row.map(Tenant::from)
        .ok_or_else(|| TenantError::NotFound(id.clone()))
}

/// The ids of the disabled tenants (the shop's API refuses their keys).
pub async fn disabled(db: &Pooled) -> Result<Vec<String>, sqlx::Error> {
    let mut conn = db.single_in(&Scope::Platform).await?;
    let ids = sqlx::query_scalar!("SELECT id FROM tenants WHERE status = 'disabled' ORDER BY id")
        .fetch_all(&mut *conn)
        .await?;
    conn.finish().await?;
    Ok(ids)
}
