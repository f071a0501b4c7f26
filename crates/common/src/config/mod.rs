//! Configuration, in sections per concern: `[broker]`, `[database]`,
//! `[telemetry]`, `[ingest]` (address, limits, `[[source]]`s), `[worker]`
//! (prefetch, retry, retention, parking) and `[mail]` (SMTP, sender, folder,
//! prefetch, send concurrency, retry), `[console]` (the operators' console:
//! address, session, users). Defaults, then the TOML file named by
//! `ONCEHOOK_CONFIG`, then
//! `ONCEHOOK_*` variables (env wins), layered with figment (`load.rs`);
//! every key and variable is listed once (`keys.rs`). Secrets and URLs are
//! [`Secret`]s: `Debug` and error messages never print them.
//!
//! Each binary takes only the sections it needs ([`Config::into_ingest`],
//! [`Config::into_worker`], [`Config::into_mailer`]); `oncehookctl`, the
//! operators' tool, reads the whole [`Config`].

mod keys;
mod load;
mod mail;
mod secret;
mod sources;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

pub use keys::*;

use crate::broker_nodes::BrokerNodes;
use crate::retry::RetryPolicy;
use crate::topology::QueueSettings;
pub use mail::{SmtpConfig, SmtpCredentials, SmtpTls};
pub use secret::Secret;
pub use sources::{DEFAULT_TOLERANCE_SECS, MAX_TOLERANCE_SECS, SourceConfig};

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/oncehook";
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// What went wrong reading the configuration. Start-up aborts on any of
/// these; none of them quotes a secret.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML (line {line}, column {column}): {message}")]
    Toml {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("invalid configuration: {0}")]
    Extract(String),
    #[error("{key}={value:?} is invalid: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    #[error("source {source_name:?}: {reason}")]
    Source { source_name: String, reason: String },
}

/// `[broker]`: RabbitMQ.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The node (or the cluster's nodes) to connect to, from the AMQP URL
    /// list; the URLs may carry a password and are never printed.
    pub nodes: BrokerNodes,
    /// Prefix of every exchange and queue name.
    pub prefix: String,
    pub publish_timeout: Duration,
    /// `x-delivery-limit` of the quorum queues (set explicitly: brokers before 4.0 have none).
    pub delivery_limit: u32,
    /// `x-quorum-initial-group-size`: replicas of each queue when it is
    /// created (the broker caps it at the number of cluster nodes).
    pub quorum_initial_group_size: u32,
}

impl BrokerConfig {
    /// The arguments the topology declares its queues with.
    pub fn queue_settings(&self) -> QueueSettings {
        QueueSettings {
            delivery_limit: self.delivery_limit,
            initial_group_size: self.quorum_initial_group_size,
        }
    }
}

/// `[database]`: Postgres.
#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: Secret,
    /// The most connections this process opens (`max_connections`); unset,
    /// each binary sizes its pool from its prefetch. Every process counts
    /// against Postgres' own `max_connections` (docs/operations.md).
    pub max_connections: Option<u32>,
    /// What sits between this process and Postgres.
    pub pooler: Pooler,
}

