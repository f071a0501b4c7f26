//! `oncehookctl retention`: delete (or, with `--dry-run`, count)
//! `processed_webhooks` rows older than N days, and `email_outbox` and
//! `notify_deliveries` rows sent (delivered) or failed more than N days ago,
//! with the same SQL the worker's schedule
//! runs ([`oncehook_common::store::retention`]). `--days 0` (everything)
//! asks first, and without a terminal needs `--yes`.

use std::fmt;

use anyhow::{Context, bail};
use clap::Args;
use oncehook_common::Config;
use oncehook_common::config::RETENTION_DAYS;
use oncehook_common::store::Pooled;
use oncehook_common::store::retention::{self, Counts};
use serde::Serialize;

use crate::output::{Caution, Report, approve};

#[derive(Args)]
#[command(mut_arg("dry_run", |a| a.help("Only count what would be deleted")))]
#[command(mut_arg("yes", |a| a.help("Do not ask before `--days 0` (required for it when stdin is not a terminal)")))]
pub struct RetentionArgs {
    /// Keep this many days, 0..=3650 (default: ONCEHOOK_RETENTION_DAYS or 90); 0 deletes everything.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=i64::from(*RETENTION_DAYS.end())))]
    pub days: Option<u32>,
    #[command(flatten)]
    pub caution: Caution,
}

/// How many rows went (or would go): the total and per table.
#[derive(Serialize)]
#[serde(untagged)]
pub enum RetentionReport {
    DryRun {
        dry_run: bool,
        days: u32,
        would_delete: u64,
        #[serde(flatten)]
        tables: Counts,
    },
    Deleted {
        dry_run: bool,
        days: u32,
        deleted: u64,
        #[serde(flatten)]
        tables: Counts,
    },
}

pub async fn run(settings: &Config, args: RetentionArgs) -> anyhow::Result<RetentionReport> {
    let days = args.days.unwrap_or(settings.worker.retention_days);
    if days == 0
        && !args.caution.dry_run
        && !args.caution.yes
        && !approve("delete every processed_webhooks row and every sent or failed email_outbox and notify_deliveries row (--days 0)")
            .await?
    {
        bail!("nothing deleted");
    }
    let pool = Pooled::connect(&settings.database, 2, 3)
        .await
        .context("connecting to the database")?;
    let result = if args.caution.dry_run {
        retention::count_older(&pool, days)
            .await
            .map(|tables| RetentionReport::DryRun {
                dry_run: true,
                days,
                would_delete: total(tables),
                tables,
            })
    } else {
        retention::delete_older(&pool, days)
            .await
            .map(|tables| RetentionReport::Deleted {
                dry_run: false,
                days,
                deleted: total(tables),
                tables,
            })
    };
    pool.close().await;
    Ok(result?)
}

fn total(c: Counts) -> u64 {
    c.processed_webhooks + c.email_outbox + c.notify_deliveries
}

impl fmt::Display for RetentionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (verb, days, t) = match self {
            RetentionReport::DryRun { days, tables, .. } => ("would delete", days, tables),
            RetentionReport::Deleted { days, tables, .. } => ("deleted", days, tables),
        };
        write!(
            f,
            "{verb} {} processed_webhooks row(s) older than {days} days, {} email_outbox row(s) sent or failed and {} notify_deliveries row(s) delivered or failed more than {days} days ago",
            t.processed_webhooks, t.email_outbox, t.notify_deliveries
        )
    }
}

impl Report for RetentionReport {}
