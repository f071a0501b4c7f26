//! Form bodies and query strings as `key=value` pairs (`application/
//! x-www-form-urlencoded`), where one key may repeat (the IDs of a bulk
//! replay).

use url::form_urlencoded;

/// Decoded pairs, in order.
#[derive(Debug, Default, Clone)]
pub struct Pairs(Vec<(String, String)>);

impl Pairs {
    pub fn parse(input: &[u8]) -> Pairs {
        Pairs(
            form_urlencoded::parse(input)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first non-empty value of `key`, trimmed.
    pub fn get(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.trim())
            .find(|v| !v.is_empty())
            .map(str::to_owned)
    }

    /// The first value of `key` exactly as sent (passwords).
    pub fn raw(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    /// Every non-empty value of `key`.
    pub fn all(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, v)| k == key && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }
}
