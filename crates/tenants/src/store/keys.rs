//! `api_keys`: a tenant's API keys issued at runtime through the
//! platform's admin API (docs/tenants.md, "Onboarding a merchant"). A key
//! is shown once, when it is issued; only its SHA-256 is stored. The shop's
//! API reads the keys changed since it last looked ([`changes`]) every
//! second, so an issued key works and a revoked one is refused within about
//! a second, without a read per request.

use oncehook_common::config::ApiScope;
use oncehook_common::store::Pooled;
use oncehook_common::store::scope::Scope;
use oncehook_common::tenant::TenantId;
use rand::TryRngCore;
use rand::rngs::OsRng;
use serde::Serialize;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::serialise;

/// What issuing or revoking a key may be refused for.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("a key's name must be 1 to 100 characters without control characters")]
    BadName,
    #[error("unknown scope {0:?} (orders:write, orders:read, products:write, events:read)")]
    BadScope(String),
    #[error("a key needs at least one scope")]
    NoScope,
    #[error("no tenant {0}")]
    NoTenant(TenantId),
    #[error("no key {0}")]
    NotFound(String),
    #[error("reading or writing the API keys: {0}")]
    Database(#[from] sqlx::Error),
}

/// A key as an operator sees it: never the key, nor its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Key {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub scopes: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub revoked_at: Option<OffsetDateTime>,
}

/// A key just issued: the key itself, shown this once.
#[derive(Debug, Clone, Serialize)]
pub struct Issued {
    #[serde(flatten)]
    pub key: Key,
    pub secret: String,
}

/// Issues a key named `name` for `tenant` with `scopes`.
pub async fn issue(
    db: &Pooled,
    tenant: &TenantId,
    name: &str,
    scopes: &[String],
) -> Result<Issued, KeyError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(KeyError::BadName);
    }
    let mut checked: Vec<String> = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let parsed = ApiScope::parse(scope).ok_or_else(|| KeyError::BadScope(scope.clone()))?;
        if !checked.iter().any(|s| s == parsed.as_str()) {
            checked.push(parsed.as_str().to_owned());
        }
    }
    if checked.is_empty() {
        return Err(KeyError::NoScope);
    }
    let secret = format!("ohk_{}", hex::encode(random::<32>()));
    let id = format!("key_{}", hex::encode(random::<8>()));
    let hash = Sha256::digest(secret.as_bytes()).to_vec();
    let mut tx = db.begin_in(&Scope::Platform).await?;
    serialise(&mut tx).await?;
    let row = sqlx::query_as!(
        Row,
        "INSERT INTO api_keys (id, tenant_id, name, hash, scopes)
         SELECT $1, t.id, $3, $4, $5 FROM tenants t WHERE t.id = $2
         RETURNING id, tenant_id, name, scopes, created_at, revoked_at",
        id,
        tenant.as_str(),
        name,
        hash,
        &checked
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    let key = row.ok_or_else(|| KeyError::NoTenant(tenant.clone()))?;
    Ok(Issued {
        key: key.into(),
        secret,
    })
}

/// Tenant `tenant`'s keys, revoked ones included, oldest first.
pub async fn list(db: &Pooled, tenant: &TenantId) -> Result<Vec<Key>, KeyError> {
    let mut tx = db.begin_in(&Scope::Platform).await?;
    let rows = sqlx::query_as!(
        Row,
        "SELECT id, tenant_id, name, scopes, created_at, revoked_at FROM api_keys
         WHERE tenant_id = $1 ORDER BY created_at, id",
        tenant.as_str()
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows.into_iter().map(Key::from).collect())
}

/// Revokes key `id`: refused from then on. Revoking it again changes
/// nothing.
pub async fn revoke(db: &Pooled, id: &str) -> Result<Key, KeyError> {
    let mut tx = db.begin_in(&Scope::Platform).await?;
    serialise(&mut tx).await?;
    let row = sqlx::query_as!(
        Row,
        "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()),
             changed = CASE WHEN revoked_at IS NULL THEN nextval('admin_changes') ELSE changed END
         WHERE id = $1
         RETURNING id, tenant_id, name, scopes, created_at, revoked_at",
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.map(Key::from)
        .ok_or_else(|| KeyError::NotFound(id.to_owned()))
}

/// A key as the API must know it to check one presented.
#[derive(Debug, Clone)]
pub struct KeyChange {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub hash: Vec<u8>,
    pub scopes: Vec<String>,
    pub revoked: bool,
}

/// The keys issued or revoked after change number `since`, and the
/// number of the newest change (ask again with that). `since` 0: every
/// key.
pub async fn changes(db: &Pooled, since: i64) -> Result<(i64, Vec<KeyChange>), KeyError> {
    let mut tx = db.begin_in(&Scope::Platform).await?;
    let newest = sqlx::query_scalar!(r#"SELECT coalesce(max(changed), 0) AS "n!" FROM api_keys"#)
        .fetch_one(&mut *tx)
        .await?;
    let rows = sqlx::query!(
        "SELECT id, tenant_id, name, hash, scopes, revoked_at IS NOT NULL AS revoked
         FROM api_keys WHERE changed > $1 AND changed <= $2 ORDER BY changed",
        since,
        newest
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((
        newest,
        rows.into_iter()
            .map(|r| KeyChange {
                id: r.id,
                tenant: r.tenant_id,
                name: r.name,
                hash: r.hash,
                scopes: r.scopes,
                revoked: r.revoked.unwrap_or(true),
            })
            .collect(),
    ))
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random number generator failed");
    bytes
}

struct Row {
    id: String,
    tenant_id: String,
    name: String,
    scopes: Vec<String>,
    created_at: OffsetDateTime,
    revoked_at: Option<OffsetDateTime>,
}

impl From<Row> for Key {
    fn from(r: Row) -> Key {
        Key {
            id: r.id,
            tenant: r.tenant_id,
            name: r.name,
            scopes: r.scopes,
            created_at: r.created_at,
            revoked_at: r.revoked_at,
        }
    }
}
