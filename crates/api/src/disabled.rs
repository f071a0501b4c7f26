//! The disabled tenants, as the API knows them: read from `tenants` every
//! second (one small read per API process, never one per request), so a
//! tenant disabled with `oncehookctl tenants disable` has its keys refused
//! within about a second (docs/tenants.md, "Disabling a tenant"). Until the
//! first read succeeds no tenant counts as disabled; a failed read keeps
//! the last set.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_tenants::store::tenants;

/// How often the set is read again.
pub const EVERY: Duration = Duration::from_secs(1);

/// The disabled tenants' ids, shared by the refresher and the key check.
#[derive(Debug, Clone, Default)]
pub struct Disabled(Arc<RwLock<HashSet<String>>>);

impl Disabled {
    /// Whether tenant `id` is disabled.
    pub fn contains(&self, id: &str) -> bool {
        self.0.read().map(|set| set.contains(id)).unwrap_or(false)
    }

    fn replace(&self, ids: Vec<String>) {
        if let Ok(mut set) = self.0.write() {
            *set = ids.into_iter().collect();
        }
    }
}

/// Reads the set every [`EVERY`] until `shutdown`.
pub async fn run(pool: Pooled, disabled: Disabled, shutdown: Shutdown) {
    Periodic::every("disabled tenants", EVERY)
        .logs(
            "reading the disabled tenants failed; the last known set stays in force",
            "the disabled tenants are read again",
        )
        .run(&shutdown, || async {
            disabled.replace(tenants::disabled(&pool).await?);
            Ok::<_, sqlx::Error>(Next::Pause)
        })
        .await;
}
