//! `oncehookctl stats`: one screen for "is the pipeline healthy?" — queue
//! depths and consumers, the dead-letter queue (depth, oldest, per gateway
//! and kind), the outbox backlog, and per gateway what the workers did over
//! a window. The broker and the database are asked independently: if one is
//! unreachable its sections say so (exit code 1) and the rest still prints.

mod gather;
mod received;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use clap::Args;
use oncehook_common::{Config, Topology};
use serde::Serialize;
use time::OffsetDateTime;

use crate::output::{Report, table};
use crate::timefmt::{age_secs, human_duration, parse_duration, rfc3339};
pub use gather::Looked;
use gather::{BrokerStats, DatabaseStats, Ledger, Outbox};
use oncehook_common::store::scope::Scope;
use oncehook_common::tenant::TenantId;
use received::ReceivedView;

#[derive(Args)]
pub struct StatsArgs {
    /// Window for the per-gateway outcomes (e.g. 30m, 2h, 7d).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub since: Duration,
    /// One tenant's figures from the database (docs/tenants.md); the
    /// queues are every tenant's.
    #[arg(long, value_parser = parse_tenant)]
    pub tenant: Option<TenantId>,
}

fn parse_tenant(s: &str) -> Result<TenantId, String> {
    TenantId::parse(s).map_err(|e| e.to_string())
}

/// The on-call view (`stats --json`); a section is `null` when the broker
/// or the database behind it did not answer.
#[derive(Serialize)]
pub struct StatsReport {
    prefix: String,
    /// The tenant the database's figures are kept to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    since: String,
    window_secs: u64,
    broker: Availability,
    database: Availability,
    queues: Option<Vec<QueueView>>,
    dead_letters: Option<DeadView>,
    outbox: Option<Outbox>,
    ledger: Option<Ledger>,
    /// The reconciler's last run, the pending orders it asks about, and
    /// what it found per source within the window.
    reconciliation: Option<ReconcileView>,
    gateways: Vec<GatewayView>,
    /// Accepted and refused webhooks per source, from ingest's counters in
    /// Prometheus; `null` when no `ONCEHOOK_PROMETHEUS_URL` is set.
    received: Option<ReceivedView>,
    /// The dead-letter queue's name, when it is missing (text only).
    #[serde(skip)]
    missing_dead_queue: Option<String>,
}

/// The reconciliation section (`reconciliation`), ages in whole seconds.
#[derive(Serialize)]
struct ReconcileView {
    /// Sources with a `[source.api]`: the ones the reconciler asks.
    sources: Vec<String>,
    last_run_at: Option<String>,
    last_run_age_secs: Option<i64>,
    pending_in_window: i64,
    never_asked: i64,
    /// Per source, deliveries that came from reconciliation within the window.
    from_reconciliation: BTreeMap<String, i64>,
}

#[derive(Serialize)]
struct Availability {
    available: bool,
    error: Option<String>,
}

#[derive(Serialize)]
struct QueueView {
    queue: String,
    role: &'static str,
    exists: bool,
    messages: Option<u32>,
    consumers: Option<u32>,
}

#[derive(Serialize)]
struct DeadView {
    queue: String,
    depth: usize,
    truncated: bool,
    oldest_failed_at: Option<String>,
    oldest_age_secs: Option<i64>,
    by_gateway: BTreeMap<String, u64>,
    by_kind: BTreeMap<String, u64>,
}

/// One gateway's outcomes (`null` without the database) and dead letters
/// (`null` without the broker).
#[derive(Serialize)]
struct GatewayView {
    gateway: String,
    applied: Option<i64>,
    ignored: Option<i64>,
    flagged: Option<i64>,
    duplicates: Option<i64>,
    dead: Option<u64>,
}

pub async fn run(settings: &Config, args: StatsArgs) -> anyhow::Result<StatsReport> {
    run_with(settings, args, None).await
}

