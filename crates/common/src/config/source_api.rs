//! `[source.api]`: how oncehook may call a source's gateway API, for the
//! reconciliation that asks the gateway what the webhooks may have missed
//! (checked at start-up; nothing calls the API yet). One table per
//! `[[source]]`, optional; each
//! gateway takes its own credentials — Razorpay `key_id` + `key_secret`
//! (HTTP Basic), Cashfree `client_id` + `client_secret` (+ `api_version`),
//! PayU the source's own `merchant_key` and salt, Stripe `api_key` — and
//! every value may be a `${VAR}`. A key another gateway uses, a missing
//! one, or a base URL that would send credentials in clear text to another
//! machine refuses to start, naming the source and the key, never a value.

use std::collections::HashMap;

use oncehook_gateways::Gateway;
use serde::{Deserialize, Serialize};

use super::sources::{Expanded, expand};
use crate::secret::Secret;

/// Cashfree's `x-api-version` when none is given.
pub const DEFAULT_CASHFREE_API_VERSION: &str = "2023-08-01";

/// A `[source.api]` table as written.
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSourceApi {
    pub base_url: Option<String>,
    pub key_id: Option<String>,
    pub key_secret: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub api_version: Option<String>,
    pub api_key: Option<String>,
}

/// A source's gateway API, validated: where it is and how to sign in.
#[derive(Clone, Debug)]
pub struct SourceApi {
    /// Without a trailing `/`; `https://`, or `http://` on a loopback address.
    pub base_url: String,
    pub auth: ApiAuth,
}

/// The credentials of one gateway's API (`Debug` never shows a secret).
#[derive(Clone, Debug)]
pub enum ApiAuth {
    /// HTTP Basic with the key id and secret.
    Razorpay { key_id: Secret, key_secret: Secret },
    /// `x-client-id`, `x-client-secret` and `x-api-version` headers.
    Cashfree {
        client_id: Secret,
        client_secret: Secret,
        api_version: String,
    },
    /// `verify_payment` signed with the source's merchant key and salt.
    Payu,
    /// `Authorization: Bearer` with the secret key.
    Stripe { api_key: Secret },
}

/// The gateway's production API.
pub fn default_base_url(gateway: Gateway) -> Option<&'static str> {
    match gateway {
        Gateway::Razorpay => Some("https://api.razorpay.com"),
        Gateway::Cashfree => Some("https://api.cashfree.com"),
        Gateway::Payu => Some("https://info.payu.in"),
        Gateway::Stripe => Some("https://api.stripe.com"),
        _ => None,
    }
}

impl FileSourceApi {
    /// The table checked for `gateway`, its `${VAR}`s expanded from `env`.
    /// `Err` is the reason, for the caller to name the source.
    pub(super) fn resolve(
        &self,
        gateway: Gateway,
        env: &HashMap<String, String>,
    ) -> Result<SourceApi, String> {
        let Some(default_url) = default_base_url(gateway) else {
            return Err(format!(
                "[source.api] is not available for gateway {:?}: it has no API to reconcile with",
                gateway.as_str()
            ));
        };
        let allowed: &[&str] = match gateway {
            Gateway::Razorpay => &["key_id", "key_secret"],
            Gateway::Cashfree => &["client_id", "client_secret", "api_version"],
            Gateway::Stripe => &["api_key"],
            _ => &[],
        };
        if let Some(extra) = self.given().into_iter().find(|k| !allowed.contains(k)) {
            return Err(format!(
                "api.{extra} is not used by gateway {:?} (it takes {})",
                gateway.as_str(),
                if allowed.is_empty() {
                    "only base_url: it signs with the source's merchant_key and salt".to_owned()
                } else {
                    allowed.join(", ")
                }
            ));
        }
        let base_url = match &self.base_url {
            None => default_url.to_owned(),
            Some(raw) => check_base_url(&value("base_url", Some(raw), env)?)?,
        };
        let secret =
            |key: &str, raw: &Option<String>| value(key, raw.as_ref(), env).map(Secret::new);
        let auth = match gateway {
            Gateway::Razorpay => ApiAuth::Razorpay {
                key_id: secret("key_id", &self.key_id)?,
                key_secret: secret("key_secret", &self.key_secret)?,
            },
            Gateway::Cashfree => ApiAuth::Cashfree {
                client_id: secret("client_id", &self.client_id)?,
                client_secret: secret("client_secret", &self.client_secret)?,
                api_version: match &self.api_version {
                    None => DEFAULT_CASHFREE_API_VERSION.to_owned(),
                    Some(raw) => value("api_version", Some(raw), env)?,
                },
            },
            Gateway::Stripe => ApiAuth::Stripe {
                api_key: secret("api_key", &self.api_key)?,
            },
            _ => ApiAuth::Payu,
        };
        Ok(SourceApi { base_url, auth })
    }

    /// The credential keys written in the table.
    fn given(&self) -> Vec<&'static str> {
        [
            ("key_id", &self.key_id),
            ("key_secret", &self.key_secret),
            ("client_id", &self.client_id),
            ("client_secret", &self.client_secret),
            ("api_version", &self.api_version),
            ("api_key", &self.api_key),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.is_some().then_some(k))
        .collect()
    }
}

/// A required value, expanded; never empty.
fn value(key: &str, raw: Option<&String>, env: &HashMap<String, String>) -> Result<String, String> {
    let Some(raw) = raw else {
        return Err(format!("api.{key} is required"));
    };
    match expand(raw, env).map_err(|why| format!("api.{key} {why}"))? {
        Expanded::Value(v) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
        _ => Err(format!("api.{key} is empty (or its variable is not set)")),
    }
}

/// `https://` anywhere; `http://` only to this machine (tests, emulators),
/// so credentials never cross a network in clear text. The messages never
/// quote the URL (it may carry a credential).
fn check_base_url(raw: &str) -> Result<String, String> {
    let url = url::Url::parse(raw).map_err(|e| format!("api.base_url is not a URL: {e}"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => {}
        "http" if loopback => {}
        "http" => {
            return Err(
                "api.base_url: plain http is accepted only for a loopback address (credentials would travel in clear text)"
                    .to_owned(),
            );
        }
        _ => return Err("api.base_url must be an https:// URL with a host".to_owned()),
    }
    if url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(
            "api.base_url must not carry a query, a fragment, a user name or a password".to_owned(),
        );
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

#[cfg(test)]
#[path = "source_api_tests.rs"]
mod tests;
