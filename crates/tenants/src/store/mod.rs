//! The tenants' tables, one module each, checked against the schema at
//! compile time (`sqlx::query!`, query data in `.sqlx/`).
//!
//! - [`tenants`]: `tenants`, one row per shop.

pub mod tenants;
