//! Every configuration key, once: its environment variable, where it lives
//! in the sectioned configuration (`[broker]`, `[database]`, …), the flat
//! name older configuration files used for it, and whether its value is
//! secret (never printed, not even in an error).
//!
//! The loader (`load.rs`) reads this table to layer the environment over
//! the file; nothing else spells a variable name.

/// How an environment value is read before it is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Number,
}

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// The environment variable (`ONCEHOOK_…`).
    pub env: &'static str,
    /// Dotted paths in the sectioned configuration; one variable may set
    /// the same setting for several binaries (`ONCEHOOK_PREFETCH`).
    pub paths: &'static [&'static str],
    /// The flat top-level name in older configuration files, if any.
    pub legacy: Option<&'static str>,
    pub kind: Kind,
    /// Secret values (URLs with passwords) never appear in messages.
    pub secret: bool,
}

const fn key(
    env: &'static str,
    paths: &'static [&'static str],
    legacy: Option<&'static str>,
    kind: Kind,
    secret: bool,
) -> Key {
    Key {
        env,
        paths,
        legacy,
        kind,
        secret,
    }
}

/// The file named by this variable is read under the environment.
pub const ENV_CONFIG: &str = "ONCEHOOK_CONFIG";
pub const ENV_DATABASE_URL: &str = "ONCEHOOK_DATABASE_URL";
pub const ENV_DATABASE_MAX_CONNECTIONS: &str = "ONCEHOOK_DATABASE_MAX_CONNECTIONS";
pub const ENV_DATABASE_POOLER: &str = "ONCEHOOK_DATABASE_POOLER";
pub const ENV_AMQP_URL: &str = "ONCEHOOK_AMQP_URL";
pub const ENV_AMQP_PREFIX: &str = "ONCEHOOK_AMQP_PREFIX";
pub const ENV_INGEST_ADDR: &str = "ONCEHOOK_INGEST_ADDR";
pub const ENV_INGEST_WORKERS: &str = "ONCEHOOK_INGEST_WORKERS";
pub const ENV_METRICS_ADDR: &str = "ONCEHOOK_METRICS_ADDR";
pub const ENV_PROMETHEUS_URL: &str = "ONCEHOOK_PROMETHEUS_URL";
pub const ENV_SMTP_URL: &str = "ONCEHOOK_SMTP_URL";
pub const ENV_SMTP_TLS: &str = "ONCEHOOK_SMTP_TLS";
pub const ENV_SMTP_USERNAME: &str = "ONCEHOOK_SMTP_USERNAME";
pub const ENV_SMTP_PASSWORD: &str = "ONCEHOOK_SMTP_PASSWORD";
pub const ENV_SMTP_CA_FILE: &str = "ONCEHOOK_SMTP_CA_FILE";
pub const ENV_SMTP_ALLOW_INSECURE_AUTH: &str = "ONCEHOOK_SMTP_ALLOW_INSECURE_AUTH";
pub const ENV_MAIL_DIR: &str = "ONCEHOOK_MAIL_DIR";
pub const ENV_MAIL_FROM: &str = "ONCEHOOK_MAIL_FROM";
pub const ENV_MAIL_CONCURRENCY: &str = "ONCEHOOK_MAIL_CONCURRENCY";
pub const ENV_LOG: &str = "ONCEHOOK_LOG";
pub const ENV_LOG_FORMAT: &str = "ONCEHOOK_LOG_FORMAT";
pub const ENV_BODY_LIMIT: &str = "ONCEHOOK_BODY_LIMIT_BYTES";
pub const ENV_PUBLISH_TIMEOUT_MS: &str = "ONCEHOOK_PUBLISH_TIMEOUT_MS";
pub const ENV_DELIVERY_LIMIT: &str = "ONCEHOOK_DELIVERY_LIMIT";
pub const ENV_QUORUM_INITIAL_GROUP_SIZE: &str = "ONCEHOOK_QUORUM_INITIAL_GROUP_SIZE";
pub const ENV_PREFETCH: &str = "ONCEHOOK_PREFETCH";
pub const ENV_RETENTION_DAYS: &str = "ONCEHOOK_RETENTION_DAYS";
pub const ENV_MAX_ATTEMPTS: &str = "ONCEHOOK_MAX_ATTEMPTS";
pub const ENV_RETENTION_INTERVAL_SECS: &str = "ONCEHOOK_RETENTION_INTERVAL_SECS";
pub const ENV_UNLINKED_TTL: &str = "ONCEHOOK_UNLINKED_TTL";
pub const ENV_CONSOLE_ADDR: &str = "ONCEHOOK_CONSOLE_ADDR";
pub const ENV_CONSOLE_SESSION_KEY: &str = "ONCEHOOK_CONSOLE_SESSION_KEY";
pub const ENV_CONSOLE_SESSION_TTL: &str = "ONCEHOOK_CONSOLE_SESSION_TTL";
pub const ENV_CONSOLE_SECURE_COOKIES: &str = "ONCEHOOK_CONSOLE_SECURE_COOKIES";
pub const ENV_WORKER_BATCH_SIZE: &str = "ONCEHOOK_WORKER_BATCH_SIZE";
pub const ENV_WORKER_BATCH_LINGER_MS: &str = "ONCEHOOK_WORKER_BATCH_LINGER_MS";
/// Fault injection for the chaos suite: the worker panics on events for this order.
pub const ENV_FAULT_PANIC_ORDER_REF: &str = "ONCEHOOK_FAULT_PANIC_ORDER_REF";

use Kind::{Number, Text};

