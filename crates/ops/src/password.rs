//! Console passwords: `oncehookctl console-user NAME` hashes a password read
//! from stdin with argon2 (Argon2id, a random salt) and prints the
//! `[[console.user]]` entry to paste into the configuration; the console
//! checks a login against that hash with [`verify`].

use std::fmt;
use std::io::BufRead as _;

use anyhow::{Context, bail};
use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use clap::Args;
use oncehook_common::config::ConsoleRole;
use serde::Serialize;

use crate::output::Report;

/// Shorter passwords are refused.
pub const MIN_PASSWORD_CHARS: usize = 8;

#[derive(Args)]
pub struct ConsoleUserArgs {
    /// The login name.
    pub name: String,
    /// `viewer` (reads every page) or `operator` (also replays and purges).
    #[arg(long, default_value = "viewer")]
    pub role: String,
}

/// The configuration entry for one console user.
#[derive(Serialize)]
pub struct ConsoleUserEntry {
    pub name: String,
    pub role: &'static str,
    pub password_hash: String,
}

/// Reads the password (the first line of stdin) and hashes it.
pub fn console_user(args: ConsoleUserArgs) -> anyhow::Result<ConsoleUserEntry> {
    let Some(role) = ConsoleRole::parse(&args.role) else {
        bail!("--role must be `viewer` or `operator`, not {:?}", args.role);
    };
    let name = args.name.trim();
    if name.is_empty() || name.chars().any(|c| c.is_control() || c == '"') {
        bail!("the name must be non-empty, without quotes or control characters");
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    let password = line.trim_end_matches(['\r', '\n']);
    Ok(ConsoleUserEntry {
        name: name.to_owned(),
        role: role.as_str(),
        password_hash: hash(password)?,
    })
}

/// An argon2id PHC string for `password`.
pub fn hash(password: &str) -> anyhow::Result<String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        bail!("the password must have at least {MIN_PASSWORD_CHARS} characters");
    }
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("hashing the password: {e}"))
}

/// Whether `password` matches the PHC string `hash` (constant time in the
/// hash comparison; a malformed hash never matches).
pub fn verify(password: &str, hash: &str) -> bool {
    Argon2::default()
        .verify_password(password.as_bytes(), hash)
        .is_ok()
}

impl fmt::Display for ConsoleUserEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "[[console.user]]")?;
        writeln!(f, "name = \"{}\"", self.name)?;
        writeln!(f, "role = \"{}\"", self.role)?;
        write!(f, "password_hash = \"{}\"", self.password_hash)
    }
}

impl Report for ConsoleUserEntry {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let h = hash("correct horse").expect("hash");
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("correct horse", &h));
        assert!(!verify("wrong horse", &h));
        assert!(!verify("correct horse", "not a hash"));
        assert!(hash("short").is_err());
    }
}
