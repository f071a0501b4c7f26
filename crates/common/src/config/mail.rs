//! `[mail]`: the mailer — the SMTP server and its login (checked together
//! in `smtp.rs`; unset, emails are written as `.eml` files to `dir`), the
//! sender, how many messages it holds and sends at once, the retries of a
//! send and the lease a mailer holds on an email while it sends it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use super::error::invalid;
use super::keys::{ENV_MAX_ATTEMPTS, ENV_PREFETCH, Key};
use super::smtp::{self, RawSmtp, SmtpConfig};
use super::values::{AtLeast, HumanDuration, NonEmpty, Retry, SecretText};
use crate::retry::RetryPolicy;

pub const ENV_SMTP_URL: &str = "ONCEHOOK_SMTP_URL";
pub const ENV_SMTP_TLS: &str = "ONCEHOOK_SMTP_TLS";
pub const ENV_SMTP_USERNAME: &str = "ONCEHOOK_SMTP_USERNAME";
pub const ENV_SMTP_PASSWORD: &str = "ONCEHOOK_SMTP_PASSWORD";
pub const ENV_SMTP_CA_FILE: &str = "ONCEHOOK_SMTP_CA_FILE";
pub const ENV_SMTP_ALLOW_INSECURE_AUTH: &str = "ONCEHOOK_SMTP_ALLOW_INSECURE_AUTH";
pub const ENV_MAIL_DIR: &str = "ONCEHOOK_MAIL_DIR";
pub const ENV_MAIL_FROM: &str = "ONCEHOOK_MAIL_FROM";
pub const ENV_MAIL_CONCURRENCY: &str = "ONCEHOOK_MAIL_CONCURRENCY";
pub const ENV_MAIL_LEASE: &str = "ONCEHOOK_MAIL_LEASE";

/// The shortest `mail.lease`: one SMTP send (at most 10 s, connecting
/// included) must fit in what is left of a lease, with room to spare.
pub const MIN_MAIL_LEASE: Duration = Duration::from_secs(15);

pub(super) const KEYS: &[Key] = &[
    Key::new(ENV_SMTP_URL, "mail.smtp_url")
        .legacy("smtp_url")
        .secret(),
    Key::new(ENV_SMTP_TLS, "mail.tls"),
    Key::new(ENV_SMTP_USERNAME, "mail.username"),
    Key::new(ENV_SMTP_PASSWORD, "mail.password").secret(),
    Key::new(ENV_SMTP_CA_FILE, "mail.ca_file"),
    Key::new(ENV_SMTP_ALLOW_INSECURE_AUTH, "mail.allow_insecure_auth"),
    Key::new(ENV_MAIL_FROM, "mail.from").legacy("mail_from"),
    Key::new(ENV_MAIL_DIR, "mail.dir").legacy("mail_dir"),
    Key::new(ENV_PREFETCH, "mail.prefetch").legacy("prefetch"),
    Key::new(ENV_MAIL_CONCURRENCY, "mail.concurrency"),
    Key::new(ENV_MAIL_LEASE, "mail.lease"),
    Key::new(ENV_MAX_ATTEMPTS, "mail.retry.max_attempts").legacy("max_attempts"),
];

/// `[mail]`: the mailer.
#[derive(Debug, Clone)]
pub struct MailConfig {
    /// The SMTP server, its TLS mode and login (`smtp_url`, `tls`,
    /// `username`, `password`, `ca_file`); unset → `.eml` files in `dir`.
    pub smtp: Option<SmtpConfig>,
    pub from: String,
    pub dir: PathBuf,
    /// Messages the broker hands the mailer ahead (its consumer prefetch),
    /// raised to `concurrency` when lower: a send in flight holds its
    /// message unacked until the row is marked sent.
    pub prefetch: u16,
    /// Emails sent at once, each on a pooled SMTP connection of its own
    /// (`concurrency`, `ONCEHOOK_MAIL_CONCURRENCY`).
    pub concurrency: u16,
    /// Backoff between SMTP sends (`retry.max_attempts` before an email is
    /// marked failed and dead-lettered).
    pub retry: RetryPolicy,
    /// How long a lease keeps other mailers off an email (`lease`); a send
    /// starts only with a whole send's time left of it.
    pub lease: Duration,
}

/// `[mail]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct MailSection {
    smtp_url: Option<SecretText>,
    tls: Option<String>,
    username: Option<String>,
    password: Option<SecretText>,
    ca_file: Option<PathBuf>,
    /// A yes/no: a TOML boolean, or text.
    allow_insecure_auth: bool,
    from: NonEmpty,
    dir: PathBuf,
    prefetch: AtLeast<u16, 1>,
    concurrency: AtLeast<u16, 1>,
    retry: Retry,
    lease: HumanDuration,
}

impl Default for MailSection {
    fn default() -> Self {
        MailSection {
            smtp_url: None,
            tls: None,
            username: None,
            password: None,
            ca_file: None,
            allow_insecure_auth: false,
            from: NonEmpty("oncehook <orders@oncehook.local>".into()),
            dir: PathBuf::from("./var/mail"),
            prefetch: AtLeast(16),
            concurrency: AtLeast(32),
            retry: Retry::default(),
            lease: HumanDuration(Duration::from_secs(120)),
        }
    }
}

impl MailSection {
    /// The section, its SMTP settings checked together.
    pub(super) fn validate(self) -> Result<MailConfig, ConfigError> {
        let expose = |s: SecretText| s.0.expose().to_owned();
        let smtp = smtp::smtp(RawSmtp {
            url: self.smtp_url.map(expose),
            tls: self.tls,
            username: self.username,
            password: self.password.map(expose),
            ca_file: self.ca_file.filter(|p| !p.as_os_str().is_empty()),
            allow_insecure_auth: self.allow_insecure_auth,
        })?;
        if self.lease.0 < MIN_MAIL_LEASE {
            return Err(invalid(
                &format!("mail.lease ({ENV_MAIL_LEASE})"),
                &humantime::format_duration(self.lease.0).to_string(),
                "must be at least 15s: a whole SMTP send (up to 10 s) must fit in a lease",
            ));
        }
        Ok(MailConfig {
            smtp,
            from: self.from.0,
            dir: self.dir,
            prefetch: self.prefetch.0,
            concurrency: self.concurrency.0,
            retry: RetryPolicy::EMAIL_SEND.with_max_attempts(self.retry.max_attempts.0),
            lease: self.lease.0,
        })
    }
}

#[cfg(test)]
#[path = "mail_tests.rs"]
mod tests;
