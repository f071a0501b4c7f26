//! What the platform's admin API reads and writes (docs/tenants.md): the
//! request bodies (unknown fields refused) and the answers, each with its
//! OpenAPI schema, and how the tenants crate's refusals become answers. No
//! answer ever carries a signing secret; an API key is in the one answer
//! that issues it.

use actix_web::http::StatusCode;
use oncehook_common::sources_feed::{FeedSource, SealedSecret};
use oncehook_tenants::store::keys::{Issued, Key};
use oncehook_tenants::store::sources::Source;
use oncehook_tenants::{KeyError, SourceError, Tenant, TenantError};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;

/// `POST /v1/admin/tenants`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantCreate {
    /// `[a-z0-9][a-z0-9_-]{0,62}`: the tenant's id for good.
    pub id: String,
    /// The shop's name (1 to 200 characters).
    pub name: String,
}

/// A tenant.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantView {
    pub id: String,
    pub name: String,
    /// `active` or `disabled`.
    pub status: String,
    pub created_at: String,
    pub disabled_at: Option<String>,
    /// The sender of its customers' emails; `null`: the deployment's.
    pub mail_from: Option<String>,
}

/// `PUT /v1/admin/tenants/{tenant}/mail-from`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantMailFrom {
    /// `Name <address@host>` or `address@host`; `null` or empty: the
    /// deployment's `mail.from` again.
    pub mail_from: Option<String>,
}

/// `POST /v1/admin/sources`: a tenant's gateway account.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceCreate {
    /// `[A-Za-z0-9_-]`, 1 to 64 characters: the webhook URL is
    /// `/webhooks/{name}`.
    pub name: String,
    pub tenant: String,
    /// `razorpay`, `cashfree`, `payu`, `stripe` or `standard`.
    pub gateway: String,
    /// The signing secret the gateway gave (or was given); stored sealed,
    /// never answered.
    pub secret: String,
    /// The replay window, 1 to 3600 (300 if left out).
    pub tolerance_secs: Option<u64>,
    /// PayU's merchant key (PayU only).
    pub merchant_key: Option<String>,
}

/// `POST /v1/admin/sources/{name}/secrets`: a further signing secret.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretAdd {
    pub secret: String,
}

/// A live signing secret: its number and age, never its value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecretSlotView {
    pub no: i32,
    pub created_at: String,
}

/// A source made at runtime.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SourceView {
    pub name: String,
    pub tenant: String,
    pub gateway: String,
    /// `active` or `disabled`.
    pub status: String,
    pub tolerance_secs: i32,
    pub merchant_key: Option<String>,
    /// The path to give the gateway, after ingest's public address.
    pub webhook_path: String,
    /// Its live signing secrets (each verifies).
    pub secrets: Vec<SecretSlotView>,
    pub created_at: String,
    pub disabled_at: Option<String>,
}

/// `GET /v1/admin/sources`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct SourcesQuery {
    /// One tenant's sources only.
    pub tenant: Option<String>,
}

/// `GET /v1/admin/feed/sources`.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct FeedQuery {
    /// The `version` of the last answer read; 0 or left out: every source.
    pub since: Option<i64>,
}

/// A live signing secret, sealed under the deployment's key ring.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SealedSecretView {
    pub no: i32,
    /// `v1.<kid>.<…>`, sealed for `source:<name>:signing:<no>`.
    pub sealed: String,
}

/// A source as ingest serves it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SourceChangeView {
    pub name: String,
    pub tenant: String,
    pub gateway: String,
    /// `active` only when the source and its tenant both are.
    pub status: String,
    pub tolerance_secs: i32,
    pub merchant_key: Option<String>,
    pub secrets: Vec<SealedSecretView>,
    /// Its tenant's rate at ingest's door as set at runtime; absent: the
    /// configuration file's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<FeedRateView>,
}

/// A tenant's rate: webhooks per second for each of its sources (0: no
/// limit) and the burst (0: twice the rate).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct FeedRateView {
    pub per_second: u32,
    pub burst: u32,
}

/// The sources changed since `since`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SourcesFeedPage {
    /// Ask again with `since` = this.
    pub version: i64,
    pub sources: Vec<SourceChangeView>,
}

/// `POST /v1/admin/tenants/{tenant}/keys`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyIssue {
    /// What the key is for (1 to 100 characters).
    pub name: String,
    /// `orders:write`, `orders:read`, `products:write`, `events:read`.
    pub scopes: Vec<String>,
}

