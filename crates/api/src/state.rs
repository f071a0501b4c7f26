//! What every handler shares: the pool, the keys and their throttle, and
//! the limits of `[api]`.

use oncehook_common::store::Pooled;

use crate::auth::Auth;

pub struct State {
    pub pool: Pooled,
    pub auth: Auth,
    pub max_items: usize,
    pub max_page_size: u32,
}
