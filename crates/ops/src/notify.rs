//! `oncehookctl notify`: the order events the notifier owes the shop's
//! endpoints (docs/shop-integration.md#order-events) — `endpoints` (each
//! one's state and counts), `list` (deliveries, newest first), `show` (one
//! event as the shop receives it, with its deliveries), `replay` (failed
//! deliveries due again with a fresh schedule; never for a disabled
//! endpoint) and `enable` (after a 410 Gone). All through
//! `store::notify`; the notifier picks replayed rows up within a second.

use std::fmt;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use oncehook_common::Config;
use oncehook_common::store::Pooled;
use oncehook_common::store::notify::{self as store, DeliveryRecord, EndpointState, Filter};
use oncehook_ledger::store::order_events;
use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::output::{Report, table, truncate};
use crate::timefmt::{human_duration, parse_duration, short_time, whole_secs};

#[derive(Subcommand)]
pub enum NotifyCommand {
    /// Each endpoint: enabled or disabled (and why), pending, failed and delivered counts.
    Endpoints,
    /// Deliveries of order events to the endpoints, newest first.
    List(ListArgs),
    /// One order event as the shop receives it, and its deliveries.
    Show {
        /// The event id (`evt_…`, the `webhook-id`).
        event_id: String,
    },
    /// Make failed deliveries due again, with a fresh retry schedule.
    Replay(ReplayArgs),
    /// Enable an endpoint a 410 Gone disabled (then replay its failed events).
    Enable {
        /// The endpoint's name.
        endpoint: String,
    },
}

#[derive(Args)]
pub struct ListArgs {
    /// Only this endpoint's deliveries.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Only deliveries in this state.
    #[arg(long, value_parser = ["pending", "delivered", "failed"])]
    pub status: Option<String>,
    /// Only deliveries of events made within this long ago (e.g. 2h, 7d).
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<std::time::Duration>,
    /// At most this many rows.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=10_000))]
    pub limit: i64,
}

#[derive(Args)]
pub struct ReplayArgs {
    /// Only this event's failed deliveries.
    pub event_id: Option<String>,
    /// Only this endpoint's failed deliveries.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Only deliveries of events made within this long ago (e.g. 2h, 7d).
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<std::time::Duration>,
}

/// What a `notify` verb prints.
#[derive(Serialize)]
#[serde(untagged)]
pub enum NotifyReport {
    Endpoints {
        endpoints: Vec<EndpointState>,
        /// Endpoints in the configuration the notifier has not started with yet.
        configured_only: Vec<String>,
    },
    List {
        deliveries: Vec<DeliveryRecord>,
    },
    Show {
        event: serde_json::Value,
        deliveries: Vec<DeliveryRecord>,
    },
    Replayed {
        replayed: u64,
        /// Disabled endpoints whose failed rows were left.
        disabled: Vec<String>,
    },
    Enabled {
        enabled: String,
    },
}

pub async fn run(settings: &Config, command: NotifyCommand) -> anyhow::Result<NotifyReport> {
    let pool = Pooled::connect(&settings.database, 2, 3)
        .await
        .context("connecting to the database")?;
    let report = async {
        // A transaction: `show` renders the event in its tenant's scope.
        let mut tx = pool.begin().await?;
        let report = verb(settings, &mut tx, command).await?;
        tx.commit().await?;
        anyhow::Ok(report)
    }
    .await;
    pool.close().await;
    report
}

async fn verb(
    settings: &Config,
    conn: &mut PgConnection,
    command: NotifyCommand,
) -> anyhow::Result<NotifyReport> {
    let since = |d: Option<std::time::Duration>| d.map(|d| OffsetDateTime::now_utc() - d);
    Ok(match command {
        NotifyCommand::Endpoints => {
            let endpoints = store::endpoints(conn).await?;
            let configured_only = settings
                .notify
                .endpoints
                .iter()
                .filter(|c| !endpoints.iter().any(|e| e.name == c.name))
                .map(|c| c.name.clone())
                .collect();
            NotifyReport::Endpoints {
                endpoints,
                configured_only,
            }
        }
        NotifyCommand::List(args) => NotifyReport::List {
            deliveries: store::list(
                conn,
                &Filter {
                    endpoint: args.endpoint,
                    status: args.status,
                    since: since(args.since),
                    limit: args.limit,
                    ..Filter::default()
                },
            )
            .await?,
        },
        NotifyCommand::Show { event_id } => show(conn, &event_id).await?,
        NotifyCommand::Replay(args) => {
            let from = since(args.since);
            replay(conn, args, from).await?
        }
        NotifyCommand::Enable { endpoint } => {
            if !store::enable(conn, &endpoint).await? {
                bail!(
                    "no endpoint is named {endpoint:?} (`oncehookctl notify endpoints` lists them)"
                );
            }
            NotifyReport::Enabled { enabled: endpoint }
        }
    })
}

