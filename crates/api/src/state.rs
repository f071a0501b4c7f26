//! What every handler shares: the pool, the keys and their throttle, and
//! the limits of `[api]`.

use sqlx::PgPool;

use crate::auth::Auth;

pub struct State {
    pub pool: PgPool,
    pub auth: Auth,
    pub max_items: usize,
    pub max_page_size: u32,
}