/// [`run`], with the dead letters already read (`looked`) instead of
/// peeking the queue again.
pub async fn run_with(
    settings: &Config,
    args: StatsArgs,
    looked: Option<Looked<'_>>,
) -> anyhow::Result<StatsReport> {
    let topology = Topology::new(settings.broker.prefix.clone());
    let scope = match &args.tenant {
        Some(t) => Scope::tenant(t.clone()),
        None => Scope::Platform,
    };
    let received = async {
        match &settings.telemetry.prometheus_url {
            Some(url) => Some(received::gather(url).await),
            None => None,
        }
    };
    let (broker, database, received) = tokio::join!(
        gather::broker_stats(settings, &topology, looked),
        gather::database_stats(settings, args.since, &scope),
        received
    );
    let now = OffsetDateTime::now_utc();
    let dead_queue = topology.dead();
    Ok(StatsReport {
        prefix: topology.prefix().to_owned(),
        tenant: args.tenant.as_ref().map(|t| t.to_string()),
        since: human_duration(args.since.as_secs()),
        window_secs: args.since.as_secs(),
        broker: Availability::of(&broker),
        database: Availability::of(&database),
        gateways: gateway_views(broker.as_ref().ok(), database.as_ref().ok()),
        queues: broker.as_ref().ok().map(queue_views),
        dead_letters: broker
            .as_ref()
            .ok()
            .and_then(|b| dead_view(b, &dead_queue, now)),
        missing_dead_queue: broker
            .as_ref()
            .is_ok_and(|b| b.dead.is_none())
            .then_some(dead_queue),
        outbox: database.as_ref().ok().map(|db| db.outbox.clone()),
        ledger: database.as_ref().ok().map(|db| db.ledger.clone()),
        reconciliation: database.as_ref().ok().map(|db| ReconcileView {
            sources: settings
                .ingest
                .sources
                .iter()
                .filter(|s| s.api.is_some())
                .map(|s| s.name.clone())
                .collect(),
            last_run_at: db.reconciliation.last_run_at.and_then(rfc3339),
            last_run_age_secs: db.reconciliation.last_run_at.map(|t| age_secs(t, now)),
            pending_in_window: db.reconciliation.pending_in_window,
            never_asked: db.reconciliation.never_asked,
            from_reconciliation: db
                .reconciliation
                .from_reconciliation
                .iter()
                .map(|c| (c.source.clone(), c.deliveries))
                .collect(),
        }),
        received,
    })
}

impl Availability {
    fn of<T>(result: &anyhow::Result<T>) -> Availability {
        Availability {
            available: result.is_ok(),
            error: result.as_ref().err().map(|e| format!("{e:#}")),
        }
    }
}

fn queue_views(b: &BrokerStats) -> Vec<QueueView> {
    b.queues
        .iter()
        .map(|q| QueueView {
            queue: q.name.clone(),
            role: q.role,
            exists: q.info.is_some(),
            messages: q.info.map(|i| i.0),
            consumers: q.info.map(|i| i.1),
        })
        .collect()
}

fn dead_view(b: &BrokerStats, queue: &str, now: OffsetDateTime) -> Option<DeadView> {
    let d = b.dead.as_ref()?;
    Some(DeadView {
        queue: queue.to_owned(),
        depth: d.depth,
        truncated: d.truncated,
        oldest_failed_at: d.oldest.and_then(rfc3339),
        oldest_age_secs: d.oldest.map(|t| age_secs(t, now)),
        by_gateway: d.by_gateway.clone(),
        by_kind: d.by_kind.clone(),
    })
}

/// Per gateway: outcomes from the database, dead letters from the DLQ.
fn gateway_views(broker: Option<&BrokerStats>, db: Option<&DatabaseStats>) -> Vec<GatewayView> {
    let mut names: BTreeMap<&str, ()> = BTreeMap::new();
    names.extend(
        db.iter()
            .flat_map(|d| d.gateways.keys().map(|g| (g.as_str(), ()))),
    );
    let dead = broker.and_then(|b| b.dead.as_ref());
    names.extend(
        dead.iter()
            .flat_map(|d| d.by_gateway.keys().map(|g| (g.as_str(), ()))),
    );
    names
        .into_keys()
        .map(|g| {
            let row = db.map(|d| d.gateways.get(g).cloned().unwrap_or_default());
            GatewayView {
                gateway: g.to_owned(),
                applied: row.as_ref().map(|r| r.applied),
                ignored: row.as_ref().map(|r| r.ignored),
                flagged: row.as_ref().map(|r| r.flagged),
                duplicates: row.as_ref().map(|r| r.duplicates),
                dead: broker.map(|_| dead.and_then(|d| d.by_gateway.get(g).copied()).unwrap_or(0)),
            }
        })
        .collect()
}

impl fmt::Display for StatsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = &self.tenant {
            writeln!(
                f,
                "tenant {t}: the database's figures are its own; the queues are every tenant's\n"
            )?;
        }
        self.fmt_broker(f)?;
        writeln!(f)?;
        self.fmt_database(f)?;
        self.fmt_reconciliation(f)?;
        writeln!(f)?;
        self.fmt_gateways(f)?;
        writeln!(f, "\n")?;
        match &self.received {
            Some(r) => write!(f, "{r}"),
            None => write!(
                f,
                "Webhooks received per source: set ONCEHOOK_PROMETHEUS_URL to read ingest's accepted and refused counts"
            ),
        }
    }
}

