//! A source's API credentials: the keys a gateway's `[source.api]` table
//! takes ([`CredentialKey`], with the shape its gateway refuses), the
//! checks every gateway shares (present, not blank, no space or control
//! character), and the values by name ([`ApiCredentials`], whose `Debug`
//! never shows a secret). What the source's webhook credentials give is
//! added in [`GatewayApi::complete_credentials`](super::GatewayApi::complete_credentials).

use std::collections::BTreeMap;
use std::fmt;

use super::RequestError;
use crate::{Credentials, Gateway};

/// One key of a gateway's `[source.api]` table.
#[derive(Debug, Clone, Copy)]
pub struct CredentialKey {
    /// The key's name (`key_id`).
    pub name: &'static str,
    /// Whether its value is a secret (never shown).
    pub secret: bool,
    /// The value when the table leaves the key out; `None`: required.
    pub default: Option<&'static str>,
    /// A shape the gateway refuses, and what is wrong with it.
    pub refused: Option<Refusal>,
}

/// A shape of value a gateway refuses for a key: `bad` says whether a
/// value has it, `problem` what is wrong with it, in words (the rest of
/// the sentence after the key's name).
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    /// Whether a value has the refused shape.
    pub bad: fn(&str) -> bool,
    /// What is wrong with such a value.
    pub problem: &'static str,
}

impl CredentialKey {
    /// A required secret.
    pub const fn secret(name: &'static str) -> CredentialKey {
        CredentialKey {
            name,
            secret: true,
            default: None,
            refused: None,
        }
    }

    /// A setting that is no secret, with a default.
    pub const fn setting(name: &'static str, default: &'static str) -> CredentialKey {
        CredentialKey {
            name,
            secret: false,
            default: Some(default),
            refused: None,
        }
    }

    /// The key, refusing a value for which `bad` is true with `problem`
    /// (the rest of the sentence after the key's name).
    pub const fn refusing(self, bad: fn(&str) -> bool, problem: &'static str) -> CredentialKey {
        CredentialKey {
            refused: Some(Refusal { bad, problem }),
            ..self
        }
    }

    /// Why `value` cannot be this key's, if it cannot.
    fn check(&self, value: &str) -> Result<(), CredentialError> {
        let problem = if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            Some("holds a space or a control character (it travels in an HTTP header)")
        } else {
            self.refused
                .and_then(|r| (r.bad)(value).then_some(r.problem))
        };
        match problem {
            Some(problem) => Err(CredentialError::Shape {
                key: self.name,
                problem,
            }),
            None => Ok(()),
        }
    }
}

/// A source's API credentials, by name. `Debug` never shows a secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiCredentials(Vec<(&'static str, String, bool)>);

impl ApiCredentials {
    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|(_, v, _)| v.as_str())
    }

    /// The value of `name`, which a request needs.
    pub fn require(&self, name: &'static str) -> Result<&str, RequestError> {
        self.get(name).ok_or(RequestError::MissingCredential(name))
    }

    /// Sets `name` (a `secret` one is never shown).
    pub fn set(&mut self, name: &'static str, value: impl Into<String>, secret: bool) {
        self.0.retain(|(n, ..)| *n != name);
        self.0.push((name, value.into(), secret));
    }
}

impl fmt::Debug for ApiCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.0
                    .iter()
                    .map(|(n, v, secret)| (n, if *secret { "[redacted]" } else { v.as_str() })),
            )
            .finish()
    }
}

/// Why a `[source.api]` table's credentials are refused (the messages name
/// the key, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The gateway has no API oncehook can ask.
    #[error("[source.api] is not available for gateway {0:?}: it has no API to reconcile with")]
    NoApi(&'static str),
    /// A key this gateway does not take.
    #[error("{key} is not used by gateway {gateway:?} (it takes {takes})")]
    NotUsed {
        /// The key written.
        key: String,
        /// The gateway's name.
        gateway: &'static str,
        /// What it takes ([`GatewayApi::takes`]).
        takes: String,
    },
    /// A required key is missing.
    #[error("{0} is required")]
    Required(&'static str),
    /// A key is empty (or its variable is not set).
    #[error("{0} is empty (or its variable is not set)")]
    Empty(&'static str),
    /// A value that cannot be what the key names.
    #[error("{key} {problem}")]
    Shape {
        /// The key.
        key: &'static str,
        /// What is wrong with its value.
        problem: &'static str,
    },
    /// What the source itself must give is missing.
    #[error("{0}")]
    Source(&'static str),
}

/// Checks a `[source.api]` table's keys for `gateway` (`table`: every key
/// written besides `base_url`, its value already expanded, blank when its
/// variable is unset) and returns the credentials, with the defaults of
/// keys left out and what the source's webhook credentials give.
pub fn credentials(
    gateway: Gateway,
    table: &BTreeMap<String, String>,
    source: Credentials<'_>,
) -> Result<ApiCredentials, CredentialError> {
    let api = gateway
        .api()
        .ok_or(CredentialError::NoApi(gateway.as_str()))?;
    let keys = api.credential_keys();
    if let Some(extra) = table.keys().find(|k| !keys.iter().any(|c| c.name == *k)) {
        return Err(CredentialError::NotUsed {
            key: extra.clone(),
            gateway: gateway.as_str(),
            takes: api.takes(),
        });
    }
    let mut credentials = ApiCredentials::default();
    for key in keys {
        let value = match (table.get(key.name), key.default) {
            (Some(v), _) if v.trim().is_empty() => return Err(CredentialError::Empty(key.name)),
            (Some(v), _) => v.trim().to_owned(),
            (None, Some(default)) => default.to_owned(),
            (None, None) => return Err(CredentialError::Required(key.name)),
        };
        key.check(&value)?;
        credentials.set(key.name, value, key.secret);
    }
    api.complete_credentials(&mut credentials, source)?;
    Ok(credentials)
}

/// Every key any registered gateway's `[source.api]` table takes, once each
/// (for the configuration's documentation check).
pub fn all_credential_keys() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = crate::registered()
        .iter()
        .filter_map(|g| g.api())
        .flat_map(|api| api.credential_keys().iter().map(|k| k.name))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}
