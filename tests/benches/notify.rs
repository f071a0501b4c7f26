//! The notifier (`oncehook-notifier`): order events delivered per second to
//! the shop's endpoint, next to the worker's rate in the same run.
//!
//! * Measured: a backlog of order events written as the ledger writes them
//!   (one `order.paid` per order, `ONCEHOOK_BENCH_EVENTS` of them, at most
//!   20,000), then the real notifier started against a local receiver
//!   (`support::receiver`, which verifies every Standard Webhooks signature
//!   with the `standardwebhooks` crate, as a shop would). The rate is the
//!   delivered rows counted over the time from the first delivery to the
//!   last; the latencies are the notifier's per-attempt histogram
//!   (`oncehook_notify_delivery_duration_seconds`).
//! * Rounds: a receiver that answers at once, and one that answers in
//!   200 ms — with the default concurrency per endpoint (4), and with 32.
//!   A slow endpoint is bounded by concurrency ÷ answer time (20/s at 4).
//!   The endpoint that answers at once straight to PostgreSQL and through
//!   PgBouncer in transaction mode ([`crate::routes`]), in alternating
//!   order, in `ONCEHOOK_BENCH_ROUNDS` rounds (the report's "notifier"
//!   row: PostgreSQL's CPU, from the notifier's start to the last
//!   delivery, the bench's polling left out, and the statements per
//!   event); the slow ones, whose rate is the endpoint's, once, by the
//!   route the deploy files give the notifier.
//! * Every event must end delivered exactly once per round: a mismatch is
//!   a note (timings fail nothing). `ONCEHOOK_BENCH_ONLY=notify` runs only
//!   this phase.

use std::time::{Duration, Instant};

use oncehook_e2e::TestEnv;
use oncehook_e2e::receiver::{Answer, Receiver, SECRET};

use crate::cpu::{CpuMeter, CpuUse, Who};
use crate::load::{self, RunLoad};
use crate::routes::{self, Route, Subject};
use crate::{
    Knobs, PHASE_TIMEOUT, Row, Stats, backend_cpu, backend_cpu_since, bench_pool,
    histogram_percentiles, median_run, ms, ratio, seed_shop,
};

pub fn only() -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "notify")
}

/// One delivery run.
struct Run {
    stats: Stats,
    /// Rows delivered and requests the receiver got.
    delivered: i64,
    received: usize,
    /// CPU over the deliveries, the bench's polling moved to the bench.
    cpu: CpuUse,
    statements: crate::pgstat::Summary,
    passed: Option<u64>,
    load: RunLoad,
}

/// The rows and notes of this phase; `worker_rate` (events/s of one
/// worker in the same run) is what each row is put next to.
pub async fn phase(knobs: &Knobs, worker_rate: Option<f64>) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let n = knobs.events.min(20_000);
    // The first is the report's "notifier" row, both routes in the bench's
    // rounds; the slow endpoints, whose rate is theirs, once, by the route
    // the deploy files give the notifier.
    let configs = [
        ("answers at once", Answer::Status(200), 4, n, knobs.rounds),
        (
            "answers in 200 ms",
            Answer::Slow(Duration::from_millis(200)),
            4,
            n.min(400),
            1,
        ),
        (
            "answers in 200 ms",
            Answer::Slow(Duration::from_millis(200)),
            32,
            n.min(2_000),
            1,
        ),
    ];
    let shipped = routes::deployed("oncehook-notifier").unwrap_or(Route::Direct);
    for (first, (what, answer, concurrency, events, rounds)) in configs.into_iter().enumerate() {
        let mut runs: Vec<(Route, Run)> = Vec::new();
        for round in 1..=rounds {
            let both = Route::in_round(round);
            let routes = if first == 0 {
                &both[..]
            } else {
                &[shipped][..]
            };
            for &route in routes {
                let label = format!(
                    "notifier{}, endpoint {what}, concurrency {concurrency}, round {round}",
                    route.suffix()
                );
                let (run, load) = load::settled(&label, || {
                    self::round(answer.clone(), concurrency, events, route)
                })
                .await;
                let run = Run { load, ..run };
                if first == 0 {
                    routes::record(Subject::Notifier, route, round, figures(&run, events));
                }
                if run.delivered != events as i64 || run.received != events {
                    notes.push(format!(
                        "notifier{} ({what}, concurrency {concurrency}), round {round}: {} of {events} delivered, {} requests received",
                        route.suffix(),
                        run.delivered,
                        run.received
                    ));
                }
                runs.push((route, run));
            }
        }
        for route in [Route::Direct, Route::Pooled] {
            let of_route: Vec<&Run> = runs
                .iter()
                .filter(|(r, _)| *r == route)
                .map(|(_, run)| run)
                .collect();
            let Some(mid) = median_run(&of_route, |r| r.stats.rate()) else {
                continue;
            };
            let vs = match worker_rate {
                Some(w) => format!("vs worker ×1: {}", ratio(mid.stats.rate(), w)),
                None => "(the worker's rate: the full bench)".to_owned(),
            };
            rows.push(Row::new(
                format!(
                    "notifier: order events to an endpoint that {what}, concurrency {concurrency}{}",
                    route.suffix()
                ),
                "events/s",
                &mid.stats,
                vs,
            ));
        }
    }
    notes.push(format!(
        "notifier latencies are per HTTP attempt (oncehook_notify_delivery_duration_seconds); p50 {} would be the 200 ms answer",
        ms(Some(Duration::from_millis(200)))
    ));
    (rows, notes)
}

