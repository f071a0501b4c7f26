//! Configuration: environment variables with the `ONCEHOOK_` prefix, on top of
//! an optional TOML file named by `ONCEHOOK_CONFIG` (env wins over file).
//! Sources (one per gateway account) live only in the file.
//!
//! Every key name lives here once; binaries read [`Settings`], never the
//! environment directly.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use oncehook_gateways::Gateway;
use serde::Deserialize;

pub const ENV_CONFIG: &str = "ONCEHOOK_CONFIG";
pub const ENV_DATABASE_URL: &str = "ONCEHOOK_DATABASE_URL";
pub const ENV_AMQP_URL: &str = "ONCEHOOK_AMQP_URL";
pub const ENV_AMQP_PREFIX: &str = "ONCEHOOK_AMQP_PREFIX";
pub const ENV_INGEST_ADDR: &str = "ONCEHOOK_INGEST_ADDR";
pub const ENV_METRICS_ADDR: &str = "ONCEHOOK_METRICS_ADDR";
pub const ENV_SMTP_URL: &str = "ONCEHOOK_SMTP_URL";
pub const ENV_MAIL_DIR: &str = "ONCEHOOK_MAIL_DIR";
pub const ENV_MAIL_FROM: &str = "ONCEHOOK_MAIL_FROM";
pub const ENV_LOG: &str = "ONCEHOOK_LOG";
pub const ENV_LOG_FORMAT: &str = "ONCEHOOK_LOG_FORMAT";
pub const ENV_BODY_LIMIT: &str = "ONCEHOOK_BODY_LIMIT_BYTES";
pub const ENV_PUBLISH_TIMEOUT_MS: &str = "ONCEHOOK_PUBLISH_TIMEOUT_MS";
pub const ENV_DELIVERY_LIMIT: &str = "ONCEHOOK_DELIVERY_LIMIT";
pub const ENV_PREFETCH: &str = "ONCEHOOK_PREFETCH";
pub const ENV_RETENTION_DAYS: &str = "ONCEHOOK_RETENTION_DAYS";
pub const ENV_MAX_ATTEMPTS: &str = "ONCEHOOK_MAX_ATTEMPTS";
pub const ENV_RETENTION_INTERVAL_SECS: &str = "ONCEHOOK_RETENTION_INTERVAL_SECS";
pub const ENV_UNLINKED_TTL: &str = "ONCEHOOK_UNLINKED_TTL";
/// Fault injection for the chaos suite: the worker panics on events for this order.
pub const ENV_FAULT_PANIC_ORDER_REF: &str = "ONCEHOOK_FAULT_PANIC_ORDER_REF";

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/oncehook";
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
pub const DEFAULT_AMQP_PREFIX: &str = "oncehook";
pub const DEFAULT_INGEST_ADDR: &str = "127.0.0.1:8080";
pub const DEFAULT_MAIL_DIR: &str = "./var/mail";
pub const DEFAULT_MAIL_FROM: &str = "oncehook <orders@oncehook.local>";
pub const DEFAULT_TOLERANCE_SECS: u64 = 300;
pub const DEFAULT_UNLINKED_TTL: &str = "1h";

/// What went wrong reading the configuration. Start-up aborts on any of these.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("{key}={value:?} is invalid: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    #[error("source {source_name:?}: {reason}")]
    Source { source_name: String, reason: String },
}

/// One gateway account: the `{source}` in `/webhooks/{source}`.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub name: String,
    pub gateway: Gateway,
    /// Live secrets; any may match (rotation). Never empty.
    pub secrets: Vec<String>,
    pub tolerance_secs: u64,
}

/// Everything a binary may need, resolved once at start-up.
#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: String,
    pub amqp_url: String,
    pub amqp_prefix: String,
    pub ingest_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub smtp_url: Option<String>,
    pub mail_dir: PathBuf,
    pub mail_from: String,
    pub log: String,
    pub log_json: bool,
    pub body_limit_bytes: usize,
    pub publish_timeout: Duration,
    /// `x-delivery-limit` of the quorum queues (set explicitly: brokers before 4.0 have none).
    pub delivery_limit: u32,
    pub prefetch: u16,
    pub retention_days: u32,
    /// Attempts (transient failures) before a message is requeued / an email dead-lettered.
    pub max_attempts: u32,
    pub retention_interval: Duration,
    /// How long an event whose payment is not linked to an order yet stays
    /// parked before it is dead-lettered as `unknown_order`.
    pub unlinked_ttl: Duration,
    /// Test-only fault injection (chaos suite); never set in production.
    pub fault_panic_order_ref: Option<String>,
    pub sources: Vec<SourceConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    database_url: Option<String>,
    amqp_url: Option<String>,
    amqp_prefix: Option<String>,
    ingest_addr: Option<String>,
    metrics_addr: Option<String>,
    smtp_url: Option<String>,
    mail_dir: Option<PathBuf>,
    mail_from: Option<String>,
    log: Option<String>,
    log_format: Option<String>,
    body_limit_bytes: Option<usize>,
    publish_timeout_ms: Option<u64>,
    delivery_limit: Option<u32>,
    prefetch: Option<u16>,
    retention_days: Option<u32>,
    max_attempts: Option<u32>,
    retention_interval_secs: Option<u64>,
    unlinked_ttl: Option<String>,
    #[serde(default)]
    source: Vec<FileSource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSource {
    name: String,
    gateway: String,
    #[serde(default)]
    secrets: Vec<String>,
    tolerance_secs: Option<u64>,
}

