//! Loading: defaults, then the TOML file named by `ONCEHOOK_CONFIG`, then
//! the environment (env wins), layered with figment and extracted into the
//! file's shape ([`RawConfig`]); `mod.rs` then validates it into typed
//! sections. Errors name the key (and its variable) but never quote a
//! secret, and a TOML syntax error gives the line and column, not the line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::Serialized;
use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::keys::{self, ENV_CONFIG, KEYS, Kind};
use super::sources::FileSource;

/// The configuration as written: sections of plain values, before checks.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawConfig {
    pub broker: RawBroker,
    pub database: RawDatabase,
    pub telemetry: RawTelemetry,
    pub ingest: RawIngest,
    pub worker: RawWorker,
    pub mail: RawMail,
    pub console: RawConsole,
    /// `[[source]]` stays a top-level table (the documented layout).
    pub source: Vec<FileSource>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawBroker {
    pub url: String,
    pub prefix: String,
    pub publish_timeout_ms: u64,
    pub delivery_limit: u32,
    pub quorum_initial_group_size: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawDatabase {
    pub url: String,
    pub max_connections: Option<u32>,
    pub pooler: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawTelemetry {
    pub log: String,
    pub log_format: String,
    pub metrics_addr: Option<String>,
    pub prometheus_url: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawIngest {
    pub addr: String,
    pub workers: Option<u16>,
    pub limits: RawLimits,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawLimits {
    pub body_limit_bytes: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawRetry {
    pub max_attempts: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawRetention {
    pub days: u32,
    pub interval_secs: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawWorker {
    pub prefetch: u16,
    pub retry: RawRetry,
    pub retention: RawRetention,
    pub batch: RawBatch,
    pub unlinked_ttl: String,
    pub fault_panic_order_ref: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawBatch {
    pub size: u16,
    pub linger_ms: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawMail {
    pub smtp_url: Option<String>,
    pub tls: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub allow_insecure_auth: Flag,
    pub from: String,
    pub dir: PathBuf,
    pub prefetch: u16,
    pub concurrency: u16,
    pub retry: RawRetry,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawConsole {
    pub addr: String,
    pub session_key: Option<String>,
    pub session_ttl: String,
    pub secure_cookies: Flag,
    /// `[[console.user]]`
    pub user: Vec<RawConsoleUser>,
}

/// A yes/no setting: a TOML boolean in the file, or text (`true`, `yes`,
/// `on`, `1` and their opposites) from the environment or the file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub(crate) enum Flag {
    Bool(bool),
    Text(String),
}

impl Flag {
    /// The value, or `None` for text that is neither yes nor no.
    pub fn value(&self) -> Option<bool> {
        match self {
            Flag::Bool(b) => Some(*b),
            Flag::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Some(true),
                "false" | "no" | "off" | "0" => Some(false),
                _ => None,
            },
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConsoleUser {
    pub name: String,
    pub role: String,
    pub password_hash: String,
}

impl Default for RawConsole {
    fn default() -> Self {
        RawConsole {
            addr: "127.0.0.1:8081".into(),
            session_key: None,
            session_ttl: "8h".into(),
            secure_cookies: Flag::Bool(true),
            user: Vec::new(),
        }
    }
}

impl Default for RawBroker {
    fn default() -> Self {
        RawBroker {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            prefix: "oncehook".into(),
            publish_timeout_ms: 3_000,
            delivery_limit: 5,
            quorum_initial_group_size: 3,
        }
    }
}

impl Default for RawDatabase {
    fn default() -> Self {
        RawDatabase {
            url: "postgres://postgres@127.0.0.1:5432/oncehook".into(),
            max_connections: None,
            pooler: "none".into(),
        }
    }
}

impl Default for RawTelemetry {
    fn default() -> Self {
        RawTelemetry {
            log: "info".into(),
            log_format: "text".into(),
            metrics_addr: None,
            prometheus_url: None,
        }
    }
}

impl Default for RawIngest {
    fn default() -> Self {
        RawIngest {
            addr: "127.0.0.1:8080".into(),
            workers: None,
            limits: RawLimits::default(),
        }
    }
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            body_limit_bytes: 256 * 1024,
        }
    }
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry { max_attempts: 5 }
    }
}

impl Default for RawRetention {
    fn default() -> Self {
        RawRetention {
            days: 90,
            interval_secs: 3_600,
        }
    }
}

impl Default for RawWorker {
    fn default() -> Self {
        RawWorker {
            prefetch: 16,
            retry: RawRetry::default(),
            retention: RawRetention::default(),
            batch: RawBatch::default(),
            unlinked_ttl: "1h".into(),
            fault_panic_order_ref: None,
        }
    }
}

impl Default for RawBatch {
    fn default() -> Self {
        RawBatch {
            size: 8,
            linger_ms: 2,
        }
    }
}

impl Default for RawMail {
    fn default() -> Self {
        RawMail {
            smtp_url: None,
            tls: None,
            username: None,
            password: None,
            ca_file: None,
            allow_insecure_auth: Flag::Bool(false),
            from: "oncehook <orders@oncehook.local>".into(),
            dir: PathBuf::from("./var/mail"),
            prefetch: 16,
            concurrency: 32,
            retry: RawRetry::default(),
        }
    }
}

/// Layers defaults, the file and `env` and extracts the result.
pub(crate) fn layered(env: &HashMap<String, String>) -> Result<RawConfig, ConfigError> {
    let mut figment = Figment::from(Serialized::defaults(RawConfig::default()));
    if let Some(path) = env.get(ENV_CONFIG).filter(|p| !p.is_empty()) {
        figment = figment.merge(Serialized::defaults(read_file(Path::new(path))?));
    }
    figment = figment.merge(Serialized::defaults(env_layer(env)?));
    figment.extract::<RawConfig>().map_err(describe)
}

/// Reads and parses the file; older flat keys move into their sections.
fn read_file(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| line_column(&text, span.start))
            .unwrap_or((0, 0));
        ConfigError::Toml {
            path: path.to_owned(),
            line,
            column,
            message: e.message().to_owned(),
        }
    })?;
    for key in KEYS {
        let Some(legacy) = key.legacy else { continue };
        if let Some(value) = table.remove(legacy) {
            for path in key.paths {
                insert(&mut table, path, value.clone());
            }
        }
    }
    Ok(table)
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The environment as a table in the file's shape (unset and empty
/// variables are left out, so the file's value or the default stays).
fn env_layer(env: &HashMap<String, String>) -> Result<toml::Table, ConfigError> {
    let mut table = toml::Table::new();
    for key in KEYS {
        let Some(raw) = env.get(key.env).filter(|v| !v.is_empty()) else {
            continue;
        };
        let value = match key.kind {
            Kind::Text => toml::Value::String(raw.clone()),
            Kind::Number => match raw.trim().parse::<i64>() {
                Ok(n) => toml::Value::Integer(n),
                Err(e) => {
                    return Err(ConfigError::Invalid {
                        key: key.env.to_owned(),
                        value: if key.secret {
                            String::new()
                        } else {
                            raw.clone()
                        },
                        reason: format!("not a whole number: {e}"),
                    });
                }
            },
        };
        for path in key.paths {
            insert(&mut table, path, value.clone());
        }
    }
    Ok(table)
}

fn insert(table: &mut toml::Table, path: &str, value: toml::Value) {
    let mut parts = path.split('.').peekable();
    let mut current = table;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            current.insert(part.to_owned(), value);
            return;
        }
        let entry = current
            .entry(part.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = entry else {
            return;
        };
        current = next;
    }
}

/// A figment error as a message naming the key (and its variable) and what
/// was expected. The offending value is quoted only for keys known not to
/// hold a secret: a `[[source]]`'s `secrets = "whsec_…"` (a string where a
/// list belongs) says "found a string", never the string.
fn describe(errors: figment::Error) -> ConfigError {
    let mut lines = Vec::new();
    for e in errors {
        let path = e.path.join(".");
        let key = keys::by_path(&path);
        let name = match key {
            Some(k) => format!("{path} ({})", k.env),
            None if path.is_empty() => "configuration".to_owned(),
            None => path.clone(),
        };
        let shows_value = key.is_some_and(|k| !k.secret);
        lines.push(format!("{name}: {}", what_is_wrong(&e.kind, shows_value)));
    }
    ConfigError::Extract(lines.join("; "))
}

/// The error without the value (unless `shows_value`).
fn what_is_wrong(kind: &figment::error::Kind, shows_value: bool) -> String {
    use figment::error::Kind;
    if shows_value {
        return kind.to_string();
    }
    match kind {
        Kind::InvalidType(actual, expected) => {
            format!("invalid type: expected {expected}, found {}", shape(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!(
                "invalid value: expected {expected}, found {}",
                shape(actual)
            )
        }
        Kind::InvalidLength(len, expected) => {
            format!("invalid length {len}: expected {expected}")
        }
        Kind::UnknownVariant(_, expected) => {
            format!("unknown variant: expected one of {}", expected.join(", "))
        }
        Kind::Unsupported(actual) | Kind::UnsupportedKey(actual, _) => {
            format!("unsupported value: {}", shape(actual))
        }
        Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => "number out of range".to_owned(),
        Kind::Message(_) => "has an invalid value".to_owned(),
        // Field names, never values.
        Kind::UnknownField(..) | Kind::MissingField(_) | Kind::DuplicateField(_) => {
            kind.to_string()
        }
    }
}

/// What kind of value was found, without the value.
fn shape(actual: &figment::error::Actual) -> &'static str {
    use figment::error::Actual;
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
        Actual::Float(_) => "a float",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Bytes(_) => "bytes",
        Actual::Unit | Actual::Option => "nothing",
        Actual::Seq => "a list",
        Actual::Map => "a table",
        _ => "another kind of value",
    }
}
