//! What each binary is given: only the sections it reads, with its
//! metrics/health listener resolved against its own default. Ingest never
//! sees the database or the mail settings; `oncehookctl` and the console
//! read the whole [`Config`].

use std::net::SocketAddr;

use super::error::invalid;
use super::{
    API_METRICS_ADDR, ApiConfig, INGEST_METRICS_ADDR, MAILER_METRICS_ADDR, NOTIFIER_METRICS_ADDR,
    NotifyConfig, WORKER_METRICS_ADDR,
};
use super::{BrokerConfig, Config, ConfigError, DatabaseConfig, ENV_CONFIG};
use super::{IngestConfig, MailConfig, SecretsConfig, TelemetryConfig, WorkerConfig};

/// What `oncehook-ingest` is given: it never sees the database or mail settings.
#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// The metrics/health listener, resolved against this binary's default.
    pub metrics_addr: Option<SocketAddr>,
    pub broker: BrokerConfig,
    pub telemetry: TelemetryConfig,
    pub ingest: IngestConfig,
    /// The key ring that opens the sources feed's sealed secrets.
    pub secrets: SecretsConfig,
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

/// What `oncehook-notifier` is given.
#[derive(Debug, Clone)]
pub struct NotifierSettings {
    /// The metrics/health listener, resolved against this binary's default.
    pub metrics_addr: Option<SocketAddr>,
    pub broker: BrokerConfig,
    pub database: DatabaseConfig,
    pub telemetry: TelemetryConfig,
    pub notify: NotifyConfig,
}

/// What `oncehook-api` is given: the database and its own section, never
/// the broker, the sources or the mail settings.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// The metrics/health listener, resolved against this binary's default.
    pub metrics_addr: Option<SocketAddr>,
    pub database: DatabaseConfig,
    pub telemetry: TelemetryConfig,
    pub api: ApiConfig,
    /// The key ring that seals what the admin API stores.
    pub secrets: SecretsConfig,
}

impl Config {
    /// The sections `oncehook-ingest` reads; it refuses to start with
    /// neither a source nor a sources feed, and with a feed but no key ring
    /// to open its secrets.
    pub fn into_ingest(self) -> Result<IngestSettings, ConfigError> {
        if self.ingest.sources.is_empty() && self.ingest.sources_feed.is_none() {
            return Err(invalid(
                ENV_CONFIG,
                "",
                "no [[source]] configured and no [ingest.sources_feed]: point ONCEHOOK_CONFIG at a \
                 TOML file with at least one source, or give ingest the admin API's feed",
            ));
        }
        if self.ingest.sources_feed.is_some() && self.secrets.keys.is_none() {
            return Err(invalid(
                "secrets.keys",
                "",
                "[ingest.sources_feed] is set, and its signing secrets come sealed: set \
                 secrets.keys (ONCEHOOK_SECRET_KEYS) to the ring the admin API seals with",
            ));
        }
        Ok(IngestSettings {
            metrics_addr: self.telemetry.metrics.resolve(INGEST_METRICS_ADDR),
            broker: self.broker,
            telemetry: self.telemetry,
            ingest: self.ingest,
            secrets: self.secrets,
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

    /// The sections `oncehook-api` reads.
    pub fn into_api(self) -> ApiSettings {
        ApiSettings {
            metrics_addr: self.telemetry.metrics.resolve(API_METRICS_ADDR),
            database: self.database,
            telemetry: self.telemetry,
            api: self.api,
            secrets: self.secrets,
        }
    }

    /// The sections `oncehook-notifier` reads.
    pub fn into_notifier(self) -> NotifierSettings {
        NotifierSettings {
            metrics_addr: self.telemetry.metrics.resolve(NOTIFIER_METRICS_ADDR),
            broker: self.broker,
            database: self.database,
            telemetry: self.telemetry,
            notify: self.notify,
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

#[cfg(test)]
#[path = "binaries_tests.rs"]
mod tests;
