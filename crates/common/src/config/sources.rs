//! Sources: one per gateway account, the `{source}` in `/webhooks/{source}`.
//! Read from `[[source]]` tables in the file; secrets may refer to
//! environment variables as `${VAR}`. A source that could verify nothing,
//! or that would verify too much, refuses to start with a message naming the
//! source and the key, never the secret.

use std::collections::HashMap;

use oncehook_gateways::{Credentials, Gateway, secret_problem};
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::source_api::{FileSourceApi, SourceApi};
use crate::rate::Limit;
use crate::tenant::TenantId;

pub const DEFAULT_TOLERANCE_SECS: u64 = 300;
/// A wider replay window would let a captured delivery be replayed for that long.
pub const MAX_TOLERANCE_SECS: u64 = 3_600;

/// A `[[source]]` table as written (`Debug` counts the secrets, never shows them).
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSource {
    pub name: String,
    pub gateway: String,
    #[serde(default)]
    pub secrets: Vec<String>,
    pub tolerance_secs: Option<u64>,
    pub merchant_key: Option<String>,
    /// `[source.api]`: the gateway's API, for reconciliation.
    pub api: Option<FileSourceApi>,
    /// The tenant the source's events belong to (docs/tenants.md); unset:
    /// the default tenant.
    pub tenant: Option<String>,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("name", &self.name)
            .field("gateway", &self.gateway)
            .field(
                "secrets",
                &format_args!("[{} redacted]", self.secrets.len()),
            )
            .finish_non_exhaustive()
    }
}

/// One gateway account, validated.
#[derive(Clone)]
pub struct SourceConfig {
    pub name: String,
    pub gateway: Gateway,
    /// Live secrets; any may match (rotation). Never empty.
    pub secrets: Vec<String>,
    pub tolerance_secs: u64,
    /// PayU: the merchant key the posted form's `key` must equal. Always
    /// set (non-empty) for PayU sources, never for others.
    pub merchant_key: Option<String>,
    /// `[source.api]`: how to ask the gateway's API (reconciliation);
    /// `None`: this source is never asked.
    pub api: Option<SourceApi>,
    /// The tenant its events, orders and books belong to.
    pub tenant: TenantId,
    /// Its tenant's rate at ingest's door as set at runtime (`oncehookctl
    /// tenants limits`, through the sources feed); `None`: the file's
    /// (`[ingest.rate_limit]`).
    pub limit: Option<Limit>,
}

impl SourceConfig {
    /// What [`oncehook_gateways::verify`] checks deliveries of this source against.
    pub fn credentials(&self) -> Credentials<'_> {
        Credentials::new(&self.secrets).with_merchant_key(self.merchant_key.as_deref())
    }
}

impl std::fmt::Debug for SourceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceConfig")
            .field("name", &self.name)
            .field("gateway", &self.gateway)
            .field(
                "secrets",
                &format_args!("[{} redacted]", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .field("merchant_key", &self.merchant_key)
            .field("api", &self.api)
            .field("tenant", &self.tenant)
            .finish()
    }
}

/// What a `${VAR}` reference came to.
pub(super) enum Expanded {
    Value(String),
    /// The whole value was one reference to an unset variable: an empty
    /// rotation slot (`"${RAZORPAY_WEBHOOK_SECRET_OLD}"`).
    Unset,
}