/// A tenant's API key: never the key itself.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyView {
    pub id: String,
    pub tenant: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// A key just issued: `key` is shown this once.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyIssued {
    #[serde(flatten)]
    pub view: KeyView,
    /// `Authorization: Bearer <key>`; not stored, not shown again.
    pub key: String,
}

fn at(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

impl From<Tenant> for TenantView {
    fn from(t: Tenant) -> TenantView {
        TenantView {
            id: t.id,
            name: t.name,
            status: t.status.as_str().to_owned(),
            created_at: at(t.created_at),
            disabled_at: t.disabled_at.map(at),
            mail_from: t.mail_from,
        }
    }
}

impl From<Source> for SourceView {
    fn from(s: Source) -> SourceView {
        SourceView {
            webhook_path: format!("/webhooks/{}", s.name),
            name: s.name,
            tenant: s.tenant,
            gateway: s.gateway,
            status: s.status.as_str().to_owned(),
            tolerance_secs: s.tolerance_secs,
            merchant_key: s.merchant_key,
            secrets: s
                .secrets
                .into_iter()
                .map(|k| SecretSlotView {
                    no: k.no,
                    created_at: at(k.created_at),
                })
                .collect(),
            created_at: at(s.created_at),
            disabled_at: s.disabled_at.map(at),
        }
    }
}

impl From<FeedSource> for SourceChangeView {
    fn from(c: FeedSource) -> SourceChangeView {
        SourceChangeView {
            name: c.name,
            tenant: c.tenant,
            gateway: c.gateway,
            status: c.status,
            tolerance_secs: c.tolerance_secs,
            merchant_key: c.merchant_key,
            secrets: c
                .secrets
                .into_iter()
                .map(|SealedSecret { no, sealed }| SealedSecretView { no, sealed })
                .collect(),
            rate: c.rate.map(|r| FeedRateView {
                per_second: r.per_second,
                burst: r.burst,
            }),
        }
    }
}

impl From<Key> for KeyView {
    fn from(k: Key) -> KeyView {
        KeyView {
            id: k.id,
            tenant: k.tenant,
            name: k.name,
            scopes: k.scopes,
            created_at: at(k.created_at),
            revoked_at: k.revoked_at.map(at),
        }
    }
}

impl From<Issued> for KeyIssued {
    fn from(i: Issued) -> KeyIssued {
        KeyIssued {
            view: i.key.into(),
            key: i.secret,
        }
    }
}

impl From<TenantError> for ApiError {
    fn from(e: TenantError) -> ApiError {
        match e {
            TenantError::Exists(_) => ApiError::new(StatusCode::CONFLICT, "exists", e.to_string()),
            TenantError::NotFound(_) => ApiError::not_found("tenant"),
            TenantError::BadName => ApiError::invalid("name", e.to_string()),
            TenantError::DefaultStays => {
                ApiError::new(StatusCode::CONFLICT, "default_tenant", e.to_string())
            }
            TenantError::BadSender(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_sender",
                e.to_string(),
            )
            .with_field("mail_from"),
            TenantError::Database { source, .. } => source.into(),
        }
    }
}

impl From<SourceError> for ApiError {
    fn from(e: SourceError) -> ApiError {
        match e {
            SourceError::Invalid { .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_source",
                e.to_string(),
            ),
            SourceError::Exists(_) => ApiError::new(StatusCode::CONFLICT, "exists", e.to_string()),
            SourceError::NotFound(_) => ApiError::not_found("source"),
            SourceError::NoTenant(_) => ApiError::invalid("tenant", e.to_string()),
            SourceError::NoSecret { .. } => ApiError::not_found("secret"),
            SourceError::LastSecret { .. } => {
                ApiError::new(StatusCode::CONFLICT, "last_secret", e.to_string())
            }
            SourceError::NoKeyRing => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_key_ring",
                e.to_string(),
            ),
            SourceError::Database { source, .. } => source.into(),
        }
    }
}

impl From<KeyError> for ApiError {
    fn from(e: KeyError) -> ApiError {
        match e {
            KeyError::BadName => ApiError::invalid("name", e.to_string()),
            KeyError::BadScope(_) | KeyError::NoScope => ApiError::invalid("scopes", e.to_string()),
            KeyError::NoTenant(_) => ApiError::not_found("tenant"),
            KeyError::NotFound(_) => ApiError::not_found("key"),
            KeyError::Database(source) => source.into(),
        }
    }
}
