//! The worker's inside: how many statements it sends Postgres per event and
//! per transaction (the worker binary behind a counting proxy,
//! `support/statements.rs`, draining a preloaded queue at batch 1 and at
//! the bench's batch), and a lone event's latency from the post to its
//! commit with an idle worker — for the binaries under test and, when
//! `ONCEHOOK_BENCH_BASELINE_BIN_DIR` names another build's binaries, for
//! that build's worker in the same run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oncehook_e2e::statements::StatementCounter;
use oncehook_e2e::{TestEnv, broker, process};

use crate::{Knobs, Row, Stats};

/// Lone events timed per run; each waits at most [`LONE_TIMEOUT`].
const LONE_EVENTS: usize = 40;
const LONE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether only this phase should run (`ONCEHOOK_BENCH_ONLY=inside`).
pub fn only() -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "inside")
}

pub async fn phase(knobs: &Knobs) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut batches = vec![1, knobs.batch];
    batches.dedup();
    for batch in batches {
        let s = statements(knobs, batch).await;
        if s.events > 0 {
            crate::routes::proxy_count(batch, s.statements as f64 / s.events as f64);
        }
        let per = |n: u64, d: u64| {
            if d == 0 {
                "–".to_owned()
            } else {
                format!("{:.1}", n as f64 / d as f64)
            }
        };
        rows.push(Row {
            measurement: format!("worker statements, batch {batch}, {} events", s.events),
            throughput: format!("{} per event", per(s.statements, s.events)),
            p50: "–".to_owned(),
            p90: "–".to_owned(),
            p99: "–".to_owned(),
            vs: format!(
                "{} per commit; {} commits, {} groups of {} deliveries on average; drained in {:.2} s through the proxy",
                per(s.statements, s.commits),
                s.commits,
                s.groups,
                per(s.events, s.groups),
                s.drained.as_secs_f64()
            ),
        });
    }
    notes.push(
        "worker statements: every statement the worker sent Postgres while draining (its \
         transactions, the outbox relay, the sweeper, the gauges), counted by a proxy that reads \
         the wire protocol; groups and their sizes from oncehook_worker_batch_size"
            .to_owned(),
    );
    let current = lone_latency(&process::bin_dir(), knobs).await;
    let baseline = std::env::var("ONCEHOOK_BENCH_BASELINE_BIN_DIR")
        .ok()
        .map(PathBuf::from);
    let vs = match &baseline {
        Some(dir) => {
            let before = lone_latency(dir, knobs).await;
            let row = Row::new(
                format!(
                    "worker, a lone event post → committed, baseline ({})",
                    dir.display()
                ),
                "events/s",
                &before,
                "(baseline)".to_owned(),
            );
            let vs = crate::versus("baseline", &current, &before);
            rows.push(row);
            vs
        }
        None => "set ONCEHOOK_BENCH_BASELINE_BIN_DIR to compare with another build".to_owned(),
    };
    rows.push(Row::new(
        format!(
            "worker, a lone event post → committed, batch {}",
            knobs.batch
        ),
        "events/s",
        &current,
        vs,
    ));
    notes.push(format!(
        "lone events: {LONE_EVENTS} captured events posted one at a time to an idle pipeline, each \
         timed from the post until its processed_webhooks row is visible (polled every millisecond)"
    ));
    (rows, notes)
}

struct Counted {
    events: u64,
    statements: u64,
    commits: u64,
    groups: u64,
    /// From the worker's start until every event was processed.
    drained: Duration,
}

async fn statements(knobs: &Knobs, batch: usize) -> Counted {
    let mut env = TestEnv::new().await;
    let k = knobs.events.min(2000);
    crate::seed_shop(&env, true, 1, k as i64).await;
    let (mut ingest, base) = env.start_ingest().await;
    let tag = format!("s{batch}");
    crate::preload(&env, &base, 1, k, knobs.concurrency, &tag).await;
    crate::wait_for(Duration::from_secs(20), || async {
        broker::events_depth(&env.prefix)
            .await
            .filter(|d| *d as usize >= k)
    })
    .await;
    let counter = StatementCounter::start(&env.database_url).await;
    let batch_size = batch.to_string();
    let prefetch = knobs.prefetch.to_string();
    let worker = env.spawn(
        "oncehook-worker",
        &[
            ("ONCEHOOK_DATABASE_URL", counter.url()),
            ("ONCEHOOK_WORKER_BATCH_SIZE", batch_size.as_str()),
            ("ONCEHOOK_PREFETCH", prefetch.as_str()),
        ],
        &[],
    );
    let before = counter.counted();
    let started = Instant::now();
    let drained = crate::wait_for(crate::PHASE_TIMEOUT, || async {
        (crate::count_processed(&env).await >= k as i64).then_some(())
    })
    .await;
    if drained.is_none() {
        eprintln!("bench: warning: the worker did not drain {k} events in time");
    }
    let drain_time = started.elapsed();
    let after = counter.counted();
    let metrics = match &worker.metrics {
        Some(base) => match env.http.get(format!("{base}/metrics")).send().await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        },
        None => String::new(),
    };
    let groups = metric(&metrics, "oncehook_worker_batch_size_count") as u64;
    crate::stop_all(vec![worker]);
    ingest.signal("TERM");
    ingest.wait_exit(Duration::from_secs(15));
    Counted {
        events: k as u64,
        statements: after.statements - before.statements,
        commits: after.commits - before.commits,
        groups,
        drained: drain_time,
    }
}

pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Posts lone events to an idle pipeline running the worker from `dir`.
async fn lone_latency(dir: &Path, knobs: &Knobs) -> Stats {
    let mut env = TestEnv::new().await;
    crate::seed_shop(&env, true, 1, LONE_EVENTS as i64).await;
    let (mut ingest, base) = env.start_ingest().await;
    let batch_size = knobs.batch.to_string();
    let worker = env.spawn_from(
        dir,
        "oncehook-worker",
        &[("ONCEHOOK_WORKER_BATCH_SIZE", batch_size.as_str())],
        &[],
    );
    let url = format!("{base}/webhooks/razorpay");
    // The worker is up once a first event went through.
    let warm = crate::captured(&env, LONE_EVENTS, "lonewarm");
    crate::post(&env.http, &url, &warm).await;
    crate::wait_for(Duration::from_secs(30), || async {
        (crate::count_processed(&env).await >= 1).then_some(())
    })
    .await;
    let mut latencies_us = Vec::new();
    let started = Instant::now();
    for n in 1..LONE_EVENTS {
        let delivery = crate::captured(&env, n, "lone");
        let event_id = format!("evt_lone_{n}");
        let posted = Instant::now();
        if !crate::post(&env.http, &url, &delivery).await {
            continue;
        }
        loop {
            let seen: Option<i32> =
                sqlx::query_scalar("SELECT 1 FROM processed_webhooks WHERE event_id = $1")
                    .bind(&event_id)
                    .fetch_optional(&env.pool)
                    .await
                    .ok()
                    .flatten();
            if seen.is_some() {
                latencies_us.push(posted.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                break;
            }
            if posted.elapsed() > LONE_TIMEOUT {
                eprintln!("bench: warning: lone event {event_id} not committed in time");
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let window = started.elapsed();
    crate::stop_all(vec![worker]);
    ingest.signal("TERM");
    ingest.wait_exit(Duration::from_secs(15));
    latencies_us.sort_unstable();
    Stats {
        ok: latencies_us.len() as u64,
        errors: (LONE_EVENTS - 1 - latencies_us.len()) as u64,
        window,
        latencies_us,
        fixed: None,
    }
}
