//! `oncehookctl sources`: a tenant's gateway accounts made at runtime
//! (docs/tenants.md, "Onboarding a merchant") — `add`, `list`, `show`,
//! `rotate` (a further signing secret: old and new both verify), `retire`
//! (an old secret stops verifying), `disable` and `enable`; ingest serves
//! each change within about two seconds, without a restart. A secret is read
//! from standard input (an argument would be in the shell's history and the
//! process list), sealed with `secrets.keys` and never printed. And
//! `oncehookctl keys`: a tenant's API keys issued at runtime — `issue`
//! (printed once), `list`, `revoke`. All through `oncehook_tenants`'
//! stores, in the platform's scope.

use std::fmt;
use std::io::BufRead as _;

use anyhow::Context;
use clap::Subcommand;
use oncehook_common::Config;
use oncehook_common::config::SourceFacts;
use oncehook_common::store::Pooled;
use oncehook_tenants::store::keys::{self, Issued, Key};
use oncehook_tenants::store::sources::{self as store, NewSource, Source};
use oncehook_tenants::{Status, TenantId};
use serde::Serialize;

use crate::output::{Report, table};
use crate::timefmt::short_time;

#[derive(Subcommand)]
pub enum SourcesCommand {
    /// A new source for a tenant; its signing secret is read from stdin.
    Add {
        /// `[A-Za-z0-9_-]`, 1 to 64 characters: the webhook URL is /webhooks/NAME.
        name: String,
        #[arg(long, value_parser = parse_tenant)]
        tenant: TenantId,
        /// razorpay, cashfree, payu, stripe or standard.
        #[arg(long)]
        gateway: String,
        /// The replay window in seconds (300 if left out).
        #[arg(long)]
        tolerance_secs: Option<u64>,
        /// PayU's merchant key (PayU only).
        #[arg(long)]
        merchant_key: Option<String>,
    },
    /// The sources made at runtime, or one tenant's.
    List {
        #[arg(long, value_parser = parse_tenant)]
        tenant: Option<TenantId>,
    },
    /// One source: its tenant, gateway, status and live secrets' numbers.
    Show { name: String },
    /// Add a signing secret (read from stdin): old and new both verify until the old is retired.
    Rotate { name: String },
    /// Retire signing secret NO: it verifies nothing from then on.
    Retire { name: String, no: i32 },
    /// Refuse the source's webhooks (503, the gateway retries) until it is enabled.
    Disable { name: String },
    /// Serve a disabled source again.
    Enable { name: String },
}

#[derive(Subcommand)]
pub enum KeysCommand {
    /// A new API key for a tenant, printed once.
    Issue {
        #[arg(value_parser = parse_tenant)]
        tenant: TenantId,
        /// What the key is for.
        #[arg(long)]
        name: String,
        /// orders:write, orders:read, products:write, events:read (repeat for several).
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
    },
    /// A tenant's keys (never the keys themselves).
    List {
        #[arg(value_parser = parse_tenant)]
        tenant: TenantId,
    },
    /// Refuse key ID from now on (within about a second).
    Revoke { id: String },
}

fn parse_tenant(s: &str) -> Result<TenantId, String> {
    TenantId::parse(s).map_err(|e| e.to_string())
}

/// What a `sources` or `keys` verb prints.
#[derive(Serialize)]
#[serde(untagged)]
pub enum SourcesReport {
    Source { source: Source, done: &'static str },
    Sources { sources: Vec<Source> },
    Issued { issued: Issued },
    Key { key: Key, done: &'static str },
    Keys { keys: Vec<Key> },
}

impl Report for SourcesReport {}

impl fmt::Display for SourcesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source_row = |s: &Source| {
            let nos: Vec<String> = s.secrets.iter().map(|k| k.no.to_string()).collect();
            vec![
                s.name.clone(),
                s.tenant.clone(),
                s.gateway.clone(),
                s.status.as_str().to_owned(),
                nos.join(","),
                format!("/webhooks/{}", s.name),
            ]
        };
        let source_headers = [
            "SOURCE",
            "TENANT",
            "GATEWAY",
            "STATUS",
            "SECRETS",
            "WEBHOOK PATH",
        ];
        let key_row = |k: &Key| {
            vec![
                k.id.clone(),
                k.tenant.clone(),
                k.name.clone(),
                k.scopes.join(","),
                short_time(k.created_at),
                k.revoked_at.map(short_time).unwrap_or_default(),
            ]
        };
        let key_headers = ["KEY", "TENANT", "NAME", "SCOPES", "CREATED", "REVOKED"];
        match self {
            SourcesReport::Source { source, done } => {
                if !done.is_empty() {
                    writeln!(f, "source {} {done}", source.name)?;
                }
                write!(f, "{}", table(&source_headers, &[source_row(source)]))
            }
            SourcesReport::Sources { sources } => {
                let rows: Vec<Vec<String>> = sources.iter().map(source_row).collect();
                write!(f, "{}", table(&source_headers, &rows))
            }
            SourcesReport::Issued { issued } => {
                writeln!(
                    f,
                    "key {} issued for tenant {}; it is shown this once:",
                    issued.key.id, issued.key.tenant
                )?;
                writeln!(f, "{}", issued.secret)
            }
            SourcesReport::Key { key, done } => {
                writeln!(f, "key {} {done}", key.id)?;
                write!(f, "{}", table(&key_headers, &[key_row(key)]))
            }
            SourcesReport::Keys { keys } => {
                let rows: Vec<Vec<String>> = keys.iter().map(key_row).collect();
                write!(f, "{}", table(&key_headers, &rows))
            }
        }
    }
}