/// The table.
pub const KEYS: &[Key] = &[
    key(
        ENV_DATABASE_URL,
        &["database.url"],
        Some("database_url"),
        Text,
        true,
    ),
    key(
        ENV_DATABASE_MAX_CONNECTIONS,
        &["database.max_connections"],
        None,
        Number,
        false,
    ),
    key(ENV_DATABASE_POOLER, &["database.pooler"], None, Text, false),
    key(ENV_AMQP_URL, &["broker.url"], Some("amqp_url"), Text, true),
    key(
        ENV_AMQP_PREFIX,
        &["broker.prefix"],
        Some("amqp_prefix"),
        Text,
        false,
    ),
    key(
        ENV_PUBLISH_TIMEOUT_MS,
        &["broker.publish_timeout_ms"],
        Some("publish_timeout_ms"),
        Number,
        false,
    ),
    key(
        ENV_DELIVERY_LIMIT,
        &["broker.delivery_limit"],
        Some("delivery_limit"),
        Number,
        false,
    ),
    key(
        ENV_QUORUM_INITIAL_GROUP_SIZE,
        &["broker.quorum_initial_group_size"],
        None,
        Number,
        false,
    ),
    key(ENV_LOG, &["telemetry.log"], Some("log"), Text, false),
    key(
        ENV_LOG_FORMAT,
        &["telemetry.log_format"],
        Some("log_format"),
        Text,
        false,
    ),
    key(
        ENV_METRICS_ADDR,
        &["telemetry.metrics_addr"],
        Some("metrics_addr"),
        Text,
        false,
    ),
    key(
        ENV_PROMETHEUS_URL,
        &["telemetry.prometheus_url"],
        None,
        Text,
        false,
    ),
    key(
        ENV_INGEST_ADDR,
        &["ingest.addr"],
        Some("ingest_addr"),
        Text,
        false,
    ),
    key(ENV_INGEST_WORKERS, &["ingest.workers"], None, Number, false),
    key(
        ENV_BODY_LIMIT,
        &["ingest.limits.body_limit_bytes"],
        Some("body_limit_bytes"),
        Number,
        false,
    ),
    key(
        ENV_PREFETCH,
        &["worker.prefetch", "mail.prefetch"],
        Some("prefetch"),
        Number,
        false,
    ),
    key(
        ENV_MAX_ATTEMPTS,
        &["worker.retry.max_attempts", "mail.retry.max_attempts"],
        Some("max_attempts"),
        Number,
        false,
    ),
    key(
        ENV_RETENTION_DAYS,
        &["worker.retention.days"],
        Some("retention_days"),
        Number,
        false,
    ),
    key(
        ENV_RETENTION_INTERVAL_SECS,
        &["worker.retention.interval_secs"],
        Some("retention_interval_secs"),
        Number,
        false,
    ),
    key(
        ENV_UNLINKED_TTL,
        &["worker.unlinked_ttl"],
        Some("unlinked_ttl"),
        Text,
        false,
    ),
    key(
        ENV_WORKER_BATCH_SIZE,
        &["worker.batch.size"],
        None,
        Number,
        false,
    ),
    key(
        ENV_WORKER_BATCH_LINGER_MS,
        &["worker.batch.linger_ms"],
        None,
        Number,
        false,
    ),
    key(
        ENV_FAULT_PANIC_ORDER_REF,
        &["worker.fault_panic_order_ref"],
        None,
        Text,
        false,
    ),
    key(
        ENV_SMTP_URL,
        &["mail.smtp_url"],
        Some("smtp_url"),
        Text,
        true,
    ),
    key(ENV_SMTP_TLS, &["mail.tls"], None, Text, false),
    key(ENV_SMTP_USERNAME, &["mail.username"], None, Text, false),
    key(ENV_SMTP_PASSWORD, &["mail.password"], None, Text, true),
    key(ENV_SMTP_CA_FILE, &["mail.ca_file"], None, Text, false),
    key(
        ENV_SMTP_ALLOW_INSECURE_AUTH,
        &["mail.allow_insecure_auth"],
        None,
        Text,
        false,
    ),
    key(
        ENV_MAIL_FROM,
        &["mail.from"],
        Some("mail_from"),
        Text,
        false,
    ),
    key(ENV_MAIL_DIR, &["mail.dir"], Some("mail_dir"), Text, false),
    key(ENV_CONSOLE_ADDR, &["console.addr"], None, Text, false),
    key(
        ENV_CONSOLE_SESSION_KEY,
        &["console.session_key"],
        None,
        Text,
        true,
    ),
    key(
        ENV_CONSOLE_SESSION_TTL,
        &["console.session_ttl"],
        None,
        Text,
        false,
    ),
    key(
        ENV_CONSOLE_SECURE_COOKIES,
        &["console.secure_cookies"],
        None,
        Text,
        false,
    ),
    key(
        ENV_MAIL_CONCURRENCY,
        &["mail.concurrency"],
        None,
        Number,
        false,
    ),
];

/// The key a dotted path belongs to.
pub fn by_path(path: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.paths.contains(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_and_path_is_listed_once() {
        let mut envs: Vec<&str> = KEYS.iter().map(|k| k.env).collect();
        envs.sort_unstable();
        envs.dedup();
        assert_eq!(envs.len(), KEYS.len());
        let mut paths: Vec<&str> = KEYS.iter().flat_map(|k| k.paths.iter().copied()).collect();
        let n = paths.len();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), n);
        assert!(KEYS.iter().all(|k| k.env.starts_with("ONCEHOOK_")));
    }
}
