//! `make bench`: the pipeline's throughput and latency, reported as ratios to
//! ceilings measured in the same run on the same machine.
//!
//! * Ceiling A: the same HTTP client against ingest's `GET /healthz` (same
//!   server stack, no verification, no broker).
//! * Ceiling B: raw publish + confirm of the same envelope (bytes and
//!   properties taken from the events queue) to a throwaway quorum queue, with
//!   the same number of concurrent publishers on one confirm channel, through
//!   the same helper ingest uses.
//! * Ceiling C: the worker's transaction as a pgbench script
//!   (`deploy/bench/worker-tx.sql`) with as many clients as the workers
//!   keep transactions in flight (workers × `ONCEHOOK_BENCH_COMMITTERS`,
//!   the worker's `batch.committers`).
//! * Ceiling C′: the worker's group of `ONCEHOOK_BENCH_BATCH` events applied
//!   set-based in one transaction (`deploy/bench/worker-tx.sql` with
//!   `-D batch=N`),
//!   when a script takes `batch`; its rate in events/s (tps × N) against
//!   the worker at the same batch.
//! * Ceiling D: the shop API's order-creating transaction as a pgbench
//!   script (`deploy/bench/api-order-tx.sql`) with as many clients as the
//!   API has concurrent callers.
//! * Measured: ingest `POST /webhooks/razorpay` with signed deliveries at the
//!   same concurrency as A; workers (1, then 2) draining K captured events
//!   for K distinct pending orders that were loaded through ingest while no
//!   worker ran, each once with one transaction per delivery (batch 1) and
//!   once with group commit (`ONCEHOOK_BENCH_BATCH` deliveries per
//!   transaction); the shop API (`api`): `POST /v1/orders` from as many
//!   concurrent clients as A, each a new order under a fresh
//!   `Idempotency-Key`, against D — every answer must be 201 and the
//!   database must hold one order per 201, or the run fails once the report
//!   is written.
//! * CPU per operation (`cpu`): around B, ingest, every worker run, the
//!   shop API and every pgbench run the CPU time of each process group
//!   taking part (the bench, ingest, workers, the API, pgbench, PostgreSQL,
//!   RabbitMQ) and of the machine is read, and reported per event (per
//!   transaction, message, order) with what it implies: the rate the
//!   machine's cores allow, and the ratio to the ceiling that CPU allows
//!   here and on a machine with cores per service.
//!
//! * Rounds (`rounds`): C (and C′), worker ×1 at batch 1 and worker ×1 at
//!   the batch run interleaved `ONCEHOOK_BENCH_ROUNDS` times; each worker's
//!   ratio is the median of its rounds' ratios to the C of the same round,
//!   with the spread. The runs with two workers (against C with their
//!   clients) and the traced worker run once.
//! * Direct and as deployed (`routes`): the worker at batch 1 (and every
//!   batch the deploy files put behind PgBouncer), the shop API, the
//!   notifier and the mailer also run through PgBouncer in transaction
//!   mode, in the same rounds as their direct runs; the report's first
//!   table puts each next to the route deploy/README.md gives it.
//! * Load (`load`): every measured run records the cores other processes
//!   used during it; a run above 0.2 cores is repeated once, and the goals
//!   that rest on a run still above it give no verdict, with the reason.
//! * Where PostgreSQL's time goes (`pgstat`): per pgbench run, worker run
//!   and the API phase, the top statements per event from
//!   `pg_stat_statements` and the rows written per event by table; per
//!   worker run, the transactions in flight and PostgreSQL's busy cores.
//! * The machine (`machine`): its load is sampled before measuring; on a
//!   busy machine (other processes above a quarter of a core, or a build
//!   running) the report says so and gives no goal verdicts.
//! * Growth (`growth`): one worker's PostgreSQL CPU per event with the
//!   growing tables preloaded to 10,000 and to `ONCEHOOK_BENCH_GROWTH_ROWS`
//!   rows, the two sizes interleaved in rounds, against the goal of at
//!   most 1.20× more.
//!
//! Every environment is a fresh [`TestEnv`] (own database, own AMQP prefix),
//! cleaned up afterwards. Timings never fail anything: a bench reports.
//!
//! * Fairness (`fairness`): a quiet tenant's post → committed while another
//!   tenant's backlog of `ONCEHOOK_BENCH_BACKLOG` (10,000) events drains,
//!   against the same with no backlog, and the flood's events/s with and
//!   without the quiet tenant, in interleaved rounds.
//!
//! * Platform size (`tenants`): ingest's memory and acks, the API's list
//!   page and the worker's events/s with one merchant and with
//!   `ONCEHOOK_BENCH_TENANTS` (10,000), each with two runtime sources, in
//!   interleaved rounds.
//!
//! * The console's pages with 10,000 dead letters and 1,000,000 processed
//!   events (`console`), against the goal of 200 ms per page.
//!
//! * Optional, `ONCEHOOK_BENCH_CLUSTER=1`: ceiling B and ingest again on the
//!   local three-node cluster (`deploy/local/cluster.sh`, started if down),
//!   as ratios to the single-node figures of the same run.
//!
//! Knobs (environment): `ONCEHOOK_BENCH_SECS` (10), `ONCEHOOK_BENCH_CONCURRENCY`
//! (16), `ONCEHOOK_BENCH_EVENTS` (3000), `ONCEHOOK_BENCH_PREFETCH` (16: the
//! worker's prefetch at batch 1; at batch N, committers × N),
//! `ONCEHOOK_BENCH_COMMITTERS` (8),
//! `ONCEHOOK_BENCH_BATCH` (8; 1 skips the group-commit runs),
//! `ONCEHOOK_BENCH_ORDERS` (200,000: the most orders the API run posts),
//! `ONCEHOOK_BENCH_CLUSTER` (unset: no cluster section),
//! `ONCEHOOK_BENCH_ONLY` (`speed`, `console`, `api`, `traces`, `notify`, `inside`, `growth`, `fairness` or `tenants`:
//! only those phases),
//! `ONCEHOOK_BENCH_TRACE_ROUNDS` (3: with `traces`, the alternating rounds of ingest
//! untraced and traced whose ratios and medians end the report; a round that dropped
//! spans does not count), `ONCEHOOK_BENCH_ROUNDS` (3: rounds of C and worker ×1),
//! `ONCEHOOK_BENCH_GROWTH_ROWS` (1,000,000: the big size of the growth phase),
//! `ONCEHOOK_BENCH_BUSY_REPEATS` (1: how often a run during which other
//! processes used more than 0.2 cores is repeated).
//! Binaries come from `ONCEHOOK_BIN_DIR` (`make bench`: release).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use oncehook_common::Envelope;
use oncehook_common::amqp;
use oncehook_e2e::cluster::Cluster;
use oncehook_e2e::{Proc, Shop, TestEnv, broker, free_port, process};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SignedDelivery;

mod api;
mod console;
mod cpu;
mod fairness;
mod growth;
mod inside;
mod load;
mod machine;
mod notify;
mod pgstat;
mod rounds;
mod routes;
mod speed;
mod table;
mod tenants;

use cpu::{Budget, CpuMeter, CpuUse, Who};
use rounds::worker_label;

/// Products in the bench catalogue; every order has one or two of them.
const SKUS: i64 = 50;
/// Orders each pgbench run may use (distinct per transaction until used up).
const PGBENCH_ORDERS: i64 = 40_000;
/// Upper bound on anything one phase may wait for.
const PHASE_TIMEOUT: Duration = Duration::from_secs(300);
/// The warm-up of the closed loops that are metered for CPU (not recorded).
const WARMUP: Duration = Duration::from_secs(1);

#[derive(Clone)]
struct Knobs {
    secs: u64,
    concurrency: usize,
    events: usize,
    prefetch: usize,
    /// The worker's committers (`ONCEHOOK_WORKER_COMMITTERS`): the
    /// transactions it keeps in flight, and C's clients per worker.
    committers: usize,
    batch: usize,
    /// Rounds of C and worker ×1 at batch 1 and `batch`, interleaved.
    rounds: usize,
    /// Only one worker at `batch`, untraced then traced (`ONCEHOOK_BENCH_ONLY=traces`).
    traced_pair_only: bool,
}

impl Knobs {
    fn from_env() -> Knobs {
        fn num(name: &str, default: usize, min: usize, max: usize) -> usize {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(default)
                .clamp(min, max)
        }
        Knobs {
            secs: num("ONCEHOOK_BENCH_SECS", 10, 1, 120) as u64,
            concurrency: num("ONCEHOOK_BENCH_CONCURRENCY", 16, 1, 256),
            events: num("ONCEHOOK_BENCH_EVENTS", 3000, 10, 100_000),
            prefetch: num("ONCEHOOK_BENCH_PREFETCH", 16, 1, 256),
            committers: num("ONCEHOOK_BENCH_COMMITTERS", 8, 1, 256),
            batch: num("ONCEHOOK_BENCH_BATCH", 8, 1, 256),
            rounds: num("ONCEHOOK_BENCH_ROUNDS", 3, 1, 20),
            traced_pair_only: false,
        }
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(self.secs)
    }

    /// The worker's prefetch at `batch`: enough deliveries in flight for
    /// every committer to fill its group (committers × batch), never fewer
    /// than the prefetch knob.
    fn prefetch_for(&self, batch: usize) -> usize {
        self.prefetch.max(self.committers * batch).min(1024)
    }

    /// Transactions one worker keeps in flight: its committers, at most its
    /// prefetch at batch 1.
    fn in_flight(&self) -> usize {
        self.committers.min(self.prefetch)
    }
}

/// Throughput and latency of one measurement.
#[derive(Debug, Clone, Default)]
struct Stats {
    ok: u64,
    errors: u64,
    window: Duration,
    /// Per-operation latency in microseconds, sorted.
    latencies_us: Vec<u32>,
    /// Percentiles known only as such (pgbench log, histogram), when `latencies_us` is empty.
    fixed: Option<[Duration; 3]>,
}

impl Stats {
    fn rate(&self) -> f64 {
        let secs = self.window.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    fn percentile(&self, p: f64) -> Option<Duration> {
        if let Some(fixed) = self.fixed {
            return Some(match p {
                x if x <= 0.5 => fixed[0],
                x if x <= 0.9 => fixed[1],
                _ => fixed[2],
            });
        }
        let n = self.latencies_us.len();
        if n == 0 {
            return None;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
        Some(Duration::from_micros(u64::from(self.latencies_us[rank])))
    }

    fn p50(&self) -> Option<Duration> {
        self.percentile(0.5)
    }

    fn p90(&self) -> Option<Duration> {
        self.percentile(0.9)
    }

    fn p99(&self) -> Option<Duration> {
        self.percentile(0.99)
    }
}

/// Runs `op` from `concurrency` tasks: a warm-up (not recorded), then a
/// measured window. Each task stops at the end of the window or after
/// `max_per_task` operations, whichever comes first.
async fn closed_loop<F, Fut>(
    concurrency: usize,
    warmup: Duration,
    window: Duration,
    max_per_task: usize,
    op: F,
) -> Stats
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let started = Instant::now();
    let measure_from = started + warmup;
    let end = measure_from + window;
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..concurrency {
        let op = op.clone();
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let (mut ok, mut errors) = (0u64, 0u64);
            for i in 0..max_per_task {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let success = op(task + i * concurrency).await;
                if t0 >= measure_from {
                    if success {
                        ok += 1;
                        let us = t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                        lat.push(us);
                    } else {
                        errors += 1;
                    }
                }
            }
            (ok, errors, lat)
        });
    }
    let mut stats = Stats::default();
    while let Some(joined) = tasks.join_next().await {
        if let Ok((ok, errors, lat)) = joined {
            stats.ok += ok;
            stats.errors += errors;
            stats.latencies_us.extend(lat);
        } else {
            stats.errors += 1;
        }
    }
    stats.window = Instant::now().saturating_duration_since(measure_from);
    stats.latencies_us.sort_unstable();
    stats
}

fn http_client(concurrency: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(concurrency)
        .build()
        .expect("http client")
}

