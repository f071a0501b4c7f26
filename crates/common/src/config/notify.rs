//! `[notify]` and `[[notify.endpoint]]`: where `oncehook-notifier` sends
//! the order events (docs/shop-integration.md) — each endpoint's name, URL,
//! Standard Webhooks secret(s) (`whsec_<base64>`; several, space-separated,
//! during a rotation: each signs) and the event types it takes (globs over
//! types: `order.*`) — and how: the retry schedule after the first attempt,
//! the timeout of one request and how many requests one endpoint has in
//! flight at once. Every value of an endpoint may be a `${VAR}`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::ConfigError;
use super::error::invalid;
use super::keys::Key;
use super::sources::{Expanded, expand};
use super::values::{HumanDuration, Within};
use crate::secret::Secret;
use crate::tenant::TenantId;

pub const ENV_NOTIFY_RETRY_SCHEDULE: &str = "ONCEHOOK_NOTIFY_RETRY_SCHEDULE";
pub const ENV_NOTIFY_TIMEOUT: &str = "ONCEHOOK_NOTIFY_TIMEOUT";
pub const ENV_NOTIFY_CONCURRENCY: &str = "ONCEHOOK_NOTIFY_CONCURRENCY";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_NOTIFY_RETRY_SCHEDULE, "notify.retry_schedule"),
    Key::new(ENV_NOTIFY_TIMEOUT, "notify.timeout"),
    Key::new(ENV_NOTIFY_CONCURRENCY, "notify.concurrency"),
];

/// The most retries a schedule may hold.
const MAX_STEPS: usize = 32;
/// The longest step of a schedule.
const MAX_STEP: Duration = Duration::from_secs(7 * 24 * 3_600);

/// One of the shop's endpoints, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyEndpoint {
    pub name: String,
    pub url: String,
    /// The signing keys (the bytes after `whsec_`), newest first.
    pub secrets: Vec<Secret>,
    /// Globs over event types (`order.*`, `order.paid`).
    pub events: Vec<String>,
    /// The tenant whose order events it takes, and no other's
    /// (docs/tenants.md).
    pub tenant: TenantId,
}

impl NotifyEndpoint {
    /// Whether this endpoint takes events of type `kind`.
    pub fn wants(&self, kind: &str) -> bool {
        self.events.iter().any(|glob| glob_matches(glob, kind))
    }
}

/// `*` matches any run of characters (dots too); everything else itself.
pub fn glob_matches(glob: &str, text: &str) -> bool {
    match glob.split_once('*') {
        None => glob == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|i| rest.is_char_boundary(*i))
                .any(|i| glob_matches(tail, &rest[i..]))
        }
    }
}

/// `[notify]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    pub endpoints: Vec<NotifyEndpoint>,
    /// The wait before each retry after the first attempt; the event is
    /// failed once it is spent.
    pub retry_schedule: Vec<Duration>,
    /// How long one request may take.
    pub timeout: Duration,
    /// Requests in flight at once, per endpoint.
    pub concurrency: u16,
}

impl NotifyConfig {
    /// The wait after the `attempts`-th failed attempt; `None` once the
    /// schedule is spent.
    pub fn retry_after(&self, attempts: u32) -> Option<Duration> {
        let step = usize::try_from(attempts).ok()?.checked_sub(1)?;
        self.retry_schedule.get(step).copied()
    }
}

/// The default schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
pub const DEFAULT_RETRY_SCHEDULE: [u64; 7] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];

/// A schedule as written: a TOML list of durations, or (from the
/// environment) one comma-separated text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Schedule(Vec<Duration>);

impl Default for Schedule {
    fn default() -> Self {
        Schedule(
            DEFAULT_RETRY_SCHEDULE
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
        )
    }
}

impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            List(Vec<HumanDuration>),
            Text(String),
        }
        let steps = match Written::deserialize(d)? {
            Written::List(steps) => steps.into_iter().map(|s| s.0).collect(),
            Written::Text(text) => text
                .split(',')
                .map(|step| {
                    humantime::parse_duration(step.trim())
                        .ok()
                        .filter(|d| !d.is_zero())
                        .ok_or_else(|| {
                            serde::de::Error::custom(format!(
                                "expected durations such as 5s,5m,30m, found {step:?}"
                            ))
                        })
                })
                .collect::<Result<Vec<_>, D::Error>>()?,
        };
        if steps.len() > MAX_STEPS || steps.iter().any(|s| *s > MAX_STEP) {
            return Err(serde::de::Error::custom(format!(
                "at most {MAX_STEPS} retries, each at most 7 days"
            )));
        }
        Ok(Schedule(steps))
    }
}

impl Serialize for Schedule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> = self
            .0
            .iter()
            .map(|d| humantime::format_duration(*d).to_string())
            .collect();
        s.collect_seq(text)
    }
}

