//! Plumbing shared by every oncehook binary: configuration, the envelope that
//! travels from ingest to the worker, the RabbitMQ topology and publishing
//! with confirms (to one node or, failing over, to a cluster's nodes:
//! `broker_nodes`), the one broker session supervisor and queue inspection
//! (`broker`), dead letters (`dead_letter`: their kinds, headers and
//! IDs), the consume loop that owns every delivery (`consume`:
//! handlers return a verdict, the loop settles it), the one `RetryPolicy`
//! every backoff reads, the one helper every periodic task runs on
//! (`periodic`), the one `Retry-After` parser (`retry_after`), telemetry (logs and metrics), the
//! release and commit a binary was built as (`build`), secrets sealed at rest
//! under a key ring (`sealed`), graceful shutdown and —
//! with the `db` feature — the Postgres pool, migrations, the consumers'
//! session (`consume::session`), the one outbox relay (`relay`) and the
//! `store` (the SQL of each table).
//!
//! Ingest builds this crate without `db`: it never touches Postgres.

pub mod amqp;
pub mod background;
pub mod broker;
pub mod broker_nodes;
pub mod build;
pub mod config;
pub mod consume;
#[cfg(feature = "db")]
pub mod contended;
#[cfg(feature = "db")]
pub mod db;
pub mod dead_letter;
pub mod email;
pub mod envelope;
pub mod health;
pub mod otel;
pub mod peek_lock;
pub mod periodic;
pub mod rate;
pub mod redact;
pub mod refund;
#[cfg(feature = "db")]
pub mod relay;
pub mod retry;
pub mod retry_after;
pub mod sealed;
pub mod secret;
pub mod shutdown;
pub mod sources_feed;
#[cfg(feature = "db")]
pub mod store;
pub mod telemetry;
pub mod tenant;
pub mod topology;

pub use config::{
    ApiSettings, Config, ConfigError, IngestSettings, MailerSettings, NotifierSettings,
    SourceConfig, WorkerSettings,
};
pub use envelope::{Envelope, Origin};
pub use retry::{REFUND_CALLS_PER_SEND, RetryPolicy};
pub use topology::Topology;