async fn post(http: &reqwest::Client, url: &str, delivery: &SignedDelivery) -> bool {
    let mut req = http.post(url).body(delivery.body.clone());
    for (name, value) in delivery.headers.iter() {
        req = req.header(name, value);
    }
    match req.send().await {
        Ok(resp) => resp.status().as_u16() == 200 && resp.bytes().await.is_ok(),
        Err(_) => false,
    }
}

/// Signed Razorpay `payment.captured` for order `bench_<n>`.
fn captured(env: &TestEnv, n: usize, tag: &str) -> SignedDelivery {
    let spec = env.spec(
        &format!("bench_{n}"),
        &format!("pay_{tag}_{n}"),
        &format!("evt_{tag}_{n}"),
        10_000,
    );
    env.sign(Gateway::Razorpay, "payment.captured", &spec)
}

/// 50 products with ample stock, and pending orders `bench_<from>..=bench_<to>`
/// of one or two items each (the same catalogue for workers and pgbench).
async fn seed_shop(env: &TestEnv, with_products: bool, from: i64, to: i64) {
    let pool = &env.pool;
    let sku = |n: i64| format!("SKU-{:03}", n % SKUS);
    let mut shop = Shop::new();
    if with_products {
        for s in 0..SKUS {
            shop = shop.product(&sku(s), 100_000_000);
        }
    }
    for n in from..=to {
        let mut items = vec![(sku(n), 1 + (n % 3) as i32)];
        if n % 2 == 1 {
            items.push((sku(n * 7 + 3), 1));
        }
        shop = shop.order_of(&format!("bench_{n}"), 10_000, "INR", &items);
    }
    shop.seed(pool).await;
    analyze_filled(pool).await;
}

/// Vacuums and analyzes the tables that hold rows (seeded, preloaded by
/// the growth phase, or written by earlier runs), before every measured
/// run: autovacuum keeps a running installation's statistics within a
/// minute of a table's growth, which a run of a few seconds never sees.
/// An empty table is left without statistics: statistics that say "empty"
/// would make the run's first plans scan it, and the server keeps those
/// plans while the run fills the table.
pub(crate) async fn analyze_filled(pool: &sqlx::PgPool) {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("the tables");
    for table in tables {
        let filled: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            // A name read from pg_class just now.
            "SELECT EXISTS (SELECT 1 FROM \"{table}\")"
        )))
        .fetch_one(pool)
        .await
        .expect("a table's first row");
        if filled {
            sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE \"{table}\"")))
                .execute(pool)
                .await
                .expect("vacuum analyze");
        }
    }
}

// ---------------------------------------------------------------- phase 1

struct HttpPhase {
    healthz: Stats,
    ingest: Stats,
    /// Ingest's own histograms: whole request, and publish + confirm alone.
    ingest_request: Option<[Duration; 3]>,
    ingest_publish: Option<[Duration; 3]>,
    broker: Stats,
    envelope_bytes: usize,
    /// CPU over the measured windows of ingest and of B.
    ingest_cpu: CpuUse,
    broker_cpu: CpuUse,
    /// What other processes did meanwhile.
    load: load::RunLoad,
}

/// Ingest under the same load as in [`http_phase`], exporting its spans
/// over OTLP to a local receiver (every request: a server span and a
/// producer span): the cost of tracing, next to the untraced run.
struct TracesPhase {
    ingest: Stats,
    /// Ingest's own CPU over the metered window.
    ingest_cpu: CpuUse,
    /// Export requests the sink received, and their bytes.
    exports: (u64, u64),
    /// Spans the sink received and spans ingest dropped (its
    /// `oncehook_telemetry_spans_dropped_total`; `None`: not readable).
    spans: (u64, Option<u64>),
    /// What other processes did meanwhile.
    load: load::RunLoad,
}

impl TracesPhase {
    /// "spans made 2040, exported 2040, dropped 0": made is exported +
    /// dropped (ingest counts every span it drops, full queue or failed
    /// export).
    fn spans_line(&self) -> String {
        let (exported, dropped) = self.spans;
        match dropped {
            Some(d) => format!(
                "spans made {}, exported {exported}, dropped {d}",
                exported + d
            ),
            None => format!("spans exported {exported}, dropped not readable"),
        }
    }

    /// Whether every span made reached the sink (known to).
    fn dropped_none(&self) -> bool {
        self.spans.1 == Some(0)
    }
}

/// The traced ingest run's row, against the untraced one.
fn traced_row(traced: &TracesPhase, http: &HttpPhase, c: usize) -> Row {
    Row::new(
        format!("ingest with traces exported (OTLP to a local sink), c={c}"),
        "req/s",
        &traced.ingest,
        format!(
            "{}; ingest CPU per request {}; {} exports, {} KiB received; {}",
            versus("ingest", &traced.ingest, &http.ingest),
            ratio(
                ingest_cpu_per_request(&traced.ingest, &traced.ingest_cpu),
                ingest_cpu_per_request(&http.ingest, &http.ingest_cpu)
            ),
            traced.exports.0,
            traced.exports.1 / 1024,
            traced.spans_line()
        ),
    )
}

/// Ingest untraced and traced, `ONCEHOOK_BENCH_TRACE_ROUNDS` times (3),
/// alternating which goes first (a machine that slows down or speeds up
/// over the run moves both sides): the ratios per round and their medians,
/// throughput and ingest's CPU per request. A round whose traced run
/// dropped spans (or whose drops could not be read) does not count toward
/// the medians: a run that exports less is cheaper and flatters the goal.
async fn traced_rounds(knobs: &Knobs) -> String {
    let rounds = std::env::var("ONCEHOOK_BENCH_TRACE_ROUNDS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(3)
        .clamp(1, 20);
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    let mut spans = Vec::new();
    let mut loads = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut runs = Vec::new();
        for traced in order {
            runs.push((traced, ingest_run(knobs, traced).await));
        }
        runs.sort_by_key(|(traced, _)| *traced);
        let [(_, plain), (_, traced)] = &runs[..] else {
            unreachable!("two runs a round")
        };
        loads.extend([plain.load.clone(), traced.load.clone()]);
        let counts = traced.dropped_none();
        spans.push(format!(
            "round {}: {}{}",
            round + 1,
            traced.spans_line(),
            if counts { "" } else { " (not counted)" }
        ));
        if counts {
            rates.push(traced.ingest.rate() / plain.ingest.rate());
            cpus.push(
                ingest_cpu_per_request(&traced.ingest, &traced.ingest_cpu)
                    / ingest_cpu_per_request(&plain.ingest, &plain.ingest_cpu),
            );
        }
    }
    if rates.is_empty() {
        return format!(
            "traces exported, ingest in {rounds} alternating rounds: every round dropped spans, \
             none counts toward the overhead goal; {}",
            spans.join("; ")
        );
    }
    let show = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.2}×"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        if v.len().is_multiple_of(2) {
            (v[mid - 1] + v[mid]) / 2.0
        } else {
            v[mid]
        }
    };
    machine::goal_on(
        "tracing overhead (ingest traced ≥ 0.95× untraced, median of the rounds that dropped no span)",
        format!(
            "{:.2}× over {} of {rounds} rounds",
            median(&rates),
            rates.len()
        ),
        median(&rates) >= 0.95,
        &loads.iter().collect::<Vec<_>>(),
    );
    format!(
        "traces exported, ingest in {rounds} alternating rounds ({} counted: a round that dropped spans does not count): throughput {} (median {:.2}×, goal ≥ 0.95×); CPU per request {} (median {:.2}×); {}",
        rates.len(),
        show(&rates),
        median(&rates),
        show(&cpus),
        median(&cpus),
        spans.join("; ")
    )
}

/// Ingest's CPU seconds per request over a metered run (0 if unreadable):
/// the cost of tracing where the throughput also moves with what else
/// the machine does.
fn ingest_cpu_per_request(stats: &Stats, cpu: &CpuUse) -> f64 {
    let budget = Budget::of_rate(String::new(), "req", stats.rate(), cpu.clone());
    budget.ms(Who::Ingest).unwrap_or(0.0)
}

async fn traces_phase(knobs: &Knobs) -> TracesPhase {
    ingest_run(knobs, true).await
}

/// One metered ingest run under the closed-loop load, its spans exported
/// to a sink when `traced`; once more when other processes were busy
/// meanwhile ([`load`]).
async fn ingest_run(knobs: &Knobs, traced: bool) -> TracesPhase {
    let label = if traced {
        "ingest with traces exported"
    } else {
        "ingest"
    };
    let (run, load) = load::settled(label, || ingest_run_once(knobs, traced)).await;
    TracesPhase { load, ..run }
}

async fn ingest_run_once(knobs: &Knobs, traced: bool) -> TracesPhase {
    // A sink: the collector's decoding is its own machine's work, not the pipeline's.
    let receiver = oncehook_e2e::otlp::OtlpReceiver::start_sink().await;
    let mut env = TestEnv::new().await;
    if traced {
        env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint);
    }
    let (ingest_proc, base) = env.start_ingest().await;
    let http = http_client(knobs.concurrency);
    eprintln!(
        "bench: ingest POST /webhooks/razorpay{}, c={}",
        if traced { " with traces exported" } else { "" },
        knobs.concurrency
    );
    let deliveries: Arc<Vec<SignedDelivery>> =
        Arc::new((0..1024).map(|n| captured(&env, n, "traced")).collect());
    let url = Arc::new(format!("{base}/webhooks/razorpay"));
    let meter = CpuMeter::new().with(Who::Ingest, [ingest_proc.pid()]);
    let load = closed_loop(
        knobs.concurrency,
        WARMUP,
        knobs.duration(),
        2_000_000,
        move |i| {
            let (http, url, deliveries) = (http.clone(), url.clone(), deliveries.clone());
            async move { post(&http, &url, &deliveries[i % deliveries.len()]).await }
        },
    );
    let (ingest, ingest_cpu) = cpu::during(&meter, WARMUP, knobs.duration(), load).await;
    // The batch exporter sends every 5 s by default; then until the count
    // stops moving.
    let mut spans = (0, None);
    if traced {
        tokio::time::sleep(Duration::from_secs(6)).await;
        let mut seen = receiver.spans_received();
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = receiver.spans_received();
            if now == seen {
                break;
            }
            seen = now;
        }
        let text = match env
            .http
            .get(format!("{}/metrics", ingest_proc.metrics_url()))
            .send()
            .await
        {
            Ok(resp) => resp.text().await.ok(),
            Err(_) => None,
        };
        // Absent until a first drop: then none was dropped.
        let dropped = text
            .map(|t| inside::metric(&t, "oncehook_telemetry_spans_dropped_total").round() as u64);
        spans = (seen, dropped);
    }
    TracesPhase {
        ingest,
        ingest_cpu,
        exports: receiver.received(),
        spans,
        load: load::RunLoad::default(),
    }
}

/// Ceiling A, ingest and ceiling B ([`http_phase_once`]); once more when
/// other processes were busy meanwhile ([`load`]).
async fn http_phase(knobs: &Knobs) -> HttpPhase {
    let (phase, load) = load::settled("A, ingest and B", || http_phase_once(knobs)).await;
    HttpPhase { load, ..phase }
}

