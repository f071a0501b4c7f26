//! Configuration, in sections per concern, one file each: `[broker]`
//! (`broker.rs`), `[database]`, `[telemetry]`, `[ingest]` with the
//! top-level `[[source]]`s (`sources.rs`), `[worker]`, `[mail]` (its SMTP
//! checks in `smtp.rs`), `[console]`, `[api]` and `[secrets]` (the key ring
//! of secrets at rest). A section's file holds all there
//! is to one of its settings: the public typed struct the binaries read, the
//! section as written with its defaults, its environment variables and its
//! checks.
//!
//! The defaults, then the TOML file named by `ONCEHOOK_CONFIG`, then the
//! `ONCEHOOK_*` variables (env wins) are layered with figment and extracted
//! straight into the sections (`load.rs`), whose value types (`values.rs`)
//! check each setting as it is read; a section's `validate()` checks what
//! spans several settings. Errors name the key and its variable and never
//! print a secret (`error.rs`). Secrets and URLs are [`Secret`]s: `Debug`
//! never prints them. docs/configuration.md lists every key and variable,
//! and a test holds it to the code (`docs_tests.rs`).
//!
//! Each binary takes only the sections it needs ([`Config::into_ingest`],
//! [`Config::into_worker`], [`Config::into_mailer`], [`Config::into_api`], in `binaries.rs`);
//! `oncehookctl`, the operators' tool, reads the whole [`Config`].

mod api;
mod binaries;
mod broker;
mod console;
mod database;
mod error;
mod ingest;
mod keys;
mod load;
mod mail;
mod notify;
mod rates;
mod reconcile;
mod refunds;
mod secrets;
mod smtp;
mod source_api;
mod sources;
mod telemetry;
mod values;
mod worker;

use std::collections::HashMap;

pub use crate::secret::Secret;
pub use api::{
    AdminKey, AdminScope, ApiConfig, ApiKey, ApiScope, ENV_API_ADDR,
    ENV_API_AUTH_FAILURES_PER_MINUTE,
};
pub use api::{ENV_API_BODY_LIMIT_BYTES, ENV_API_MAX_ITEMS, ENV_API_MAX_PAGE_SIZE};
pub use binaries::{ApiSettings, IngestSettings, MailerSettings, NotifierSettings, WorkerSettings};
pub use broker::{BrokerConfig, DEFAULT_AMQP_URL, QueueSettings};
pub use broker::{ENV_AMQP_PREFIX, ENV_AMQP_URL, ENV_DELIVERY_LIMIT};
pub use broker::{ENV_PUBLISH_TIMEOUT_MS, ENV_QUORUM_INITIAL_GROUP_SIZE};
pub use console::{ConsoleConfig, ConsoleRole, ConsoleUser};
pub use console::{ENV_CONSOLE_ADDR, ENV_CONSOLE_SECURE_COOKIES};
pub use console::{ENV_CONSOLE_SESSION_KEY, ENV_CONSOLE_SESSION_TTL};
pub use database::{DEFAULT_DATABASE_URL, DatabaseConfig, Pooler};
pub use database::{ENV_DATABASE_MAX_CONNECTIONS, ENV_DATABASE_POOLER, ENV_DATABASE_URL};
pub use error::ConfigError;
pub use ingest::{ENV_BODY_LIMIT, ENV_INGEST_ADDR, ENV_INGEST_WORKERS, IngestConfig, SourcesFeed};
pub use ingest::{ENV_SOURCES_FEED_EVERY, ENV_SOURCES_FEED_KEY, ENV_SOURCES_FEED_URL};
pub use keys::{ENV_CONFIG, ENV_MAX_ATTEMPTS, ENV_PREFETCH};
pub use mail::{ENV_MAIL_CONCURRENCY, ENV_MAIL_DIR, ENV_MAIL_FROM, MailConfig};
pub use mail::{ENV_MAIL_LEASE, MIN_MAIL_LEASE};
pub use mail::{ENV_SMTP_ALLOW_INSECURE_AUTH, ENV_SMTP_CA_FILE, ENV_SMTP_PASSWORD};
pub use mail::{ENV_SMTP_TLS, ENV_SMTP_URL, ENV_SMTP_USERNAME};
pub use notify::{DEFAULT_RETRY_SCHEDULE, NotifyConfig, NotifyEndpoint, glob_matches};
pub use notify::{ENV_NOTIFY_CONCURRENCY, ENV_NOTIFY_RETRY_SCHEDULE, ENV_NOTIFY_TIMEOUT};
pub use rates::{ENV_RATE_BURST, ENV_RATE_PER_SECOND, ENV_SHARE_BURST, ENV_SHARE_PER_SECOND};
pub use rates::{Fairness, RateLimits};
pub use reconcile::{ENV_RECONCILE_AFTER, ENV_RECONCILE_HORIZON, ENV_RECONCILE_INTERVAL};
pub use reconcile::{ENV_RECONCILE_CALLS_PER_RUN, ENV_RECONCILE_CALLS_PER_SECOND};
pub use reconcile::{ENV_RECONCILE_PAID_HORIZON, ENV_RECONCILE_PAID_INTERVAL};
pub use reconcile::{ENV_RECONCILE_TIMEOUT, ReconcileConfig};
pub use refunds::{
    Ceilings, ENV_REFUNDS_INTERVAL, ENV_REFUNDS_LEASE, ENV_REFUNDS_MAX_DAILY_MINOR,
    ENV_REFUNDS_MAX_REFUND_MINOR, ENV_REFUNDS_MODE, RefundMode, RefundPolicy, RefundsConfig,
};
pub use secrets::{ENV_SECRET_KEYS, SecretsConfig};
pub use smtp::{SmtpConfig, SmtpCredentials, SmtpTls};
pub use source_api::SourceApi;
pub use sources::{
    DEFAULT_TOLERANCE_SECS, MAX_TOLERANCE_SECS, SourceConfig, SourceFacts, source_name_problem,
};
pub use telemetry::{
    API_METRICS_ADDR, INGEST_METRICS_ADDR, MAILER_METRICS_ADDR, NOTIFIER_METRICS_ADDR,
    WORKER_METRICS_ADDR,
};
pub use telemetry::{ENV_LOG, ENV_LOG_FORMAT, ENV_METRICS_ADDR, ENV_PROMETHEUS_URL};
pub use telemetry::{MetricsListener, OtlpProtocol, Sampler, TelemetryConfig, TracesConfig};
pub use worker::{BATCH_SIZE, RETENTION_DAYS, WorkerConfig};
pub use worker::{ENV_FAULT_PANIC_ORDER_REF, ENV_RETENTION_DAYS, ENV_RETENTION_INTERVAL_SECS};
pub use worker::{ENV_UNLINKED_TTL, ENV_WORKER_BATCH_SIZE};

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
    pub api: ApiConfig,
    pub reconcile: ReconcileConfig,
    pub notify: NotifyConfig,
    pub refunds: RefundsConfig,
    pub secrets: SecretsConfig,
}