/// The first line of stdin: a secret, never an argument.
fn secret_from_stdin() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the signing secret from stdin")?;
    let secret = line.trim_end_matches(['\r', '\n']).to_owned();
    if secret.is_empty() {
        anyhow::bail!(
            "no signing secret on stdin (e.g. `printf %s \"$SECRET\" | oncehookctl sources add …`)"
        );
    }
    Ok(secret)
}

async fn connect(settings: &Config) -> anyhow::Result<Pooled> {
    Pooled::connect(&settings.database, 2, 3)
        .await
        .context("connecting to the database")
}

pub async fn run(settings: &Config, command: SourcesCommand) -> anyhow::Result<SourcesReport> {
    let secret = match &command {
        SourcesCommand::Add { .. } | SourcesCommand::Rotate { .. } => Some(secret_from_stdin()?),
        _ => None,
    };
    let pool = connect(settings).await?;
    let report = verb(&pool, settings, command, secret.unwrap_or_default()).await;
    pool.close().await;
    report
}

async fn verb(
    db: &Pooled,
    settings: &Config,
    command: SourcesCommand,
    secret: String,
) -> anyhow::Result<SourcesReport> {
    let ring = settings.secrets.keys.as_ref();
    let one = |source, done| SourcesReport::Source { source, done };
    Ok(match command {
        SourcesCommand::Add {
            name,
            tenant,
            gateway,
            tolerance_secs,
            merchant_key,
        } => {
            let new = NewSource {
                facts: SourceFacts {
                    name: &name,
                    gateway: &gateway,
                    tolerance_secs,
                    merchant_key,
                    tenant,
                },
                secret,
            };
            one(store::create(db, ring, new).await?, "added")
        }
        SourcesCommand::List { tenant } => SourcesReport::Sources {
            sources: store::list(db, tenant.as_ref()).await?,
        },
        SourcesCommand::Show { name } => match store::get(db, &name).await? {
            Some(source) => one(source, ""),
            None => anyhow::bail!(
                "no source {name} made at runtime (`oncehookctl sources list` shows them)"
            ),
        },
        SourcesCommand::Rotate { name } => one(
            store::add_secret(db, ring, &name, &secret).await?,
            "has a further secret (retire the old one once the gateway signs with the new)",
        ),
        SourcesCommand::Retire { name, no } => one(
            store::retire_secret(db, &name, no).await?,
            "retired a secret",
        ),
        SourcesCommand::Disable { name } => one(
            store::set_status(db, &name, Status::Disabled).await?,
            "disabled",
        ),
        SourcesCommand::Enable { name } => one(
            store::set_status(db, &name, Status::Active).await?,
            "enabled",
        ),
    })
}

pub async fn keys(settings: &Config, command: KeysCommand) -> anyhow::Result<SourcesReport> {
    let db = connect(settings).await?;
    let report = async {
        Ok::<_, anyhow::Error>(match command {
            KeysCommand::Issue {
                tenant,
                name,
                scopes,
            } => SourcesReport::Issued {
                issued: keys::issue(&db, &tenant, &name, &scopes).await?,
            },
            KeysCommand::List { tenant } => SourcesReport::Keys {
                keys: keys::list(&db, &tenant).await?,
            },
            KeysCommand::Revoke { id } => SourcesReport::Key {
                key: keys::revoke(&db, &id).await?,
                done: "revoked",
            },
        })
    }
    .await;
    db.close().await;
    report
}
