//! The disabled tenants, as the API knows them: read from `tenants` every
//! second with the issued keys ([`crate::issued::run`]: one small read per
//! API process, never one per request), so a tenant disabled with
//! `oncehookctl tenants disable` has its keys refused within about a second
//! (docs/tenants.md, "Disabling a tenant"). Until the first read succeeds
//! no tenant counts as disabled; a failed read keeps the last set.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

/// The disabled tenants' ids, shared by the refresher and the key check.
#[derive(Debug, Clone, Default)]
pub struct Disabled(Arc<RwLock<HashSet<String>>>);

impl Disabled {
    /// Whether tenant `id` is disabled.
    pub fn contains(&self, id: &str) -> bool {
        self.0.read().map(|set| set.contains(id)).unwrap_or(false)
    }

    pub(crate) fn replace(&self, ids: Vec<String>) {
        if let Ok(mut set) = self.0.write() {
            *set = ids.into_iter().collect();
        }
    }
}