async fn http_phase_once(knobs: &Knobs) -> HttpPhase {
    let mut env = TestEnv::new().await;
    let (ingest_proc, base) = env.start_ingest().await;
    let http = http_client(knobs.concurrency);
    let warmup = WARMUP;
    let cap = 2_000_000;

    eprintln!("bench: A  GET /healthz, c={}", knobs.concurrency);
    let healthz = {
        let (http, url) = (http.clone(), Arc::new(format!("{base}/healthz")));
        closed_loop(
            knobs.concurrency,
            warmup,
            knobs.duration(),
            cap,
            move |_| {
                let (http, url) = (http.clone(), url.clone());
                async move {
                    match http.get(url.as_str()).send().await {
                        Ok(r) => r.status().as_u16() == 200 && r.bytes().await.is_ok(),
                        Err(_) => false,
                    }
                }
            },
        )
        .await
    };

    eprintln!(
        "bench: ingest POST /webhooks/razorpay, c={}",
        knobs.concurrency
    );
    // Distinct signed deliveries (for orders this database does not have: no
    // worker runs in this phase, the events only pile up in the queue).
    let deliveries: Arc<Vec<SignedDelivery>> =
        Arc::new((0..1024).map(|n| captured(&env, n, "http")).collect());
    let ingest_meter = CpuMeter::new().with(Who::Ingest, [ingest_proc.pid()]);
    let (ingest, ingest_cpu) = {
        let (http, url) = (http.clone(), Arc::new(format!("{base}/webhooks/razorpay")));
        let deliveries = deliveries.clone();
        let load = closed_loop(knobs.concurrency, warmup, knobs.duration(), cap, move |i| {
            let (http, url, deliveries) = (http.clone(), url.clone(), deliveries.clone());
            async move { post(&http, &url, &deliveries[i % deliveries.len()]).await }
        });
        cpu::during(&ingest_meter, warmup, knobs.duration(), load).await
    };

    // Where ingest's time goes, from its own histograms (warm-up included).
    let metrics = [format!("{}/metrics", ingest_proc.metrics_url())];
    let ingest_request =
        histogram_percentiles(&env, &metrics, "oncehook_ingest_request_duration_seconds").await;
    let ingest_publish =
        histogram_percentiles(&env, &metrics, "oncehook_ingest_publish_duration_seconds").await;

    // The envelope exactly as ingest published it: bytes and properties.
    let sample = sample_envelope(&format!("{}.events", env.prefix)).await;
    let envelope_bytes = sample.to_bytes().len();
    eprintln!(
        "bench: B  publish+confirm of a {envelope_bytes}-byte envelope to a quorum queue, {} publishers",
        knobs.concurrency
    );
    let load = broker_ceiling(&env.prefix, &sample, knobs);
    let (broker, broker_cpu) = cpu::during(&CpuMeter::new(), WARMUP, knobs.duration(), load).await;
    HttpPhase {
        healthz,
        ingest,
        ingest_request,
        ingest_publish,
        broker,
        envelope_bytes,
        ingest_cpu,
        broker_cpu,
        load: load::RunLoad::default(),
    }
}

async fn sample_envelope(queue: &str) -> Envelope {
    let conn = broker::connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let msg = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
        .expect("the events queue holds the posted deliveries");
    let envelope = Envelope::from_bytes(&msg.delivery.data).expect("an oncehook envelope");
    let _ = ch.close(200, "sampled".into()).await;
    let _ = conn.close(200, "bye".into()).await;
    envelope
}

/// Ceiling B: N tasks publishing the envelope on one confirm channel (as
/// ingest does), each awaiting its confirm, into a throwaway quorum queue.
async fn broker_ceiling(prefix: &str, envelope: &Envelope, knobs: &Knobs) -> Stats {
    broker_ceiling_at(broker::AMQP_URL, prefix, envelope, knobs).await
}

/// [`broker_ceiling`] through the broker node at `url` (the queue's leader
/// is placed on that node; on a cluster it has a replica on every node).
async fn broker_ceiling_at(url: &str, prefix: &str, envelope: &Envelope, knobs: &Knobs) -> Stats {
    queue_ceiling(
        url,
        &format!("{prefix}.bench-ceiling"),
        envelope,
        knobs,
        Vec::new(),
    )
    .await
}

/// N tasks publishing the envelope on one confirm channel, each awaiting its
/// confirm, into `queue`: a throwaway quorum queue with `extra` arguments,
/// declared on the node at `url` and deleted afterwards.
pub(crate) async fn queue_ceiling(
    url: &str,
    queue: &str,
    envelope: &Envelope,
    knobs: &Knobs,
    extra: Vec<(&'static str, AMQPValue)>,
) -> Stats {
    let (conn, ch) = broker::confirm_channel_on(url).await;
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    // A safety net: the queue disappears on its own if this run dies.
    args.insert("x-expires".into(), AMQPValue::LongInt(600_000));
    for (k, v) in extra {
        args.insert(k.into(), v);
    }
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        args,
    )
    .await
    .expect("declare the ceiling queue");

    let payload = Arc::new(envelope.to_bytes());
    let props = envelope.properties();
    let queue_name = Arc::new(queue.to_owned());
    let stats = {
        let ch = ch.clone();
        closed_loop(
            knobs.concurrency,
            Duration::from_secs(1),
            knobs.duration(),
            2_000_000,
            move |_| {
                let (ch, payload, props, queue_name) = (
                    ch.clone(),
                    payload.clone(),
                    props.clone(),
                    queue_name.clone(),
                );
                async move {
                    amqp::publish_confirmed(
                        &ch,
                        "",
                        &queue_name,
                        &payload,
                        props,
                        Duration::from_secs(5),
                    )
                    .await
                    .is_ok()
                }
            },
        )
        .await
    };
    let _ = ch
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "bye".into()).await;
    stats
}

// ---------------------------------------------------------------- phase 2

#[derive(Clone)]
struct WorkerRun {
    workers: usize,
    /// Exporting its traces to a local OTLP receiver.
    traced: bool,
    /// Deliveries per transaction (`[worker] batch.size`).
    batch: usize,
    /// The round it belongs to (0 for the runs outside the rounds).
    round: usize,
    events: usize,
    stats: Stats,
    applied: i64,
    dead: u32,
    /// CPU time over the run by group (the whole PostgreSQL server among
    /// them, less the bench's own queries), and of the workers' backends
    /// alone.
    cpu: CpuUse,
    backends_cpu: Option<Duration>,
    /// What the workers' backends were doing, sampled (`pg_stat_activity`).
    waits: Waits,
    /// Spans the workers dropped while traced (0 untraced; `None`: a
    /// worker's metrics were not readable).
    spans_dropped: Option<u64>,
    /// The statement that took PostgreSQL the most time in the run, with
    /// its ms per event, and the top-level statements and ms planning per
    /// event (`pg_stat_statements`).
    slowest: Option<String>,
    statements: Option<f64>,
    planning_ms: Option<f64>,
    /// Straight to PostgreSQL or through PgBouncer, and the transactions
    /// PgBouncer passed on (`None` for a direct run).
    route: routes::Route,
    passed: Option<u64>,
    /// What other processes did meanwhile.
    load: load::RunLoad,
}

impl WorkerRun {
    /// "worker ×1 batch 8", with the route and the round when there are
    /// several.
    fn label(&self, rounds: usize) -> String {
        let round = if rounds > 1 { self.round } else { 0 };
        worker_label(self.workers, self.batch, self.route, self.traced, round)
    }

    /// PostgreSQL's CPU seconds per wall second over the run (the whole
    /// server, less the bench's own queries): its busy cores.
    fn pg_cores(&self) -> Option<f64> {
        let cpu = self.cpu.of(Who::Postgres)?;
        Some(cpu.as_secs_f64() / self.cpu.window.as_secs_f64().max(0.001))
    }

    /// "5.2 backends in a transaction, PostgreSQL 0.84 cores busy".
    /// For a goal not met: "; the statement taking the most time: …" (the
    /// budget names the component, this the statement).
    fn stopped_by(&self, met: bool) -> String {
        match (&self.slowest, met) {
            (Some(slowest), false) => format!("; the statement taking the most time: {slowest}"),
            _ => String::new(),
        }
    }

    /// PostgreSQL's CPU (the whole server, less the bench's polling) per
    /// event, in ms.
    fn postgres_ms(&self) -> Option<f64> {
        let cpu = self.cpu.of(Who::Postgres)?;
        (self.events > 0).then(|| cpu.as_secs_f64() * 1_000.0 / self.events as f64)
    }

    fn pressure(&self) -> String {
        let in_tx = self
            .waits
            .in_transaction
            .map_or("–".to_owned(), |n| format!("{n:.1}"));
        let cores = self
            .pg_cores()
            .map_or("–".to_owned(), |c| format!("{c:.2}"));
        format!("{in_tx} backends in a transaction, PostgreSQL {cores} cores busy")
    }
}

/// `(workers, batch, traced)` of each worker run outside the rounds: two
/// workers at batch 1 and the configured batch, then one worker at that
/// batch exporting its traces (the cost of tracing, next to the same run
/// without) — or, with `traced_pair_only`, one worker at that batch
/// untraced then traced.
fn worker_rounds(knobs: &Knobs) -> Vec<(usize, usize, bool)> {
    let b = knobs.batch.max(1);
    if knobs.traced_pair_only {
        return vec![(1, b, false), (1, b, true)];
    }
    let mut rounds: Vec<(usize, usize, bool)> = batches(knobs)
        .into_iter()
        .map(|batch| (2, batch, false))
        .collect();
    rounds.push((1, b, true));
    rounds
}

/// Batch 1, and the configured batch if it is larger.
fn batches(knobs: &Knobs) -> Vec<usize> {
    if knobs.batch > 1 {
        vec![1, knobs.batch]
    } else {
        vec![1]
    }
}

/// The worker runs outside the rounds ([`worker_rounds`]).
async fn worker_phase(knobs: &Knobs) -> Vec<WorkerRun> {
    let plan = worker_rounds(knobs);
    let mut bench = WorkerBench::on(TestEnv::new().await, knobs, plan.len()).await;
    let mut runs = Vec::new();
    for (workers, batch, traced) in plan {
        runs.push(bench.run(workers, batch, traced, 0).await);
    }
    bench.stop();
    runs
}

/// A database with orders for a number of worker runs, ingest to load
/// each run's events, and what every run needs (a polling pool, a trace
/// sink).
struct WorkerBench {
    env: TestEnv,
    ingest: Proc,
    base: String,
    probe: sqlx::PgPool,
    receiver: oncehook_e2e::otlp::OtlpReceiver,
    knobs: Knobs,
    /// Runs so far (each takes the next `events` orders), and runs whose
    /// orders are seeded.
    done: usize,
    seeded: usize,
    /// What the runs' PostgreSQL sections open with ("growth, …: ").
    context: String,
    /// The PgBouncer of the pooled runs, started with the first.
    pooler: Option<routes::Pooler>,
}

impl WorkerBench {
    /// Seeds `env` with the products and orders for `runs` runs and starts
    /// ingest.
    async fn on(mut env: TestEnv, knobs: &Knobs, runs: usize) -> WorkerBench {
        seed_shop(&env, true, 1, (runs * knobs.events) as i64).await;
        let (ingest, base) = env.start_ingest().await;
        let probe = bench_pool(&env).await;
        // A sink, as for ingest: the collector's decoding is not the pipeline's work.
        let receiver = oncehook_e2e::otlp::OtlpReceiver::start_sink().await;
        WorkerBench {
            env,
            ingest,
            base,
            probe,
            receiver,
            knobs: knobs.clone(),
            done: 0,
            seeded: runs,
            context: String::new(),
            pooler: None,
        }
    }

