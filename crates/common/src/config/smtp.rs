//! `[mail]`'s SMTP settings (`mail.rs` reads them), checked together once
//! at start-up: where the mailer submits emails (`smtp_url`), how the
//! connection is protected (`tls`: none, STARTTLS or implicit TLS), who it
//! logs in as (`username` and `password`, or the user and password of the
//! URL) and which extra certificate authority it trusts (`ca_file`, for a
//! private relay).
//!
//! Credentials are never sent over a connection that is not encrypted
//! unless `allow_insecure_auth` says so (a relay on the same host). No
//! error here quotes the URL or any part of it (scheme, user, parameters,
//! TLS mode as written), nor a password: they name the key and what is
//! wrong. A URL that parses as something other than it looks like
//! (`smtp:PASSWORD` is the scheme `smtp` and the path `PASSWORD`) is refused
//! by what it lacks, never echoed.

use std::path::PathBuf;

use percent_encoding::percent_decode_str;

use super::mail::{ENV_SMTP_ALLOW_INSECURE_AUTH, ENV_SMTP_TLS, ENV_SMTP_URL};
use super::mail::{ENV_SMTP_CA_FILE, ENV_SMTP_PASSWORD, ENV_SMTP_USERNAME};
use super::{ConfigError, Secret};
use crate::redact::redact;

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain text: a relay on the same host or network (port 25).
    None,
    /// Plain connect, then `STARTTLS` before anything else (submission, 587).
    /// A server that does not offer it is an error, never a silent downgrade.
    StartTls,
    /// TLS from the first byte (`smtps://`, 465).
    Implicit,
}

impl SmtpTls {
    pub fn as_str(self) -> &'static str {
        match self {
            SmtpTls::None => "none",
            SmtpTls::StartTls => "starttls",
            SmtpTls::Implicit => "implicit",
        }
    }

    fn parse(value: &str) -> Option<SmtpTls> {
        match value.trim().to_ascii_lowercase().as_str() {
            "none" | "plain" | "off" => Some(SmtpTls::None),
            "starttls" => Some(SmtpTls::StartTls),
            "implicit" | "tls" | "smtps" => Some(SmtpTls::Implicit),
            _ => None,
        }
    }

    /// The port a scheme and mode use when the URL names none.
    fn default_port(self) -> u16 {
        match self {
            SmtpTls::None => 25,
            SmtpTls::StartTls => 587,
            SmtpTls::Implicit => 465,
        }
    }
}

/// The account the mailer logs in as (`AUTH PLAIN` or `LOGIN`).
#[derive(Debug, Clone)]
pub struct SmtpCredentials {
    pub username: String,
    pub password: Secret,
}

/// Where and how emails are submitted.
#[derive(Debug, Clone)]
pub struct SmtpConfig {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub credentials: Option<SmtpCredentials>,
    /// A PEM file of certificate authorities trusted besides the public ones.
    pub ca_file: Option<PathBuf>,
    /// The URL with its password removed, for logs.
    pub shown: String,
}

impl SmtpConfig {
    /// `host:port`, for messages.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// `[mail]`'s SMTP keys as written (after the environment is layered on).
pub(crate) struct RawSmtp {
    pub url: Option<String>,
    pub tls: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub allow_insecure_auth: bool,
}

/// The checked SMTP settings; `None` when no URL is set (emails go to files).
pub(crate) fn smtp(raw: RawSmtp) -> Result<Option<SmtpConfig>, ConfigError> {
    let Some(text) = raw.url.filter(|u| !u.trim().is_empty()) else {
        if raw.username.as_deref().is_some_and(|u| !u.is_empty()) {
            return Err(bad(
                ENV_SMTP_USERNAME,
                "is set but mail.smtp_url is not: set ONCEHOOK_SMTP_URL to the server to log in to",
            ));
        }
        return Ok(None);
    };
    const EXPECTED: &str =
        "expected smtp:// or smtps://, such as smtps://user:password@smtp.example.com:465";
    let url = url::Url::parse(text.trim()).map_err(|e| {
        // The url crate's messages name what is wrong, never the text.
        bad(ENV_SMTP_URL, &format!("is not a URL ({e}); {EXPECTED}"))
    })?;
    let by_scheme = match url.scheme() {
        "smtp" => SmtpTls::None,
        "smtps" => SmtpTls::Implicit,
        _ => {
            return Err(bad(
                ENV_SMTP_URL,
                &format!("has a scheme other than smtp:// or smtps://; {EXPECTED}"),
            ));
        }
    };
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad(ENV_SMTP_URL, &format!("has no host; {EXPECTED}")))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    // `smtp://user:pa/ss@host` is the host `user`, the port `pa` (refused by
    // the parser above) or, with digits, a port and a path: an SMTP URL has
    // no path, so what follows the authority is a password that needs
    // %-encoding, not something to connect to.
    if !matches!(url.path(), "" | "/") || url.fragment().is_some() {
        return Err(bad(
            ENV_SMTP_URL,
            &format!(
                "has a path or a fragment after its host (a password's / ? # or @ must be \
                 %-encoded: %2F %3F %23 %40); {EXPECTED}"
            ),
        ));
    }
    let tls = tls_mode(&url, by_scheme, raw.tls.as_deref())?;
    let credentials = credentials(&url, raw.username, raw.password)?;
    if credentials.is_some() && tls == SmtpTls::None && !raw.allow_insecure_auth {
        return Err(bad(
            ENV_SMTP_URL,
            &format!(
                "would send the SMTP password over a plain connection: use tls = \"starttls\" \
                 (port 587) or smtps:// (port 465), or set mail.allow_insecure_auth = true \
                 ({ENV_SMTP_ALLOW_INSECURE_AUTH}) for a relay on the same host"
            ),
        ));
    }
    if let Some(path) = &raw.ca_file {
        if path.as_os_str().is_empty() {
            return Err(bad(ENV_SMTP_CA_FILE, "is empty"));
        }
        if tls == SmtpTls::None {
            return Err(bad(
                ENV_SMTP_CA_FILE,
                "is set but the SMTP connection uses no TLS (tls = \"none\")",
            ));
        }
    }
    Ok(Some(SmtpConfig {
        port: url.port().unwrap_or(tls.default_port()),
        host,
        tls,
        credentials,
        ca_file: raw.ca_file,
        shown: redact(text.trim()),
    }))
}

