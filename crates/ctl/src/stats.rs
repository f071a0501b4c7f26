//! `oncehookctl stats`: one screen for "is the pipeline healthy?" — queue
//! depths and consumers, the dead-letter queue (depth, oldest, per gateway
//! and kind), the outbox backlog, and per gateway what the workers did over
//! a window. The broker and the database are asked independently: if one is
//! unreachable its sections say so (exit code 1) and the rest still prints.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use oncehook_common::{Settings, Topology};
use serde_json::{Value, json};
use sqlx::{Connection as _, Row};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::dlq;
use crate::output::{Output, human_duration, parse_duration, table};

/// How long the database may take to answer before its sections are reported unavailable.
const DB_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Args)]
pub struct StatsArgs {
    /// Window for the per-gateway outcomes (e.g. 30m, 2h, 7d).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub since: Duration,
}

struct QueueStat {
    name: String,
    role: &'static str,
    /// (ready messages, consumers); `None` if the queue does not exist.
    info: Option<(u32, u32)>,
}

#[derive(Default)]
struct DeadStats {
    depth: usize,
    truncated: bool,
    oldest: Option<OffsetDateTime>,
    by_gateway: BTreeMap<String, u64>,
    by_kind: BTreeMap<String, u64>,
}

struct Broker {
    queues: Vec<QueueStat>,
    /// `None` when the dead-letter queue does not exist.
    dead: Option<DeadStats>,
}

struct Outbox {
    backlog: i64,
    unpublished: i64,
    failed: i64,
    oldest_age_secs: Option<f64>,
}

#[derive(Default, Clone)]
struct GatewayRow {
    applied: i64,
    ignored: i64,
    flagged: i64,
    duplicates: i64,
}

/// Books that need a human, and events waiting for their order's link.
struct Ledger {
    oversold_orders: i64,
    needs_refund: i64,
    amount_mismatch: i64,
    parked: i64,
    oldest_parked_age_secs: Option<f64>,
}

struct Database {
    outbox: Outbox,
    ledger: Ledger,
    gateways: BTreeMap<String, GatewayRow>,
}