/// `[notify]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct NotifySection {
    retry_schedule: Schedule,
    timeout: HumanDuration,
    concurrency: Within<u16, 1, 256>,
    endpoint: Vec<FileEndpoint>,
}

impl Default for NotifySection {
    fn default() -> Self {
        NotifySection {
            retry_schedule: Schedule::default(),
            timeout: HumanDuration(Duration::from_secs(10)),
            concurrency: Within(4),
            endpoint: Vec::new(),
        }
    }
}

/// `[[notify.endpoint]]` as written.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct FileEndpoint {
    name: String,
    url: String,
    secret: String,
    #[serde(default)]
    events: Vec<String>,
    #[serde(default)]
    tenant: Option<String>,
}

impl NotifySection {
    /// The section checked, the endpoints' `${VAR}`s expanded from `env`.
    pub(super) fn validate(
        self,
        env: &HashMap<String, String>,
    ) -> Result<NotifyConfig, ConfigError> {
        let mut names = HashSet::new();
        let mut endpoints = Vec::with_capacity(self.endpoint.len());
        for (i, e) in self.endpoint.into_iter().enumerate() {
            let at = |field: &str| format!("notify.endpoint[{i}].{field}");
            let endpoint =
                resolve(e, env).map_err(|(field, value, why)| invalid(&at(field), &value, &why))?;
            if !names.insert(endpoint.name.clone()) {
                return Err(invalid(
                    &at("name"),
                    &endpoint.name,
                    "is the name of another endpoint",
                ));
            }
            endpoints.push(endpoint);
        }
        Ok(NotifyConfig {
            endpoints,
            retry_schedule: self.retry_schedule.0,
            timeout: self.timeout.0,
            concurrency: self.concurrency.0,
        })
    }
}

/// A field's failure: which field, the value shown, why.
type FieldError = (&'static str, String, String);

fn resolve(e: FileEndpoint, env: &HashMap<String, String>) -> Result<NotifyEndpoint, FieldError> {
    let value = |field: &'static str, raw: &str, shown: bool| match expand(raw, env) {
        Ok(Expanded::Value(v)) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
        Ok(Expanded::Unset) => Err((
            field,
            raw.to_owned(),
            "refers to a variable that is not set".to_owned(),
        )),
        Ok(_) => Err((field, String::new(), "must not be empty".to_owned())),
        Err(why) => Err((
            field,
            if shown { raw.to_owned() } else { String::new() },
            why,
        )),
    };
    let name = value("name", &e.name, true)?;
    if name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err((
            "name",
            name,
            "letters, digits, - and _ (at most 64)".to_owned(),
        ));
    }
    // The URL is never shown: it may carry a token (in its user, password
    // or query), and one that parses as something else (`https:token@shop`)
    // would show it whole.
    let url = value("url", &e.url, false)?;
    let parsed = url::Url::parse(&url).map_err(|err| {
        (
            "url",
            "[redacted]".to_owned(),
            format!("is not a URL ({err})"),
        )
    })?;
    let lower = url.to_ascii_lowercase();
    let written = lower.starts_with("http://") || lower.starts_with("https://");
    if !written || !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err((
            "url",
            "[redacted]".to_owned(),
            "must be an http:// or https:// URL with a host".to_owned(),
        ));
    }
    let secret = value("secret", &e.secret, false)?;
    let secrets = signing_keys(&secret)?;
    let events = if e.events.is_empty() {
        vec!["order.*".to_owned()]
    } else {
        e.events
    };
    if let Some(bad) = events.iter().find(|g| {
        g.is_empty()
            || !g
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b"._*".contains(&b))
    }) {
        return Err((
            "events",
            bad.clone(),
            "globs over event types, such as order.* or order.paid".to_owned(),
        ));
    }
    let tenant = match &e.tenant {
        None => TenantId::default_tenant(),
        Some(raw) => {
            TenantId::parse(raw.trim()).map_err(|err| ("tenant", raw.clone(), err.to_string()))?
        }
    };
    Ok(NotifyEndpoint {
        name,
        url,
        secrets,
        events,
        tenant,
    })
}

/// The keys of `secret`: one or more space-separated `whsec_<base64>`.
fn signing_keys(secret: &str) -> Result<Vec<Secret>, FieldError> {
    secret
        .split_whitespace()
        .map(|s| {
            let key = s.strip_prefix("whsec_").ok_or_else(|| {
                (
                    "secret",
                    String::new(),
                    "each secret must start with whsec_ (Standard Webhooks)".to_owned(),
                )
            })?;
            // One rule for reading a `whsec_` secret: the signer's own.
            match oncehook_gateways::standard_webhooks::signing_key(key) {
                Some(bytes) if bytes.len() >= 16 => Ok(Secret::new(key)),
                _ => Err((
                    "secret",
                    String::new(),
                    "the part after whsec_ must be base64 of at least 16 bytes".to_owned(),
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()
}

#[cfg(test)]
#[path = "notify_tests.rs"]
mod tests;