/// The mode from `[mail] tls`, the URL's `?tls=` and its scheme; two that
/// disagree are an error rather than a guess.
fn tls_mode(
    url: &url::Url,
    by_scheme: SmtpTls,
    setting: Option<&str>,
) -> Result<SmtpTls, ConfigError> {
    let parse = |key: &str, v: &str| {
        SmtpTls::parse(v).ok_or_else(|| {
            bad(
                key,
                "names something that is not a TLS mode: expected \"none\", \"starttls\" or \"implicit\"",
            )
        })
    };
    let from_query = url
        .query_pairs()
        .find(|(k, _)| k == "tls")
        .map(|(_, v)| parse(ENV_SMTP_URL, &v))
        .transpose()?;
    let from_setting = setting
        .filter(|s| !s.trim().is_empty())
        .map(|s| parse(ENV_SMTP_TLS, s))
        .transpose()?;
    if url.query_pairs().any(|(k, _)| k != "tls") {
        return Err(bad(
            ENV_SMTP_URL,
            "has an unknown parameter: only ?tls= is read",
        ));
    }
    let chosen = match (from_query, from_setting) {
        (Some(q), Some(s)) if q != s => {
            return Err(bad(
                ENV_SMTP_TLS,
                &format!(
                    "is {:?} but {ENV_SMTP_URL} says tls={:?}: set it in one place",
                    s.as_str(),
                    q.as_str()
                ),
            ));
        }
        (Some(q), _) => q,
        (None, Some(s)) => s,
        (None, None) => by_scheme,
    };
    if by_scheme == SmtpTls::Implicit && chosen != SmtpTls::Implicit {
        return Err(bad(
            ENV_SMTP_TLS,
            &format!(
                "is {:?} but smtps:// is TLS from the first byte: use smtp:// for {:?}",
                chosen.as_str(),
                chosen.as_str()
            ),
        ));
    }
    Ok(chosen)
}

/// The login from the URL's user and password or from `username` and
/// `password`; both at once is an error (which one would be meant?).
fn credentials(
    url: &url::Url,
    username: Option<String>,
    password: Option<String>,
) -> Result<Option<SmtpCredentials>, ConfigError> {
    let decode = |s: &str| {
        percent_decode(s).ok_or_else(|| {
            bad(
                ENV_SMTP_URL,
                "has a user or password that is not valid percent-encoded UTF-8",
            )
        })
    };
    let in_url = !url.username().is_empty() || url.password().is_some();
    let username = username.filter(|u| !u.is_empty());
    let password = password.filter(|p| !p.is_empty());
    if in_url && (username.is_some() || password.is_some()) {
        return Err(bad(
            ENV_SMTP_URL,
            &format!(
                "carries a login and mail.username/mail.password ({ENV_SMTP_USERNAME}, \
                 {ENV_SMTP_PASSWORD}) are set too: set the login in one place"
            ),
        ));
    }
    let (user, pass) = if in_url {
        (
            decode(url.username())?,
            url.password().map(decode).transpose()?,
        )
    } else {
        (username.unwrap_or_default(), password)
    };
    match (user.is_empty(), pass) {
        (true, None) => Ok(None),
        (false, Some(p)) => Ok(Some(SmtpCredentials {
            username: user,
            password: Secret::new(p),
        })),
        // The user is not quoted: `smtps://PASSWORD@host` (the user left
        // out) would otherwise print the password.
        (false, None) => Err(bad(
            ENV_SMTP_PASSWORD,
            "is not set: the SMTP user has no password (mail.password or the URL's password)",
        )),
        (true, Some(_)) => Err(bad(
            ENV_SMTP_USERNAME,
            "an SMTP password is set without a user name",
        )),
    }
}

/// A URL's user or password as it was before percent-encoding; `None` if
/// that is not UTF-8. A `%` without two hex digits after it stays as
/// written (as URL parsers read it).
fn percent_decode(s: &str) -> Option<String> {
    percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

fn bad(key: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        value: "[redacted]".to_owned(),
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
#[path = "smtp_tests.rs"]
mod tests;