/// Expands `${VAR}` references. A value that is exactly one reference to
/// an unset variable is [`Expanded::Unset`]; an unset reference *inside*
/// other text is an error (`"whsec_${UNSET}"` would otherwise become the
/// guessable secret `whsec_`).
pub(super) fn expand(raw: &str, env: &HashMap<String, String>) -> Result<Expanded, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    let mut unset = Vec::new();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "has an unterminated `${`".to_owned())?;
        let var = &after[..end];
        match env.get(var).filter(|v| !v.is_empty()) {
            Some(v) => out.push_str(v),
            None => unset.push(var.to_owned()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    match unset.as_slice() {
        [] => Ok(Expanded::Value(out)),
        [_] if out.is_empty() => Ok(Expanded::Unset),
        vars => Err(format!(
            "refers to ${{{}}}, which is not set (refusing to start with part of a secret)",
            vars.join("}, ${")
        )),
    }
}

fn resolve(s: FileSource, env: &HashMap<String, String>) -> Result<SourceConfig, ConfigError> {
    let err = |reason: String| ConfigError::Source {
        source_name: s.name.clone(),
        reason,
    };
    let mut secrets = Vec::with_capacity(s.secrets.len());
    for (i, raw) in s.secrets.iter().enumerate() {
        match expand(raw, env).map_err(|why| err(format!("secrets[{i}] {why}")))? {
            Expanded::Unset => {}
            Expanded::Value(value) => secrets.push(value),
        }
    }
    let merchant_key = match &s.merchant_key {
        None => None,
        Some(raw) => match expand(raw, env).map_err(|why| err(format!("merchant_key {why}")))? {
            Expanded::Unset => None,
            Expanded::Value(v) if v.trim().is_empty() => None,
            Expanded::Value(v) => Some(v),
        },
    };
    let tenant = match &s.tenant {
        None => TenantId::default_tenant(),
        Some(raw) => TenantId::parse(raw.trim()).map_err(|e| err(format!("tenant: {e}")))?,
    };
    let mut source = SourceConfig::checked(
        SourceFacts {
            name: &s.name,
            gateway: &s.gateway,
            tolerance_secs: s.tolerance_secs,
            merchant_key,
            tenant,
        },
        secrets,
    )
    .map_err(err)?;
    if let Some(table) = &s.api {
        let webhook = source.credentials();
        source.api = Some(table.resolve(source.gateway, webhook, env).map_err(err)?);
    }
    Ok(source)
}

/// What a source is besides its secrets, as given (the file, the admin
/// API, `oncehookctl sources`), before [`SourceConfig::checked`].
#[derive(Debug, Clone)]
pub struct SourceFacts<'a> {
    pub name: &'a str,
    pub gateway: &'a str,
    /// Unset: [`DEFAULT_TOLERANCE_SECS`].
    pub tolerance_secs: Option<u64>,
    pub merchant_key: Option<String>,
    pub tenant: TenantId,
}

/// Why a source's name is refused, if it is: it is the `{source}` of
/// `/webhooks/{source}`.
pub fn source_name_problem(name: &str) -> Option<&'static str> {
    let fine = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    (!fine).then_some("name must be 1 to 64 characters of [A-Za-z0-9_-]")
}

impl SourceConfig {
    /// A source from its facts and live secrets, with every check a
    /// `[[source]]` gets (the error names the value, never a secret): the
    /// one gate for the file's sources and those made at runtime.
    pub fn checked(facts: SourceFacts<'_>, secrets: Vec<String>) -> Result<SourceConfig, String> {
        if let Some(problem) = source_name_problem(facts.name) {
            return Err(problem.to_owned());
        }
        let gateway: Gateway = facts.gateway.parse().map_err(|e| format!("{e}"))?;
        for (i, value) in secrets.iter().enumerate() {
            if let Some(problem) = secret_problem(gateway, value) {
                return Err(format!("secrets[{i}] {problem}"));
            }
        }
        if secrets.is_empty() {
            return Err(
                "no secrets: an empty secret list would accept nothing (refusing to start)".into(),
            );
        }
        let tolerance_secs = facts.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS);
        if !(1..=MAX_TOLERANCE_SECS).contains(&tolerance_secs) {
            return Err(format!(
                "tolerance_secs = {tolerance_secs} is outside 1..={MAX_TOLERANCE_SECS}: the replay window must be short"
            ));
        }
        check_merchant_key(gateway, facts.merchant_key.as_deref())?;
        Ok(SourceConfig {
            name: facts.name.to_owned(),
            gateway,
            secrets,
            tolerance_secs,
            merchant_key: facts.merchant_key,
            api: None,
            tenant: facts.tenant,
            limit: None,
        })
    }
}

fn check_merchant_key(gateway: Gateway, key: Option<&str>) -> Result<(), String> {
    let needed = gateway.scheme().needs_merchant_key;
    match key {
        None if needed => Err(format!(
            "merchant_key is required for gateway {:?} (notifications whose `key` differs \
             are refused): refusing to start",
            gateway.as_str()
        )),
        Some(k) if needed && k.contains('|') => {
            Err("merchant_key must not contain `|` (PayU's hash separator)".into())
        }
        Some(_) if !needed => Err(format!(
            "merchant_key is only used by gateways that sign with one (payu), not {:?}",
            gateway.as_str()
        )),
        _ => Ok(()),
    }
}

/// Every `[[source]]`, checked, with its `${VAR}`s expanded from `env`.
pub(super) fn resolve_all(
    files: Vec<FileSource>,
    env: &HashMap<String, String>,
) -> Result<Vec<SourceConfig>, ConfigError> {
    let sources = files
        .into_iter()
        .map(|s| resolve(s, env))
        .collect::<Result<Vec<_>, _>>()?;
    check_unique(&sources)?;
    Ok(sources)
}

/// Refuses two sources with one name.
fn check_unique(sources: &[SourceConfig]) -> Result<(), ConfigError> {
    for (i, s) in sources.iter().enumerate() {
        if sources[..i].iter().any(|o| o.name == s.name) {
            return Err(ConfigError::Source {
                source_name: s.name.clone(),
                reason: "defined twice".into(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "sources_tests.rs"]
mod tests;
