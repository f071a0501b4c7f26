//! `oncehookctl migrate`: apply the embedded database migrations (idempotent).

use std::fmt;

use anyhow::Context;
use oncehook_common::redact::redact;
use oncehook_common::{Config, db};
use serde::Serialize;

use crate::output::Report;

/// `--json`: `{"status": "migrated"}`.
#[derive(Serialize)]
pub struct MigrateReport {
    status: &'static str,
}

pub async fn run(settings: &Config) -> anyhow::Result<MigrateReport> {
    let pool = db::connect(settings.database.url.expose(), 2, 3)
        .await
        .with_context(|| format!("connecting to {}", redact(settings.database.url.expose())))?;
    db::MIGRATOR
        .run(&pool)
        .await
        .context("applying migrations")?;
    Ok(MigrateReport { status: "migrated" })
}

impl fmt::Display for MigrateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "migrations applied")
    }
}

impl Report for MigrateReport {}