/// A run's figures for the report's first table.
fn figures(run: &Run, events: usize) -> routes::Figures {
    routes::Figures {
        rate: run.stats.rate(),
        ops: events as f64,
        cpu: run.cpu.clone(),
        statements: run.statements.statements,
        planning_ms: run.statements.planning_ms,
        passed: run.passed,
        load: run.load.clone(),
    }
}

/// One round: a fresh database with `events` paid orders' events, a
/// receiver answering `answer`, the notifier with `concurrency`, by
/// `route`. The rate, the rows delivered and the requests received, and
/// the CPU and statements from the notifier's start to the last delivery.
async fn round(answer: Answer, concurrency: u16, events: usize, route: Route) -> Run {
    let mut env = TestEnv::new().await;
    let rx = Receiver::start(SECRET).await;
    rx.always(answer);
    env.append_config(&format!(
        "[[notify.endpoint]]\nname = \"shop\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"order.*\"]\n",
        rx.url
    ));
    seed_shop(&env, true, 1, events as i64).await;
    sqlx::query(
        "INSERT INTO order_events (id, type, order_id) SELECT 'evt_bench_' || id, 'order.paid', id FROM orders",
    )
    .execute(&env.pool)
    .await
    .expect("the backlog of order events");
    let pooler = (route == Route::Pooled).then(|| routes::Pooler::start(&env));
    let via = routes::Via::new(pooler.as_ref());
    // The bench's polling, told apart from the notifier's backends.
    let probe = bench_pool(&env).await;
    let pgstat = crate::pgstat::Probe::start(&env.pool).await;
    let backends_before = backend_cpu(&probe, &env.db_name).await;
    let c = concurrency.to_string();
    let vars = via.vars(&[("ONCEHOOK_NOTIFY_CONCURRENCY", c.as_str())]);
    let meter = via.meter(CpuMeter::new());
    let cpu_before = meter.read();
    let mut notifier = env.start_consumer("oncehook-notifier", &vars).await;
    let target = events as i64;
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut first: Option<(Instant, i64)> = None;
    let mut last = 0;
    while Instant::now() < deadline {
        last = delivered(&probe).await;
        if last > 0 && first.is_none() {
            first = Some((Instant::now(), last));
        }
        if last >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done = Instant::now();
    let mut cpu = meter.since(&cpu_before);
    if let Some((_, polling)) = backend_cpu_since(&probe, &env.db_name, backends_before).await {
        // The bench's own queries are the bench's cost, not the notifier's.
        cpu.reattribute(Who::Postgres, Who::Bench, polling);
    }
    let passed = via.passed();
    if last < target {
        eprintln!(
            "bench: warning: the notifier delivered only {last} of {target} order events before the time limit"
        );
    }
    let metrics = format!("{}/metrics", notifier.metrics_url());
    let fixed = histogram_percentiles(
        &env,
        &[metrics],
        "oncehook_notify_delivery_duration_seconds",
    )
    .await;
    let stats = match first {
        Some((at, count)) => Stats {
            ok: (last - count).max(0) as u64,
            window: done.saturating_duration_since(at),
            fixed,
            ..Stats::default()
        },
        None => Stats::default(),
    };
    notifier.signal("TERM");
    if notifier.wait_exit(Duration::from_secs(15)).is_none() {
        notifier.kill();
    }
    via.settle();
    let statements = pgstat
        .finish(
            &env.pool,
            &format!(
                "the notifier{}, concurrency {concurrency}, {events} order events",
                route.suffix()
            ),
            events as f64,
            "event",
        )
        .await;
    Run {
        stats,
        delivered: last,
        received: rx.received().len(),
        cpu,
        statements,
        passed,
        load: RunLoad::default(),
    }
}

async fn delivered(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT /* oncehook bench */ count(*) FROM notify_deliveries WHERE status = 'delivered'",
    )
    .fetch_one(pool)
    .await
    .unwrap_or(0)
}
