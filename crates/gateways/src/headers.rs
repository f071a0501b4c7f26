//! A small, owned, case-insensitive header list. Keeps the gateways crate free
//! of any HTTP library: ingest copies the headers it needs into one of these,
//! and the envelope carries it to the worker.

use serde::{Deserialize, Serialize};

/// Request headers with lowercase names, in arrival order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// An empty header list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a header; the name is stored lowercase.
    pub fn insert(&mut self, name: &str, value: impl Into<String>) {
        self.0.push((name.to_ascii_lowercase(), value.into()));
    }

    /// Builder form of [`Headers::insert`].
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.insert(name, value);
        self
    }

    /// First value of a header, looked up case-insensitively.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All headers in arrival order, names lower case.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Number of headers (repeated names count once per occurrence).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N: AsRef<str>, V: Into<String>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let mut h = Headers::new();
        for (n, v) in iter {
            h.insert(n.as_ref(), v);
        }
        h
    }
}