impl Settings {
    /// Reads `ONCEHOOK_CONFIG` (if set) and the environment.
    pub fn load() -> Result<Self, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::from_env_map(&env)
    }

    /// Like [`Settings::load`] but from an explicit variable map (tests).
    pub fn from_env_map(env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let file = match env.get(ENV_CONFIG).filter(|p| !p.is_empty()) {
            Some(path) => {
                let path = PathBuf::from(path);
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str::<FileConfig>(&text).map_err(|e| ConfigError::Toml {
                    path,
                    message: e.to_string(),
                })?
            }
            None => FileConfig::default(),
        };
        let pick = |key: &str, file_value: Option<String>, default: &str| -> String {
            env.get(key)
                .filter(|v| !v.is_empty())
                .cloned()
                .or(file_value)
                .unwrap_or_else(|| default.to_owned())
        };
        let opt = |key: &str, file_value: Option<String>| -> Option<String> {
            env.get(key)
                .filter(|v| !v.is_empty())
                .cloned()
                .or(file_value)
        };

        let ingest_addr = parse_addr(
            ENV_INGEST_ADDR,
            &pick(ENV_INGEST_ADDR, file.ingest_addr, DEFAULT_INGEST_ADDR),
        )?;
        let metrics_addr = opt(ENV_METRICS_ADDR, file.metrics_addr)
            .map(|v| parse_addr(ENV_METRICS_ADDR, &v))
            .transpose()?;
        let log_format = pick(ENV_LOG_FORMAT, file.log_format, "text");
        let log_json = match log_format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                return Err(invalid(ENV_LOG_FORMAT, other, "expected `text` or `json`"));
            }
        };

        let sources = file
            .source
            .into_iter()
            .map(|s| resolve_source(s, env))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, s) in sources.iter().enumerate() {
            if sources[..i].iter().any(|o| o.name == s.name) {
                return Err(ConfigError::Source {
                    source_name: s.name.clone(),
                    reason: "defined twice".into(),
                });
            }
        }

        Ok(Settings {
            database_url: pick(ENV_DATABASE_URL, file.database_url, DEFAULT_DATABASE_URL),
            amqp_url: pick(ENV_AMQP_URL, file.amqp_url, DEFAULT_AMQP_URL),
            amqp_prefix: pick(ENV_AMQP_PREFIX, file.amqp_prefix, DEFAULT_AMQP_PREFIX),
            ingest_addr,
            metrics_addr,
            smtp_url: opt(ENV_SMTP_URL, file.smtp_url),
            mail_dir: opt(ENV_MAIL_DIR, None)
                .map(PathBuf::from)
                .or(file.mail_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_MAIL_DIR)),
            mail_from: pick(ENV_MAIL_FROM, file.mail_from, DEFAULT_MAIL_FROM),
            log: pick(ENV_LOG, file.log, "info"),
            log_json,
            body_limit_bytes: number(env, ENV_BODY_LIMIT, file.body_limit_bytes, 256 * 1024)?,
            publish_timeout: Duration::from_millis(number(
                env,
                ENV_PUBLISH_TIMEOUT_MS,
                file.publish_timeout_ms,
                3_000,
            )?),
            delivery_limit: number(env, ENV_DELIVERY_LIMIT, file.delivery_limit, 5)?,
            prefetch: number(env, ENV_PREFETCH, file.prefetch, 16)?,
            retention_days: number(env, ENV_RETENTION_DAYS, file.retention_days, 90)?,
            max_attempts: number(env, ENV_MAX_ATTEMPTS, file.max_attempts, 5)?,
            retention_interval: Duration::from_secs(number(
                env,
                ENV_RETENTION_INTERVAL_SECS,
                file.retention_interval_secs,
                3_600,
            )?),
            unlinked_ttl: {
                let text = pick(ENV_UNLINKED_TTL, file.unlinked_ttl, DEFAULT_UNLINKED_TTL);
                parse_duration(&text).map_err(|reason| invalid(ENV_UNLINKED_TTL, &text, reason))?
            },
            fault_panic_order_ref: opt(ENV_FAULT_PANIC_ORDER_REF, None),
            sources,
        })
    }

    /// The source named `name`, if configured.
    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// Ingest cannot do anything useful without sources.
    pub fn require_sources(&self) -> Result<(), ConfigError> {
        if self.sources.is_empty() {
            return Err(ConfigError::Invalid {
                key: ENV_CONFIG.into(),
                value: String::new(),
                reason: "no [[source]] configured: point ONCEHOOK_CONFIG at a TOML file with at least one source".into(),
            });
        }
        Ok(())
    }
}

