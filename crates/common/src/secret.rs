//! [`Secret`]: a configuration value that must never be printed — webhook
//! secrets, and URLs that may carry a password (database, broker, SMTP).
//! `Debug` shows `[redacted]`; the value is read with [`Secret::expose`]
//! only where it is used (to connect, to verify a signature).

use secrecy::{ExposeSecret, SecretString};

/// A secret string (see the module documentation).
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(SecretString::from(value.into()))
    }

    /// The value, for the one place that needs it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for Secret {}

#[cfg(test)]
#[path = "secret_tests.rs"]
mod tests;