    async fn run_once(
        &mut self,
        route: routes::Route,
        workers: usize,
        batch: usize,
        traced: bool,
        round: usize,
        attempt: usize,
    ) -> WorkerRun {
        let knobs = self.knobs.clone();
        let k = knobs.events;
        let first = self.done * k + 1;
        if self.done >= self.seeded {
            // A repeated run takes orders nobody counted on.
            seed_shop(&self.env, false, first as i64, (first + k - 1) as i64).await;
            self.seeded += 1;
        }
        self.done += 1;
        if route == routes::Route::Pooled && self.pooler.is_none() {
            self.pooler = Some(routes::Pooler::start(&self.env));
        }
        eprintln!("bench: loading {k} captured events through ingest (no worker running)");
        let tag = format!(
            "w{workers}b{batch}{}{}r{round}a{attempt}",
            if traced { "t" } else { "" },
            if route == routes::Route::Pooled {
                "p"
            } else {
                ""
            }
        );
        preload(&self.env, &self.base, first, k, knobs.concurrency, &tag).await;
        let prefix = self.env.prefix.clone();
        let depth = wait_for(Duration::from_secs(20), || async {
            broker::events_depth(&prefix)
                .await
                .filter(|d| *d as usize >= k)
        })
        .await;
        if depth.is_none() {
            eprintln!("bench: warning: the events queue does not hold {k} messages");
        }
        let probe = self.probe.clone();
        let probe = &probe;
        let done_before = count_processed_in(probe).await;
        eprintln!("bench: {workers} worker(s), batch {batch}, draining {k} events");
        let mut procs = Vec::new();
        let mut metrics = Vec::new();
        let prefetch = knobs.prefetch_for(batch).to_string();
        let committers = knobs.committers.to_string();
        let batch_size = batch.to_string();
        analyze_filled(&self.env.pool).await;
        let pgstat = pgstat::Probe::start(&self.env.pool).await;
        let backends_before = backend_cpu(probe, &self.env.db_name).await;
        let sampler = tokio::spawn(sample_waits(
            probe.clone(),
            self.env.db_name.clone(),
            done_before + k as i64,
        ));
        let via = routes::Via::new(match route {
            routes::Route::Pooled => self.pooler.as_ref(),
            routes::Route::Direct => None,
        });
        let watch = load::Watch::start();
        for _ in 0..workers {
            let addr = format!("127.0.0.1:{}", free_port());
            let mut vars = vec![
                ("ONCEHOOK_METRICS_ADDR", addr.as_str()),
                ("ONCEHOOK_PREFETCH", prefetch.as_str()),
                ("ONCEHOOK_WORKER_BATCH_SIZE", batch_size.as_str()),
                ("ONCEHOOK_WORKER_COMMITTERS", committers.as_str()),
            ];
            if traced {
                vars.push((
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    self.receiver.endpoint.as_str(),
                ));
            }
            procs.push(self.env.spawn("oncehook-worker", &via.vars(&vars), &[]));
            metrics.push(format!("http://{addr}/metrics"));
        }
        let meter = via.meter(
            CpuMeter::new()
                .with(Who::Worker, procs.iter().map(Proc::pid))
                .with(Who::Ingest, [self.ingest.pid()]),
        );
        let cpu_before = meter.read();
        let stats = drain_rate(probe, done_before, done_before + k as i64).await;
        let mut cpu = meter.since(&cpu_before);
        let label = format!(
            "{}{}",
            self.context,
            worker_label(
                workers,
                batch,
                route,
                traced,
                if knobs.rounds > 1 { round } else { 0 }
            )
        );
        let load = watch.finish(&label, attempt);
        let passed = via.passed();
        let backends = backend_cpu_since(probe, &self.env.db_name, backends_before).await;
        let (backends_cpu, polling) = backends.unzip();
        if let Some(polling) = polling {
            // The bench's own queries are the bench's cost, not the pipeline's.
            cpu.reattribute(Who::Postgres, Who::Bench, polling);
        }
        let waits = match tokio::time::timeout(Duration::from_secs(5), sampler).await {
            Ok(Ok(waits)) => waits,
            _ => Waits::default(),
        };
        let transaction = histogram_percentiles(
            &self.env,
            &metrics,
            "oncehook_worker_transaction_duration_seconds",
        )
        .await;
        let stats = Stats {
            fixed: transaction,
            ..stats
        };
        let applied: i64 = sqlx::query_scalar(
            "SELECT /* oncehook bench */ count(*) FROM processed_webhooks
             WHERE outcome = 'applied' AND event_id LIKE $1",
        )
        .bind(format!("evt_{tag}\\_%"))
        .fetch_one(&self.env.pool)
        .await
        .unwrap_or(-1);
        let dead = broker::depth(&format!("{}.dead", self.env.prefix))
            .await
            .unwrap_or(0);
        // The spans the workers dropped (the counter is absent until a
        // first drop); `None` when a worker's metrics could not be read.
        let mut spans_dropped = Some(0u64);
        if traced {
            for url in &metrics {
                let text = match self.env.http.get(url).send().await {
                    Ok(resp) => resp.text().await.ok(),
                    Err(_) => None,
                };
                let dropped = text.map(|t| {
                    inside::metric(&t, "oncehook_telemetry_spans_dropped_total").round() as u64
                });
                spans_dropped = spans_dropped.zip(dropped).map(|(a, b)| a + b);
            }
        }
        stop_all(procs);
        via.settle();
        let run = WorkerRun {
            workers,
            batch,
            traced,
            round,
            events: k,
            stats,
            applied,
            dead,
            cpu,
            backends_cpu,
            waits,
            spans_dropped,
            slowest: None,
            statements: None,
            planning_ms: None,
            route,
            passed,
            load,
        };
        let summary = pgstat
            .finish(&self.env.pool, &label, k as f64, "event")
            .await;
        WorkerRun {
            slowest: summary.slowest,
            statements: summary.statements,
            planning_ms: summary.planning_ms,
            ..run
        }
    }

    fn stop(mut self) {
        self.ingest.signal("TERM");
        self.ingest.wait_exit(Duration::from_secs(15));
    }
}

