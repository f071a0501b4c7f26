//! The shop API's `POST /v1/orders` (`oncehook-api`): orders created per
//! second through the API and its latency, against ceiling D, the same
//! transaction as a pgbench script (`deploy/bench/api-order-tx.sql`).
//!
//! * Measured: the real binary with its own database, the bench's 50
//!   products created beforehand with `PUT /v1/products/{sku}`, then a
//!   closed loop of `ONCEHOOK_BENCH_CONCURRENCY` clients, each posting a new
//!   order (a fresh `Idempotency-Key`, a distinct `order_ref`, one or two
//!   items, a Razorpay reference, metadata) for `ONCEHOOK_BENCH_SECS` after
//!   a warm-up, at most `ONCEHOOK_BENCH_ORDERS` in all. The API's pool gets
//!   as many connections as there are clients, so that it can run as many
//!   transactions at once as pgbench.
//! * Ceiling D: pgbench with the same number of clients for the same window,
//!   each transaction a new order under a new key, in a database of its own
//!   with the same products.
//! * CPU per order by process group around both windows ([`crate::cpu`]).
//! * Routes: the API straight to PostgreSQL and through PgBouncer in
//!   transaction mode ([`crate::routes`]), in `ONCEHOOK_BENCH_ROUNDS`
//!   rounds, the two in alternating order, each in a fresh database; the
//!   goal on PostgreSQL's CPU per order is the deployed route's.
//!
//! Every answer must be 201, and the database must hold exactly as many
//! orders as there were 201s (warm-up included): a mismatch is reported and
//! fails the run after the report is written (`make bench-smoke` relies on
//! that). Timings fail nothing. `ONCEHOOK_BENCH_ONLY=api` runs only this
//! phase.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use oncehook_e2e::TestEnv;
use oncehook_e2e::api::{Api, FULL_KEY};
use serde_json::json;

use crate::cpu::{self, Budget, CpuMeter, CpuUse, Who};
use crate::load::{self, RunLoad};
use crate::routes::{self, Route, Subject};
use crate::{
    Knobs, Row, SKUS, Stats, WARMUP, closed_loop, http_client, median_run, run_pgbench, seed_shop,
    versus, workspace,
};

/// Rows, notes and CPU budgets of this phase, and what went wrong.
pub struct ApiPhase {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    pub cpu: cpu::Report,
    /// Answers other than 201, or orders the database does not agree on.
    pub failures: Vec<String>,
}

impl ApiPhase {
    /// Fails the run if an answer was not 201 or the orders do not add up
    /// (after the report is written, so that it shows the figures).
    pub fn check(&self) {
        assert!(
            self.failures.is_empty(),
            "the shop API bench went wrong:\n{}",
            self.failures.join("\n")
        );
    }
}

/// Whether only this phase should run.
pub fn only() -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "api")
}

