//! `oncehookctl tenants`: the shops one deployment serves (docs/tenants.md)
//! — `create` (an id and a name), `list`, `show`, `disable`, `enable` and
//! `mail-from` (the sender of its customers' emails) and `limits` (each of
//! its sources' rate at ingest's door, docs/tenants.md "Fairness").
//! All through `oncehook_tenants::store::tenants`, in the platform's scope.

use std::fmt;

use anyhow::Context;
use clap::Subcommand;
use oncehook_common::Config;
use oncehook_common::rate::Limit;
use oncehook_common::store::Pooled;
use oncehook_common::topology::lane_of;
use oncehook_tenants::store::tenants as store;
use oncehook_tenants::{Status, Tenant, TenantId, TenantRate};
use serde::Serialize;

use crate::output::{Report, table};
use crate::timefmt::short_time;

#[derive(Subcommand)]
pub enum TenantsCommand {
    /// A new tenant: its id (in webhook paths and keys) and its name.
    Create {
        /// 1 to 63 lowercase letters, digits, `-` or `_` (e.g. `acme-shop`).
        #[arg(value_parser = parse_id)]
        id: TenantId,
        /// What operators see (e.g. "Acme Shop").
        #[arg(long)]
        name: String,
    },
    /// Every tenant: id, name, status, since when.
    List,
    /// One tenant.
    Show {
        #[arg(value_parser = parse_id)]
        id: TenantId,
    },
    /// Stop serving a tenant: its sources refuse webhooks, its keys are refused; its rows stay.
    Disable {
        #[arg(value_parser = parse_id)]
        id: TenantId,
    },
    /// Serve a disabled tenant again.
    Enable {
        #[arg(value_parser = parse_id)]
        id: TenantId,
    },
    /// The sender of the tenant's customers' emails (`Name <address>`), or --default for mail.from.
    MailFrom {
        #[arg(value_parser = parse_id)]
        id: TenantId,
        #[arg(required_unless_present = "default", conflicts_with = "default")]
        address: Option<String>,
        /// Back to the deployment's `mail.from`.
        #[arg(long)]
        default: bool,
    },
    /// Each of the tenant's sources' rate at ingest's door (429 beyond it), served within about two seconds; --default for the file's.
    Limits {
        #[arg(value_parser = parse_id)]
        id: TenantId,
        /// Webhooks per second for each of its sources; 0: no limit.
        #[arg(long, required_unless_present = "default", conflicts_with = "default")]
        per_second: Option<u32>,
        /// How many at once after a quiet spell (default: twice the rate).
        #[arg(long, conflicts_with = "default")]
        burst: Option<u32>,
        /// Back to the configuration file's (`[ingest.rate_limit]`).
        #[arg(long)]
        default: bool,
    },
}

fn parse_id(s: &str) -> Result<TenantId, String> {
    TenantId::parse(s).map_err(|e| e.to_string())
}

/// What a `tenants` verb prints.
#[derive(Serialize)]
#[serde(untagged)]
pub enum TenantsReport {
    One { tenant: Tenant, done: &'static str },
    List { tenants: Vec<Tenant> },
}

impl Report for TenantsReport {}

impl fmt::Display for TenantsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let row = |t: &Tenant| {
            vec![
                t.id.clone(),
                t.name.clone(),
                t.status.as_str().to_owned(),
                short_time(t.created_at),
                t.disabled_at.map(short_time).unwrap_or_default(),
                t.mail_from
                    .clone()
                    .unwrap_or_else(|| "(mail.from)".to_owned()),
                rate_text(t.rate),
                lane_text(&t.id),
            ]
        };
        let headers = [
            "TENANT",
            "NAME",
            "STATUS",
            "CREATED",
            "DISABLED",
            "SENDER",
            "RATE",
            "BULK LANE",
        ];
        match self {
            TenantsReport::One { tenant, done } => {
                if !done.is_empty() {
                    writeln!(f, "tenant {} {done}", tenant.id)?;
                }
                write!(f, "{}", table(&headers, &[row(tenant)]))
            }
            TenantsReport::List { tenants } => {
                let rows: Vec<Vec<String>> = tenants.iter().map(row).collect();
                write!(f, "{}", table(&headers, &rows))
            }
        }
    }
}

/// A tenant's rate as `tenants` shows it.
fn rate_text(rate: Option<TenantRate>) -> String {
    match rate {
        None => "(file)".to_owned(),
        Some(r) => match Limit::from_setting(r.per_second, r.burst) {
            Limit::Off => "no limit".to_owned(),
            Limit::At(rate) => rate.to_string(),
        },
    }
}

/// The bulk lane a tenant's deliveries beyond its share go to.
fn lane_text(id: &str) -> String {
    TenantId::parse(id).map_or_else(
        |_| "-".to_owned(),
        |t| format!("events-bulk.{}", lane_of(&t)),
    )
}

pub async fn run(settings: &Config, command: TenantsCommand) -> anyhow::Result<TenantsReport> {
    let pool = Pooled::connect(&settings.database, 2, 3)
        .await
        .context("connecting to the database")?;
    let report = verb(&pool, command).await;
    pool.close().await;
    report
}

async fn verb(db: &Pooled, command: TenantsCommand) -> anyhow::Result<TenantsReport> {
    let one = |tenant, done| TenantsReport::One { tenant, done };
    Ok(match command {
        TenantsCommand::Create { id, name } => one(store::create(db, &id, &name).await?, "created"),
        TenantsCommand::List => TenantsReport::List {
            tenants: store::list(db).await?,
        },
        TenantsCommand::Show { id } => match store::get(db, &id).await? {
            Some(tenant) => one(tenant, ""),
            None => anyhow::bail!("no tenant {id} (`oncehookctl tenants list` shows them)"),
        },
        TenantsCommand::Disable { id } => one(
            store::set_status(db, &id, Status::Disabled).await?,
            "disabled",
        ),
        TenantsCommand::Enable { id } => {
            one(store::set_status(db, &id, Status::Active).await?, "enabled")
        }
        TenantsCommand::MailFrom { id, address, .. } => one(
            store::set_mail_from(db, &id, address.as_deref()).await?,
            "has its sender set",
        ),
        TenantsCommand::Limits {
            id,
            per_second,
            burst,
            ..
        } => {
            let rate = per_second.map(|per_second| TenantRate {
                per_second,
                burst: burst.unwrap_or(0),
            });
            one(
                store::set_rate(db, &id, rate).await?,
                "has its rate set (every ingest serves it within about two seconds)",
            )
        }
    })
}