/// Posts captured events for orders `bench_<first>..` once each (a refused
/// post is retried a few times), `concurrency` at a time.
async fn preload(env: &TestEnv, base: &str, first: usize, k: usize, concurrency: usize, tag: &str) {
    let deliveries: Arc<Vec<SignedDelivery>> =
        Arc::new((first..first + k).map(|n| captured(env, n, tag)).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let http = http_client(concurrency);
    let url = Arc::new(format!("{base}/webhooks/razorpay"));
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (deliveries, next, failed, http, url) = (
            deliveries.clone(),
            next.clone(),
            failed.clone(),
            http.clone(),
            url.clone(),
        );
        tasks.spawn(async move {
            for _ in 0..deliveries.len() {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= deliveries.len() || Instant::now() > deadline {
                    return;
                }
                let mut accepted = false;
                for _attempt in 0..5 {
                    if post(&http, &url, &deliveries[i]).await {
                        accepted = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                if !accepted {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        eprintln!("bench: warning: {failed} of {k} events were never accepted by ingest");
    }
}

async fn count_processed(env: &TestEnv) -> i64 {
    count_processed_in(&env.pool).await
}

/// The `application_name` of the bench's own connections while workers run.
const BENCH_APP: &str = "oncehook-bench";

/// A pool for the bench's queries while workers run (progress, waits,
/// backend CPU), named [`BENCH_APP`] so that its backends can be told apart
/// from the workers'. Falls back to the environment's pool.
async fn bench_pool(env: &TestEnv) -> sqlx::PgPool {
    let options = match env.database_url.parse::<sqlx::postgres::PgConnectOptions>() {
        Ok(options) => options.application_name(BENCH_APP),
        Err(e) => {
            eprintln!("bench: warning: {e}; polling through the test's pool");
            return env.pool.clone();
        }
    };
    match sqlx::postgres::PgPoolOptions::new()
        .max_connections(3)
        .connect_with(options)
        .await
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("bench: warning: {e}; polling through the test's pool");
            env.pool.clone()
        }
    }
}

/// Polls `processed_webhooks` until it holds `target` rows; the rate is
/// measured from the first row this run added to the last one.
async fn drain_rate(pool: &sqlx::PgPool, before: i64, target: i64) -> Stats {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut first: Option<(Instant, i64)> = None;
    let mut last = before;
    let poll = Duration::from_millis(20);
    for _ in 0..(PHASE_TIMEOUT.as_millis() / poll.as_millis()) {
        let now = Instant::now();
        if now > deadline {
            break;
        }
        last = count_processed_in(pool).await;
        if last > before && first.is_none() {
            first = Some((now, last));
        }
        if last >= target {
            break;
        }
        tokio::time::sleep(poll).await;
    }
    let done_at = Instant::now();
    let Some((first_at, first_count)) = first else {
        eprintln!("bench: warning: the workers applied nothing");
        return Stats::default();
    };
    if last < target {
        eprintln!(
            "bench: warning: only {} of {} events applied before the time limit",
            last - before,
            target - before
        );
    }
    Stats {
        ok: (last - first_count).max(0) as u64,
        window: done_at.saturating_duration_since(first_at),
        ..Stats::default()
    }
}

/// p50/p90/p99 of the Prometheus histogram `metric` summed over every
/// label set and every endpoint in `urls`, interpolated within its buckets.
async fn histogram_percentiles(
    env: &TestEnv,
    urls: &[String],
    metric: &str,
) -> Option<[Duration; 3]> {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    let prefix = format!("{metric}_bucket{{");
    for url in urls {
        let Ok(resp) = env.http.get(url).send().await else {
            continue;
        };
        let text = resp.text().await.unwrap_or_default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let Some(le_at) = rest.find("le=\"") else {
                continue;
            };
            let le_text = &rest[le_at + 4..];
            let Some(end) = le_text.find('"') else {
                continue;
            };
            let le = match &le_text[..end] {
                "+Inf" => f64::INFINITY,
                v => match v.parse::<f64>() {
                    Ok(v) => v,
                    Err(_) => continue,
                },
            };
            let Some(count) = line.rsplit(' ').next().and_then(|c| c.parse::<f64>().ok()) else {
                continue;
            };
            match buckets.iter_mut().find(|(b, _)| *b == le) {
                Some((_, c)) => *c += count,
                None => buckets.push((le, count)),
            }
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map(|b| b.1)?;
    if total <= 0.0 {
        return None;
    }
    let quantile = |q: f64| {
        let rank = q * total;
        let mut prev = (0.0, 0.0);
        for &(le, cum) in &buckets {
            if cum >= rank {
                if le.is_infinite() {
                    return Duration::from_secs_f64(prev.0);
                }
                let in_bucket = cum - prev.1;
                let frac = if in_bucket > 0.0 {
                    (rank - prev.1) / in_bucket
                } else {
                    1.0
                };
                return Duration::from_secs_f64(prev.0 + (le - prev.0) * frac);
            }
            prev = (le, cum);
        }
        Duration::from_secs_f64(prev.0)
    };
    Some([quantile(0.5), quantile(0.9), quantile(0.99)])
}

fn stop_all(procs: Vec<Proc>) {
    for p in &procs {
        p.signal("TERM");
    }
    for mut p in procs {
        if p.wait_exit(Duration::from_secs(30)).is_none() {
            p.kill();
        }
    }
}

async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    for _ in 0..10_000 {
        if let Some(v) = check().await {
            return Some(v);
        }
        if started.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

// ---------------------------------------------------------------- phase 3

#[derive(Clone)]
struct PgbenchRun {
    /// Workers whose concurrency this run matches.
    workers: usize,
    clients: usize,
    /// Events per transaction: 1 for C, the group's size for C′.
    batch: usize,
    /// The round it belongs to (0 outside the rounds).
    round: usize,
    run: PgbenchOutcome,
    /// What other processes did meanwhile.
    load: load::RunLoad,
}

impl PgbenchRun {
    /// Events per second: transactions per second × events per transaction.
    fn event_rate(&self) -> f64 {
        self.run.stats.rate() * self.batch as f64
    }

    /// "C  16 clients" or "C′ group of 8, 16 clients", with the round.
    fn label(&self, rounds: usize) -> String {
        let mut label = if self.batch > 1 {
            format!(
                "C′ pgbench group of {}, {} clients",
                self.batch, self.clients
            )
        } else {
            format!("C  pgbench, {} clients", self.clients)
        };
        if rounds > 1 && self.round > 0 {
            label.push_str(&format!(", round {}", self.round));
        }
        label
    }
}

/// C′'s script: the worker's group of `-D batch=N` events applied
/// set-based in one transaction — `deploy/bench/worker-tx.sql`, which is C
/// at `batch=1`; `None` if it no longer takes `batch`.
fn group_script() -> Option<PathBuf> {
    let tx = workspace().join("deploy/bench/worker-tx.sql");
    std::fs::read_to_string(&tx)
        .ok()?
        .contains(":batch")
        .then_some(tx)
}

/// A database with seeded orders for a number of pgbench runs, each run
/// on a range of its own.
struct PgbenchBench {
    env: TestEnv,
    knobs: Knobs,
    /// Runs so far (each takes the next [`PGBENCH_ORDERS`] orders), and
    /// runs whose orders are seeded.
    done: i64,
    seeded: i64,
}

impl PgbenchBench {
    async fn new(knobs: &Knobs, runs: usize) -> PgbenchBench {
        let env = TestEnv::new().await;
        seed_shop(&env, true, 1, runs as i64 * PGBENCH_ORDERS).await;
        PgbenchBench {
            env,
            knobs: knobs.clone(),
            done: 0,
            seeded: runs as i64,
        }
    }

    async fn run_once(
        &mut self,
        workers: usize,
        batch: usize,
        round: usize,
        attempt: usize,
    ) -> Option<PgbenchRun> {
        let script = if batch > 1 {
            group_script()?
        } else {
            workspace().join("deploy/bench/worker-tx.sql")
        };
        let clients = workers * self.knobs.in_flight();
        let index = self.done;
        if index >= self.seeded {
            // A repeated run takes orders nobody counted on.
            let first = index * PGBENCH_ORDERS + 1;
            seed_shop(&self.env, false, first, first + PGBENCH_ORDERS - 1).await;
            self.seeded += 1;
        }
        self.done += 1;
        if batch > 1 {
            eprintln!("bench: C′ pgbench set-based group of {batch}, {clients} clients");
        } else {
            eprintln!("bench: C  pgbench worker transaction, {clients} clients");
        }
        let mut defines = vec![
            ("batch", "1".to_owned()),
            ("norders", PGBENCH_ORDERS.to_string()),
            ("base", (index * PGBENCH_ORDERS).to_string()),
            ("nclients", clients.to_string()),
            ("tag", format!("r{index}")),
            ("k", "0".to_owned()),
        ];
        if batch > 1 {
            defines[0].1 = batch.to_string();
        }
        analyze_filled(&self.env.pool).await;
        let pgstat = pgstat::Probe::start(&self.env.pool).await;
        let watch = load::Watch::start();
        let run = run_pgbench(
            &self.env,
            &script,
            clients,
            &self.knobs,
            &defines,
            &format!("pgbench_{index}"),
        )
        .await;
        let mut run = PgbenchRun {
            workers,
            clients,
            batch,
            round,
            run,
            load: load::RunLoad::default(),
        };
        run.load = watch.finish(&run.label(self.knobs.rounds), attempt);
        // A ceiling's section names its own slowest statement.
        pgstat
            .finish(
                &self.env.pool,
                &run.label(self.knobs.rounds),
                run.run.processed as f64 * batch as f64,
                "event",
            )
            .await;
        Some(run)
    }
}

/// What one pgbench run measured.
#[derive(Clone)]
struct PgbenchOutcome {
    /// pgbench's own tps as the rate; latencies from its `-l` log.
    stats: Stats,
    failed: u64,
    /// Transactions pgbench reports as processed.
    processed: u64,
    /// CPU time over the whole run: pgbench, PostgreSQL (whole server), …
    cpu: CpuUse,
    /// CPU of pgbench's backends over `backends_window` of the run.
    backends_cpu: Option<Duration>,
    backends_window: Duration,
}

/// Runs `script` through pgbench against `env`'s database (`-M prepared`,
/// `clients` clients on up to two threads, the knobs' window, `-D` for each
/// of `defines`, its per-transaction log as `log*` in the environment's
/// folder), metering CPU around it. Panics if pgbench is missing or fails.
async fn run_pgbench(
    env: &TestEnv,
    script: &Path,
    clients: usize,
    knobs: &Knobs,
    defines: &[(&str, String)],
    log: &str,
) -> PgbenchOutcome {
    let log_prefix = env.dir.join(log);
    let mut cmd = tokio::process::Command::new("pgbench");
    cmd.args(["-n", "-M", "prepared"])
        .arg(format!("-c{clients}"))
        .arg(format!("-j{}", clients.min(2)))
        .arg(format!("-T{}", knobs.secs))
        .arg("-f")
        .arg(script);
    for (name, value) in defines {
        cmd.arg(format!("-D{name}={value}"));
    }
    cmd.arg("-l")
        .arg(format!("--log-prefix={}", log_prefix.display()))
        .arg(env.service_url())
        .current_dir(&env.dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let limit = knobs.duration() + Duration::from_secs(60);
    let meter = CpuMeter::new().with(Who::Pgbench, []);
    // Counted from here: the test pool's backends did the seeding.
    let backends_before = backend_cpu(&env.pool, &env.db_name).await;
    let cpu_before = meter.read();
    let started = Instant::now();
    // pgbench's backends exit with it: their CPU is read shortly before.
    let sample_at = knobs.duration().saturating_sub(Duration::from_millis(700));
    let sample = async {
        tokio::time::sleep(sample_at).await;
        let cpu = backend_cpu_since(&env.pool, &env.db_name, backends_before).await;
        (cpu.map(|(backends, _)| backends), started.elapsed())
    };
    let (out, (backends_cpu, backends_window)) =
        tokio::join!(tokio::time::timeout(limit, cmd.output()), sample);
    let out = match out {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("run pgbench (is it installed? it ships with PostgreSQL): {e}"),
        Err(_) => panic!("pgbench did not finish within {limit:?}"),
    };
    let cpu = meter.since(&cpu_before);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        panic!("pgbench failed ({})", out.status);
    }
    let tps = stdout
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    let failed = pgbench_count(&stdout, "number of failed transactions:");
    let processed = pgbench_count(&stdout, "number of transactions actually processed:");
    // The rate is pgbench's own tps; the window makes `rate()` return it.
    let window = knobs.duration();
    PgbenchOutcome {
        stats: Stats {
            ok: (tps * window.as_secs_f64()).round() as u64,
            errors: failed,
            window,
            latencies_us: pgbench_latencies(&env.dir, log),
            fixed: None,
        },
        failed,
        processed,
        cpu,
        backends_cpu,
        backends_window,
    }
}

/// The number after `label` in pgbench's summary (0 if absent).
fn pgbench_count(stdout: &str, label: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Per-transaction latencies (µs, sorted) from pgbench's `-l` logs: the third
/// field of every line.
fn pgbench_latencies(dir: &Path, prefix: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines().take(10_000_000) {
            if let Some(us) = line
                .split_whitespace()
                .nth(2)
                .and_then(|v| v.parse::<u32>().ok())
            {
                out.push(us);
            }
        }
    }
    out.sort_unstable();
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

// ---------------------------------------------------------------- report

fn ms(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.2} ms", d.as_secs_f64() * 1000.0),
        None => "–".to_owned(),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("{:.2}×", a / b)
    } else {
        "–".to_owned()
    }
}

fn lat_ratio(a: Option<Duration>, b: Option<Duration>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if !b.is_zero() => format!("{:.1}×", a.as_secs_f64() / b.as_secs_f64()),
        _ => "–".to_owned(),
    }
}

struct Row {
    measurement: String,
    throughput: String,
    p50: String,
    p90: String,
    p99: String,
    vs: String,
}

impl Row {
    fn new(measurement: String, unit: &str, stats: &Stats, vs: String) -> Row {
        Row {
            measurement,
            throughput: format!("{:.0} {unit}", stats.rate()),
            p50: ms(stats.p50()),
            p90: ms(stats.p90()),
            p99: ms(stats.p99()),
            vs,
        }
    }
}

fn versus(name: &str, m: &Stats, c: &Stats) -> String {
    format!(
        "vs {name}: {} throughput, p50 {}, p99 {}",
        ratio(m.rate(), c.rate()),
        lat_ratio(m.p50(), c.p50()),
        lat_ratio(m.p99(), c.p99())
    )
}

fn print_and_write(rows: &[Row], notes: &[String], cpu_report: &cpu::Report, knobs: &Knobs) {
    let header = [
        "measurement",
        "throughput",
        "p50",
        "p90",
        "p99",
        "ratio to its ceiling",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.measurement.clone(),
                r.throughput.clone(),
                r.p50.clone(),
                r.p90.clone(),
                r.p99.clone(),
                r.vs.clone(),
            ]
        })
        .collect();
    let numeric = |i: usize| (1..5).contains(&i);
    // The first table, direct and as deployed (its goals recorded before
    // the goals are read).
    let (first_text, first_md) = routes::table().unwrap_or_default();
    println!();
    print!("{first_text}");
    println!();
    print!("{}", table::text(&header, &cells, numeric));
    println!();
    for n in notes {
        println!("note: {n}");
    }
    println!();
    print!("{}", cpu_report.text());
    let preface = machine::preface();
    let goals = machine::goals();
    let runs_load = load::summary();
    let sections = pgstat::take_sections();
    println!();
    print!("{preface}{goals}{runs_load}");
    if !sections.is_empty() {
        println!(
            "\n{} PostgreSQL sections (statements and rows per event) in target/bench-report.md",
            sections.len()
        );
    }

    let mut md = String::new();
    md.push_str("# oncehook bench\n\n");
    md.push_str(&preface);
    md.push_str(&format!(
        "\n{} CPU(s); binaries: {}; window {} s per measurement, concurrency {}, {} events per worker run, prefetch {}; {} round{} of C{} and worker ×1 interleaved where they run, and of the worker, the API, the notifier and the mailer straight to PostgreSQL and through PgBouncer, and of the growth phase's two sizes (the other phases once).\n\n",
        cpu::cores(),
        binaries_profile(),
        knobs.secs,
        knobs.concurrency,
        knobs.events,
        knobs.prefetch,
        knobs.rounds,
        if knobs.rounds == 1 { "" } else { "s" },
        if group_script().is_some() { ", C′" } else { "" }
    ));
    md.push_str(&first_md);
    if !first_md.is_empty() {
        md.push_str("\n## Every measurement\n\n");
    }
    md.push_str(&table::markdown(&header, &cells, numeric));
    md.push('\n');
    for n in notes {
        md.push_str(&format!("- {n}\n"));
    }
    md.push_str(&goals);
    md.push_str(&runs_load);
    md.push_str(&cpu_report.markdown());
    if !sections.is_empty() {
        md.push_str("\n## Where PostgreSQL's time goes, per phase\n");
        for section in &sections {
            md.push_str(section);
        }
    }
    let path = workspace().join("target/bench-report.md");
    match std::fs::write(&path, md) {
        Ok(()) => println!("\nwritten to target/bench-report.md"),
        Err(e) => eprintln!("bench: could not write target/bench-report.md: {e}"),
    }
}

/// The row of one worker run, against the pgbench run of its concurrency.
fn worker_row(run: &WorkerRun, pg: &PgbenchRun, knobs: &Knobs) -> Row {
    Row::new(
        format!(
            "worker ×{} (prefetch {}, {} committers, batch {}){}, {} events",
            run.workers,
            knobs.prefetch_for(run.batch),
            knobs.committers,
            run.batch,
            if run.traced { ", traces exported" } else { "" },
            run.events
        ),
        "events/s",
        &run.stats,
        format!(
            "vs C: {} throughput, p50 {}, p99 {}; {}",
            ratio(run.stats.rate(), pg.run.stats.rate()),
            lat_ratio(run.stats.p50(), pg.run.stats.p50()),
            lat_ratio(run.stats.p99(), pg.run.stats.p99()),
            run.pressure()
        ),
    )
}

/// What the workers' backends did over a run, sampled.
#[derive(Debug, Clone, Default)]
struct Waits {
    /// The shares, largest first, and the mean number of active ones.
    text: String,
    /// Mean number of backends in a transaction (`active` or `idle in
    /// transaction`): the transactions in flight.
    in_transaction: Option<f64>,
}

impl std::fmt::Display for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.text.is_empty() {
            f.write_str("not sampled")
        } else {
            f.write_str(&self.text)
        }
    }
}