fn resolve_source(
    s: FileSource,
    env: &HashMap<String, String>,
) -> Result<SourceConfig, ConfigError> {
    let err = |reason: String| ConfigError::Source {
        source_name: s.name.clone(),
        reason,
    };
    if s.name.is_empty()
        || !s
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(err(
            "name must be non-empty and use only [A-Za-z0-9_-]".into()
        ));
    }
    let gateway: Gateway = s.gateway.parse().map_err(|e| err(format!("{e}")))?;
    let mut secrets = Vec::with_capacity(s.secrets.len());
    for raw in &s.secrets {
        let value = expand_vars(raw, env).map_err(&err)?;
        // An unset `${OLD_SECRET}` during rotation is normal: skip empty values.
        if !value.is_empty() {
            secrets.push(value);
        }
    }
    if secrets.is_empty() {
        return Err(err(
            "no secrets: an empty secret list would accept nothing (refusing to start)".into(),
        ));
    }
    Ok(SourceConfig {
        name: s.name.clone(),
        gateway,
        secrets,
        tolerance_secs: s.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS),
    })
}

/// A duration such as `1h`, `30m`, `45s`, `500ms` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, &'static str> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| "expected a whole number with an optional unit: ms, s, m, h")?;
    let duration = match unit.trim() {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3_600)),
        _ => return Err("unknown unit (expected ms, s, m or h)"),
    };
    if duration.is_zero() {
        return Err("must be greater than zero");
    }
    Ok(duration)
}

/// Expands `${VAR}` references from `env`; an unset variable expands to "".
fn expand_vars(raw: &str, env: &HashMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated ${{ in secret reference {raw:?}"))?;
        let var = &after[..end];
        if let Some(v) = env.get(var) {
            out.push_str(v);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn parse_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .parse()
        .map_err(|e| invalid(key, value, &format!("not a socket address: {e}")))
}

fn number<T: std::str::FromStr>(
    env: &HashMap<String, String>,
    key: &str,
    file_value: Option<T>,
    default: T,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match env.get(key).filter(|v| !v.is_empty()) {
        Some(v) => v.parse().map_err(|e| invalid(key, v, &format!("{e}"))),
        None => Ok(file_value.unwrap_or(default)),
    }
}

fn invalid(key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(toml: &str) -> (PathBuf, HashMap<String, String>) {
        let path =
            std::env::temp_dir().join(format!("oncehook-config-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&path, toml).expect("write temp config");
        let mut env = HashMap::new();
        env.insert(ENV_CONFIG.to_owned(), path.display().to_string());
        (path, env)
    }

    #[test]
    fn defaults_without_file() {
        let s = Settings::from_env_map(&HashMap::new()).expect("defaults");
        assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(s.amqp_prefix, "oncehook");
        assert!(s.sources.is_empty());
        assert!(s.require_sources().is_err());
    }

    #[test]
    fn env_wins_over_file_and_secrets_expand() {
        let (path, mut env) = write(
            r#"
amqp_prefix = "fromfile"
[[source]]
name = "rzp"
gateway = "razorpay"
secrets = ["${NEW}", "${OLD}"]
"#,
        );
        env.insert(ENV_AMQP_PREFIX.into(), "fromenv".into());
        env.insert("NEW".into(), "s3cret".into());
        let s = Settings::from_env_map(&env).expect("config");
        assert_eq!(s.amqp_prefix, "fromenv");
        let src = s.source("rzp").expect("source");
        assert_eq!(
            src.secrets,
            vec!["s3cret".to_owned()],
            "unset OLD is skipped"
        );
        assert_eq!(src.tolerance_secs, DEFAULT_TOLERANCE_SECS);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn empty_secret_list_refuses_to_start() {
        let (path, env) =
            write("[[source]]\nname = \"x\"\ngateway = \"stripe\"\nsecrets = [\"${UNSET_VAR}\"]\n");
        let err = Settings::from_env_map(&env).expect_err("must refuse");
        assert!(err.to_string().contains("no secrets"), "{err}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn unknown_gateway_and_bad_numbers_are_named() {
        let (path, env) =
            write("[[source]]\nname = \"x\"\ngateway = \"paypal\"\nsecrets = [\"a\"]\n");
        let err = Settings::from_env_map(&env).expect_err("unknown gateway");
        assert!(err.to_string().contains("paypal"), "{err}");
        let _ = std::fs::remove_file(path);

        let mut env = HashMap::new();
        env.insert(ENV_BODY_LIMIT.to_owned(), "lots".to_owned());
        let err = Settings::from_env_map(&env).expect_err("bad number");
        assert!(err.to_string().contains(ENV_BODY_LIMIT), "{err}");
    }
}
