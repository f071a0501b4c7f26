//! `oncehookctl`: the operators' and integrators' tool. Human-readable output
//! by default, `--json` for scripts. Each verb lives in its own module and
//! returns a report (`Serialize + Display`); [`output::Output::finish`] is
//! the one place that prints it. The verbs themselves are the library
//! (`oncehook-ops`), shared with the operators' console.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use oncehook_common::Config;
use oncehook_ops::{
    api_key, demo, dlq, migrate, notify, output, password, reconcile, refunds, retention, send,
    sources, stats, tenants, trace,
};

#[derive(Parser)]
#[command(
    name = "oncehookctl",
    version = oncehook_common::build::version_text(),
    about = "Operate oncehook: migrations, demo data, signed test events, dead letters, tracing, retention, stats"
)]
struct Cli {
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// `oncehookctl migrate [--finish]`.
#[derive(clap::Args)]
struct MigrateArgs {
    /// The contract step, after every binary runs this release: drop what only
    /// the previous release needed, catch up the orders it changed during the
    /// rollout and mint missing refund intents.
    #[arg(long)]
    finish: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Apply database migrations (idempotent): the expand step, which the running
    /// release can live with; `--finish` once every binary runs this release.
    Migrate(MigrateArgs),
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
    Retention(retention::RetentionArgs),
    /// Ask the gateways' APIs about pending orders now; publish what no webhook delivered.
    Reconcile(reconcile::ReconcileArgs),
    /// Refund intents: list, show, approve, cancel; pause and resume every refunder.
    Refunds {
        #[command(subcommand)]
        command: refunds::RefundsCommand,
    },
    /// Order events owed to the shop's endpoints: list, show, replay, enable.
    Notify {
        #[command(subcommand)]
        command: notify::NotifyCommand,
    },
    /// Queue depths, consumers, dead letters, outbox backlog, outcomes per gateway.
    Stats(stats::StatsArgs),
    /// The shops this deployment serves: create, list, show, disable, enable.
    Tenants {
        #[command(subcommand)]
        command: tenants::TenantsCommand,
    },
    /// Tenants' sources made at runtime: add, list, show, rotate, retire, disable, enable.
    Sources {
        #[command(subcommand)]
        command: sources::SourcesCommand,
    },
    /// Tenants' API keys issued at runtime: issue (printed once), list, revoke.
    Keys {
        #[command(subcommand)]
        command: sources::KeysCommand,
    },
    /// Hash a console password (read from stdin) into a `[[console.user]]` entry.
    ConsoleUser(password::ConsoleUserArgs),
    /// A new random key for the shop's API, printed once, and its `[[api.key]]` entry.
    ApiKey(api_key::ApiKeyArgs),
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
    let out = output::Output { json: cli.json };
    if let Command::ConsoleUser(args) = cli.command {
        // Needs no configuration: it prints a line for the configuration.
        return Ok(out.finish(&password::console_user(args)?));
    }
    if let Command::ApiKey(args) = cli.command {
        return Ok(out.finish(&api_key::api_key(args)?));
    }
    let settings = Config::load().context("reading configuration")?;
    Ok(match cli.command {
        Command::Migrate(args) => out.finish(&migrate::run(&settings, args.finish).await?),
        Command::Demo { command } => out.finish(&demo::run(&settings, command).await?),
        Command::Send(args) => out.finish(&send::run(&settings, args, &out).await?),
        Command::Dlq { command } => dlq::run(&settings, command, &out).await?,
        Command::Trace { command } => out.finish(&trace::run(&settings, command).await?),
        Command::Retention(args) => out.finish(&retention::run(&settings, args).await?),
        Command::Reconcile(args) => out.finish(&reconcile::run(&settings, args).await?),
        Command::Notify { command } => out.finish(&notify::run(&settings, command).await?),
        Command::Refunds { command } => out.finish(&refunds::run(&settings, command).await?),
        Command::Stats(args) => out.finish(&stats::run(&settings, args).await?),
        Command::Tenants { command } => out.finish(&tenants::run(&settings, command).await?),
        Command::Sources { command } => out.finish(&sources::run(&settings, command).await?),
        Command::Keys { command } => out.finish(&sources::keys(&settings, command).await?),
        Command::ConsoleUser(_) | Command::ApiKey(_) => ExitCode::SUCCESS,
    })
}
