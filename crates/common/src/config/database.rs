//! `[database]`: Postgres — its URL (a secret: it may carry a password),
//! the most connections one process opens, and whether a pooler in
//! transaction mode sits in between. Ingest never reads this section.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Secret;
use super::keys::Key;
use super::values::AtLeast;

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/oncehook";

pub const ENV_DATABASE_URL: &str = "ONCEHOOK_DATABASE_URL";
pub const ENV_DATABASE_MAX_CONNECTIONS: &str = "ONCEHOOK_DATABASE_MAX_CONNECTIONS";
pub const ENV_DATABASE_POOLER: &str = "ONCEHOOK_DATABASE_POOLER";

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_DATABASE_URL, "database.url")
        .legacy("database_url")
        .secret(),
    Key::new(ENV_DATABASE_MAX_CONNECTIONS, "database.max_connections"),
    Key::new(ENV_DATABASE_POOLER, "database.pooler"),
];

/// `[database]`: Postgres.
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: Secret,
    /// The most connections this process opens (`max_connections`); unset,
    /// each binary sizes its pool from its prefetch. Every process counts
    /// against Postgres' own `max_connections` (docs/operations.md).
    pub max_connections: Option<u32>,
    /// What sits between this process and Postgres.
    pub pooler: Pooler,
}

impl DatabaseConfig {
    /// The pool size: the configured budget, else `default`.
    pub fn pool_size(&self, default: u32) -> u32 {
        self.max_connections.unwrap_or(default)
    }
}

/// A connection pooler in front of Postgres, which changes what a
/// connection may rely on between transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooler {
    /// Straight to Postgres, or a pooler in session mode: prepared
    /// statements are cached per connection.
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`):
    /// a server connection is ours only inside a transaction, so no
    /// statement is cached, every statement runs inside a transaction, and
    /// the pooler must drop prepared statements when it hands a server
    /// connection on (docs/operations.md, "PgBouncer").
    Transaction,
}

impl<'de> Deserialize<'de> for Pooler {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = String::deserialize(d)?;
        match value.trim() {
            "" | "none" | "session" => Ok(Pooler::None),
            "transaction" => Ok(Pooler::Transaction),
            other => Err(D::Error::custom(format!(
                "expected `none` (or `session`) or `transaction`, found {other:?}"
            ))),
        }
    }
}

impl Serialize for Pooler {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        })
    }
}

/// `[database]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct DatabaseSection {
    url: PostgresUrl,
    max_connections: Option<AtLeast<u32, 2>>,
    pooler: Pooler,
}

impl Default for DatabaseSection {
    fn default() -> Self {
        DatabaseSection {
            url: PostgresUrl(Secret::new(DEFAULT_DATABASE_URL)),
            max_connections: None,
            pooler: Pooler::None,
        }
    }
}

impl From<DatabaseSection> for DatabaseConfig {
    fn from(s: DatabaseSection) -> Self {
        DatabaseConfig {
            url: s.url.0,
            max_connections: s.max_connections.map(|n| n.0),
            pooler: s.pooler,
        }
    }
}

/// `database.url`: a `postgres://` or `postgresql://` URL the client
/// accepts, never printed: the messages say what is wrong, never quote the
/// URL nor the client's own message (which may quote a query value).
#[derive(Debug, Clone)]
struct PostgresUrl(Secret);

impl<'de> Deserialize<'de> for PostgresUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];
        let url = String::deserialize(d)?;
        let trimmed = url.trim();
        let rest = SCHEMES.iter().find_map(|s| trimmed.strip_prefix(s));
        if rest.is_none_or(str::is_empty) {
            return Err(D::Error::custom(format!(
                "expected a URL starting with {}",
                SCHEMES.join(" or ")
            )));
        }
        // `postgres://app:12/x@db/shop` is the host `app`, the port 12 and
        // the database `x@db/shop`: an `@` after the host is a password
        // that needs %-encoding.
        let parsed = url::Url::parse(trimmed).map_err(|e| {
            D::Error::custom(format!(
                "is not a URL ({e}; a password's / ? # or @ must be %-encoded)"
            ))
        })?;
        if parsed.path().contains('@') || parsed.fragment().is_some() {
            return Err(D::Error::custom(
                "has an @ or a # after its host: a password's / ? # or @ must be %-encoded \
                 (%2F %3F %23 %40)",
            ));
        }
        #[cfg(feature = "db")]
        if trimmed.parse::<sqlx::postgres::PgConnectOptions>().is_err() {
            return Err(D::Error::custom(
                "is not a Postgres URL the client accepts: check the port and the query \
                 parameters (sslmode, statement-cache-capacity, hostaddr, port, …)",
            ));
        }
        Ok(PostgresUrl(Secret::new(url)))
    }
}

impl Serialize for PostgresUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.expose())
    }
}

#[cfg(test)]
#[path = "database_tests.rs"]
mod tests;
