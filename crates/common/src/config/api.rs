//! `[api]`: the shop's API (`oncehook-api`) — its own listener (never the
//! public ingest port), its limits (body size, items per order, page size,
//! failed authentications per client before it is throttled) and its keys
//! (`[[api.key]]`, in the file only: a name, the SHA-256 of the key in hex,
//! and the scopes the key is given; tenants' keys issued at runtime live in
//! the database), the platform's admin keys (`[[api.admin_key]]`, the same
//! shape with admin scopes), and how long an `Idempotency-Key` is
//! remembered (`api.idempotency_ttl`).

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::error::invalid;
use super::keys::Key;
use super::values::{Addr, HumanDuration, Within};
use crate::tenant::TenantId;

pub const ENV_API_ADDR: &str = "ONCEHOOK_API_ADDR";
pub const ENV_API_BODY_LIMIT_BYTES: &str = "ONCEHOOK_API_BODY_LIMIT_BYTES";
pub const ENV_API_MAX_ITEMS: &str = "ONCEHOOK_API_MAX_ITEMS";
pub const ENV_API_MAX_PAGE_SIZE: &str = "ONCEHOOK_API_MAX_PAGE_SIZE";
pub const ENV_API_AUTH_FAILURES_PER_MINUTE: &str = "ONCEHOOK_API_AUTH_FAILURES_PER_MINUTE";
pub const ENV_API_IDEMPOTENCY_TTL: &str = "ONCEHOOK_API_IDEMPOTENCY_TTL";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_API_ADDR, "api.addr"),
    Key::new(ENV_API_BODY_LIMIT_BYTES, "api.limits.body_limit_bytes"),
    Key::new(ENV_API_MAX_ITEMS, "api.limits.max_items"),
    Key::new(ENV_API_MAX_PAGE_SIZE, "api.limits.max_page_size"),
    Key::new(
        ENV_API_AUTH_FAILURES_PER_MINUTE,
        "api.limits.auth_failures_per_minute",
    ),
    Key::new(ENV_API_IDEMPOTENCY_TTL, "api.idempotency_ttl"),
];

/// What an API key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiScope {
    /// Create orders.
    OrdersWrite,
    /// Read orders and list them.
    OrdersRead,
    /// Create and rename products, move their stock.
    ProductsWrite,
    /// Read the events of orders (reserved for the events feed).
    EventsRead,
}

impl ApiScope {
    pub const ALL: [ApiScope; 4] = [
        ApiScope::OrdersWrite,
        ApiScope::OrdersRead,
        ApiScope::ProductsWrite,
        ApiScope::EventsRead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApiScope::OrdersWrite => "orders:write",
            ApiScope::OrdersRead => "orders:read",
            ApiScope::ProductsWrite => "products:write",
            ApiScope::EventsRead => "events:read",
        }
    }

    pub fn parse(value: &str) -> Option<ApiScope> {
        ApiScope::ALL
            .into_iter()
            .find(|s| s.as_str() == value.trim())
    }
}

/// What a platform admin key may do (`[[api.admin_key]]`, docs/tenants.md):
/// no admin key reaches a tenant's orders, and no tenant key reaches these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AdminScope {
    /// Create and disable tenants, add, rotate and disable sources, issue
    /// and revoke tenants' API keys.
    Admin,
    /// Read the sources' changes, secrets sealed (ingest's key).
    SourcesFeed,
}

impl AdminScope {
    pub const ALL: [AdminScope; 2] = [AdminScope::Admin, AdminScope::SourcesFeed];

    pub fn as_str(self) -> &'static str {
        match self {
            AdminScope::Admin => "admin",
            AdminScope::SourcesFeed => "sources:feed",
        }
    }

    pub fn parse(value: &str) -> Option<AdminScope> {
        AdminScope::ALL
            .into_iter()
            .find(|s| s.as_str() == value.trim())
    }
}

