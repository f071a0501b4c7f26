//! `[console]`: the operators' web console (`oncehook-console`) — its own
//! listener (never the public ingest port), the key its sessions are signed
//! with, how long a login lasts, whether its cookies are `Secure`, and its
//! accounts (`[[console.user]]`, in the file only).

use std::net::SocketAddr;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::error::invalid;
use super::keys::Key;
use super::values::{Addr, HumanDuration, SecretText};
use super::{ConfigError, Secret};
use crate::tenant::TenantId;

pub const ENV_CONSOLE_ADDR: &str = "ONCEHOOK_CONSOLE_ADDR";
pub const ENV_CONSOLE_SESSION_KEY: &str = "ONCEHOOK_CONSOLE_SESSION_KEY";
pub const ENV_CONSOLE_SESSION_TTL: &str = "ONCEHOOK_CONSOLE_SESSION_TTL";
pub const ENV_CONSOLE_SECURE_COOKIES: &str = "ONCEHOOK_CONSOLE_SECURE_COOKIES";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_CONSOLE_ADDR, "console.addr"),
    Key::new(ENV_CONSOLE_SESSION_KEY, "console.session_key").secret(),
    Key::new(ENV_CONSOLE_SESSION_TTL, "console.session_ttl"),
    Key::new(ENV_CONSOLE_SECURE_COOKIES, "console.secure_cookies"),
];

/// `[console]`: the operators' web console (`oncehook-console`).
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Its own listener, never the public ingest port.
    pub addr: SocketAddr,
    /// The key sessions are signed with; `None` → a random key per start.
    pub session_key: Option<Secret>,
    /// How long a session lasts after login.
    pub session_ttl: Duration,
    /// Whether session cookies carry `Secure` (off only for plain local http).
    pub secure_cookies: bool,
    /// `[[console.user]]`: who may log in.
    pub users: Vec<ConsoleUser>,
}

/// One console account.
#[derive(Debug, Clone)]
pub struct ConsoleUser {
    pub name: String,
    pub role: ConsoleRole,
    /// An argon2 PHC string (`oncehookctl console-user NAME` prints one).
    pub password_hash: Secret,
    /// The tenants whose rows the account sees (docs/tenants.md); `None`:
    /// a platform operator, who sees every tenant's.
    pub tenants: Option<Vec<TenantId>>,
}

/// What a console account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsoleRole {
    /// Reads every page.
    Viewer,
    /// Also replays and purges dead letters.
    Operator,
}

impl ConsoleRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleRole::Viewer => "viewer",
            ConsoleRole::Operator => "operator",
        }
    }

    pub fn parse(value: &str) -> Option<ConsoleRole> {
        match value.trim() {
            "viewer" => Some(ConsoleRole::Viewer),
            "operator" => Some(ConsoleRole::Operator),
            _ => None,
        }
    }
}

/// `[console]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct ConsoleSection {
    addr: Addr,
    session_key: SessionKey,
    session_ttl: HumanDuration,
    /// A yes/no: a TOML boolean, or text.
    secure_cookies: bool,
    /// `[[console.user]]`
    pub user: Vec<UserEntry>,
}

/// A `[[console.user]]` table as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UserEntry {
    name: String,
    role: String,
    password_hash: SecretText,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tenants: Option<Vec<String>>,
}

impl Default for ConsoleSection {
    fn default() -> Self {
        ConsoleSection {
            addr: Addr(SocketAddr::from(([127, 0, 0, 1], 8081))),
            session_key: SessionKey(None),
            session_ttl: HumanDuration(Duration::from_secs(8 * 3_600)),
            secure_cookies: true,
            user: Vec::new(),
        }
    }
}

impl ConsoleSection {
    /// The section, each account checked and no name given twice.
    pub(super) fn validate(self) -> Result<ConsoleConfig, ConfigError> {
        let mut users: Vec<ConsoleUser> = Vec::with_capacity(self.user.len());
        for entry in self.user {
            let user = entry.validate()?;
            if users.iter().any(|u| u.name == user.name) {
                return Err(user_error(&user.name, "configured twice"));
            }
            users.push(user);
        }
        Ok(ConsoleConfig {
            addr: self.addr.0,
            session_key: self.session_key.0,
            session_ttl: self.session_ttl.0,
            secure_cookies: self.secure_cookies,
            users,
        })
    }
}

impl UserEntry {
    fn validate(self) -> Result<ConsoleUser, ConfigError> {
        let name = self.name.trim().to_owned();
        if name.is_empty() {
            return Err(user_error(&name, "a console user needs a name"));
        }
        let role = ConsoleRole::parse(&self.role)
            .ok_or_else(|| user_error(&name, "role must be `viewer` or `operator`"))?;
        if !self.password_hash.0.expose().starts_with("$argon2") {
            return Err(user_error(
                &name,
                "password_hash must be an argon2 hash (`oncehookctl console-user NAME` prints one)",
            ));
        }
        let tenants = match self.tenants {
            None => None,
            Some(ids) if ids.is_empty() => {
                return Err(user_error(
                    &name,
                    "tenants must name at least one tenant (leave it out for a platform operator)",
                ));
            }
            Some(ids) => Some(
                ids.iter()
                    .map(|id| TenantId::parse(id.trim()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| user_error(&name, &format!("tenants: {e}")))?,
            ),
        };
        Ok(ConsoleUser {
            name,
            role,
            password_hash: self.password_hash.0,
            tenants,
        })
    }
}

fn user_error(name: &str, reason: &str) -> ConfigError {
    invalid(&format!("console.user {name:?}"), "", reason)
}

/// `session_key`: at least 32 characters, never printed; empty means unset.
#[derive(Debug, Clone)]
struct SessionKey(Option<Secret>);

impl<'de> Deserialize<'de> for SessionKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(key) if key.is_empty() => Ok(SessionKey(None)),
            Some(key) if key.len() < 32 => Err(D::Error::custom("must be at least 32 characters")),
            key => Ok(SessionKey(key.map(Secret::new))),
        }
    }
}

impl Serialize for SessionKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            None => s.serialize_none(),
            Some(key) => s.serialize_str(key.expose()),
        }
    }
}

#[cfg(test)]
#[path = "console_tests.rs"]
mod tests;
