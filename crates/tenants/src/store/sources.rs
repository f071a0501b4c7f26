//! `sources` and `source_secrets`: a tenant's gateway accounts made at
//! runtime (docs/tenants.md, "Onboarding a merchant"), and their signing
//! secrets, sealed under the deployment's key ring — never stored, logged
//! or answered in the clear. Every write that changes what ingest must know
//! takes the next `admin_changes` number under one advisory lock, so
//! [`changes`] since a number is exact and ingest never reads the whole
//! table again. Each statement runs in the platform's scope: these are the
//! platform admin's verbs.

use oncehook_common::config::{SourceConfig, SourceFacts};
use oncehook_common::sealed::KeyRing;
use oncehook_common::sources_feed::{FeedPage, FeedRate, FeedSource, SealedSecret, secret_place};
use oncehook_common::store::Pooled;
use oncehook_common::store::scope::Scope;
use oncehook_common::tenant::TenantId;
use serde::Serialize;
use sqlx::{PgConnection, Postgres, Transaction};
use time::OffsetDateTime;

use super::serialise;
use super::tenants::{Status, TenantRate};

/// What a source given at runtime may be refused for.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("source {name}: {reason}")]
    Invalid { name: String, reason: String },
    #[error("source {0} already exists")]
    Exists(String),
    #[error("no source {0}")]
    NotFound(String),
    #[error("no tenant {0}")]
    NoTenant(TenantId),
    #[error("source {name} has no live secret {no}")]
    NoSecret { name: String, no: i32 },
    #[error(
        "secret {no} is source {name}'s last live one: add its successor first (a source with no \
         secret would refuse every webhook)"
    )]
    LastSecret { name: String, no: i32 },
    #[error(
        "no key ring to seal secrets with: set secrets.keys (ONCEHOOK_SECRET_KEYS) \
         (docs/tenants.md, \"Secrets at rest\")"
    )]
    NoKeyRing,
    #[error("reading or writing source {name}: {source}")]
    Database {
        name: String,
        #[source]
        source: sqlx::Error,
    },
}

fn db_error(name: &str) -> impl FnOnce(sqlx::Error) -> SourceError + '_ {
    move |source| SourceError::Database {
        name: name.to_owned(),
        source,
    }
}

/// A source as an operator sees it: everything but its secrets' values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    pub name: String,
    pub tenant: String,
    pub gateway: String,
    pub status: Status,
    pub tolerance_secs: i32,
    pub merchant_key: Option<String>,
    /// Its live signing secrets, by number (each verifies).
    pub secrets: Vec<SecretSlot>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub disabled_at: Option<OffsetDateTime>,
}

/// One live signing secret: its number and age, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretSlot {
    pub no: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// A new source, as given.
pub struct NewSource<'a> {
    pub facts: SourceFacts<'a>,
    /// Its first signing secret, in the clear (sealed before it is stored).
    pub secret: String,
}

/// Checks `new` as a `[[source]]` is checked, seals its secret and stores
/// it for its tenant, which must exist.
pub async fn create(
    db: &Pooled,
    ring: Option<&KeyRing>,
    new: NewSource<'_>,
) -> Result<Source, SourceError> {
    let ring = ring.ok_or(SourceError::NoKeyRing)?;
    let name = new.facts.name.to_owned();
    let checked = SourceConfig::checked(new.facts, vec![new.secret]).map_err(|reason| {
        SourceError::Invalid {
            name: name.clone(),
            reason,
        }
    })?;
    let sealed = ring.seal(checked.secrets[0].as_bytes(), &secret_place(&name, 1));
    let mut tx = db
        .begin_in(&Scope::Platform)
        .await
        .map_err(db_error(&name))?;
    serialise(&mut tx).await.map_err(db_error(&name))?;
    let tenant = sqlx::query_scalar!(
        "SELECT id FROM tenants WHERE id = $1",
        checked.tenant.as_str()
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error(&name))?;
    if tenant.is_none() {
        return Err(SourceError::NoTenant(checked.tenant));
    }
    let made = sqlx::query_scalar!(
        "WITH made AS (
             INSERT INTO sources (name, tenant_id, gateway, tolerance_secs, merchant_key)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING RETURNING name, tenant_id)
         INSERT INTO source_secrets (source, no, tenant_id, sealed)
         SELECT name, 1, tenant_id, $6 FROM made RETURNING source",
        &name,
        checked.tenant.as_str(),
        checked.gateway.as_str(),
        i32::try_from(checked.tolerance_secs).unwrap_or(i32::MAX),
        checked.merchant_key.as_deref(),
        sealed
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error(&name))?;
    if made.is_none() {
        return Err(SourceError::Exists(name));
    }
    let source = read(&mut tx, &name).await?;
    tx.commit().await.map_err(db_error(&name))?;
    source.ok_or(SourceError::NotFound(name))
}