/// A platform admin key, validated.
#[derive(Clone)]
pub struct AdminKey {
    pub name: String,
    /// SHA-256 of the key.
    pub hash: [u8; 32],
    pub scopes: Vec<AdminScope>,
}

impl std::fmt::Debug for AdminKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminKey")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// `[api]`: the shop's API (`oncehook-api`).
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Its own listener, never the public ingest port.
    pub addr: SocketAddr,
    /// Larger request bodies get 413.
    pub body_limit_bytes: usize,
    /// The most items one order may have.
    pub max_items: usize,
    /// The most orders one page of `GET /v1/orders` holds.
    pub max_page_size: u32,
    /// Failed authentications one client address may make in a minute
    /// before it gets 429.
    pub auth_failures_per_minute: u32,
    /// How long an `Idempotency-Key` and its answer are kept; the API
    /// deletes older ones (a retry after that is a new request).
    pub idempotency_ttl: Duration,
    /// `[[api.key]]`: who may call.
    pub keys: Vec<ApiKey>,
    /// `[[api.admin_key]]`: the platform's admin keys.
    pub admin_keys: Vec<AdminKey>,
}

/// One configured API key: never the key itself, only its SHA-256.
#[derive(Clone)]
pub struct ApiKey {
    pub name: String,
    /// SHA-256 of the key.
    pub hash: [u8; 32],
    pub scopes: Vec<ApiScope>,
    /// The tenant whose orders, products and events the key reaches, and
    /// no other's (docs/tenants.md); unset in the file: the default tenant.
    pub tenant: TenantId,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

type BodyLimit = Within<u64, 1_024, 16_777_216>;
type MaxItems = Within<u16, 1, 1_000>;
type MaxPageSize = Within<u32, 1, 1_000>;
type FailuresPerMinute = Within<u32, 1, 100_000>;

/// `[api]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ApiSection {
    addr: Addr,
    idempotency_ttl: HumanDuration,
    limits: Limits,
    /// `[[api.key]]`
    pub key: Vec<KeyEntry>,
    /// `[[api.admin_key]]`
    pub admin_key: Vec<AdminKeyEntry>,
}

/// `[api.limits]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct Limits {
    body_limit_bytes: BodyLimit,
    max_items: MaxItems,
    max_page_size: MaxPageSize,
    auth_failures_per_minute: FailuresPerMinute,
}

/// A `[[api.admin_key]]` table as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdminKeyEntry {
    name: String,
    hash: String,
    scopes: Vec<String>,
}

/// A `[[api.key]]` table as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyEntry {
    name: String,
    hash: String,
    scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
}

