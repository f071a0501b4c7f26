//! What went wrong reading the configuration, and how a figment error
//! becomes a message: it names the key (and its variable) and what was
//! expected, and quotes the offending value only for keys known not to hold
//! a secret. A `[[source]]`'s `secrets = "whsec_…"` (a string where a list
//! belongs) says "found a string", never the string.

use std::path::PathBuf;

use super::keys;

/// What went wrong reading the configuration. Start-up aborts on any of
/// these; none of them quotes a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML (line {line}, column {column}): {message}")]
    Toml {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("invalid configuration: {0}")]
    Extract(String),
    #[error("{key}={value:?} is invalid: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    #[error("source {source_name:?}: {reason}")]
    Source { source_name: String, reason: String },
    #[error("{path} ({env}) was removed in oncehook {removed_in} and is no longer read; {instead}")]
    Retired {
        path: &'static str,
        env: &'static str,
        removed_in: &'static str,
        instead: &'static str,
    },
}

/// The refusal of a retired setting.
pub(super) fn retired(key: &keys::Retired) -> ConfigError {
    ConfigError::Retired {
        path: key.path,
        env: key.env,
        removed_in: key.removed_in,
        instead: key.instead,
    }
}

/// A check of several settings together failed (`validate()` of a
/// section); `value` is shown, so callers pass `[redacted]` for secrets.
pub(super) fn invalid(key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// A figment error as a message per failed key: `path (VARIABLE): what`.
pub(super) fn describe(errors: figment::Error) -> ConfigError {
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
    match kind {
        // Written by the checks of the sections' value types, which quote a
        // value only for settings that are never secret.
        Kind::Message(message) => message.clone(),
        _ if shows_value => kind.to_string(),
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
