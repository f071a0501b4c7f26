//! What `stats` asks the broker and the database, each on its own so that
//! one being down does not hide the other.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use oncehook_common::redact::redact;
use oncehook_common::store::{Pooled, dedup, outbox};
use oncehook_common::{Config, Topology};
use oncehook_ledger::store::{self as ledger, parking};
use oncehook_reconcile::store as reconcile;
use serde::Serialize;
use time::OffsetDateTime;

use crate::broker;
use crate::dlq::letter::Letter;
use crate::timefmt::whole_secs;
use oncehook_common::store::scope::Scope;

/// How long the database may take to answer before its sections are reported unavailable.
const DB_TIMEOUT: Duration = Duration::from_secs(15);

pub struct QueueStat {
    pub name: String,
    pub role: &'static str,
    /// (ready messages, consumers); `None` if the queue does not exist.
    pub info: Option<(u32, u32)>,
}

#[derive(Default)]
pub struct DeadStats {
    pub depth: usize,
    pub truncated: bool,
    pub oldest: Option<OffsetDateTime>,
    pub by_gateway: BTreeMap<String, u64>,
    pub by_kind: BTreeMap<String, u64>,
}

pub struct BrokerStats {
    pub queues: Vec<QueueStat>,
    /// `None` when the dead-letter queue does not exist.
    pub dead: Option<DeadStats>,
}

/// The email outbox, as the report says it (ages in whole seconds).
#[derive(Serialize, Clone)]
pub struct Outbox {
    pub backlog: i64,
    pub unpublished: i64,
    pub failed: i64,
    pub oldest_backlog_age_secs: Option<i64>,
}

#[derive(Default, Clone)]
pub struct GatewayRow {
    pub applied: i64,
    pub ignored: i64,
    pub flagged: i64,
    pub duplicates: i64,
}

/// Books that need a human, and events waiting for their order's link, as
/// the report says them (ages in whole seconds).
#[derive(Serialize, Clone)]
pub struct Ledger {
    pub oversold_orders: i64,
    pub payments_needing_refund: i64,
    pub payments_amount_mismatch: i64,
    pub parked_events: i64,
    pub oldest_parked_age_secs: Option<i64>,
}

pub struct DatabaseStats {
    pub outbox: Outbox,
    pub ledger: Ledger,
    pub reconciliation: reconcile::Summary,
    pub gateways: BTreeMap<String, GatewayRow>,
}

/// Dead letters someone already read (the console's snapshot), so that
/// `stats` need not peek the queue again.
pub struct Looked<'a> {
    pub letters: &'a [Letter],
    pub truncated: bool,
}

impl DeadStats {
    /// Depth, oldest failure and counts by gateway and kind of `letters`.
    pub fn of(letters: &[Letter], truncated: bool) -> DeadStats {
        let mut d = DeadStats {
            depth: letters.len(),
            truncated,
            ..DeadStats::default()
        };
        for l in letters {
            *d.by_gateway.entry(l.facts.gateway.clone()).or_default() += 1;
            *d.by_kind.entry(l.facts.kind.to_string()).or_default() += 1;
            if let Some(at) = l.failed_at {
                d.oldest = Some(d.oldest.map_or(at, |o| o.min(at)));
            }
        }
        d
    }
}

/// Queue depths and consumers, and the dead letters: `looked` when given,
/// else peeked now.
pub async fn broker_stats(
    settings: &Config,
    topology: &Topology,
    looked: Option<Looked<'_>>,
) -> anyhow::Result<BrokerStats> {
    let conn = broker::connect(settings).await?;
    let result = async {
        let mut queues = Vec::new();
        let lanes = topology.bulk_lanes().map(|lane| (lane, "bulk"));
        let named = std::iter::once((topology.events(), "events"))
            .chain(lanes)
            .chain([(topology.emails(), "emails"), (topology.dead(), "dead")]);
        for (name, role) in named {
            let info = broker::queue_info(&conn, &name).await?;
            queues.push(QueueStat { name, role, info });
        }
        let dead = if queues.last().is_some_and(|q| q.info.is_some()) {
            let dead = match &looked {
                Some(given) => DeadStats::of(given.letters, given.truncated),
                None => {
                    let (letters, truncated) = broker::look(&conn, topology).await?;
                    DeadStats::of(&letters, truncated)
                }
            };
            // The depth read before the look misses letters another peek
            // held then; the look waited for them.
            if let Some((ready, _)) = queues.last_mut().and_then(|q| q.info.as_mut()) {
                *ready = (*ready).max(u32::try_from(dead.depth).unwrap_or(u32::MAX));
            }
            Some(dead)
        } else {
            None
        };
        Ok(BrokerStats { queues, dead })
    }
    .await;
    broker::close(conn).await;
    result
}

/// The database's figures in `scope` (every tenant's, or one tenant's).
pub async fn database_stats(
    settings: &Config,
    window: Duration,
    scope: &Scope,
) -> anyhow::Result<DatabaseStats> {
    let work = async {
        // One connection, tried once: its error says why.
        let pool = Pooled::connect(&settings.database, 1, 0)
            .await
            .with_context(|| {
                format!(
                    "connecting to the database at {}",
                    redact(settings.database.url.expose())
                )
            })?;
        let reconcile_window = (settings.reconcile.after, settings.reconcile.horizon);
        let result = async {
            let mut conn = pool.single_in(scope).await?;
            let stats = database_queries(&mut conn, window, reconcile_window).await?;
            conn.finish().await?;
            anyhow::Ok(stats)
        }
        .await;
        pool.close().await;
        result
    };
    match tokio::time::timeout(DB_TIMEOUT, work).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!("the database did not answer within {DB_TIMEOUT:?}"),
    }
}

async fn database_queries(
    conn: &mut sqlx::PgConnection,
    window: Duration,
    reconcile_window: (Duration, Duration),
) -> anyhow::Result<DatabaseStats> {
    let counts = outbox::counts(conn).await.context("reading email_outbox")?;
    let outbox = Outbox {
        backlog: counts.backlog,
        unpublished: counts.unpublished,
        failed: counts.failed,
        oldest_backlog_age_secs: counts.oldest_age_secs.map(whole_secs),
    };
    let ledger = ledger(conn).await?;
    let reconciliation = reconcile::summary(conn, window, reconcile_window.0, reconcile_window.1)
        .await
        .context("reading the reconciliation records")?;
    let gateways = gateways(conn, window).await?;
    Ok(DatabaseStats {
        outbox,
        ledger,
        reconciliation,
        gateways,
    })
}

async fn ledger(conn: &mut sqlx::PgConnection) -> anyhow::Result<Ledger> {
    let attention = ledger::attention(conn)
        .await
        .context("reading the ledger (orders, payments)")?;
    let parked = parking::backlog(conn)
        .await
        .context("reading parked_events")?;
    Ok(Ledger {
        oversold_orders: attention.oversold_orders,
        payments_needing_refund: attention.needs_refund,
        payments_amount_mismatch: attention.amount_mismatch,
        parked_events: parked.parked,
        oldest_parked_age_secs: parked.oldest_age_secs.map(whole_secs),
    })
}

async fn gateways(
    conn: &mut sqlx::PgConnection,
    window: Duration,
) -> anyhow::Result<BTreeMap<String, GatewayRow>> {
    let rows = dedup::outcomes_within(conn, window)
        .await
        .context("reading processed_webhooks")?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let row = GatewayRow {
                applied: r.applied,
                ignored: r.ignored,
                flagged: r.flagged,
                duplicates: r.duplicates,
            };
            (r.provider, row)
        })
        .collect())
}
