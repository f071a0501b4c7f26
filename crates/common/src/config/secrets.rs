//! `[secrets]`: the key ring that seals tenants' secrets at rest
//! ([`crate::sealed`]): `keys` is `kid:base64key[,kid:base64key…]`, the
//! first key sealing and every key opening. Unset, nothing can be sealed
//! or opened. The ring is a secret: a malformed one is refused naming the
//! entry that is wrong, never its key.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Secret;
use super::keys::Key;
use crate::sealed::KeyRing;

pub const ENV_SECRET_KEYS: &str = "ONCEHOOK_SECRET_KEYS";

pub(super) const KEYS: &[Key] = &[Key::new(ENV_SECRET_KEYS, "secrets.keys").secret()];

/// `[secrets]`: the key ring of secrets at rest.
#[derive(Debug, Clone, Default)]
pub struct SecretsConfig {
    /// `None`: unset (nothing can be sealed or opened).
    pub keys: Option<KeyRing>,
}

/// `[secrets]` as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct SecretsSection {
    keys: RingText,
}

impl From<SecretsSection> for SecretsConfig {
    fn from(s: SecretsSection) -> Self {
        SecretsConfig {
            keys: s.keys.0.map(|(_, ring)| ring),
        }
    }
}

/// `secrets.keys`: parsed as it is read, never printed; empty means unset.
/// The text is kept to serialize back (the defaults layer).
#[derive(Debug, Clone, Default)]
struct RingText(Option<(Secret, KeyRing)>);

impl<'de> Deserialize<'de> for RingText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(text) if !text.trim().is_empty() => {
                // The ring's errors name an entry and a well-formed kid,
                // never a key.
                let ring = text
                    .parse::<KeyRing>()
                    .map_err(|e| D::Error::custom(e.to_string()))?;
                Ok(RingText(Some((Secret::new(text), ring))))
            }
            _ => Ok(RingText(None)),
        }
    }
}

impl Serialize for RingText {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            None => s.serialize_none(),
            Some((text, _)) => s.serialize_str(text.expose()),
        }
    }
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
