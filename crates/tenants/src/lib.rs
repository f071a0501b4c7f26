//! The shops one deployment serves (docs/tenants.md). A tenant owns its
//! sources, keys, products, orders, endpoints and refund policy; every row
//! of those is marked with its id and PostgreSQL keeps each tenant's rows
//! from the others (`oncehook_common::store::scope`). This crate owns the
//! `tenants` table (creating a tenant, listing them, disabling and
//! enabling one), the sources made for them at runtime with their sealed
//! signing secrets, and their API keys issued at runtime — the one way
//! `oncehookctl tenants|sources` and the platform's admin API reach them.

pub mod store;

pub use oncehook_common::tenant::{BadTenantId, TenantId};
pub use store::keys::KeyError;
pub use store::sources::SourceError;
pub use store::tenants::{Status, Tenant, TenantError, TenantRate};