async fn show(conn: &mut PgConnection, event_id: &str) -> anyhow::Result<NotifyReport> {
    let Some(row) = order_events::by_id(conn, event_id).await? else {
        bail!("no order event has the id {event_id:?}");
    };
    let event = match oncehook_ledger::render::render(conn, &row).await? {
        Some(e) => serde_json::to_value(e)?,
        None => serde_json::json!({ "id": row.id, "type": row.kind, "order_ref": row.order_ref }),
    };
    let deliveries = store::list(
        conn,
        &Filter {
            event_id: Some(event_id.to_owned()),
            limit: 1_000,
            ..Filter::default()
        },
    )
    .await?;
    Ok(NotifyReport::Show { event, deliveries })
}

async fn replay(
    conn: &mut PgConnection,
    args: ReplayArgs,
    since: Option<OffsetDateTime>,
) -> anyhow::Result<NotifyReport> {
    let disabled: Vec<String> = store::endpoints(conn)
        .await?
        .into_iter()
        .filter(|e| e.disabled_at.is_some() && e.failed > 0)
        .filter(|e| args.endpoint.as_ref().is_none_or(|n| *n == e.name))
        .map(|e| e.name)
        .collect();
    if let Some(name) = &args.endpoint
        && disabled.contains(name)
    {
        bail!(
            "endpoint {name:?} is disabled (it answered 410 Gone): run `oncehookctl notify enable {name}` first; a replay alone enables nothing"
        );
    }
    let replayed = store::replay(
        conn,
        &Filter {
            endpoint: args.endpoint,
            event_id: args.event_id,
            since,
            ..Filter::default()
        },
    )
    .await?;
    Ok(NotifyReport::Replayed { replayed, disabled })
}

fn delivery_rows(deliveries: &[DeliveryRecord]) -> Vec<Vec<String>> {
    deliveries
        .iter()
        .map(|d| {
            let last = match (d.last_status, &d.last_error) {
                (Some(s), _) if d.status == "delivered" => s.to_string(),
                (_, Some(e)) => truncate(e, 48),
                (Some(s), None) => s.to_string(),
                (None, None) => String::new(),
            };
            vec![
                d.event_id.clone(),
                d.event_type.clone(),
                d.order_ref.clone(),
                d.endpoint.clone(),
                d.status.clone(),
                d.attempts.to_string(),
                if d.status == "pending" {
                    short_time(d.next_attempt_at)
                } else {
                    String::new()
                },
                last,
            ]
        })
        .collect()
}

const DELIVERY_HEADERS: [&str; 8] = [
    "EVENT", "TYPE", "ORDER", "ENDPOINT", "STATUS", "ATTEMPTS", "NEXT", "LAST",
];

impl fmt::Display for NotifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotifyReport::Endpoints {
                endpoints,
                configured_only,
            } => write_endpoints(f, endpoints, configured_only),
            NotifyReport::List { deliveries } if deliveries.is_empty() => {
                write!(f, "no deliveries")
            }
            NotifyReport::List { deliveries } => {
                write!(
                    f,
                    "{}",
                    table(&DELIVERY_HEADERS, &delivery_rows(deliveries))
                )
            }
            NotifyReport::Show { event, deliveries } => {
                writeln!(
                    f,
                    "{}",
                    serde_json::to_string_pretty(event).unwrap_or_default()
                )?;
                if deliveries.is_empty() {
                    return write!(f, "\nno deliveries (no endpoint takes this type)");
                }
                write!(
                    f,
                    "\n{}",
                    table(&DELIVERY_HEADERS, &delivery_rows(deliveries))
                )?;
                for d in deliveries.iter().filter(|d| d.last_answer.is_some()) {
                    write!(
                        f,
                        "\n{} answered: {}",
                        d.endpoint,
                        truncate(d.last_answer.as_deref().unwrap_or(""), 200)
                    )?;
                }
                Ok(())
            }
            NotifyReport::Replayed { replayed, disabled } => {
                write!(f, "{replayed} failed delivery(ies) due again now")?;
                for name in disabled {
                    write!(
                        f,
                        "\nleft {name}'s failed deliveries: it is disabled (run `oncehookctl notify enable {name}` first)"
                    )?;
                }
                Ok(())
            }
            NotifyReport::Enabled { enabled } => write!(
                f,
                "{enabled} enabled; its failed deliveries stay failed until `oncehookctl notify replay --endpoint {enabled}`"
            ),
        }
    }
}

impl Report for NotifyReport {}

fn write_endpoints(
    f: &mut fmt::Formatter<'_>,
    endpoints: &[EndpointState],
    configured_only: &[String],
) -> fmt::Result {
    let rows: Vec<Vec<String>> = endpoints
        .iter()
        .map(|e| {
            vec![
                e.name.clone(),
                match &e.disabled_reason {
                    Some(why) if e.disabled_at.is_some() => {
                        format!("disabled ({})", truncate(why, 40))
                    }
                    _ => "enabled".to_owned(),
                },
                e.pending.to_string(),
                e.failed.to_string(),
                e.delivered.to_string(),
                if e.pending > 0 {
                    human_duration(whole_secs(e.oldest_pending_secs).max(0) as u64)
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    write!(
        f,
        "{}",
        table(
            &[
                "ENDPOINT",
                "STATE",
                "PENDING",
                "FAILED",
                "DELIVERED",
                "OLDEST PENDING"
            ],
            &rows
        )
    )?;
    for name in configured_only {
        write!(f, "\n{name}: configured, not yet seen by a notifier")?;
    }
    Ok(())
}