/// Samples every 10 ms, until `processed_webhooks` holds `target` rows (or
/// the phase times out), what the workers' backends in database `db` are
/// doing: running (no wait event), waiting for a lock, for the client, …
async fn sample_waits(pool: sqlx::PgPool, db: String, target: i64) -> Waits {
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    let mut samples = 0u64;
    let mut in_transaction = 0u64;
    let deadline = Instant::now() + PHASE_TIMEOUT;
    for _ in 0..(PHASE_TIMEOUT.as_millis() / 10) {
        if Instant::now() > deadline {
            break;
        }
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT /* oncehook bench */ CASE WHEN state = 'idle' THEN 'idle'
                         WHEN wait_event IS NULL THEN 'running'
                         ELSE wait_event_type || ':' || wait_event END, count(*),
                    count(*) FILTER (WHERE state IN ('active', 'idle in transaction'))
             FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'
               AND application_name NOT LIKE 'pgbench%' AND application_name <> $2
             GROUP BY 1",
        )
        .bind(&db)
        .bind(BENCH_APP)
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
        samples += 1;
        for (what, n, in_tx) in rows {
            *counts.entry(what).or_default() += n.max(0) as u64;
            in_transaction += in_tx.max(0) as u64;
        }
        if samples.is_multiple_of(10) && count_processed_in(&pool).await >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let busy: u64 = counts
        .iter()
        .filter(|(k, _)| k.as_str() != "idle")
        .map(|(_, n)| n)
        .sum();
    if samples == 0 || busy == 0 {
        return Waits {
            text: "no active backend seen".to_owned(),
            in_transaction: (samples > 0).then_some(0.0),
        };
    }
    let mut shares: Vec<(&String, &u64)> = counts
        .iter()
        .filter(|(k, _)| k.as_str() != "idle")
        .collect();
    shares.sort_by(|a, b| b.1.cmp(a.1));
    let parts: Vec<String> = shares
        .iter()
        .take(5)
        .map(|(k, n)| format!("{k} {:.0}%", **n as f64 * 100.0 / busy as f64))
        .collect();
    Waits {
        text: format!(
            "{:.1} active on average; {}",
            busy as f64 / samples as f64,
            parts.join(", ")
        ),
        in_transaction: Some(in_transaction as f64 / samples as f64),
    }
}

/// Events processed in the last day: every one the bench made (the growth
/// phase's preloaded rows are older, and counting them would cost the
/// server a scan of the table every poll).
async fn count_processed_in(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT /* oncehook bench */ count(*) FROM processed_webhooks
         WHERE processed_at > now() - interval '1 day'",
    )
    .fetch_one(pool)
    .await
    .unwrap_or(0)
}

/// CPU ticks (user + system) so far of each client backend serving
/// database `db`, by pid (`pg_stat_activity` and `/proc/<pid>/stat`), and
/// whether it is one of the bench's own ([`BENCH_APP`]).
async fn backend_cpu(
    pool: &sqlx::PgPool,
    db: &str,
) -> Option<std::collections::BTreeMap<i32, (u64, bool)>> {
    let pids: Vec<(i32, bool)> = sqlx::query_as(
        "SELECT /* oncehook bench */ pid, application_name = $2 FROM pg_stat_activity
         WHERE datname = $1 AND backend_type = 'client backend'",
    )
    .bind(db)
    .bind(BENCH_APP)
    .fetch_all(pool)
    .await
    .ok()?;
    let out: std::collections::BTreeMap<i32, (u64, bool)> = pids
        .into_iter()
        .filter_map(|(pid, ours)| {
            let ticks = cpu::process_ticks(u32::try_from(pid).ok()?)?;
            Some((pid, (ticks.own, ours)))
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// CPU the backends of `db` used since `before`: the others' (the
/// workers'), and the bench's own. Backends that started since count from
/// zero; backends that exited meanwhile are missed.
async fn backend_cpu_since(
    pool: &sqlx::PgPool,
    db: &str,
    before: Option<std::collections::BTreeMap<i32, (u64, bool)>>,
) -> Option<(Duration, Duration)> {
    let now = backend_cpu(pool, db).await?;
    let before = before.unwrap_or_default();
    let (mut others, mut ours) = (0u64, 0u64);
    for (pid, (ticks, bench)) in &now {
        let used = ticks.saturating_sub(before.get(pid).map_or(0, |b| b.0));
        *(if *bench { &mut ours } else { &mut others }) += used;
    }
    Some((
        cpu::ticks_to_duration(others)?,
        cpu::ticks_to_duration(ours)?,
    ))
}

/// "1.23 ms per event, 1.8 cores busy".
fn cpu_per(cpu: Option<Duration>, n: u64, window: Duration, what: &str) -> String {
    match cpu {
        Some(cpu) if n > 0 => format!(
            "{:.2} ms per {what}, {:.1} cores busy",
            cpu.as_secs_f64() * 1000.0 / n as f64,
            cpu.as_secs_f64() / window.as_secs_f64().max(0.001)
        ),
        _ => "not measured (no readable postgres process in /proc)".to_owned(),
    }
}

fn binaries_profile() -> &'static str {
    let dir = process::bin_dir();
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("release") => "release",
        Some("debug") => "debug",
        _ => "custom build",
    }
}

#[tokio::main]
async fn main() {
    let knobs = Knobs::from_env();
    let started = Instant::now();
    eprintln!(
        "bench: binaries: {}, window {} s, concurrency {}, {} events, prefetch {}",
        binaries_profile(),
        knobs.secs,
        knobs.concurrency,
        knobs.events,
        knobs.prefetch
    );
    // Fail early and clearly if a binary is missing.
    let _ = process::bin("oncehook-ingest");
    let _ = process::bin("oncehook-worker");
    let _ = process::bin("oncehook-api");
    let load = machine::survey().await;
    if load.busy() {
        eprintln!(
            "bench: warning: the machine is busy ({:.2} cores used by other processes{}): goals will not be reported",
            load.others,
            if load.builds.is_empty() {
                String::new()
            } else {
                format!("; builds running: {}", load.builds.join(", "))
            }
        );
    }
    if inside::only() {
        let (rows, notes) = inside::phase(&knobs).await;
        print_and_write(&rows, &notes, &cpu::Report::default(), &knobs);
        return;
    }
    if tenants::only() {
        let (rows, notes) = tenants::phase(&knobs).await;
        print_and_write(&rows, &notes, &cpu::Report::default(), &knobs);
        return;
    }
    if fairness::only() {
        let (rows, notes) = fairness::phase(&knobs).await;
        print_and_write(&rows, &notes, &cpu::Report::default(), &knobs);
        return;
    }
    if growth::only() {
        let (rows, notes) = growth::phase(&knobs).await;
        print_and_write(&rows, &notes, &cpu::Report::default(), &knobs);
        return;
    }
    if speed::only() {
        let extra = speed::phases(&knobs).await;
        print_and_write(&extra.rows, &extra.notes, &extra.cpu, &knobs);
        return;
    }
    if api::only() {
        let api = api::phase(&knobs).await;
        print_and_write(&api.rows, &api.notes, &api.cpu, &knobs);
        api.check();
        return;
    }
    if std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "traces") {
        // Ingest untraced and traced, under the same load, one after the other.
        let http = http_phase(&knobs).await;
        let traced = traces_phase(&knobs).await;
        let c = knobs.concurrency;
        let mut rows = vec![
            Row::new(
                format!("ingest POST /webhooks/razorpay (signed), c={c}"),
                "req/s",
                &http.ingest,
                versus("A", &http.ingest, &http.healthz),
            ),
            traced_row(&traced, &http, c),
        ];
        let mut notes = vec![traced_rounds(&knobs).await];
        // And one worker at the configured batch, untraced then traced.
        let only_one = Knobs {
            traced_pair_only: true,
            ..knobs.clone()
        };
        let workers = worker_phase(&only_one).await;
        for run in &workers {
            rows.push(Row::new(
                format!(
                    "worker ×{} batch {}{}",
                    run.workers,
                    run.batch,
                    if run.traced {
                        ", traces exported (OTLP to a local sink)"
                    } else {
                        ""
                    }
                ),
                "events/s",
                &run.stats,
                String::new(),
            ));
        }
        if let [u, t] = &workers[..] {
            notes.push(format!(
                "traces exported: worker ×1 batch {} ran at {} of the same run without export (goal ≥ 0.95×); spans dropped by the worker: {}",
                t.batch,
                ratio(t.stats.rate(), u.stats.rate()),
                t.spans_dropped
                    .map_or("not readable".to_owned(), |n| n.to_string())
            ));
        }
        print_and_write(&rows, &notes, &cpu::Report::default(), &knobs);
        return;
    }
    if notify::only() {
        let (rows, notes) = notify::phase(&knobs, None).await;
        print_and_write(&rows, &notes, &cpu::Report::default(), &knobs);
        return;
    }
    if console::only() {
        let (rows, notes) = console::phase().await;
        print_and_write(&rows, &notes, &cpu::Report::default(), &knobs);
        return;
    }

    let http = http_phase(&knobs).await;
    let traced = traces_phase(&knobs).await;
    let cluster = cluster_phase(&knobs, &http).await;
    let (pgbench, workers, pooled_workers) = rounds::phase(&knobs).await;

    let c = knobs.concurrency;
    let mut rows = vec![
        Row::new(
            format!("A  plain HTTP GET /healthz, c={c}"),
            "req/s",
            &http.healthz,
            "(ceiling)".to_owned(),
        ),
        Row::new(
            format!(
                "B  broker publish+confirm, quorum queue, {c} publishers, {} B",
                http.envelope_bytes
            ),
            "msg/s",
            &http.broker,
            "(ceiling)".to_owned(),
        ),
        Row::new(
            format!("ingest POST /webhooks/razorpay (signed), c={c}"),
            "req/s",
            &http.ingest,
            format!(
                "{}; {}",
                versus("A", &http.ingest, &http.healthz),
                versus("B", &http.ingest, &http.broker)
            ),
        ),
    ];
    rows.push(traced_row(&traced, &http, c));
    machine::goal_on(
        "traced ingest ≥ 0.95× untraced, with 0 spans dropped",
        format!(
            "{}; {}",
            ratio(traced.ingest.rate(), http.ingest.rate()),
            traced.spans_line()
        ),
        traced.ingest.rate() >= 0.95 * http.ingest.rate() && traced.spans.1 == Some(0),
        &[&traced.load, &http.load],
    );
    machine::goal_on(
        "ingest ≥ 0.65× B (two shared cores)",
        ratio(http.ingest.rate(), http.broker.rate()),
        http.ingest.rate() >= 0.65 * http.broker.rate(),
        &[&http.load],
    );
    let server_side = |what: &str, fixed: Option<[Duration; 3]>, vs: String| Row {
        measurement: format!("  ingest, server side: {what}"),
        throughput: "–".to_owned(),
        p50: ms(fixed.map(|f| f[0])),
        p90: ms(fixed.map(|f| f[1])),
        p99: ms(fixed.map(|f| f[2])),
        vs,
    };
    rows.push(server_side(
        "whole request (histogram)",
        http.ingest_request,
        "inside the handler; the rest of the client's latency is HTTP and the client".to_owned(),
    ));
    rows.push(server_side(
        "publish + confirm (histogram)",
        http.ingest_publish,
        format!(
            "vs B: p50 {}, p99 {}",
            lat_ratio(http.ingest_publish.map(|f| f[0]), http.broker.p50()),
            lat_ratio(http.ingest_publish.map(|f| f[2]), http.broker.p99())
        ),
    ));
    let mut notes = Vec::new();
    let (round_rows, round_notes) = rounds_report(&knobs, &pgbench, &workers);
    rows.extend(round_rows);
    notes.extend(round_notes);
    for pg in &pgbench {
        let sampled = (pg.run.stats.rate() * pg.run.backends_window.as_secs_f64()) as u64;
        notes.push(format!(
            "PostgreSQL CPU, {}: its backends {}; whole server {}",
            pg.label(knobs.rounds),
            cpu_per(
                pg.run.backends_cpu,
                sampled,
                pg.run.backends_window,
                "transaction"
            ),
            cpu_per(
                pg.run.cpu.of(Who::Postgres),
                pg.run.processed,
                pg.run.cpu.window,
                "transaction"
            )
        ));
        let events = pg.run.processed * pg.batch as u64;
        if events > PGBENCH_ORDERS as u64 {
            notes.push(format!(
                "{}: {events} events over a range of {PGBENCH_ORDERS} orders — the range was used up and the rest paid orders already paid",
                pg.label(knobs.rounds)
            ));
        }
        if pg.run.failed > 0 {
            notes.push(format!(
                "{}: {} failed transactions",
                pg.label(knobs.rounds),
                pg.run.failed
            ));
        }
    }
    if group_script().is_none() {
        notes.push(
            "C′ not available: no script here takes -D batch (the worker's group applied set-based)".to_owned(),
        );
    }
    for run in workers.iter().chain(&pooled_workers) {
        let label = run.label(knobs.rounds);
        notes.push(format!(
            "PostgreSQL CPU, {label}: its backends {}; whole server {}",
            cpu_per(
                run.backends_cpu,
                run.events as u64,
                run.stats.window,
                "event"
            ),
            cpu_per(
                run.cpu.of(Who::Postgres),
                run.events as u64,
                run.cpu.window,
                "event"
            )
        ));
        notes.push(format!(
            "{label}: {}; backends sampled in pg_stat_activity: {}",
            run.pressure(),
            run.waits
        ));
        if run.applied != run.events as i64 || run.dead > 0 {
            notes.push(format!(
                "{label}: {} of {} events applied, {} dead-lettered",
                run.applied, run.events, run.dead
            ));
        }
    }
    if let Some(t) = workers.iter().find(|r| r.traced)
        && let Some(u) = workers
            .iter()
            .find(|r| !r.traced && r.workers == t.workers && r.batch == t.batch)
    {
        notes.push(format!(
            "traces exported: worker ×{} batch {} ran at {} of the same run without export (goal ≥ 0.95×); spans dropped by the workers: {}{}",
            t.workers,
            t.batch,
            ratio(t.stats.rate(), u.stats.rate()),
            t.spans_dropped
                .map_or("not readable".to_owned(), |n| n.to_string()),
            if t.spans_dropped == Some(0) {
                ""
            } else {
                " (a run that exported less is cheaper: not comparable)"
            }
        ));
    }
    for batch in workers.iter().map(|r| r.batch).filter(|b| *b > 1).take(1) {
        // The median of the rounds' runs (one run for two workers).
        let rate = |w: usize, b: usize| {
            let rates: Vec<f64> = workers
                .iter()
                .filter(|r| r.workers == w && r.batch == b && !r.traced)
                .map(|r| r.stats.rate())
                .collect();
            median(&rates)
        };
        let loads: Vec<&load::RunLoad> = workers.iter().map(|r| &r.load).collect();
        machine::goal_on(
            &format!("batch {batch} at least as fast as batch 1 in every worker row"),
            format!(
                "one worker {}, two {}",
                ratio(rate(1, batch), rate(1, 1)),
                ratio(rate(2, batch), rate(2, 1))
            ),
            rate(1, batch) >= rate(1, 1) && rate(2, batch) >= rate(2, 1),
            &loads,
        );
        notes.push(format!(
            "group commit (batch {batch} vs 1): {} events/s with one worker, {} with two",
            ratio(rate(1, batch), rate(1, 1)),
            ratio(rate(2, batch), rate(2, 1))
        ));
    }
    for batch in workers
        .iter()
        .map(|r| r.batch)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let rate = |w: usize| {
            workers
                .iter()
                .find(|r| r.workers == w && r.batch == batch)
                .map_or(0.0, |r| r.stats.rate())
        };
        notes.push(format!(
            "worker scaling 1 → 2 processes on this machine, batch {batch}: {} events/s",
            ratio(rate(2), rate(1))
        ));
    }
    for (name, s) in [
        ("A", &http.healthz),
        ("ingest", &http.ingest),
        ("B", &http.broker),
    ] {
        if s.errors > 0 {
            notes.push(format!("{name}: {} failed requests", s.errors));
        }
    }
    notes.push(
        "worker latencies are per transaction (begin to commit), from the workers' \
         oncehook_worker_transaction_duration_seconds histogram, interpolated within its buckets; \
         pgbench latencies are per transaction from its log"
            .to_owned(),
    );
    notes.push(
        "client, services and load generator share the same machine; ratios, not absolute figures, are the result"
            .to_owned(),
    );
    if let Some(cluster) = cluster {
        rows.extend(cluster.rows);
        notes.extend(cluster.notes);
    }
    let (median_pg, median_workers) = median_runs(&pgbench, &workers);
    let mut cpu = cpu_report(&http, &median_workers, &median_pg, c);
    // The worker through PgBouncer: its budget beside the direct ones'.
    let (_, median_pooled) = median_runs(&[], &pooled_workers);
    cpu.budgets
        .extend(median_pooled.iter().map(WorkerRun::budget));
    let extra = speed::phases(&knobs).await;
    rows.extend(extra.rows);
    notes.extend(extra.notes);
    cpu.extend(extra.cpu);
    let (inside_rows, inside_notes) =
        load::recorded("the worker's inside", inside::phase(&knobs)).await;
    rows.extend(inside_rows);
    notes.extend(inside_notes);
    let mut api = api::phase(&knobs).await;
    rows.append(&mut api.rows);
    notes.append(&mut api.notes);
    cpu.extend(std::mem::take(&mut api.cpu));
    let worker_rate = workers
        .iter()
        .filter(|r| r.workers == 1 && !r.traced)
        .map(|r| r.stats.rate())
        .reduce(f64::max);
    let (notify_rows, notify_notes) = notify::phase(&knobs, worker_rate).await;
    rows.extend(notify_rows);
    notes.extend(notify_notes);
    let (console_rows, console_notes) = load::recorded("the console", console::phase()).await;
    rows.extend(console_rows);
    notes.extend(console_notes);
    let (growth_rows, growth_notes) = growth::phase(&knobs).await;
    rows.extend(growth_rows);
    notes.extend(growth_notes);
    let (fairness_rows, fairness_notes) = fairness::phase(&knobs).await;
    rows.extend(fairness_rows);
    notes.extend(fairness_notes);
    let (tenants_rows, tenants_notes) = tenants::phase(&knobs).await;
    rows.extend(tenants_rows);
    notes.extend(tenants_notes);
    print_and_write(&rows, &notes, &cpu, &knobs);
    api.check();
    eprintln!("bench: done in {:.0} s", started.elapsed().as_secs_f64());
}