/// A connection pooler in front of Postgres, which changes what a
/// connection may rely on between transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooler {
    /// Straight to Postgres, or a pooler in session mode: prepared
    /// statements are cached per connection.
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`):
    /// a server connection is ours only inside a transaction, so no
    /// statement is cached, every statement runs inside a transaction, and
    /// the pooler must drop prepared statements when it hands a server
    /// connection on (docs/operations.md, "PgBouncer").
    Transaction,
}

impl Pooler {
    fn parse(value: &str) -> Result<Self, ConfigError> {
        match value.trim() {
            "" | "none" | "session" => Ok(Pooler::None),
            "transaction" => Ok(Pooler::Transaction),
            other => Err(invalid(
                ENV_DATABASE_POOLER,
                other,
                "expected `none` (or `session`) or `transaction`",
            )),
        }
    }
}

impl DatabaseConfig {
    /// The pool size: the configured budget, else `default`.
    pub fn pool_size(&self, default: u32) -> u32 {
        self.max_connections.unwrap_or(default)
    }
}

/// `[telemetry]`: logs and the metrics/health listener.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    pub log: String,
    pub log_json: bool,
    pub metrics: MetricsListener,
    /// The Prometheus server that scrapes the binaries, for the operators'
    /// tools (`stats`, the console's Overview) to read ingest's counters of
    /// accepted and refused webhooks; `None`: those numbers are not shown.
    pub prometheus_url: Option<String>,
}

/// Where a binary serves `/metrics`, `/healthz` and `/readyz`: never on the
/// public ingest port. Unset means each binary's own loopback default (ports
/// 9100, 9101, 9102 for ingest, worker, mailer, so the three share a host);
/// `off` turns the listener off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListener {
    Default,
    Off,
    At(SocketAddr),
}

const fn loopback(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

/// Ingest's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const INGEST_METRICS_ADDR: SocketAddr = loopback(9100);
/// The worker's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const WORKER_METRICS_ADDR: SocketAddr = loopback(9101);
/// The mailer's metrics/health listener when `ONCEHOOK_METRICS_ADDR` is unset.
pub const MAILER_METRICS_ADDR: SocketAddr = loopback(9102);

impl MetricsListener {
    /// The address to bind, given the binary's default; `None` when off.
    pub fn resolve(self, default: SocketAddr) -> Option<SocketAddr> {
        match self {
            MetricsListener::Default => Some(default),
            MetricsListener::Off => None,
            MetricsListener::At(addr) => Some(addr),
        }
    }

    fn parse(value: Option<&str>) -> Result<Self, ConfigError> {
        match value.map(str::trim) {
            None | Some("") => Ok(MetricsListener::Default),
            Some("off") => Ok(MetricsListener::Off),
            Some(other) => other.parse().map(MetricsListener::At).map_err(|e| {
                invalid(
                    ENV_METRICS_ADDR,
                    other,
                    &format!("expected `host:port` or `off`: {e}"),
                )
            }),
        }
    }
}

/// `[ingest]`: the webhook edge.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    pub addr: SocketAddr,
    /// HTTP worker threads (`workers`, `ONCEHOOK_INGEST_WORKERS`); unset,
    /// one per CPU (actix's default).
    pub workers: Option<u16>,
    pub body_limit_bytes: usize,
    pub sources: Vec<SourceConfig>,
}

/// `[worker]`: consuming events, retention and parked events.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub prefetch: u16,
    /// Backoff for transient database errors while a delivery stays unacked
    /// (`retry.max_attempts` before it is requeued).
    pub retry: RetryPolicy,
    pub retention_days: u32,
    pub retention_interval: Duration,
    /// Group commit: up to this many prefetched deliveries share one
    /// transaction (1 = one transaction per delivery).
    pub batch_size: u16,
    /// How long a batch that is not full waits for more deliveries.
    pub batch_linger: Duration,
    /// How long an event whose payment is not linked to an order yet stays
    /// parked before it is dead-lettered as `unknown_order`.
    pub unlinked_ttl: Duration,
    /// Test-only fault injection (chaos suite); never set in production.
    pub fault_panic_order_ref: Option<String>,
}

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
}

/// `[console]`: the operators' web console (`oncehook-console`).
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Its own listener, never the public ingest port.
    pub addr: SocketAddr,
    /// The key sessions are signed with; `None` → a random key per start.
    pub session_key: Option<Secret>,
    /// How long a session lasts after login.
    pub session_ttl: Duration,
    /// Whether session cookies carry `Secure` (off only for plain local http).
    pub secure_cookies: bool,
    /// `[[console.user]]`: who may log in.
    pub users: Vec<ConsoleUser>,
}

/// One console account.
#[derive(Debug, Clone)]
pub struct ConsoleUser {
    pub name: String,
    pub role: ConsoleRole,
    /// An argon2 PHC string (`oncehookctl console-user NAME` prints one).
    pub password_hash: Secret,
}

/// What a console account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConsoleRole {
    /// Reads every page.
    Viewer,
    /// Also replays and purges dead letters.
    Operator,
}

impl ConsoleRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleRole::Viewer => "viewer",
            ConsoleRole::Operator => "operator",
        }
    }

    pub fn parse(value: &str) -> Option<ConsoleRole> {
        match value.trim() {
            "viewer" => Some(ConsoleRole::Viewer),
            "operator" => Some(ConsoleRole::Operator),
            _ => None,
        }
    }
}

/// Every section, validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub broker: BrokerConfig,
    pub database: DatabaseConfig,
    pub telemetry: TelemetryConfig,
    pub ingest: IngestConfig,
    pub worker: WorkerConfig,
    pub mail: MailConfig,
    pub console: ConsoleConfig,
}

impl Config {
    /// Reads `ONCEHOOK_CONFIG` (if set) and the environment.
    pub fn load() -> Result<Self, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::from_env_map(&env)
    }

    /// Like [`Config::load`] but from an explicit variable map (tests).
    pub fn from_env_map(env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let raw = load::layered(env)?;
        let sources = raw
            .source
            .into_iter()
            .map(|s| sources::resolve(s, env))
            .collect::<Result<Vec<_>, _>>()?;
        sources::check_unique(&sources)?;
        let console = console(raw.console)?;
        Ok(Config {
            console,
            broker: BrokerConfig {
                nodes: BrokerNodes::parse(&raw.broker.url).map_err(|reason| {
                    ConfigError::Invalid {
                        key: ENV_AMQP_URL.to_owned(),
                        value: "[redacted]".to_owned(),
                        reason,
                    }
                })?,
                prefix: non_empty(ENV_AMQP_PREFIX, raw.broker.prefix)?,
                publish_timeout: Duration::from_millis(raw.broker.publish_timeout_ms),
                delivery_limit: raw.broker.delivery_limit,
                quorum_initial_group_size: at_least_one(
                    ENV_QUORUM_INITIAL_GROUP_SIZE,
                    raw.broker.quorum_initial_group_size,
                )?,
            },
            database: DatabaseConfig {
                url: url(
                    ENV_DATABASE_URL,
                    raw.database.url,
                    &["postgres://", "postgresql://"],
                )?,
                max_connections: raw
                    .database
                    .max_connections
                    .map(|n| at_least(ENV_DATABASE_MAX_CONNECTIONS, n, 2))
                    .transpose()?,
                pooler: Pooler::parse(&raw.database.pooler)?,
            },
            telemetry: TelemetryConfig {
                log: raw.telemetry.log,
                log_json: match raw.telemetry.log_format.as_str() {
                    "text" => false,
                    "json" => true,
                    other => {
                        return Err(invalid(ENV_LOG_FORMAT, other, "expected `text` or `json`"));
                    }
                },
                metrics: MetricsListener::parse(raw.telemetry.metrics_addr.as_deref())?,
                prometheus_url: prometheus_url(raw.telemetry.prometheus_url)?,
            },
            ingest: IngestConfig {
                addr: parse_addr(ENV_INGEST_ADDR, &raw.ingest.addr)?,
                workers: raw
                    .ingest
                    .workers
                    .map(|n| at_least_one(ENV_INGEST_WORKERS, n))
                    .transpose()?,
                body_limit_bytes: raw.ingest.limits.body_limit_bytes,
                sources,
            },
            worker: WorkerConfig {
                prefetch: at_least_one(ENV_PREFETCH, raw.worker.prefetch)?,
                retry: RetryPolicy::DELIVERY.with_max_attempts(at_least_one(
                    ENV_MAX_ATTEMPTS,
                    raw.worker.retry.max_attempts,
                )?),
                retention_days: retention_days(raw.worker.retention.days)?,
                retention_interval: Duration::from_secs(raw.worker.retention.interval_secs),
                batch_size: batch_size(raw.worker.batch.size)?,
                batch_linger: batch_linger(raw.worker.batch.linger_ms)?,
                unlinked_ttl: parse_duration(ENV_UNLINKED_TTL, &raw.worker.unlinked_ttl)?,
                fault_panic_order_ref: raw.worker.fault_panic_order_ref.filter(|r| !r.is_empty()),
            },
            mail: MailConfig {
                smtp: mail::smtp(mail::RawSmtp {
                    url: raw.mail.smtp_url,
                    tls: raw.mail.tls,
                    username: raw.mail.username,
                    password: raw.mail.password,
                    ca_file: raw.mail.ca_file.filter(|p| !p.as_os_str().is_empty()),
                    allow_insecure_auth: flag(
                        ENV_SMTP_ALLOW_INSECURE_AUTH,
                        &raw.mail.allow_insecure_auth,
                    )?,
                })?,
                from: non_empty(ENV_MAIL_FROM, raw.mail.from)?,
                dir: raw.mail.dir,
                prefetch: at_least_one(ENV_PREFETCH, raw.mail.prefetch)?,
                concurrency: at_least_one(ENV_MAIL_CONCURRENCY, raw.mail.concurrency)?,
                retry: RetryPolicy::EMAIL_SEND.with_max_attempts(at_least_one(
                    ENV_MAX_ATTEMPTS,
                    raw.mail.retry.max_attempts,
                )?),
            },
        })
    }
}

impl Config {
    /// The source named `name`, if configured.
    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.ingest.sources.iter().find(|s| s.name == name)
    }

    /// The sections `oncehook-ingest` reads.
    pub fn into_ingest(self) -> Result<IngestSettings, ConfigError> {
        if self.ingest.sources.is_empty() {
            return Err(ConfigError::Invalid {
                key: ENV_CONFIG.into(),
                value: String::new(),
                reason: "no [[source]] configured: point ONCEHOOK_CONFIG at a TOML file with at least one source".into(),
            });
        }
        Ok(IngestSettings {
            metrics_addr: self.telemetry.metrics.resolve(INGEST_METRICS_ADDR),
            broker: self.broker,
            telemetry: self.telemetry,
            ingest: self.ingest,
        })
    }

    /// The sections `oncehook-worker` reads.
    pub fn into_worker(self) -> WorkerSettings {
        WorkerSettings {
            metrics_addr: self.telemetry.metrics.resolve(WORKER_METRICS_ADDR),
            broker: self.broker,
            database: self.database,
            telemetry: self.telemetry,
            worker: self.worker,
        }
    }

    /// The sections `oncehook-mailer` reads.
    pub fn into_mailer(self) -> MailerSettings {
        MailerSettings {
            metrics_addr: self.telemetry.metrics.resolve(MAILER_METRICS_ADDR),
            broker: self.broker,
            database: self.database,
            telemetry: self.telemetry,
            mail: self.mail,
        }
    }
}

/// What `oncehook-ingest` is given: it never sees the database or mail settings.
#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// The metrics/health listener, resolved against this binary's default.
    pub metrics_addr: Option<SocketAddr>,
    pub broker: BrokerConfig,
    pub telemetry: TelemetryConfig,
    pub ingest: IngestConfig,
}

/// What `oncehook-worker` is given.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The metrics/health listener, resolved against this binary's default.
    pub metrics_addr: Option<SocketAddr>,
    pub broker: BrokerConfig,
    pub database: DatabaseConfig,
    pub telemetry: TelemetryConfig,
    pub worker: WorkerConfig,
}

/// What `oncehook-mailer` is given.
#[derive(Debug, Clone)]
pub struct MailerSettings {
    /// The metrics/health listener, resolved against this binary's default.
    pub metrics_addr: Option<SocketAddr>,
    pub broker: BrokerConfig,
    pub database: DatabaseConfig,
    pub telemetry: TelemetryConfig,
    pub mail: MailConfig,
}

/// A URL setting: one of `schemes` (each node of a comma-separated list),
/// kept secret; the message never includes the value.
fn url(key: &str, value: String, schemes: &[&str]) -> Result<Secret, ConfigError> {
    let bad = value
        .split(',')
        .map(str::trim)
        .any(|node| !schemes.iter().any(|s| node.starts_with(s)) || node.len() <= 8);
    if bad {
        return Err(ConfigError::Invalid {
            key: key.to_owned(),
            value: "[redacted]".to_owned(),
            reason: format!("expected a URL starting with {}", schemes.join(" or ")),
        });
    }
    Ok(Secret::new(value))
}

fn non_empty(key: &str, value: String) -> Result<String, ConfigError> {
    if value.trim().is_empty() {
        return Err(invalid(key, &value, "must not be empty"));
    }
    Ok(value)
}

fn at_least(key: &str, value: u32, min: u32) -> Result<u32, ConfigError> {
    if value < min {
        return Err(invalid(
            key,
            &value.to_string(),
            &format!("must be at least {min}"),
        ));
    }
    Ok(value)
}

fn at_least_one<T: PartialOrd + From<u8> + std::fmt::Display>(
    key: &str,
    value: T,
) -> Result<T, ConfigError> {
    if value < T::from(1) {
        return Err(invalid(key, &value.to_string(), "must be at least 1"));
    }
    Ok(value)
}

/// The retention windows configuration and `oncehookctl retention --days`
/// accept: at least a day (0 would delete every dedup row on each pass), at
/// most ten years.
pub const RETENTION_DAYS: std::ops::RangeInclusive<u32> = 1..=3650;

fn retention_days(days: u32) -> Result<u32, ConfigError> {
    if !RETENTION_DAYS.contains(&days) {
        let (lo, hi) = (RETENTION_DAYS.start(), RETENTION_DAYS.end());
        return Err(invalid(
            ENV_RETENTION_DAYS,
            &days.to_string(),
            &format!("must be within {lo}..={hi} days"),
        ));
    }
    Ok(days)
}

fn console(raw: load::RawConsole) -> Result<ConsoleConfig, ConfigError> {
    let mut users: Vec<ConsoleUser> = Vec::with_capacity(raw.user.len());
    for u in raw.user {
        let name = u.name.trim().to_owned();
        let bad = |reason: &str| ConfigError::Invalid {
            key: format!("console.user {name:?}"),
            value: String::new(),
            reason: reason.to_owned(),
        };
        if name.is_empty() {
            return Err(bad("a console user needs a name"));
        }
        if users.iter().any(|x| x.name == name) {
            return Err(bad("configured twice"));
        }
        let role = ConsoleRole::parse(&u.role)
            .ok_or_else(|| bad("role must be `viewer` or `operator`"))?;
        if !u.password_hash.starts_with("$argon2") {
            return Err(bad(
                "password_hash must be an argon2 hash (`oncehookctl console-user NAME` prints one)",
            ));
        }
        users.push(ConsoleUser {
            name,
            role,
            password_hash: Secret::new(u.password_hash),
        });
    }
    let secure_cookies = flag(ENV_CONSOLE_SECURE_COOKIES, &raw.secure_cookies)?;
    let session_key = match raw.session_key.filter(|k| !k.is_empty()) {
        Some(k) if k.len() < 32 => {
            return Err(ConfigError::Invalid {
                key: ENV_CONSOLE_SESSION_KEY.into(),
                value: "[redacted]".into(),
                reason: "must be at least 32 characters".into(),
            });
        }
        other => other.map(Secret::new),
    };
    Ok(ConsoleConfig {
        addr: parse_addr(ENV_CONSOLE_ADDR, &raw.addr)?,
        session_key,
        session_ttl: parse_duration(ENV_CONSOLE_SESSION_TTL, &raw.session_ttl)?,
        secure_cookies,
        users,
    })
}

/// Group commit bounds: a batch of 1 is one transaction per delivery; more
/// than 256 deliveries would hold their locks for too long.
pub const BATCH_SIZE: std::ops::RangeInclusive<u16> = 1..=256;
/// A batch waits at most a second for more deliveries.
pub const BATCH_LINGER_MS: std::ops::RangeInclusive<u64> = 0..=1000;

fn batch_size(size: u16) -> Result<u16, ConfigError> {
    if !BATCH_SIZE.contains(&size) {
        let (lo, hi) = (BATCH_SIZE.start(), BATCH_SIZE.end());
        return Err(invalid(
            ENV_WORKER_BATCH_SIZE,
            &size.to_string(),
            &format!("must be within {lo}..={hi}"),
        ));
    }
    Ok(size)
}

fn batch_linger(ms: u64) -> Result<Duration, ConfigError> {
    if !BATCH_LINGER_MS.contains(&ms) {
        let (lo, hi) = (BATCH_LINGER_MS.start(), BATCH_LINGER_MS.end());
        return Err(invalid(
            ENV_WORKER_BATCH_LINGER_MS,
            &ms.to_string(),
            &format!("must be within {lo}..={hi} ms"),
        ));
    }
    Ok(Duration::from_millis(ms))
}

fn parse_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .parse()
        .map_err(|e| invalid(key, value, &format!("not a socket address: {e}")))
}

/// An http(s) base URL (trailing slash dropped); empty means unset.
fn prometheus_url(value: Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(v) = value.map(|v| v.trim().trim_end_matches('/').to_owned()) else {
        return Ok(None);
    };
    if v.is_empty() {
        return Ok(None);
    }
    let rest = v
        .strip_prefix("http://")
        .or_else(|| v.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(Some(v)),
        _ => Err(invalid(
            ENV_PROMETHEUS_URL,
            &v,
            "expected the Prometheus server's base URL, such as http://prometheus:9090",
        )),
    }
}

fn parse_duration(key: &str, value: &str) -> Result<Duration, ConfigError> {
    match humantime::parse_duration(value.trim()) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(invalid(key, value, "must be greater than zero")),
        Err(e) => Err(invalid(
            key,
            value,
            &format!("not a duration such as 30s, 15m or 1h: {e}"),
        )),
    }
}

/// A yes/no setting (a TOML boolean, or `true`/`false` as text).
fn flag(key: &str, value: &load::Flag) -> Result<bool, ConfigError> {
    value.value().ok_or_else(|| {
        let shown = match value {
            load::Flag::Text(t) => t.clone(),
            load::Flag::Bool(b) => b.to_string(),
        };
        invalid(key, &shown, "expected `true` or `false`")
    })
}

fn invalid(key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(toml: &str) -> (PathBuf, HashMap<String, String>) {
        let path =
            std::env::temp_dir().join(format!("oncehook-config-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&path, toml).expect("write temp config");
        let mut env = HashMap::new();
        env.insert(ENV_CONFIG.to_owned(), path.display().to_string());
        (path, env)
    }

    #[test]
    fn retention_days_are_bounded() {
        for bad in ["0", "3651", "4294967295"] {
            let env = HashMap::from([(ENV_RETENTION_DAYS.to_owned(), bad.to_owned())]);
            let err = Config::from_env_map(&env).expect_err(bad).to_string();
            assert!(err.contains(ENV_RETENTION_DAYS), "{bad}: {err}");
        }
        let env = HashMap::from([(ENV_RETENTION_DAYS.to_owned(), "3650".to_owned())]);
        let ok = Config::from_env_map(&env).expect("3650 days");
        assert_eq!(ok.worker.retention_days, 3650);
    }

    #[test]
    fn batches_are_bounded_and_default_to_eight_deliveries() {
        let d = Config::from_env_map(&HashMap::new()).expect("defaults");
        assert_eq!(d.worker.batch_size, 8);
        assert_eq!(d.worker.batch_linger, Duration::from_millis(2));
        for (key, bad) in [
            (ENV_WORKER_BATCH_SIZE, "0"),
            (ENV_WORKER_BATCH_SIZE, "257"),
            (ENV_WORKER_BATCH_LINGER_MS, "1001"),
        ] {
            let env = HashMap::from([(key.to_owned(), bad.to_owned())]);
            let err = Config::from_env_map(&env).expect_err(bad).to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
        let env = HashMap::from([
            (ENV_WORKER_BATCH_SIZE.to_owned(), "1".to_owned()),
            (ENV_WORKER_BATCH_LINGER_MS.to_owned(), "0".to_owned()),
        ]);
        let off = Config::from_env_map(&env).expect("group commit off");
        assert_eq!(
            (off.worker.batch_size, off.worker.batch_linger),
            (1, Duration::ZERO)
        );
    }

    #[test]
    fn the_prometheus_url_is_an_http_base_url_or_unset() {
        let url = |v: &str| {
            let env = HashMap::from([(ENV_PROMETHEUS_URL.to_owned(), v.to_owned())]);
            Config::from_env_map(&env).map(|c| c.telemetry.prometheus_url)
        };
        assert_eq!(
            Config::from_env_map(&HashMap::new())
                .expect("defaults")
                .telemetry
                .prometheus_url,
            None
        );
        assert_eq!(url("").expect("empty is unset"), None);
        assert_eq!(
            url("http://prometheus:9090/").expect("valid"),
            Some("http://prometheus:9090".to_owned())
        );
        assert!(url("https://prom.example.internal").is_ok());
        for bad in ["prometheus:9090", "ftp://x", "http://", "http://a b"] {
            let err = url(bad).expect_err(bad).to_string();
            assert!(err.contains(ENV_PROMETHEUS_URL), "{bad}: {err}");
        }
    }

    #[test]
    fn metrics_listener_defaults_per_binary_and_can_be_moved_or_off() {
        let none = Config::from_env_map(&HashMap::new()).expect("defaults");
        let addrs = [
            none.clone().into_worker().metrics_addr,
            none.clone().into_mailer().metrics_addr,
            none.telemetry.metrics.resolve(INGEST_METRICS_ADDR),
        ];
        assert_eq!(
            addrs,
            [
                Some(WORKER_METRICS_ADDR),
                Some(MAILER_METRICS_ADDR),
                Some(INGEST_METRICS_ADDR)
            ]
        );
        assert!(addrs.iter().flatten().all(|a| a.ip().is_loopback()));
        assert_ne!(WORKER_METRICS_ADDR.port(), MAILER_METRICS_ADDR.port());
        assert_ne!(INGEST_METRICS_ADDR.port(), WORKER_METRICS_ADDR.port());

        let at = |v: &str| {
            let env = HashMap::from([(ENV_METRICS_ADDR.to_owned(), v.to_owned())]);
            Config::from_env_map(&env).map(|c| c.into_worker().metrics_addr)
        };
        assert_eq!(at("off").expect("off"), None);
        assert_eq!(
            at("0.0.0.0:9300").expect("explicit"),
            Some("0.0.0.0:9300".parse().expect("addr"))
        );
        let err = at("localhost").expect_err("not an address").to_string();
        assert!(
            err.contains(ENV_METRICS_ADDR) && err.contains("off"),
            "{err}"
        );
    }

    #[test]
    fn defaults_without_file() {
        let s = Config::from_env_map(&HashMap::new()).expect("defaults");
        assert_eq!(s.database.url.expose(), DEFAULT_DATABASE_URL);
        assert_eq!(s.broker.prefix, "oncehook");
        assert!(s.ingest.sources.is_empty());
        assert!(s.into_ingest().is_err());
    }

    #[test]
    fn env_wins_over_file_and_secrets_expand() {
        let (path, mut env) = write(
            r#"
amqp_prefix = "fromfile"
[[source]]
name = "rzp"
gateway = "razorpay"
secrets = ["${NEW}", "${OLD}"]
"#,
        );
        env.insert(ENV_AMQP_PREFIX.into(), "fromenv".into());
        env.insert("NEW".into(), "s3cret".into());
        let s = Config::from_env_map(&env).expect("config");
        assert_eq!(s.broker.prefix, "fromenv");
        let src = s.source("rzp").expect("source");
        assert_eq!(
            src.secrets,
            vec!["s3cret".to_owned()],
            "unset OLD is skipped"
        );
        assert_eq!(src.tolerance_secs, DEFAULT_TOLERANCE_SECS);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn empty_secret_list_refuses_to_start() {
        let (path, env) =
            write("[[source]]\nname = \"x\"\ngateway = \"stripe\"\nsecrets = [\"${UNSET_VAR}\"]\n");
        let err = Config::from_env_map(&env).expect_err("must refuse");
        assert!(err.to_string().contains("no secrets"), "{err}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn payu_sources_need_a_merchant_key_and_only_they_take_one() {
        let (path, mut env) = write(
            "[[source]]\nname = \"pu\"\ngateway = \"payu\"\nsecrets = [\"salt\"]\nmerchant_key = \"${PAYU_KEY}\"\n",
        );
        let err = Config::from_env_map(&env).expect_err("unset key");
        let text = err.to_string();
        assert!(
            text.contains("\"pu\"") && text.contains("merchant_key"),
            "{text}"
        );
        env.insert("PAYU_KEY".into(), "gtKFFx".into());
        let s = Config::from_env_map(&env).expect("config");
        let src = s.source("pu").expect("source");
        assert_eq!(src.merchant_key.as_deref(), Some("gtKFFx"));
        assert_eq!(src.credentials().merchant_key, Some("gtKFFx"));
        let _ = std::fs::remove_file(path);

        let (path, env) =
            write("[[source]]\nname = \"pu\"\ngateway = \"payu\"\nsecrets = [\"salt\"]\n");
        let err = Config::from_env_map(&env).expect_err("no key");
        assert!(err.to_string().contains("merchant_key"), "{err}");
        let _ = std::fs::remove_file(path);

        let (path, env) = write(
            "[[source]]\nname = \"st\"\ngateway = \"stripe\"\nsecrets = [\"s\"]\nmerchant_key = \"k\"\n",
        );
        let err = Config::from_env_map(&env).expect_err("key on stripe");
        assert!(err.to_string().contains("only used by"), "{err}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn unknown_gateway_and_bad_numbers_are_named() {
        let (path, env) =
            write("[[source]]\nname = \"x\"\ngateway = \"paypal\"\nsecrets = [\"a\"]\n");
        let err = Config::from_env_map(&env).expect_err("unknown gateway");
        assert!(err.to_string().contains("paypal"), "{err}");
        let _ = std::fs::remove_file(path);

        let mut env = HashMap::new();
        env.insert(ENV_BODY_LIMIT.to_owned(), "lots".to_owned());
        let err = Config::from_env_map(&env).expect_err("bad number");
        assert!(err.to_string().contains(ENV_BODY_LIMIT), "{err}");
    }

    /// Loads `toml` as the file with `vars` set; returns the error text.
    fn refused(toml: &str, vars: &[(&str, &str)]) -> String {
        let (path, mut env) = write(toml);
        for (k, v) in vars {
            env.insert((*k).to_owned(), (*v).to_owned());
        }
        let err = Config::from_env_map(&env).expect_err("must refuse to start");
        let _ = std::fs::remove_file(path);
        err.to_string()
    }

    #[test]
    fn a_secret_with_an_unset_variable_inside_refuses_to_start() {
        for (gateway, secret) in [
            ("stripe", "whsec_${UNSET_PART}"),
            ("razorpay", "rzp_${UNSET_PART}"),
        ] {
            let text = refused(
                &format!(
                    "[[source]]\nname = \"s\"\ngateway = \"{gateway}\"\nsecrets = [\"{secret}\"]\n"
                ),
                &[],
            );
            assert!(
                text.contains("\"s\"")
                    && text.contains("secrets[0]")
                    && text.contains("UNSET_PART"),
                "{text}"
            );
        }
        // A whole rotation slot left unset is fine next to a live secret.
        let (path, mut env) = write(
            "[[source]]\nname = \"s\"\ngateway = \"razorpay\"\nsecrets = [\"${LIVE}\", \"${OLD_UNSET}\"]\n",
        );
        env.insert("LIVE".into(), "rzp_live".into());
        let s = Config::from_env_map(&env).expect("rotation slot");
        assert_eq!(s.ingest.sources[0].secrets, vec!["rzp_live".to_owned()]);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn blank_and_malformed_secrets_refuse_to_start() {
        let text = refused(
            "[[source]]\nname = \"s\"\ngateway = \"razorpay\"\nsecrets = [\"   \"]\n",
            &[],
        );
        assert!(text.contains("secrets[0] is blank"), "{text}");
        let text = refused(
            "[[source]]\nname = \"std\"\ngateway = \"standard\"\nsecrets = [\"whsec_not*base64!\"]\n",
            &[],
        );
        assert!(text.contains("Standard Webhooks secret"), "{text}");
        assert!(
            !text.contains("not*base64"),
            "the secret is not quoted: {text}"
        );
    }

    #[test]
    fn a_tolerance_that_disables_the_window_refuses_to_start() {
        for tolerance in ["0", "86400", "9223372036854775807"] {
            let text = refused(
                &format!(
                    "[[source]]\nname = \"s\"\ngateway = \"stripe\"\nsecrets = [\"whsec_x\"]\ntolerance_secs = {tolerance}\n"
                ),
                &[],
            );
            assert!(text.contains("tolerance_secs"), "{tolerance}: {text}");
        }
    }

    #[test]
    fn a_toml_syntax_error_names_the_place_not_the_line() {
        let text = refused(
            "[[source]]\nname = \"s\"\ngateway = \"stripe\"\nsecrets = [\"whsec_TOPSECRET\" oops]\n",
            &[],
        );
        assert!(text.contains("line 4"), "{text}");
        assert!(
            !text.contains("TOPSECRET"),
            "the line (and its secret) is not quoted: {text}"
        );
    }

    #[test]
    fn a_bad_url_is_refused_without_printing_it() {
        let mut env = HashMap::new();
        env.insert(
            ENV_AMQP_URL.to_owned(),
            "http://user:p@ss@broker/".to_owned(),
        );
        let text = Config::from_env_map(&env)
            .expect_err("not amqp")
            .to_string();
        assert!(text.contains(ENV_AMQP_URL), "{text}");
        assert!(!text.contains("p@ss") && !text.contains("user"), "{text}");
        // A password with `@` in a good URL is kept whole and never shown by Debug.
        env.insert(
            ENV_AMQP_URL.to_owned(),
            "amqp://user:p@ss@broker:5672/%2f".to_owned(),
        );
        let config = Config::from_env_map(&env).expect("valid");
        assert_eq!(
            config.broker.nodes.all()[0].url().expose(),
            "amqp://user:p@ss@broker:5672/%2f"
        );
        assert!(!format!("{config:?}").contains("p@ss"));
    }

    #[test]
    fn the_broker_url_may_list_the_nodes_of_a_cluster() {
        let mut env = HashMap::from([(
            ENV_AMQP_URL.to_owned(),
            "amqp://app:s3cret@rabbit-0:5672/%2f,amqp://app:s3cret@rabbit-1:5672/%2f,amqp://app:s3cret@rabbit-2:5672/%2f".to_owned(),
        )]);
        let c = Config::from_env_map(&env).expect("three nodes");
        assert_eq!(c.broker.nodes.len(), 3);
        assert_eq!(
            c.broker.nodes.labels(),
            "rabbit-0:5672, rabbit-1:5672, rabbit-2:5672"
        );
        assert_eq!(c.broker.quorum_initial_group_size, 3, "default");
        assert!(!format!("{c:?}").contains("s3cret"));

        // A bad entry is named (position and variable), its text is not.
        env.insert(
            ENV_AMQP_URL.to_owned(),
            "amqp://app:s3cret@rabbit-0:5672/%2f,amqp//app:s3cret@rabbit-1:5672".to_owned(),
        );
        let text = Config::from_env_map(&env)
            .expect_err("bad second entry")
            .to_string();
        assert!(
            text.contains(ENV_AMQP_URL) && text.contains("entry 2 of 2"),
            "{text}"
        );
        assert!(!text.contains("s3cret") && !text.contains("app"), "{text}");
    }

    #[test]
    fn the_quorum_group_size_is_read_and_at_least_one() {
        let (path, env) = write("[broker]\nquorum_initial_group_size = 5\n");
        let c = Config::from_env_map(&env).expect("file");
        assert_eq!(c.broker.queue_settings().initial_group_size, 5);
        let _ = std::fs::remove_file(path);
        let env = HashMap::from([(ENV_QUORUM_INITIAL_GROUP_SIZE.to_owned(), "0".to_owned())]);
        let text = Config::from_env_map(&env).expect_err("zero").to_string();
        assert!(text.contains(ENV_QUORUM_INITIAL_GROUP_SIZE), "{text}");
    }

    #[test]
    fn wrong_types_and_unknown_keys_are_named() {
        let text = refused("[worker]\nprefetch = \"lots\"\n", &[]);
        assert!(
            text.contains("worker.prefetch") && text.contains(ENV_PREFETCH),
            "{text}"
        );
        let text = refused("[worker]\nprefetsh = 3\n", &[]);
        assert!(text.contains("prefetsh"), "{text}");
        let text = refused("[database]\nurl = 5\n", &[]);
        assert!(
            text.contains("database.url") && !text.contains('5'),
            "{text}"
        );
    }

    #[test]
    fn sections_and_older_flat_keys_both_read() {
        let (path, env) = write(
            "delivery_limit = 9\n[broker]\nprefix = \"sectioned\"\n[worker]\nunlinked_ttl = \"15m\"\n[mail]\nprefetch = 4\n",
        );
        let c = Config::from_env_map(&env).expect("config");
        assert_eq!(c.broker.prefix, "sectioned");
        assert_eq!(c.broker.delivery_limit, 9);
        assert_eq!(c.worker.unlinked_ttl, Duration::from_secs(900));
        assert_eq!((c.worker.prefetch, c.mail.prefetch), (16, 4));
        let _ = std::fs::remove_file(path);
        assert!(format!("{c:?}").contains("[redacted]"));
    }

    #[test]
    fn the_mail_concurrency_is_its_own_setting() {
        let c = Config::from_env_map(&HashMap::new()).expect("defaults");
        assert_eq!((c.mail.prefetch, c.mail.concurrency), (16, 32));
        let (path, mut env) = write("[mail]\nconcurrency = 8\n");
        let c = Config::from_env_map(&env).expect("from the file");
        assert_eq!((c.mail.prefetch, c.mail.concurrency), (16, 8));
        env.insert(ENV_MAIL_CONCURRENCY.to_owned(), "64".to_owned());
        let c = Config::from_env_map(&env).expect("env wins");
        assert_eq!(c.mail.concurrency, 64);
        assert_eq!(c.worker.prefetch, 16, "the worker is not touched");
        env.insert(ENV_MAIL_CONCURRENCY.to_owned(), "0".to_owned());
        let text = Config::from_env_map(&env).expect_err("zero").to_string();
        assert!(text.contains(ENV_MAIL_CONCURRENCY), "{text}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn ingest_workers_are_actix_default_unless_set() {
        let c = Config::from_env_map(&HashMap::new()).expect("defaults");
        assert_eq!(c.ingest.workers, None);
        let (path, mut env) = write("[ingest]\nworkers = 3\n");
        let c = Config::from_env_map(&env).expect("from the file");
        assert_eq!(c.ingest.workers, Some(3));
        env.insert(ENV_INGEST_WORKERS.to_owned(), "0".to_owned());
        let text = Config::from_env_map(&env).expect_err("zero").to_string();
        assert!(text.contains(ENV_INGEST_WORKERS), "{text}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_connection_budget_is_read_and_bounded() {
        let mut env = HashMap::new();
        let c = Config::from_env_map(&env).expect("defaults");
        assert_eq!(c.database.max_connections, None);
        assert_eq!(c.database.pool_size(20), 20, "unset: the binary's own size");
        env.insert(ENV_DATABASE_MAX_CONNECTIONS.to_owned(), "3".to_owned());
        let c = Config::from_env_map(&env).expect("budget");
        assert_eq!(c.database.pool_size(20), 3);
        env.insert(ENV_DATABASE_MAX_CONNECTIONS.to_owned(), "1".to_owned());
        let text = Config::from_env_map(&env)
            .expect_err("too small")
            .to_string();
        assert!(text.contains(ENV_DATABASE_MAX_CONNECTIONS), "{text}");
    }
}
