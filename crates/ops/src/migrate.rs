//! `oncehookctl migrate`: apply the embedded database migrations (idempotent).

use std::fmt;

use anyhow::Context;
use oncehook_common::Config;
use oncehook_common::redact::redact;
use oncehook_common::store::{self, Pooled};
use serde::Serialize;

use crate::output::Report;

/// `--json`: `{"status": "migrated"}`.
#[derive(Serialize)]
pub struct MigrateReport {
    status: &'static str,
}

pub async fn run(settings: &Config) -> anyhow::Result<MigrateReport> {
    let pool = Pooled::connect(&settings.database, 2, 3)
        .await
        .with_context(|| format!("connecting to {}", redact(settings.database.url.expose())))?;
    let migrated = store::schema::migrate(&pool).await;
    pool.close().await;
    migrated.context("applying migrations")?;
    Ok(MigrateReport { status: "migrated" })
}

impl fmt::Display for MigrateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "migrations applied")
    }
}

impl Report for MigrateReport {}