/// Waits (at most [`PHASE_TIMEOUT`]) until `n` delivery records whose
/// event id is `LIKE like` are committed; whether they were.
async fn wait_processed(pool: &sqlx::PgPool, like: &str, n: usize) -> bool {
    wait_for(PHASE_TIMEOUT, || async {
        let rows: i64 =
            sqlx::query_scalar("SELECT count(*) FROM processed_webhooks WHERE event_id LIKE $1")
                .bind(like)
                .fetch_one(pool)
                .await
                .unwrap_or(0);
        (rows as usize >= n).then_some(())
    })
    .await
    .is_some()
}

/// Whether `ONCEHOOK_BENCH_ONLY` names `phase`.
fn only_phase(phase: &str) -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == phase)
}

/// A count from the environment (`_` allowed as a separator), `default`
/// when unset or unreadable, kept within `lo..=hi`.
fn env_count(name: &str, default: usize, lo: usize, hi: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
        .clamp(lo, hi)
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    match v.len() {
        0 => 0.0,
        n if n % 2 == 0 => (v[mid - 1] + v[mid]) / 2.0,
        _ => v[mid],
    }
}

/// "median 1.70 ms (1.63–1.94 ms over 3 rounds)": [`spread`] in any unit.
fn spread_of(v: &[f64], unit: &str) -> String {
    let min = v.iter().copied().reduce(f64::min).unwrap_or(0.0);
    let max = v.iter().copied().reduce(f64::max).unwrap_or(0.0);
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    format!(
        "median {:.2}{unit} ({min:.2}–{max:.2}{unit} over {} round{})",
        median(v),
        v.len(),
        if v.len() == 1 { "" } else { "s" }
    )
}

/// "median 0.85× (0.80–0.90× over 3 rounds)".
fn spread(v: &[f64]) -> String {
    let min = v.iter().copied().reduce(f64::min).unwrap_or(0.0);
    let max = v.iter().copied().reduce(f64::max).unwrap_or(0.0);
    format!(
        "median {:.2}× ({min:.2}–{max:.2}× over {} round{})",
        median(v),
        v.len(),
        if v.len() == 1 { "" } else { "s" }
    )
}

/// The run with the median rate among `runs` (the upper middle of an even
/// count): the figures the table shows for a kind measured in rounds.
fn median_run<T>(runs: &[T], rate: impl Fn(&T) -> f64) -> Option<&T> {
    let mut sorted: Vec<&T> = runs.iter().collect();
    sorted.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    sorted.get(sorted.len() / 2).copied()
}

/// For each kind of pgbench run (clients, group size) and of worker run
/// (workers, batch, traced), the run with the median rate.
fn median_runs(pg: &[PgbenchRun], workers: &[WorkerRun]) -> (Vec<PgbenchRun>, Vec<WorkerRun>) {
    let mut pg_kinds: Vec<(usize, usize)> = Vec::new();
    for r in pg {
        if !pg_kinds.contains(&(r.workers, r.batch)) {
            pg_kinds.push((r.workers, r.batch));
        }
    }
    let pg_out = pg_kinds
        .into_iter()
        .filter_map(|(w, b)| {
            let runs: Vec<PgbenchRun> = pg
                .iter()
                .filter(|r| r.workers == w && r.batch == b)
                .cloned()
                .collect();
            median_run(&runs, PgbenchRun::event_rate).cloned()
        })
        .collect();
    let mut kinds: Vec<(usize, usize, bool)> = Vec::new();
    for r in workers {
        if !kinds.contains(&(r.workers, r.batch, r.traced)) {
            kinds.push((r.workers, r.batch, r.traced));
        }
    }
    let worker_out = kinds
        .into_iter()
        .filter_map(|(w, b, t)| {
            let runs: Vec<WorkerRun> = workers
                .iter()
                .filter(|r| r.workers == w && r.batch == b && r.traced == t)
                .cloned()
                .collect();
            median_run(&runs, |r| r.stats.rate()).cloned()
        })
        .collect();
    (pg_out, worker_out)
}