/// The most orders one run posts (`ONCEHOOK_BENCH_ORDERS`, 200,000).
fn max_orders() -> usize {
    std::env::var("ONCEHOOK_BENCH_ORDERS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(200_000)
        .clamp(10, 10_000_000)
}

/// Every answer of a run, the warm-up's included.
#[derive(Default)]
struct Tally {
    created: AtomicU64,
    /// Anything but 201, by status and error code (or transport error).
    other: Mutex<BTreeMap<String, u64>>,
}

impl Tally {
    fn refused(&self, what: String) {
        if let Ok(mut other) = self.other.lock() {
            *other.entry(what).or_default() += 1;
        }
    }

    fn others(&self) -> BTreeMap<String, u64> {
        self.other.lock().map(|o| o.clone()).unwrap_or_default()
    }
}

/// The measured side: the API's closed loop.
struct ApiRun {
    stats: Stats,
    cpu: CpuUse,
    created: u64,
    others: BTreeMap<String, u64>,
    /// Orders the database holds afterwards (`None`: not readable).
    in_database: Option<i64>,
    /// The statement that took PostgreSQL the most time, with its ms per
    /// order, and the statements and planning per order.
    statements: crate::pgstat::Summary,
    route: Route,
    round: usize,
    /// Transactions PgBouncer passed on (pooled runs).
    passed: Option<u64>,
    load: RunLoad,
}

impl ApiRun {
    fn label(&self) -> String {
        format!("API POST /v1/orders{}", self.route.suffix())
    }

    /// Orders within the metered window.
    fn orders(&self) -> f64 {
        self.stats.rate() * self.cpu.window.as_secs_f64()
    }

    fn postgres_ms(&self) -> Option<f64> {
        let pg = self.cpu.of(Who::Postgres)?;
        (self.orders() > 0.0).then(|| pg.as_secs_f64() * 1_000.0 / self.orders())
    }

    fn figures(&self) -> routes::Figures {
        routes::Figures {
            rate: self.stats.rate(),
            ops: self.orders(),
            cpu: self.cpu.clone(),
            statements: self.statements.statements,
            planning_ms: self.statements.planning_ms,
            passed: self.passed,
            load: self.load.clone(),
        }
    }
}

pub async fn phase(knobs: &Knobs) -> ApiPhase {
    let mut runs = Vec::new();
    for round in 1..=knobs.rounds {
        for route in Route::in_round(round) {
            let label = format!("API POST /v1/orders{}, round {round}", route.suffix());
            let (run, load) = load::settled(&label, || api_run(knobs, route, round)).await;
            let run = ApiRun { load, ..run };
            routes::record(Subject::Api, route, round, run.figures());
            runs.push(run);
        }
    }
    let (ceiling, load) = load::settled("ceiling D", || ceiling_run(knobs)).await;
    report(knobs, &runs, &ceiling, &load)
}

/// The bench's order `n`: one item, every other order a second one, as the
/// pgbench script makes them.
fn order_body(n: usize) -> String {
    let sku = |i: usize| format!("SKU-{:03}", i % SKUS as usize);
    let qty = 1 + n % 3;
    let mut items = vec![json!({"sku": sku(n), "qty": qty, "unit_minor": 25_000})];
    if n % 2 == 1 {
        items.push(json!({"sku": sku(n * 7 + 3), "qty": 1, "unit_minor": 25_000}));
    }
    let units = qty + usize::from(n % 2 == 1);
    json!({
        "order_ref": format!("api_{n}"),
        "customer_email": "buyer@shop.example",
        "currency": "INR",
        "amount_minor": 25_000 * units,
        "items": items,
        "gateway_refs": {"razorpay": format!("order_rzp_api_{n}")},
        "metadata": {"cart": format!("c-{n}")},
    })
    .to_string()
}

/// Posts order `n`; true for a 201, anything else is tallied.
async fn post_order(http: &reqwest::Client, url: &str, n: usize, tally: &Tally) -> bool {
    let sent = http
        .post(url)
        .header("Authorization", format!("Bearer {FULL_KEY}"))
        .header("Idempotency-Key", format!("bench-{n}"))
        .header("Content-Type", "application/json")
        .body(order_body(n))
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(e) => {
            let kind = if e.is_timeout() { "timeout" } else { "error" };
            tally.refused(format!("transport {kind}"));
            return false;
        }
    };
    let status = resp.status().as_u16();
    let text = resp.text().await;
    match (status, text) {
        (201, Ok(_)) => {
            tally.created.fetch_add(1, Ordering::Relaxed);
            true
        }
        (status, text) => {
            let code = text
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|j| j["error"].as_str().map(str::to_owned))
                .unwrap_or_default();
            tally.refused(format!("HTTP {status} {code}").trim_end().to_owned());
            false
        }
    }
}

async fn api_run(knobs: &Knobs, route: Route, round: usize) -> ApiRun {
    let mut env = TestEnv::new().await;
    let c = knobs.concurrency;
    let pool_size = c.max(2).to_string();
    let pooler = (route == Route::Pooled).then(|| routes::Pooler::start(&env));
    let via = routes::Via::new(pooler.as_ref());
    let api = Api::start(
        &mut env,
        &via.vars(&[("ONCEHOOK_DATABASE_MAX_CONNECTIONS", pool_size.as_str())]),
    )
    .await;
    for s in 0..SKUS {
        api.product(&format!("SKU-{s:03}"), 100_000_000).await;
    }
    crate::analyze_filled(&env.pool).await;
    eprintln!("bench: shop API POST /v1/orders{}, c={c}", route.suffix());
    let pgstat = crate::pgstat::Probe::start(&env.pool).await;
    let tally = Arc::new(Tally::default());
    let meter = via.meter(CpuMeter::new().with(Who::Api, [api.proc.pid()]));
    let per_task = max_orders().div_ceil(c);
    let (stats, cpu) = {
        let http = http_client(c);
        let url = Arc::new(format!("{}/v1/orders", api.base));
        let tally = tally.clone();
        let load = closed_loop(c, WARMUP, knobs.duration(), per_task, move |n| {
            let (http, url, tally) = (http.clone(), url.clone(), tally.clone());
            async move { post_order(&http, &url, n, &tally).await }
        });
        cpu::during(&meter, WARMUP, knobs.duration(), load).await
    };
    let passed = via.passed();
    let in_database = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM orders")
        .fetch_one(&env.pool)
        .await
        .ok();
    let mut proc = api.proc;
    proc.signal("TERM");
    if proc.wait_exit(Duration::from_secs(15)).is_none() {
        proc.kill();
    }
    via.settle();
    let created = tally.created.load(Ordering::Relaxed);
    let statements = pgstat
        .finish(
            &env.pool,
            &format!(
                "the shop API POST /v1/orders{}, c={c}, round {round} (warm-up included)",
                route.suffix()
            ),
            created as f64,
            "order",
        )
        .await;
    ApiRun {
        stats,
        cpu,
        created,
        others: tally.others(),
        in_database,
        statements,
        route,
        round,
        passed,
        load: RunLoad::default(),
    }
}

