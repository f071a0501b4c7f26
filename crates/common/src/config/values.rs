//! The value types several sections write their settings in. Each checks
//! its value while it is read, so a section extracted from the layered
//! configuration holds only valid values; a failed check is a message
//! figment files under the key's path, and `error.rs` adds the variable.
//! Only the types for settings that are never secret (addresses,
//! durations) quote the value they found; [`SecretText`] checks nothing.
//!
//! Each type also serializes back to the way it is written, which is how
//! the sections' defaults become the first figment layer (`load.rs`).

use std::fmt::Display;
use std::net::SocketAddr;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Secret;

/// A whole number of at least `MIN` (`prefetch`, `concurrency`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(super) struct AtLeast<T, const MIN: u64>(pub T);

impl<'de, T, const MIN: u64> Deserialize<'de> for AtLeast<T, MIN>
where
    T: Deserialize<'de> + Copy + Into<u64> + Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = T::deserialize(d)?;
        if value.into() < MIN {
            return Err(D::Error::custom(format!(
                "must be at least {MIN}, found {value}"
            )));
        }
        Ok(AtLeast(value))
    }
}

/// A whole number within `LO..=HI` (`worker.batch.size`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(super) struct Within<T, const LO: u64, const HI: u64>(pub T);

impl<'de, T, const LO: u64, const HI: u64> Deserialize<'de> for Within<T, LO, HI>
where
    T: Deserialize<'de> + Copy + Into<u64> + Display,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = T::deserialize(d)?;
        if !(LO..=HI).contains(&value.into()) {
            return Err(D::Error::custom(format!(
                "must be within {LO}..={HI}, found {value}"
            )));
        }
        Ok(Within(value))
    }
}

/// Text that must not be blank (`broker.prefix`, `mail.from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub(super) struct NonEmpty(pub String);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = String::deserialize(d)?;
        if value.trim().is_empty() {
            return Err(D::Error::custom("must not be empty"));
        }
        Ok(NonEmpty(value))
    }
}

/// A listener's `host:port` (`ingest.addr`, `console.addr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Addr(pub SocketAddr);

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = String::deserialize(d)?;
        value.trim().parse().map(Addr).map_err(|e| {
            D::Error::custom(format!(
                "expected a socket address such as 127.0.0.1:8080, found {value:?}: {e}"
            ))
        })
    }
}

impl Serialize for Addr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// A duration written as `30s`, `15m` or `1h`, greater than zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = String::deserialize(d)?;
        match humantime::parse_duration(value.trim()) {
            Ok(duration) if !duration.is_zero() => Ok(HumanDuration(duration)),
            Ok(_) => Err(D::Error::custom(format!(
                "must be greater than zero, found {value:?}"
            ))),
            Err(e) => Err(D::Error::custom(format!(
                "expected a duration such as 30s, 15m or 1h, found {value:?}: {e}"
            ))),
        }
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(self.0))
    }
}

/// A secret written as text: `Debug` never shows it. It serializes (for
/// the defaults layer, inside this module only) as the text itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SecretText(pub Secret);

impl Default for SecretText {
    fn default() -> Self {
        SecretText(Secret::new(""))
    }
}

impl<'de> Deserialize<'de> for SecretText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| SecretText(Secret::new(s)))
    }
}

impl Serialize for SecretText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.expose())
    }
}

/// `retry = { max_attempts = N }`, of `[worker]` and of `[mail]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct Retry {
    pub max_attempts: AtLeast<u32, 1>,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: AtLeast(5),
        }
    }
}

#[cfg(test)]
#[path = "values_tests.rs"]
mod tests;