impl Config {
    /// Reads `ONCEHOOK_CONFIG` (if set) and the environment.
    pub fn load() -> Result<Self, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Self::from_env_map(&env)
    }

    /// A configuration from these variables alone, its database one nothing
    /// listens on unless `vars` name one: for the paths a test drives that
    /// decide before they would touch Postgres (a pool opened lazily on it
    /// never connects).
    pub fn offline(vars: &[(&str, &str)]) -> Result<Self, ConfigError> {
        let mut env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        env.entry("ONCEHOOK_DATABASE_URL".to_owned())
            .or_insert_with(|| "postgres://nobody@127.0.0.1:1/none".to_owned());
        Self::from_env_map(&env)
    }

    /// Like [`Config::load`] but from an explicit variable map (tests).
    pub fn from_env_map(env: &HashMap<String, String>) -> Result<Self, ConfigError> {
        let sections = load::layered(env)?;
        let sources = sources::resolve_all(sections.source, env)?;
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        let refunds = sections.refunds.validate(&names)?;
        let reconcile = sections.reconcile.validate()?;
        refunds.check_lease(reconcile.timeout)?;
        Ok(Config {
            broker: sections.broker.into(),
            database: sections.database.into(),
            telemetry: sections.telemetry.validate()?,
            ingest: sections.ingest.with_sources(sources)?,
            worker: sections.worker.into(),
            mail: sections.mail.validate()?,
            console: sections.console.validate()?,
            api: sections.api.validate()?,
            reconcile,
            notify: sections.notify.validate(env)?,
            refunds,
            secrets: sections.secrets.into(),
        })
    }

    /// The source named `name`, if configured.
    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.ingest.sources.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod testing;

#[cfg(test)]
#[path = "docs_tests.rs"]
mod docs_tests;

#[cfg(test)]
#[path = "secrets_in_errors_tests.rs"]
mod secrets_in_errors_tests;
