//! The shops one deployment serves (docs/tenants.md). A tenant owns its
//! sources, keys, products, orders, endpoints and refund policy; every row
//! of those is marked with its id and PostgreSQL keeps each tenant's rows
//! from the others (`oncehook_common::store::scope`). This crate owns the
//! `tenants` table: creating a tenant, listing them, disabling and
//! enabling one — the one way `oncehookctl tenants` and the platform's
//! admin API reach it.

pub mod store;

pub use oncehook_common::tenant::{BadTenantId, TenantId};
pub use store::tenants::{Status, Tenant, TenantError};
