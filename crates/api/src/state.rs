//! What every handler shares: the pool, the keys and their throttle, the
//! limits of `[api]` (with the one reading of a page's `limit`), and the
//! key ring of secrets at rest.

use oncehook_common::sealed::KeyRing;
use oncehook_common::store::Pooled;

use crate::auth::Auth;
use crate::error::ApiError;

/// The page size when `limit` is left out (capped by `api.limits.max_page_size`).
const DEFAULT_PAGE: u32 = 50;

pub struct State {
    pub pool: Pooled,
    pub auth: Auth,
    pub max_items: usize,
    pub max_page_size: u32,
    /// The ring the admin API seals secrets with (`secrets.keys`); `None`:
    /// sources cannot be added or rotated here.
    pub ring: Option<KeyRing>,
}

impl State {
    /// The size of a page asked for with `limit`: the default when left
    /// out, refused unless between 1 and `api.limits.max_page_size`.
    pub fn page_size(&self, limit: Option<u32>) -> Result<u32, ApiError> {
        let limit = limit.unwrap_or(DEFAULT_PAGE.min(self.max_page_size));
        if limit == 0 || limit > self.max_page_size {
            return Err(ApiError::invalid(
                "limit",
                format!("between 1 and {}", self.max_page_size),
            ));
        }
        Ok(limit)
    }
}