impl Default for ApiSection {
    fn default() -> Self {
        ApiSection {
            addr: Addr(SocketAddr::from(([127, 0, 0, 1], 8082))),
            idempotency_ttl: HumanDuration(Duration::from_secs(24 * 3_600)),
            limits: Limits::default(),
            key: Vec::new(),
            admin_key: Vec::new(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_limit_bytes: Within(65_536),
            max_items: Within(100),
            max_page_size: Within(100),
            auth_failures_per_minute: Within(20),
        }
    }
}

impl ApiSection {
    /// The section, each key checked and no name or hash given twice.
    pub(super) fn validate(self) -> Result<ApiConfig, ConfigError> {
        let mut keys: Vec<ApiKey> = Vec::with_capacity(self.key.len());
        for entry in self.key {
            let key = entry.validate()?;
            if keys.iter().any(|k| k.name == key.name) {
                return Err(key_error(&key.name, "configured twice"));
            }
            if keys.iter().any(|k| k.hash == key.hash) {
                return Err(key_error(&key.name, "has the same hash as another key"));
            }
            keys.push(key);
        }
        let mut admin_keys: Vec<AdminKey> = Vec::with_capacity(self.admin_key.len());
        for entry in self.admin_key {
            let key = entry.validate()?;
            if admin_keys.iter().any(|k| k.name == key.name) {
                return Err(admin_key_error(&key.name, "configured twice"));
            }
            if keys.iter().any(|k| k.hash == key.hash)
                || admin_keys.iter().any(|k| k.hash == key.hash)
            {
                return Err(admin_key_error(
                    &key.name,
                    "has the same hash as another key (an admin key is never a tenant's key)",
                ));
            }
            admin_keys.push(key);
        }
        Ok(ApiConfig {
            addr: self.addr.0,
            body_limit_bytes: usize::try_from(self.limits.body_limit_bytes.0).unwrap_or(usize::MAX),
            max_items: usize::from(self.limits.max_items.0),
            max_page_size: self.limits.max_page_size.0,
            auth_failures_per_minute: self.limits.auth_failures_per_minute.0,
            idempotency_ttl: self.idempotency_ttl.0,
            keys,
            admin_keys,
        })
    }
}

impl KeyEntry {
    fn validate(self) -> Result<ApiKey, ConfigError> {
        let name = self.name.trim().to_owned();
        if name.is_empty() || name == "unknown" || name.chars().any(|c| c.is_control()) {
            return Err(key_error(
                &name,
                "an API key needs a name (not `unknown`, no control characters)",
            ));
        }
        let hash = parse_hash(&self.hash).ok_or_else(|| {
            key_error(
                &name,
                "hash must be the SHA-256 of the key as 64 hex characters (`oncehookctl api-key NAME` prints one)",
            )
        })?;
        let mut scopes = Vec::with_capacity(self.scopes.len());
        for scope in &self.scopes {
            let Some(scope) = ApiScope::parse(scope) else {
                let known: Vec<&str> = ApiScope::ALL.iter().map(|s| s.as_str()).collect();
                return Err(key_error(
                    &name,
                    &format!("unknown scope {scope:?}: scopes are {}", known.join(", ")),
                ));
            };
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        if scopes.is_empty() {
            return Err(key_error(&name, "an API key needs at least one scope"));
        }
        let tenant = match &self.tenant {
            None => TenantId::default_tenant(),
            Some(raw) => TenantId::parse(raw.trim())
                .map_err(|e| key_error(&name, &format!("tenant: {e}")))?,
        };
        Ok(ApiKey {
            name,
            hash,
            scopes,
            tenant,
        })
    }
}

impl AdminKeyEntry {
    fn validate(self) -> Result<AdminKey, ConfigError> {
        let name = self.name.trim().to_owned();
        if name.is_empty() || name == "unknown" || name.chars().any(|c| c.is_control()) {
            return Err(admin_key_error(
                &name,
                "an admin key needs a name (not `unknown`, no control characters)",
            ));
        }
        let hash = parse_hash(&self.hash).ok_or_else(|| {
            admin_key_error(
                &name,
                "hash must be the SHA-256 of the key as 64 hex characters (`oncehookctl api-key NAME` prints one)",
            )
        })?;
        let mut scopes = Vec::with_capacity(self.scopes.len());
        for scope in &self.scopes {
            let Some(scope) = AdminScope::parse(scope) else {
                return Err(admin_key_error(
                    &name,
                    &format!(
                        "unknown scope {scope:?}: an admin key's scopes are admin, sources:feed"
                    ),
                ));
            };
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        if scopes.is_empty() {
            return Err(admin_key_error(
                &name,
                "an admin key needs at least one scope",
            ));
        }
        Ok(AdminKey { name, hash, scopes })
    }
}

fn admin_key_error(name: &str, reason: &str) -> ConfigError {
    invalid(&format!("api.admin_key {name:?}"), "", reason)
}

/// 64 hex characters → 32 bytes.
fn parse_hash(text: &str) -> Option<[u8; 32]> {
    let text = text.trim().as_bytes();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        let byte = digit(pair[0])? * 16 + digit(pair[1])?;
        out[i] = u8::try_from(byte).ok()?;
    }
    Some(out)
}

fn key_error(name: &str, reason: &str) -> ConfigError {
    invalid(&format!("api.key {name:?}"), "", reason)
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
