//! Test support for the end-to-end suite: each test gets a [`TestEnv`] with
//! its own database (created and migrated here, dropped afterwards), its own
//! AMQP prefix, its own temp folder and config file, and starts the real
//! compiled binaries as child processes against real Postgres and RabbitMQ.
//!
//! [`TestEnv::pipeline`] starts the whole pipeline (ingest, workers, a
//! mailer) and waits until it is ready; [`shop::Shop`] writes the products
//! and orders a test needs; [`ops`] drives `oncehookctl` for the operators'
//! tests.
//!
//! Binaries are taken from the workspace's `target/debug` (override with
//! `ONCEHOOK_BIN_DIR`); `make test` builds them before running the tests.

pub mod api;
pub mod broker;
pub mod chaos;
pub mod cluster;
pub mod console;
pub mod direct;
pub mod env;
pub mod gateway_api;
pub mod in_process;
pub mod ledger_gen;
pub mod ledger_model;
pub mod metrics;
pub mod ops;
pub mod otlp;
pub mod pgbouncer;
pub mod pipeline;
pub mod ports;
pub mod process;
pub mod prometheus;
pub mod receiver;
pub mod refunds;
pub mod rng;
pub mod services;
pub mod shop;
pub mod smtp;
pub mod smtp_tls;
pub mod statements;
pub mod webdriver;

pub use env::{Secrets, TestEnv};
pub use pipeline::{Pipeline, PipelineSpec};
pub use ports::free_port;
pub use process::Proc;
pub use shop::Shop;
pub use smtp::SmtpSink;

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for the pipeline to do one thing (an order paid,
/// its email sent, a dead letter to arrive) before it fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout`
/// with `what` in the message.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if started.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
