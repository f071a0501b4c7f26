//! `oncehookctl`: the operators' and integrators' tool. Human-readable output
//! by default, `--json` for scripts. Each verb lives in its own module.

mod demo;
mod dlq;
mod output;
mod send;
mod stats;
mod trace;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use oncehook_common::{Settings, db};

#[derive(Parser)]
#[command(
    name = "oncehookctl",
    version,
    about = "Operate oncehook: migrations, demo data, signed test events, dead letters, tracing, retention, stats"
)]
struct Cli {
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply database migrations (idempotent).
    Migrate,
    /// Demo data for local runs and the README tour.
    Demo {
        #[command(subcommand)]
        command: demo::DemoCommand,
    },
    /// Sign a realistic event for a configured source and post it to ingest (like `stripe trigger`).
    Send(send::SendArgs),
    /// Inspect, replay and purge dead letters.
    Dlq {
        #[command(subcommand)]
        command: dlq::DlqCommand,
    },
    /// Explain an order or an event: payments, webhook deliveries, emails.
    Trace {
        #[command(subcommand)]
        command: trace::TraceCommand,
    },
    /// Delete processed_webhooks rows older than N days, in small batches.
    Retention {
        /// Keep this many days (default: ONCEHOOK_RETENTION_DAYS or 90).
        #[arg(long)]
        days: Option<u32>,
        /// Only count what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
    /// Queue depths, consumers, dead letters, outbox backlog, outcomes per gateway.
    Stats(stats::StatsArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    // `oncehookctl dlq list | head` should stop quietly, like any Unix tool,
    // instead of panicking on the closed pipe.
    #[cfg(unix)]
    // SAFETY: `signal` only resets the process-wide disposition of SIGPIPE
    // to the default; no handler function is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::load().context("reading configuration")?;
    let out = output::Output { json: cli.json };
    match cli.command {
        Command::Migrate => {
            let pool = db::connect(&settings.database_url, 2, 3)
                .await
                .with_context(|| format!("connecting to {}", redact(&settings.database_url)))?;
            db::MIGRATOR
                .run(&pool)
                .await
                .context("applying migrations")?;
            out.done(
                "migrations applied",
                serde_json::json!({ "status": "migrated" }),
            );
        }
        Command::Demo { command } => demo::run(&settings, command, &out).await?,
        Command::Send(args) => return send::run(&settings, args, &out).await,
        Command::Dlq { command } => return dlq::run(&settings, command, &out).await,
        Command::Trace { command } => return trace::run(&settings, command, &out).await,
        Command::Retention { days, dry_run } => {
            let days = days.unwrap_or(settings.retention_days);
            let pool = db::connect(&settings.database_url, 2, 3)
                .await
                .context("connecting to the database")?;
            if dry_run {
                let n = oncehook_worker::retention::count_older(&pool, days).await?;
                out.done(
                    &format!(
                        "{n} processed_webhooks row(s) older than {days} days would be deleted"
                    ),
                    serde_json::json!({ "dry_run": true, "days": days, "would_delete": n }),
                );
            } else {
                let n = oncehook_worker::retention::delete_older(&pool, days).await?;
                out.done(
                    &format!("deleted {n} processed_webhooks row(s) older than {days} days"),
                    serde_json::json!({ "dry_run": false, "days": days, "deleted": n }),
                );
            }
        }
        Command::Stats(args) => return stats::run(&settings, args, &out).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// A URL with its password removed, for error messages.
pub fn redact(url: &str) -> String {
    match url.split_once('@') {
        Some((creds, rest)) if creds.contains(':') && creds.matches(':').count() > 1 => {
            let scheme_end = creds.find("://").map_or(0, |i| i + 3);
            let user = creds[scheme_end..].split(':').next().unwrap_or("");
            format!("{}{}:***@{}", &creds[..scheme_end], user, rest)
        }
        _ => url.to_owned(),
    }
}