/// The rows of the ceilings and worker runs: C (and C′) and worker ×1 at
/// each batch as the median of the rounds, each worker's ratio per round
/// to the C (and C′) of its round, median and spread; then C with two
/// workers' clients and the runs outside the rounds as before.
fn rounds_report(
    knobs: &Knobs,
    pg: &[PgbenchRun],
    workers: &[WorkerRun],
) -> (Vec<Row>, Vec<String>) {
    let (mut rows, mut notes) = (Vec::new(), Vec::new());
    let rounds = knobs.rounds;
    let of_rounds = format!(
        "median of {rounds} round{}",
        if rounds == 1 { "" } else { "s" }
    );
    let c_runs: Vec<PgbenchRun> = pg
        .iter()
        .filter(|r| r.round > 0 && r.batch == 1)
        .cloned()
        .collect();
    let g_runs: Vec<PgbenchRun> = pg
        .iter()
        .filter(|r| r.round > 0 && r.batch > 1)
        .cloned()
        .collect();
    let c_of = |round: usize| c_runs.iter().find(|r| r.round == round);
    let g_of = |round: usize| g_runs.iter().find(|r| r.round == round);
    let rates = |runs: &[PgbenchRun]| runs.iter().map(PgbenchRun::event_rate).collect::<Vec<_>>();
    if let Some(c) = median_run(&c_runs, PgbenchRun::event_rate) {
        let r = rates(&c_runs);
        rows.push(Row::new(
            format!(
                "C  pgbench worker transaction, {} clients, {of_rounds}",
                c.clients
            ),
            "tps",
            &c.run.stats,
            format!(
                "(ceiling) {:.0}–{:.0} tps over the rounds",
                r.iter().copied().reduce(f64::min).unwrap_or(0.0),
                r.iter().copied().reduce(f64::max).unwrap_or(0.0)
            ),
        ));
    }
    if let Some(g) = median_run(&g_runs, PgbenchRun::event_rate) {
        let r = rates(&g_runs);
        let scaled = Stats {
            ok: g.run.stats.ok * g.batch as u64,
            ..g.run.stats.clone()
        };
        rows.push(Row::new(
            format!(
                "C′ pgbench set-based group of {}, {} clients, {of_rounds}",
                g.batch, g.clients
            ),
            "events/s",
            &scaled,
            format!(
                "(ceiling) {:.0} tps × {} events; {:.0}–{:.0} events/s over the rounds; latencies per group",
                g.run.stats.rate(),
                g.batch,
                r.iter().copied().reduce(f64::min).unwrap_or(0.0),
                r.iter().copied().reduce(f64::max).unwrap_or(0.0)
            ),
        ));
    }
    for batch in batches(knobs) {
        let runs: Vec<WorkerRun> = workers
            .iter()
            .filter(|r| r.round > 0 && r.workers == 1 && r.batch == batch && !r.traced)
            .cloned()
            .collect();
        let Some(mid) = median_run(&runs, |r| r.stats.rate()) else {
            continue;
        };
        let vs_c: Vec<f64> = runs
            .iter()
            .filter_map(|r| Some(r.stats.rate() / c_of(r.round)?.event_rate()))
            .collect();
        let vs_g: Vec<f64> = runs
            .iter()
            .filter(|r| r.batch == knobs.batch && batch > 1)
            .filter_map(|r| Some(r.stats.rate() / g_of(r.round)?.event_rate()))
            .collect();
        let mut vs = format!("vs C of its round: {}", spread(&vs_c));
        if let Some(c) = c_of(mid.round) {
            vs.push_str(&format!(
                "; median round's p50 {}, p99 {}",
                lat_ratio(mid.stats.p50(), c.run.stats.p50()),
                lat_ratio(mid.stats.p99(), c.run.stats.p99())
            ));
        }
        if !vs_g.is_empty() {
            vs.push_str(&format!("; vs C′: {}", spread(&vs_g)));
        } else if batch > 1 {
            vs.push_str("; C′ not available");
        }
        vs.push_str(&format!("; {}", mid.pressure()));
        // The verdicts rest on these runs and on the ceilings of their rounds.
        let mut loads: Vec<&load::RunLoad> = runs.iter().map(|r| &r.load).collect();
        loads.extend(c_runs.iter().chain(&g_runs).map(|r| &r.load));
        rows.push(Row::new(
            format!(
                "worker ×1 (prefetch {}, {} committers, batch {batch}), {} events, {of_rounds}",
                knobs.prefetch_for(batch),
                knobs.committers,
                mid.events
            ),
            "events/s",
            &mid.stats,
            vs,
        ));
        if !vs_c.is_empty() {
            // One transaction per event approaches C; groups must beat it.
            let least = if batch == 1 { 0.6 } else { 1.5 };
            machine::goal_on(
                &format!("worker ×1 batch {batch} ≥ {least}× C ({of_rounds})"),
                spread(&vs_c),
                median(&vs_c) >= least,
                &loads,
            );
        }
        if !vs_g.is_empty() {
            machine::goal_on(
                &format!("worker ×1 batch {batch} ≥ 0.7× the set-based C′ ({of_rounds})"),
                spread(&vs_g),
                median(&vs_g) >= 0.7,
                &loads,
            );
        }
        let pg_ms: Vec<f64> = runs.iter().filter_map(WorkerRun::postgres_ms).collect();
        if !pg_ms.is_empty() {
            let most = if batch == 1 { 1.2 } else { 0.5 };
            let met = median(&pg_ms) <= most;
            machine::goal_on(
                &format!(
                    "PostgreSQL CPU per event, worker ×1 batch {batch}, whole server ≤ {most} ms ({of_rounds})"
                ),
                format!("{}{}", spread_of(&pg_ms, "ms"), mid.stopped_by(met)),
                met,
                &loads,
            );
        }
        let in_tx: Vec<f64> = runs.iter().filter_map(|r| r.waits.in_transaction).collect();
        if batch > 1 && !in_tx.is_empty() {
            machine::goal_on(
                &format!(
                    "worker ×1 batch {batch}: ≥ 8 transactions in flight on average ({of_rounds})"
                ),
                spread_of(&in_tx, ""),
                median(&in_tx) >= 8.0,
                &loads,
            );
        }
        for r in &runs {
            notes.push(format!(
                "round {}: worker ×1 batch {batch} {:.0} events/s, C {}, ratio {}{}",
                r.round,
                r.stats.rate(),
                c_of(r.round).map_or("–".to_owned(), |c| format!("{:.0} tps", c.event_rate())),
                c_of(r.round).map_or("–".to_owned(), |c| ratio(r.stats.rate(), c.event_rate())),
                g_of(r.round)
                    .filter(|_| batch > 1)
                    .map_or(String::new(), |g| format!(
                        "; C′ {:.0} events/s, ratio {}",
                        g.event_rate(),
                        ratio(r.stats.rate(), g.event_rate())
                    ))
            ));
        }
    }
    for c2 in pg.iter().filter(|r| r.round == 0) {
        rows.push(Row::new(
            format!("C  pgbench worker transaction, {} clients", c2.clients),
            "tps",
            &c2.run.stats,
            "(ceiling)".to_owned(),
        ));
        for run in workers
            .iter()
            .filter(|r| r.round == 0 && r.workers == c2.workers)
        {
            rows.push(worker_row(run, c2, knobs));
        }
    }
    for run in workers
        .iter()
        .filter(|r| r.round == 0 && !pg.iter().any(|p| p.round == 0 && p.workers == r.workers))
    {
        if let Some(c) = c_runs.first() {
            rows.push(worker_row(run, c, knobs));
        }
    }
    (rows, notes)
}

/// The CPU budgets of the pipeline's phases, and what they say about the
/// goals: ingest against B, each worker run against C of its concurrency.
fn cpu_report(
    http: &HttpPhase,
    workers: &[WorkerRun],
    pgbench: &[PgbenchRun],
    c: usize,
) -> cpu::Report {
    let mut report = cpu::Report::default();
    let b = Budget::of_rate(
        format!("B  publish+confirm, quorum queue, {c} publishers"),
        "msg",
        http.broker.rate(),
        http.broker_cpu.clone(),
    );
    let ingest = Budget::of_rate(
        format!("ingest POST /webhooks/razorpay, c={c}"),
        "req",
        http.ingest.rate(),
        http.ingest_cpu.clone(),
    );
    report.notes.push(cpu::limit_line(
        "ingest ≥ 0.65× B",
        &ingest,
        &b,
        Who::Rabbitmq,
    ));
    report.budgets.extend([b, ingest]);
    for pg in pgbench {
        let ceiling = pg.budget();
        if pg.batch > 1 {
            // C′: its own budget; the goals are against C.
            report.budgets.push(ceiling);
            continue;
        }
        let runs: Vec<Budget> = workers
            .iter()
            .filter(|r| r.workers == pg.workers)
            .map(WorkerRun::budget)
            .collect();
        for (run, budget) in workers
            .iter()
            .filter(|r| r.workers == pg.workers)
            .zip(&runs)
        {
            let goal = match (run.workers, run.batch) {
                (1, 1) => "goal ≥ 0.6× C, ",
                (1, _) => "goal ≥ 1.5× C, ",
                _ => "",
            };
            report.notes.push(cpu::limit_line(
                &format!("{goal}{} vs C {} clients", budget.label, pg.clients),
                budget,
                &ceiling,
                Who::Postgres,
            ));
        }
        report.budgets.push(ceiling);
        report.budgets.extend(runs);
    }
    report
}

impl WorkerRun {
    /// CPU per event over the whole drain (from the workers' start).
    fn budget(&self) -> Budget {
        Budget {
            label: self.label(1),
            unit: "event",
            ops: self.events as f64,
            rate: self.stats.rate(),
            cpu: self.cpu.clone(),
        }
    }
}

impl PgbenchRun {
    /// CPU per transaction over the whole pgbench run.
    fn budget(&self) -> Budget {
        Budget {
            label: self.label(1),
            unit: "tx",
            ops: self.run.processed as f64,
            rate: self.run.stats.rate(),
            cpu: self.run.cpu.clone(),
        }
    }
}

// ---------------------------------------------------------------- cluster

/// The rows and notes of the optional cluster section.
struct ClusterPhase {
    rows: Vec<Row>,
    notes: Vec<String>,
}

/// With `ONCEHOOK_BENCH_CLUSTER=1`: ceiling B and ingest on the local
/// three-node cluster, as ratios to the single-node figures of `single`.
async fn cluster_phase(knobs: &Knobs, single: &HttpPhase) -> Option<ClusterPhase> {
    if std::env::var("ONCEHOOK_BENCH_CLUSTER").ok().as_deref() != Some("1") {
        return None;
    }
    eprintln!("bench: cluster: starting the local three-node cluster if it is down");
    // Asked for: a cluster that is missing or fails to start fails the bench.
    let cluster = Cluster::ensure().await;
    let mut env = TestEnv::new().await;
    env.use_broker(&cluster.urls);
    let (_ingest, base) = env.start_ingest().await;
    let c = knobs.concurrency;
    eprintln!("bench: cluster: ingest POST /webhooks/razorpay, c={c}");
    let http = http_client(c);
    let deliveries: Arc<Vec<SignedDelivery>> =
        Arc::new((0..1024).map(|n| captured(&env, n, "cluster")).collect());
    let ingest = {
        let (http, url) = (http.clone(), Arc::new(format!("{base}/webhooks/razorpay")));
        closed_loop(
            c,
            Duration::from_secs(1),
            knobs.duration(),
            2_000_000,
            move |i| {
                let (http, url, deliveries) = (http.clone(), url.clone(), deliveries.clone());
                async move { post(&http, &url, &deliveries[i % deliveries.len()]).await }
            },
        )
        .await
    };
    let events = format!("{}.events", env.prefix);
    let placement = cluster.queue_nodes(&events).await;

    // The same envelope bytes as the single-node ceiling, through the first node.
    let conn = broker::connect_on(&cluster.urls).await;
    let ch = conn.create_channel().await.expect("channel");
    let msg = ch
        .basic_get(events.as_str().into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
        .expect("the events queue holds the posted deliveries");
    let sample = Envelope::from_bytes(&msg.delivery.data).expect("an oncehook envelope");
    let _ = conn.close(200, "sampled".into()).await;
    let first = cluster
        .urls
        .split(',')
        .next()
        .unwrap_or(broker::AMQP_URL)
        .to_owned();
    eprintln!(
        "bench: cluster: B  publish+confirm to a quorum queue with 3 replicas, {c} publishers"
    );
    let broker = broker_ceiling_at(&first, &env.prefix, &sample, knobs).await;

    let rows = vec![
        Row::new(
            format!("B3 broker publish+confirm, 3-node cluster (3 replicas), {c} publishers"),
            "msg/s",
            &broker,
            format!(
                "ceiling on the cluster; {}",
                versus("B (one node)", &broker, &single.broker)
            ),
        ),
        Row::new(
            format!("ingest POST on the 3-node cluster, c={c}"),
            "req/s",
            &ingest,
            format!(
                "{}; {}",
                versus("ingest on one node", &ingest, &single.ingest),
                versus("B3", &ingest, &broker)
            ),
        ),
    ];
    let mut notes = vec![format!(
        "cluster: {} nodes on this same machine (replication costs CPU here, not network); B3's queue leader is on the node it publishes through",
        cluster.nodes.len()
    )];
    if let Some(q) = placement {
        notes.push(format!(
            "cluster: ingest's events queue led by {}, replicas on {}",
            q.leader,
            q.members.join(", ")
        ));
    }
    for (name, s) in [("cluster ingest", &ingest), ("B3", &broker)] {
        if s.errors > 0 {
            notes.push(format!("{name}: {} failed requests", s.errors));
        }
    }
    Some(ClusterPhase { rows, notes })
}