/// Ceiling D: the API's transaction through pgbench, as many clients.
async fn ceiling_run(knobs: &Knobs) -> crate::PgbenchOutcome {
    let env = TestEnv::new().await;
    seed_shop(&env, true, 1, 0).await;
    let clients = knobs.concurrency;
    eprintln!("bench: D  pgbench API order transaction, {clients} clients");
    let script = workspace().join("deploy/bench/api-order-tx.sql");
    let defines = [("nclients", clients.to_string()), ("k", "0".to_owned())];
    let pgstat = crate::pgstat::Probe::start(&env.pool).await;
    let run = run_pgbench(&env, &script, clients, knobs, &defines, "pgbench_api").await;
    // Ceiling D's section names its own slowest statement.
    pgstat
        .finish(
            &env.pool,
            &format!("D  pgbench API order transaction, {clients} clients"),
            run.processed as f64,
            "order",
        )
        .await;
    run
}

fn report(
    knobs: &Knobs,
    runs: &[ApiRun],
    ceiling: &crate::PgbenchOutcome,
    ceiling_load: &RunLoad,
) -> ApiPhase {
    let c = knobs.concurrency;
    let d_label = format!("D  pgbench API order transaction, {c} clients");
    let mut rows = vec![Row::new(
        d_label.clone(),
        "tps",
        &ceiling.stats,
        "(ceiling)".to_owned(),
    )];
    let d_budget = Budget {
        label: d_label,
        unit: "tx",
        ops: ceiling.processed as f64,
        rate: ceiling.stats.rate(),
        cpu: ceiling.cpu.clone(),
    };
    let mut cpu = cpu::Report::default();
    cpu.budgets.push(d_budget.clone());
    let mut notes = Vec::new();
    if ceiling.failed > 0 {
        notes.push(format!("D: {} failed transactions", ceiling.failed));
    }
    let mut failures = Vec::new();
    for run in runs {
        notes.push(format!(
            "{}, round {}: {} answers 201 (warm-up included), {} orders in the database, {} other \
             answers; the API's pool had {} connections (its default is 8), pgbench {c} clients",
            run.label(),
            run.round,
            run.created,
            run.in_database
                .map_or("not readable".to_owned(), |n| n.to_string()),
            run.others.values().sum::<u64>(),
            c.max(2)
        ));
        let wrong = self::failures(run);
        notes.extend(wrong.iter().map(|f| format!("{}: {f}", run.label())));
        failures.extend(wrong);
    }
    let shipped = routes::deployed("oncehook-api").unwrap_or(Route::Direct);
    for route in [Route::Direct, Route::Pooled] {
        let of_route: Vec<&ApiRun> = runs.iter().filter(|r| r.route == route).collect();
        let Some(mid) = median_run(&of_route, |r| r.stats.rate()) else {
            continue;
        };
        let label = format!("{}, c={c}", mid.label());
        rows.push(Row::new(
            label.clone(),
            "orders/s",
            &mid.stats,
            format!(
                "{} (the median of {} round{})",
                versus("D", &mid.stats, &ceiling.stats),
                of_route.len(),
                if of_route.len() == 1 { "" } else { "s" }
            ),
        ));
        let budget = Budget::of_rate(label, "order", mid.stats.rate(), mid.cpu.clone());
        cpu.notes.push(cpu::limit_line(
            &format!("shop API{} vs D", route.suffix()),
            &budget,
            &d_budget,
            Who::Postgres,
        ));
        cpu.budgets.push(budget);
        if route != shipped {
            continue;
        }
        let pg: Vec<f64> = of_route.iter().filter_map(|r| r.postgres_ms()).collect();
        if !pg.is_empty() {
            let ms = crate::median(&pg);
            let slowest = mid
                .statements
                .slowest
                .as_ref()
                .filter(|_| ms > 1.5)
                .map_or(String::new(), |s| {
                    format!("; the statement taking the most time: {s}")
                });
            let mut loads: Vec<&RunLoad> = of_route.iter().map(|r| &r.load).collect();
            loads.push(ceiling_load);
            crate::machine::goal_on(
                &format!(
                    "shop API POST /v1/orders as deployed ({}): PostgreSQL CPU ≤ 1.5 ms per order",
                    route.name()
                ),
                format!("{}{slowest}", crate::spread_of(&pg, "ms")),
                ms <= 1.5,
                &loads,
            );
        }
    }
    ApiPhase {
        rows,
        notes,
        cpu,
        failures,
    }
}

/// What is wrong with a run: answers other than 201, an empty run, and a
/// database that does not hold exactly one order per 201.
fn failures(api: &ApiRun) -> Vec<String> {
    let mut out: Vec<String> = api
        .others
        .iter()
        .map(|(what, n)| format!("{n} answers were {what}, not 201"))
        .collect();
    if api.created == 0 {
        out.push("no order was created".to_owned());
    }
    match api.in_database {
        Some(n) if n == api.created as i64 => {}
        Some(n) => out.push(format!(
            "the database holds {n} orders for {} answers 201",
            api.created
        )),
        None => out.push("the orders could not be counted".to_owned()),
    }
    out
}