/// Adds a signing secret to source `name` (rotation: the old and the new
/// both verify until the old is retired); returns its number.
pub async fn add_secret(
    db: &Pooled,
    ring: Option<&KeyRing>,
    name: &str,
    secret: &str,
) -> Result<Source, SourceError> {
    let ring = ring.ok_or(SourceError::NoKeyRing)?;
    let (mut tx, current) = locked(db, name).await?;
    let gateway = current.gateway.clone();
    let facts = SourceFacts {
        name,
        gateway: &gateway,
        tolerance_secs: u64::try_from(current.tolerance_secs).ok(),
        merchant_key: current.merchant_key.clone(),
        tenant: TenantId::parse(&current.tenant).map_err(|e| SourceError::Invalid {
            name: name.to_owned(),
            reason: e.to_string(),
        })?,
    };
    SourceConfig::checked(facts, vec![secret.to_owned()]).map_err(|reason| {
        SourceError::Invalid {
            name: name.to_owned(),
            reason,
        }
    })?;
    let no = sqlx::query_scalar!(
        r#"SELECT coalesce(max(no), 0) + 1 AS "no!" FROM source_secrets WHERE source = $1"#,
        name
    )
    .fetch_one(&mut *tx)
    .await
    .map_err(db_error(name))?;
    let sealed = ring.seal(secret.as_bytes(), &secret_place(name, no));
    sqlx::query!(
        "INSERT INTO source_secrets (source, no, tenant_id, sealed) VALUES ($1, $2, $3, $4)",
        name,
        no,
        current.tenant,
        sealed
    )
    .execute(&mut *tx)
    .await
    .map_err(db_error(name))?;
    changed(tx, name).await
}

/// Retires source `name`'s secret `no`: it verifies nothing from then on.
/// The last live secret cannot be retired.
pub async fn retire_secret(db: &Pooled, name: &str, no: i32) -> Result<Source, SourceError> {
    let (mut tx, current) = locked(db, name).await?;
    if !current.secrets.iter().any(|s| s.no == no) {
        return Err(SourceError::NoSecret {
            name: name.to_owned(),
            no,
        });
    }
    if current.secrets.len() == 1 {
        return Err(SourceError::LastSecret {
            name: name.to_owned(),
            no,
        });
    }
    sqlx::query!(
        "UPDATE source_secrets SET retired_at = now()
         WHERE source = $1 AND no = $2 AND retired_at IS NULL",
        name,
        no
    )
    .execute(&mut *tx)
    .await
    .map_err(db_error(name))?;
    changed(tx, name).await
}

/// Disables or enables source `name`.
pub async fn set_status(db: &Pooled, name: &str, status: Status) -> Result<Source, SourceError> {
    let mut tx = db
        .begin_in(&Scope::Platform)
        .await
        .map_err(db_error(name))?;
    serialise(&mut tx).await.map_err(db_error(name))?;
    let hit = sqlx::query!(
        "UPDATE sources SET status = $2, changed = nextval('admin_changes'),
             disabled_at = CASE WHEN $2 = 'disabled' THEN coalesce(disabled_at, now()) END
         WHERE name = $1",
        name,
        status.as_str()
    )
    .execute(&mut *tx)
    .await
    .map_err(db_error(name))?;
    if hit.rows_affected() == 0 {
        return Err(SourceError::NotFound(name.to_owned()));
    }
    let source = read(&mut tx, name).await?;
    tx.commit().await.map_err(db_error(name))?;
    source.ok_or_else(|| SourceError::NotFound(name.to_owned()))
}

/// Source `name`, if there is one.
pub async fn get(db: &Pooled, name: &str) -> Result<Option<Source>, SourceError> {
    let mut tx = db
        .begin_in(&Scope::Platform)
        .await
        .map_err(db_error(name))?;
    let source = read(&mut tx, name).await?;
    tx.commit().await.map_err(db_error(name))?;
    Ok(source)
}

/// Every source made at runtime, or one tenant's, by name.
pub async fn list(db: &Pooled, tenant: Option<&TenantId>) -> Result<Vec<Source>, SourceError> {
    let mut tx = db.begin_in(&Scope::Platform).await.map_err(db_error("*"))?;
    let sources = select(&mut tx, tenant.map(TenantId::as_str), None).await?;
    tx.commit().await.map_err(db_error("*"))?;
    Ok(sources)
}

