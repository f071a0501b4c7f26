//! `[source.api]`: how oncehook may call a source's gateway API, for the
//! reconciliation that asks the gateway what the webhooks may have missed
//! (checked at start-up). One table per `[[source]]`, optional. This module
//! reads the table and owns what is the same for every gateway — `${VAR}`
//! expansion, the `base_url` policy; the gateway's folder
//! (`oncehook_gateways::reconcile`) owns the rest: its default base URL,
//! the credential keys it takes (Razorpay `key_id` + `key_secret`, Cashfree
//! `client_id` + `client_secret` (+ `api_version`), PayU none — it signs
//! with the source's `merchant_key` and salt —, Stripe `api_key`) and their
//! shape. A key the gateway does not take, a missing or malformed one, or a
//! base URL that would send credentials in clear text to another machine
//! refuses to start, naming the source and the key, never a value.

use std::collections::{BTreeMap, HashMap};

use figment::value::Value;
use oncehook_gateways::reconcile::ApiCredentials;
use oncehook_gateways::{Credentials, Gateway};
use serde::{Deserialize, Serialize};

use super::sources::{Expanded, expand};

/// A `[source.api]` table as written: `base_url`, and the gateway's own
/// credential keys (which ones, and their shape, the gateway decides).
#[derive(Clone, Default, Deserialize, Serialize)]
pub(super) struct FileSourceApi {
    pub base_url: Option<String>,
    #[serde(flatten)]
    pub keys: BTreeMap<String, Value>,
}

/// A source's gateway API, validated: where it is and how to sign in.
#[derive(Clone, Debug)]
pub struct SourceApi {
    /// Without a trailing `/`; `https://`, or `http://` on a loopback address.
    pub base_url: String,
    /// The gateway's credentials by key (`Debug` never shows a secret).
    pub credentials: ApiCredentials,
}

impl FileSourceApi {
    /// The table checked for `gateway`, its `${VAR}`s expanded from `env`;
    /// `source` is the source's webhook credentials (PayU signs its API
    /// calls with them). `Err` is the reason, for the caller to name the
    /// source.
    pub(super) fn resolve(
        &self,
        gateway: Gateway,
        source: Credentials<'_>,
        env: &HashMap<String, String>,
    ) -> Result<SourceApi, String> {
        let Some(api) = gateway.api() else {
            return Err(format!(
                "[source.api] is not available for gateway {:?}: it has no API to reconcile with",
                gateway.as_str()
            ));
        };
        let mut table = BTreeMap::new();
        for (key, raw) in &self.keys {
            let Some(raw) = raw.as_str() else {
                return Err(format!("api.{key} must be a string"));
            };
            let value = match expand(raw, env).map_err(|why| format!("api.{key} {why}"))? {
                Expanded::Value(v) => v,
                // Blank: the gateway's check says the key is empty.
                Expanded::Unset => String::new(),
            };
            table.insert(key.clone(), value);
        }
        let base_url = match &self.base_url {
            None => api.default_base_url().to_owned(),
            Some(raw) => check_base_url(&value("base_url", Some(raw), env)?)?,
        };
        let credentials = oncehook_gateways::reconcile::credentials(gateway, &table, source)
            .map_err(|e| format!("api.{e}"))?;
        Ok(SourceApi {
            base_url,
            credentials,
        })
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
