//! The tenants' API keys issued at runtime (`api_keys`, docs/tenants.md),
//! as the API knows them: the keys changed since the last look are read
//! every second (one small read per API process, never one per request),
//! so an issued key works and a revoked one is refused within about a
//! second. Until the first read succeeds only the file's keys work; a
//! failed read keeps what was known.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use oncehook_common::config::{ApiKey, ApiScope};
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::tenant::TenantId;
use oncehook_tenants::store::keys::{self, KeyChange};
use oncehook_tenants::store::tenants;

use crate::disabled::Disabled;

/// How often the changes are read.
pub const EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Known {
    /// The newest change read.
    seen: i64,
    /// Live keys by the SHA-256 of the key.
    by_hash: HashMap<[u8; 32], ApiKey>,
}

/// The live issued keys, shared by the refresher and the key check.
#[derive(Debug, Clone, Default)]
pub struct Issued(Arc<RwLock<Known>>);

impl Issued {
    /// The live issued key whose hash is `digest`.
    pub fn find(&self, digest: &[u8; 32]) -> Option<ApiKey> {
        self.0.read().ok()?.by_hash.get(digest).cloned()
    }

    fn seen(&self) -> i64 {
        self.0.read().map(|k| k.seen).unwrap_or(0)
    }

    fn apply(&self, newest: i64, changes: Vec<KeyChange>) {
        let Ok(mut known) = self.0.write() else {
            return;
        };
        for change in changes {
            let Ok(hash) = <[u8; 32]>::try_from(change.hash.as_slice()) else {
                continue;
            };
            if change.revoked {
                known.by_hash.remove(&hash);
                continue;
            }
            match key(change) {
                Some(k) => known.by_hash.insert(hash, k),
                None => known.by_hash.remove(&hash),
            };
        }
        known.seen = newest;
    }
}

/// A stored key as the check uses it; `None` for one the database holds
/// wrongly (an unknown scope or tenant id is never widened).
fn key(change: KeyChange) -> Option<ApiKey> {
    let scopes = change
        .scopes
        .iter()
        .map(|s| ApiScope::parse(s))
        .collect::<Option<Vec<_>>>()?;
    Some(ApiKey {
        name: change.name,
        hash: <[u8; 32]>::try_from(change.hash.as_slice()).ok()?,
        scopes,
        tenant: TenantId::parse(&change.tenant).ok()?,
    })
}

/// Reads the issued keys changed since the last look and the disabled
/// tenants every [`EVERY`] until `shutdown`.
pub async fn run(pool: Pooled, issued: Issued, disabled: Disabled, shutdown: Shutdown) {
    Periodic::every("issued API keys and disabled tenants", EVERY)
        .logs(
            "reading the issued API keys or the disabled tenants failed; what is known stays in force",
            "the issued API keys and the disabled tenants are read again",
        )
        .run(&shutdown, || async {
            let (newest, changes) = keys::changes(&pool, issued.seen()).await?;
            issued.apply(newest, changes);
            disabled.replace(tenants::disabled(&pool).await?);
            Ok::<_, keys::KeyError>(Next::Pause)
        })
        .await;
}