impl StatsReport {
    fn fmt_broker(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(queues) = &self.queues else {
            let error = self.broker.error.as_deref().unwrap_or_default();
            return writeln!(f, "Queues and dead letters: unavailable ({error})");
        };
        let rows: Vec<Vec<String>> = queues
            .iter()
            .map(|q| match (q.messages, q.consumers) {
                (Some(m), Some(c)) => vec![q.queue.clone(), m.to_string(), c.to_string()],
                _ => vec![q.queue.clone(), "missing".into(), "missing".into()],
            })
            .collect();
        writeln!(f, "{}\n", table(&["QUEUE", "MESSAGES", "CONSUMERS"], &rows))?;
        let Some(d) = &self.dead_letters else {
            let queue = self.missing_dead_queue.as_deref().unwrap_or_default();
            return writeln!(f, "Dead letters: queue {queue} is missing");
        };
        let at_least = if d.truncated { "at least " } else { "" };
        write!(f, "Dead letters: {at_least}{}", d.depth)?;
        if let Some(age) = d.oldest_age_secs {
            write!(f, ", oldest failed {} ago", human_duration(age as u64))?;
        }
        if !d.by_kind.is_empty() {
            let kinds: Vec<String> = d.by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
            write!(f, " ({})", kinds.join(", "))?;
        }
        writeln!(f)
    }

    fn fmt_database(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (Some(o), Some(l)) = (&self.outbox, &self.ledger) else {
            let error = self.database.error.as_deref().unwrap_or_default();
            return writeln!(f, "Outbox: unavailable ({error})");
        };
        let age = |secs: i64| human_duration(secs as u64);
        writeln!(
            f,
            "Outbox: backlog {} (unpublished {}), failed {}, oldest backlog {}",
            o.backlog,
            o.unpublished,
            o.failed,
            o.oldest_backlog_age_secs
                .map_or_else(|| "-".to_owned(), |s| format!("{} old", age(s))),
        )?;
        writeln!(
            f,
            "Ledger: oversold orders {}, payments needing refund {}, amount mismatches {}, parked events {}{}",
            l.oversold_orders,
            l.payments_needing_refund,
            l.payments_amount_mismatch,
            l.parked_events,
            l.oldest_parked_age_secs
                .map(|s| format!(" (oldest {} old)", age(s)))
                .unwrap_or_default(),
        )
    }

    /// One line, and one per source that reconciliation found payments for.
    fn fmt_reconciliation(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(r) = &self.reconciliation else {
            return Ok(());
        };
        if r.sources.is_empty() {
            return writeln!(
                f,
                "Reconciliation: off (no source has a [source.api]; docs/reconciliation.md)"
            );
        }
        let last = r.last_run_age_secs.map_or_else(
            || "never ran".to_owned(),
            |s| format!("last run {} ago", human_duration(s.max(0) as u64)),
        );
        writeln!(
            f,
            "Reconciliation of {}: {last}; {} pending order(s) to ask about, {} never asked",
            r.sources.join(", "),
            r.pending_in_window,
            r.never_asked
        )?;
        for (source, n) in &r.from_reconciliation {
            writeln!(
                f,
                "  {source}: {n} payment state(s) found only by reconciliation in the last {} (are its webhooks arriving?)",
                self.since
            )?;
        }
        Ok(())
    }

    fn fmt_gateways(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Events per gateway, last {} (DEAD: now in the dead-letter queue)",
            self.since
        )?;
        if !self.database.available {
            writeln!(f, "(outcomes unavailable: the database did not answer)")?;
        }
        if self.gateways.is_empty() {
            return write!(f, "(none)");
        }
        let cell = |n: Option<i64>| n.map_or_else(|| "?".to_owned(), |n| n.to_string());
        let rows: Vec<Vec<String>> = self
            .gateways
            .iter()
            .map(|g| {
                vec![
                    g.gateway.clone(),
                    cell(g.applied),
                    cell(g.ignored),
                    cell(g.flagged),
                    cell(g.duplicates),
                    g.dead.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                ]
            })
            .collect();
        let headers = [
            "GATEWAY",
            "APPLIED",
            "IGNORED",
            "FLAGGED",
            "DUPLICATES",
            "DEAD",
        ];
        write!(f, "{}", table(&headers, &rows))
    }
}

impl Report for StatsReport {
    fn ok(&self) -> bool {
        self.broker.available && self.database.available
    }

    fn diagnostics(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(e) = &self.broker.error {
            lines.push(format!("error: broker unavailable: {e}"));
        }
        if let Some(e) = &self.database.error {
            lines.push(format!("error: database unavailable: {e}"));
        }
        lines
    }
}
