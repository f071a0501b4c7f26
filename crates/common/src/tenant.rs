//! A tenant's id: the shop a row, a source, a key or an event belongs to
//! (docs/tenants.md). Lowercase letters, digits, `-` and `_`, starting with
//! a letter or digit, at most 63 characters — the same rule the `tenants`
//! table checks — so an id is safe in a URL, a log line and the scope a
//! transaction sets. A deployment that configures no tenant has one,
//! [`TenantId::DEFAULT`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A validated tenant id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantId(String);

/// Why a string is not a tenant id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a tenant id: use 1 to 63 lowercase letters, digits, `-` or `_`, \
     starting with a letter or digit (e.g. `acme-shop`)"
)]
pub struct BadTenantId(pub String);

impl TenantId {
    /// The tenant of a deployment that configures none, and of every row
    /// written before tenants existed.
    pub const DEFAULT: &'static str = "default";

    /// The default tenant.
    pub fn default_tenant() -> TenantId {
        TenantId(Self::DEFAULT.to_owned())
    }

    /// Checks `s`.
    pub fn parse(s: &str) -> Result<TenantId, BadTenantId> {
        let mut chars = s.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok =
            chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if first_ok && rest_ok && s.len() <= 63 {
            Ok(TenantId(s.to_owned()))
        } else {
            Err(BadTenantId(s.chars().take(80).collect()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is [`TenantId::DEFAULT`].
    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TenantId {
    type Err = BadTenantId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TenantId::parse(s)
    }
}

impl Serialize for TenantId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TenantId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TenantId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_tables_rule() {
        for ok in [
            "default",
            "acme",
            "acme-shop",
            "a",
            "0shop",
            "a_b",
            &"a".repeat(63),
        ] {
            assert!(TenantId::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-acme",
            "_a",
            "Acme",
            "acme shop",
            "acme,other",
            "a'b",
            "*",
            &"a".repeat(64),
        ] {
            assert!(TenantId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_error_names_the_rule() {
        let err = TenantId::parse("Acme").unwrap_err().to_string();
        assert!(
            err.contains("\"Acme\"") && err.contains("lowercase"),
            "{err}"
        );
    }
}
