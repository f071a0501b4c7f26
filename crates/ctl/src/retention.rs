//! `oncehookctl retention`: delete (or, with `--dry-run`, count)
//! `processed_webhooks` rows older than N days, with the same SQL the
//! worker's schedule runs ([`oncehook_common::store::retention`]).

use std::fmt;

use anyhow::Context;
use clap::Args;
use oncehook_common::store::retention;
use oncehook_common::{Config, db};
use serde::Serialize;

use crate::output::Report;

#[derive(Args)]
pub struct RetentionArgs {
    /// Keep this many days (default: ONCEHOOK_RETENTION_DAYS or 90).
    #[arg(long)]
    pub days: Option<u32>,
    /// Only count what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
}

/// How many rows went (or would go).
#[derive(Serialize)]
#[serde(untagged)]
pub enum RetentionReport {
    DryRun {
        dry_run: bool,
        days: u32,
        would_delete: i64,
    },
    Deleted {
        dry_run: bool,
        days: u32,
        deleted: u64,
    },
}

pub async fn run(settings: &Config, args: RetentionArgs) -> anyhow::Result<RetentionReport> {
    let days = args.days.unwrap_or(settings.worker.retention_days);
    let pool = db::connect(settings.database.url.expose(), 2, 3)
        .await
        .context("connecting to the database")?;
    let report = if args.dry_run {
        RetentionReport::DryRun {
            dry_run: true,
            days,
            would_delete: retention::count_older(&pool, days).await?,
        }
    } else {
        RetentionReport::Deleted {
            dry_run: false,
            days,
            deleted: retention::delete_older(&pool, days).await?,
        }
    };
    pool.close().await;
    Ok(report)
}

impl fmt::Display for RetentionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetentionReport::DryRun {
                days, would_delete, ..
            } => write!(
                f,
                "{would_delete} processed_webhooks row(s) older than {days} days would be deleted"
            ),
            RetentionReport::Deleted { days, deleted, .. } => write!(
                f,
                "deleted {deleted} processed_webhooks row(s) older than {days} days"
            ),
        }
    }
}

impl Report for RetentionReport {}