/// The sources changed after change number `since`, and the number the
/// newest change has (ask again with that). `since` 0: every source.
pub async fn changes(db: &Pooled, since: i64) -> Result<FeedPage, SourceError> {
    let mut tx = db.begin_in(&Scope::Platform).await.map_err(db_error("*"))?;
    let newest = sqlx::query_scalar!(r#"SELECT coalesce(max(changed), 0) AS "n!" FROM sources"#)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error("*"))?;
    let rows = sqlx::query!(
        r#"SELECT s.name, s.tenant_id, s.gateway, s.tolerance_secs, s.merchant_key,
                  CASE WHEN s.status = 'active' AND t.status = 'active' THEN 'active'
                       ELSE 'disabled' END AS "status!",
                  t.rate_per_second, t.rate_burst,
                  coalesce(array_agg(k.no ORDER BY k.no) FILTER (WHERE k.no IS NOT NULL), '{}') AS "nos!",
                  coalesce(array_agg(k.sealed ORDER BY k.no) FILTER (WHERE k.no IS NOT NULL), '{}') AS "sealed!"
           FROM sources s
           JOIN tenants t ON t.id = s.tenant_id
           LEFT JOIN source_secrets k ON k.source = s.name AND k.retired_at IS NULL
           WHERE s.changed > $1 AND s.changed <= $2
           GROUP BY s.name, t.status, t.rate_per_second, t.rate_burst ORDER BY s.changed"#,
        since,
        newest
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error("*"))?;
    tx.commit().await.map_err(db_error("*"))?;
    let sources = rows
        .into_iter()
        .map(|r| FeedSource {
            name: r.name,
            tenant: r.tenant_id,
            gateway: r.gateway,
            status: r.status,
            tolerance_secs: r.tolerance_secs,
            merchant_key: r.merchant_key,
            secrets: r
                .nos
                .into_iter()
                .zip(r.sealed)
                .map(|(no, sealed)| SealedSecret { no, sealed })
                .collect(),
            rate: TenantRate::from_columns(r.rate_per_second, r.rate_burst).map(|t| FeedRate {
                per_second: t.per_second,
                burst: t.burst,
            }),
        })
        .collect();
    Ok(FeedPage {
        version: newest,
        sources,
    })
}

/// Marks every source of `tenant` changed (its status moved: ingest
/// serves or refuses them all). In the caller's transaction.
pub(crate) async fn tenant_changed(
    conn: &mut PgConnection,
    tenant: &TenantId,
) -> Result<(), sqlx::Error> {
    serialise(conn).await?;
    sqlx::query!(
        "UPDATE sources SET changed = nextval('admin_changes') WHERE tenant_id = $1",
        tenant.as_str()
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Source `name` in a new platform transaction, after every change made
/// before (the change lock held until the transaction ends).
async fn locked(
    db: &Pooled,
    name: &str,
) -> Result<(Transaction<'static, Postgres>, Source), SourceError> {
    let mut tx = db
        .begin_in(&Scope::Platform)
        .await
        .map_err(db_error(name))?;
    serialise(&mut tx).await.map_err(db_error(name))?;
    let current = read(&mut tx, name)
        .await?
        .ok_or_else(|| SourceError::NotFound(name.to_owned()))?;
    Ok((tx, current))
}

/// Marks source `name` changed (ingest reads it again), commits, and
/// answers the source as it is now.
async fn changed(
    mut tx: Transaction<'static, Postgres>,
    name: &str,
) -> Result<Source, SourceError> {
    sqlx::query!(
        "UPDATE sources SET changed = nextval('admin_changes') WHERE name = $1",
        name
    )
    .execute(&mut *tx)
    .await
    .map_err(db_error(name))?;
    let source = read(&mut tx, name).await?;
    tx.commit().await.map_err(db_error(name))?;
    source.ok_or_else(|| SourceError::NotFound(name.to_owned()))
}

struct Row {
    name: String,
    tenant_id: String,
    gateway: String,
    status: String,
    tolerance_secs: i32,
    merchant_key: Option<String>,
    created_at: OffsetDateTime,
    disabled_at: Option<OffsetDateTime>,
    nos: Vec<i32>,
    made: Vec<OffsetDateTime>,
}

impl From<Row> for Source {
    fn from(r: Row) -> Source {
        Source {
            name: r.name,
            tenant: r.tenant_id,
            gateway: r.gateway,
            status: Status::from_db(&r.status),
            tolerance_secs: r.tolerance_secs,
            merchant_key: r.merchant_key,
            secrets: r
                .nos
                .into_iter()
                .zip(r.made)
                .map(|(no, created_at)| SecretSlot { no, created_at })
                .collect(),
            created_at: r.created_at,
            disabled_at: r.disabled_at,
        }
    }
}

async fn read(conn: &mut PgConnection, name: &str) -> Result<Option<Source>, SourceError> {
    Ok(select(conn, None, Some(name)).await?.pop())
}

/// The sources of `tenant` (or every tenant's), or the one named `name`.
async fn select(
    conn: &mut PgConnection,
    tenant: Option<&str>,
    name: Option<&str>,
) -> Result<Vec<Source>, SourceError> {
    let rows = sqlx::query_as!(
        Row,
        r#"SELECT s.name, s.tenant_id, s.gateway, s.status, s.tolerance_secs, s.merchant_key,
                  s.created_at, s.disabled_at,
                  coalesce(array_agg(k.no ORDER BY k.no) FILTER (WHERE k.no IS NOT NULL), '{}') AS "nos!",
                  coalesce(array_agg(k.created_at ORDER BY k.no) FILTER (WHERE k.no IS NOT NULL), '{}') AS "made!"
           FROM sources s
           LEFT JOIN source_secrets k ON k.source = s.name AND k.retired_at IS NULL
           WHERE ($1::text IS NULL OR s.tenant_id = $1) AND ($2::text IS NULL OR s.name = $2)
           GROUP BY s.name ORDER BY s.name"#,
        tenant,
        name
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error(name.unwrap_or("*")))?;
    Ok(rows.into_iter().map(Source::from).collect())
}