pub async fn run(settings: &Settings, args: StatsArgs, out: &Output) -> anyhow::Result<ExitCode> {
    let topology = Topology::new(settings.amqp_prefix.clone());
    let (broker, database) = tokio::join!(
        broker_stats(settings, &topology),
        database_stats(settings, args.since)
    );
    let now = OffsetDateTime::now_utc();
    let window = human_duration(args.since.as_secs());

    // Per gateway: outcomes from the database, dead letters from the DLQ.
    let mut gateways: BTreeMap<String, (Option<GatewayRow>, Option<u64>)> = BTreeMap::new();
    if let Ok(db) = &database {
        for (g, row) in &db.gateways {
            gateways.entry(g.clone()).or_default().0 = Some(row.clone());
        }
    }
    if let Ok(Broker {
        dead: Some(dead), ..
    }) = &broker
    {
        for (g, n) in &dead.by_gateway {
            gateways.entry(g.clone()).or_default().1 = Some(*n);
        }
    }
    let db_ok = database.is_ok();
    let broker_ok = broker.is_ok();
    let gateway_rows: Vec<(String, GatewayRow, u64)> = gateways
        .into_iter()
        .map(|(g, (row, dead))| (g, row.unwrap_or_default(), dead.unwrap_or(0)))
        .collect();

    if out.json {
        let err = |e: &anyhow::Error| Value::String(format!("{e:#}"));
        let queues = match &broker {
            Ok(b) => Value::Array(
                b.queues
                    .iter()
                    .map(|q| {
                        json!({
                            "queue": q.name,
                            "role": q.role,
                            "exists": q.info.is_some(),
                            "messages": q.info.map(|i| i.0),
                            "consumers": q.info.map(|i| i.1),
                        })
                    })
                    .collect(),
            ),
            Err(_) => Value::Null,
        };
        let dead = match &broker {
            Ok(Broker { dead: Some(d), .. }) => json!({
                "queue": topology.dead(),
                "depth": d.depth,
                "truncated": d.truncated,
                "oldest_failed_at": d.oldest.and_then(|t| t.format(&Rfc3339).ok()),
                "oldest_age_secs": d.oldest.map(|t| (now - t).whole_seconds().max(0)),
                "by_gateway": d.by_gateway,
                "by_kind": d.by_kind,
            }),
            _ => Value::Null,
        };
        let outbox = match &database {
            Ok(db) => json!({
                "backlog": db.outbox.backlog,
                "unpublished": db.outbox.unpublished,
                "failed": db.outbox.failed,
                "oldest_backlog_age_secs": db.outbox.oldest_age_secs.map(|s| s.max(0.0).round() as i64),
            }),
            Err(_) => Value::Null,
        };
        let ledger = match &database {
            Ok(db) => json!({
                "oversold_orders": db.ledger.oversold_orders,
                "payments_needing_refund": db.ledger.needs_refund,
                "payments_amount_mismatch": db.ledger.amount_mismatch,
                "parked_events": db.ledger.parked,
                "oldest_parked_age_secs": db.ledger.oldest_parked_age_secs.map(|s| s.max(0.0).round() as i64),
            }),
            Err(_) => Value::Null,
        };
        let gateways_json: Vec<Value> = gateway_rows
            .iter()
            .map(|(g, r, dead)| {
                json!({
                    "gateway": g,
                    "applied": db_ok.then_some(r.applied),
                    "ignored": db_ok.then_some(r.ignored),
                    "flagged": db_ok.then_some(r.flagged),
                    "duplicates": db_ok.then_some(r.duplicates),
                    "dead": broker_ok.then_some(*dead),
                })
            })
            .collect();
        out.done(
            "",
            json!({
                "prefix": topology.prefix(),
                "since": window,
                "window_secs": args.since.as_secs(),
                "broker": {
                    "available": broker_ok,
                    "error": broker.as_ref().err().map(err),
                },
                "database": {
                    "available": db_ok,
                    "error": database.as_ref().err().map(err),
                },
                "queues": queues,
                "dead_letters": dead,
                "outbox": outbox,
                "ledger": ledger,
                "gateways": gateways_json,
            }),
        );
    } else {
        let mut text = String::new();
        match &broker {
            Ok(b) => {
                let rows: Vec<Vec<String>> = b
                    .queues
                    .iter()
                    .map(|q| match q.info {
                        Some((messages, consumers)) => {
                            vec![q.name.clone(), messages.to_string(), consumers.to_string()]
                        }
                        None => vec![q.name.clone(), "missing".into(), "missing".into()],
                    })
                    .collect();
                text.push_str(&table(&["QUEUE", "MESSAGES", "CONSUMERS"], &rows));
                text.push_str("\n\n");
                match &b.dead {
                    Some(d) => {
                        text.push_str(&format!(
                            "Dead letters: {}{}",
                            if d.truncated { "at least " } else { "" },
                            d.depth
                        ));
                        if let Some(oldest) = d.oldest {
                            text.push_str(&format!(
                                ", oldest failed {} ago",
                                human_duration((now - oldest).whole_seconds().max(0) as u64)
                            ));
                        }
                        if !d.by_kind.is_empty() {
                            let kinds: Vec<String> =
                                d.by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
                            text.push_str(&format!(" ({})", kinds.join(", ")));
                        }
                        text.push('\n');
                    }
                    None => text.push_str(&format!(
                        "Dead letters: queue {} is missing\n",
                        topology.dead()
                    )),
                }
            }
            Err(e) => text.push_str(&format!("Queues and dead letters: unavailable ({e:#})\n")),
        }
        text.push('\n');
        match &database {
            Ok(db) => {
                let o = &db.outbox;
                text.push_str(&format!(
                    "Outbox: backlog {} (unpublished {}), failed {}, oldest backlog {}\n",
                    o.backlog,
                    o.unpublished,
                    o.failed,
                    o.oldest_age_secs
                        .map(|s| format!("{} old", human_duration(s.max(0.0) as u64)))
                        .unwrap_or_else(|| "-".to_owned()),
                ));
                let l = &db.ledger;
                text.push_str(&format!(
                    "Ledger: oversold orders {}, payments needing refund {}, amount mismatches {}, parked events {}{}\n",
                    l.oversold_orders,
                    l.needs_refund,
                    l.amount_mismatch,
                    l.parked,
                    l.oldest_parked_age_secs
                        .map(|s| format!(" (oldest {} old)", human_duration(s.max(0.0) as u64)))
                        .unwrap_or_default(),
                ));
            }
            Err(e) => text.push_str(&format!("Outbox: unavailable ({e:#})\n")),
        }
        text.push('\n');
        text.push_str(&format!(
            "Events per gateway, last {window} (DEAD: now in the dead-letter queue)\n"
        ));
        if !db_ok {
            text.push_str("(outcomes unavailable: the database did not answer)\n");
        }
        if gateway_rows.is_empty() {
            text.push_str("(none)");
        } else {
            let cell = |ok: bool, n: i64| if ok { n.to_string() } else { "?".to_owned() };
            let rows: Vec<Vec<String>> = gateway_rows
                .iter()
                .map(|(g, r, dead)| {
                    vec![
                        g.clone(),
                        cell(db_ok, r.applied),
                        cell(db_ok, r.ignored),
                        cell(db_ok, r.flagged),
                        cell(db_ok, r.duplicates),
                        if broker_ok {
                            dead.to_string()
                        } else {
                            "?".to_owned()
                        },
                    ]
                })
                .collect();
            text.push_str(&table(
                &[
                    "GATEWAY",
                    "APPLIED",
                    "IGNORED",
                    "FLAGGED",
                    "DUPLICATES",
                    "DEAD",
                ],
                &rows,
            ));
        }
        out.done(text.trim_end(), Value::Null);
    }
    if let Err(e) = &broker {
        eprintln!("error: broker unavailable: {e:#}");
    }
    if let Err(e) = &database {
        eprintln!("error: database unavailable: {e:#}");
    }
    Ok(if broker_ok && db_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn broker_stats(settings: &Settings, topology: &Topology) -> anyhow::Result<Broker> {
    let conn = dlq::connect(settings).await?;
    let result = async {
        let mut queues = Vec::new();
        for (name, role) in [
            (topology.events(), "events"),
            (topology.emails(), "emails"),
            (topology.dead(), "dead"),
        ] {
            let info = dlq::queue_info(&conn, &name).await?;
            queues.push(QueueStat { name, role, info });
        }
        let dead = if queues.last().is_some_and(|q| q.info.is_some()) {
            let (ch, letters, truncated) = dlq::peek(&conn, topology, |_| false).await?;
            dlq::release(ch).await;
            let mut d = DeadStats {
                depth: letters.len(),
                truncated,
                ..DeadStats::default()
            };
            for l in &letters {
                *d.by_gateway.entry(l.gateway.clone()).or_default() += 1;
                *d.by_kind.entry(l.kind.clone()).or_default() += 1;
                if let Some(at) = l.failed_at {
                    d.oldest = Some(d.oldest.map_or(at, |o| o.min(at)));
                }
            }
            Some(d)
        } else {
            None
        };
        Ok(Broker { queues, dead })
    }
    .await;
    let _ = conn.close(200, "oncehookctl stats done".into()).await;
    result
}

async fn database_stats(settings: &Settings, window: Duration) -> anyhow::Result<Database> {
    let work = async {
        // One plain connection: its error says why (a pool would only say "timed out").
        let mut conn = sqlx::PgConnection::connect(&settings.database_url)
            .await
            .with_context(|| {
                format!(
                    "connecting to the database at {}",
                    crate::redact(&settings.database_url)
                )
            })?;
        let result = database_queries(&mut conn, window).await;
        let _ = conn.close().await;
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
) -> anyhow::Result<Database> {
    let row = sqlx::query(
        "SELECT count(*) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL) AS backlog,
                count(*) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL AND published_at IS NULL) AS unpublished,
                count(*) FILTER (WHERE failed_at IS NOT NULL) AS failed,
                EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL))::float8 AS oldest_age
         FROM email_outbox",
    )
    .fetch_one(&mut *conn)
    .await
    .context("reading email_outbox")?;
    let outbox = Outbox {
        backlog: row.try_get("backlog")?,
        unpublished: row.try_get("unpublished")?,
        failed: row.try_get("failed")?,
        oldest_age_secs: row.try_get("oldest_age")?,
    };
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM orders WHERE oversold) AS oversold,
                (SELECT count(*) FROM payments WHERE flag = 'needs_refund') AS needs_refund,
                (SELECT count(*) FROM payments WHERE flag = 'amount_mismatch') AS amount_mismatch,
                (SELECT count(*) FROM parked_events) AS parked,
                (SELECT EXTRACT(EPOCH FROM now() - min(parked_at))::float8 FROM parked_events) AS oldest_parked",
    )
    .fetch_one(&mut *conn)
    .await
    .context("reading the ledger (orders, payments, parked_events)")?;
    let ledger = Ledger {
        oversold_orders: row.try_get("oversold")?,
        needs_refund: row.try_get("needs_refund")?,
        amount_mismatch: row.try_get("amount_mismatch")?,
        parked: row.try_get("parked")?,
        oldest_parked_age_secs: row.try_get("oldest_parked")?,
    };
    let rows = sqlx::query(
        "SELECT provider,
                count(*) FILTER (WHERE outcome = 'applied') AS applied,
                count(*) FILTER (WHERE outcome = 'ignored') AS ignored,
                count(*) FILTER (WHERE outcome = 'flagged') AS flagged,
                COALESCE(sum(deliveries - 1), 0)::bigint AS duplicates
         FROM processed_webhooks
         WHERE processed_at > now() - make_interval(secs => $1)
         GROUP BY provider ORDER BY provider",
    )
    .bind(window.as_secs_f64())
    .fetch_all(&mut *conn)
    .await
    .context("reading processed_webhooks")?;
    let mut gateways = BTreeMap::new();
    for r in rows {
        gateways.insert(
            r.try_get::<String, _>("provider")?,
            GatewayRow {
                applied: r.try_get("applied")?,
                ignored: r.try_get("ignored")?,
                flagged: r.try_get("flagged")?,
                duplicates: r.try_get("duplicates")?,
            },
        );
    }
    Ok(Database {
        outbox,
        ledger,
        gateways,
    })
}
