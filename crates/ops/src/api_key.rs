//! `oncehookctl api-key NAME --scope orders:write --scope orders:read`: a
//! new random key for the shop's API (`ohk_` and 32 random bytes in
//! base64url), printed once, with the `[[api.key]]` entry that holds only
//! its SHA-256. The key is not kept anywhere: lose it, make another.

use std::fmt;

use anyhow::bail;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use clap::Args;
use oncehook_common::config::ApiScope;
use rand::RngCore as _;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::output::Report;

#[derive(Args)]
pub struct ApiKeyArgs {
    /// The key's name (in the audit and the metrics).
    pub name: String,
    /// orders:write, orders:read, products:write, events:read (repeat for several).
    #[arg(long = "scope", required = true)]
    pub scopes: Vec<String>,
}

/// A new key and its configuration entry.
#[derive(Serialize)]
pub struct ApiKeyEntry {
    pub name: String,
    /// The key itself: shown once, never stored.
    pub key: String,
    pub hash: String,
    pub scopes: Vec<&'static str>,
}

pub fn api_key(args: ApiKeyArgs) -> anyhow::Result<ApiKeyEntry> {
    let name = args.name.trim();
    if name.is_empty() || name == "unknown" || name.chars().any(|c| c.is_control() || c == '"') {
        bail!("the name must be non-empty, not `unknown`, without quotes or control characters");
    }
    let mut scopes = Vec::new();
    for s in &args.scopes {
        let Some(scope) = ApiScope::parse(s) else {
            let known: Vec<&str> = ApiScope::ALL.iter().map(|s| s.as_str()).collect();
            bail!("unknown scope {s:?}: scopes are {}", known.join(", "));
        };
        if !scopes.contains(&scope.as_str()) {
            scopes.push(scope.as_str());
        }
    }
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let key = format!("ohk_{}", URL_SAFE_NO_PAD.encode(bytes));
    Ok(ApiKeyEntry {
        name: name.to_owned(),
        hash: hash(&key),
        key,
        scopes,
    })
}

/// The SHA-256 of a key, in hex: what `[[api.key]] hash` holds.
pub fn hash(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl fmt::Display for ApiKeyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "# The key (shown once; give it to the shop's backend):")?;
        writeln!(f, "# {}", self.key)?;
        writeln!(f, "[[api.key]]")?;
        writeln!(f, "name = \"{}\"", self.name)?;
        writeln!(f, "hash = \"{}\"", self.hash)?;
        let scopes: Vec<String> = self.scopes.iter().map(|s| format!("\"{s}\"")).collect();
        write!(f, "scopes = [{}]", scopes.join(", "))
    }
}

impl Report for ApiKeyEntry {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_random_prefixed_and_hashed() {
        let args = |s: &[&str]| ApiKeyArgs {
            name: "shop".into(),
            scopes: s.iter().map(|s| (*s).to_owned()).collect(),
        };
        let a = api_key(args(&["orders:write", "orders:read"])).expect("key");
        let b = api_key(args(&["orders:write"])).expect("key");
        assert!(
            a.key.starts_with("ohk_") && a.key.len() == 4 + 43,
            "{}",
            a.key
        );
        assert_ne!(a.key, b.key);
        assert_eq!(a.hash, hash(&a.key));
        assert_eq!(a.hash.len(), 64);
        assert!(
            a.to_string()
                .contains("scopes = [\"orders:write\", \"orders:read\"]")
        );
        assert!(api_key(args(&["orders:delete"])).is_err());
    }
}
