//! Cost flat as the tables grow: one worker's PostgreSQL CPU per event
//! (the whole server, [`crate::cpu`]) at batch 1 and at the configured
//! batch, with the tables that grow with traffic — `orders`, `payments`,
//! `payment_links`, `processed_webhooks`, `order_events` — preloaded in
//! bulk to
//! [`SMALL`] rows and to `ONCEHOOK_BENCH_GROWTH_ROWS` rows (1,000,000),
//! and the ratio of the two against the goal (≤ [`GOAL`]). Both databases
//! are loaded first; then the two sizes run interleaved in
//! `ONCEHOOK_BENCH_ROUNDS` rounds (the order alternating), and the ratio
//! is the median of each round's big over the same round's small. A statement
//! whose cost follows the table's size (a scan, a count, an index that
//! does not fit) shows here long before production finds it.
//!
//! The rows are made by `INSERT … SELECT … generate_series` in one
//! transaction, not through the pipeline: paid orders, a captured payment
//! each and its link to the order, their processed webhooks (two to 31 days old: newer than the
//! retention, older than what the bench counts as its own) and published
//! order events. Triggers and foreign-key checks are skipped while
//! loading (`session_replication_role = replica`: the rows agree by
//! construction), then the database is vacuumed and analyzed. Nothing is
//! dropped. `ONCEHOOK_BENCH_ONLY=growth` runs only this phase.

use std::time::Instant;

use oncehook_e2e::TestEnv;
use sqlx::PgPool;

use crate::load::RunLoad;
use crate::{Knobs, Row, WorkerBench, batches, machine, median, spread, spread_of};

/// Rows of each table in the small database.
const SMALL: i64 = 10_000;
/// The most the per-event cost may grow from [`SMALL`] to the big size.
const GOAL: f64 = 1.20;

/// Whether only this phase should run.
pub fn only() -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "growth")
}

/// Rows of each table in the big database (`ONCEHOOK_BENCH_GROWTH_ROWS`).
fn big() -> i64 {
    std::env::var("ONCEHOOK_BENCH_GROWTH_ROWS")
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(1_000_000)
        .clamp(1_000, 100_000_000)
}

/// One worker run of the phase: its size, batch and round, PostgreSQL's
/// ms per event, the statement that took the most time, what other
/// processes did meanwhile.
struct Cost {
    rows: i64,
    batch: usize,
    ms: Option<f64>,
    slowest: Option<String>,
    load: RunLoad,
}

pub async fn phase(knobs: &Knobs) -> (Vec<Row>, Vec<String>) {
    let sizes = [SMALL, big()];
    let batches = batches(knobs);
    let mut notes = Vec::new();
    // Both databases first, then the sizes interleaved in rounds (the
    // order alternating): a machine that slows down over the phase moves
    // both.
    let mut benches = Vec::new();
    for rows in sizes {
        let env = TestEnv::new().await;
        let started = Instant::now();
        eprintln!("bench: growth: preloading {rows} rows in each growing table");
        preload(&env.pool, rows).await;
        let loaded = started.elapsed();
        let mut bench = WorkerBench::on(env, knobs, knobs.rounds * batches.len()).await;
        notes.push(format!(
            "growth: {rows} rows in each of orders, payments, payment_links, processed_webhooks, order_events loaded in {:.1} s; the bench's orders seeded, the database vacuumed and analyzed, ingest started in {:.1} s more",
            loaded.as_secs_f64(),
            (started.elapsed() - loaded).as_secs_f64()
        ));
        bench.context = format!("growth, {rows} rows preloaded: ");
        benches.push((rows, bench));
    }
    let mut cost: Vec<Cost> = Vec::new();
    for round in 1..=knobs.rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let (rows, bench) = &mut benches[i];
            for batch in &batches {
                let run = bench.run(1, *batch, false, round).await;
                notes.push(format!(
                    "growth, {rows} rows, round {round}: worker ×1 batch {batch} {:.0} events/s, {}",
                    run.stats.rate(),
                    run.pressure()
                ));
                cost.push(Cost {
                    rows: *rows,
                    batch: *batch,
                    ms: run.postgres_ms(),
                    slowest: run.slowest.clone(),
                    load: run.load.clone(),
                });
            }
        }
    }
    for (_, bench) in benches {
        bench.stop();
    }
    let mut out = Vec::new();
    for batch in batches {
        let of = |rows: i64| -> Vec<&Cost> {
            cost.iter()
                .filter(|c| c.rows == rows && c.batch == batch)
                .collect()
        };
        let ms = |runs: &[&Cost]| -> Vec<f64> { runs.iter().filter_map(|c| c.ms).collect() };
        let (small_runs, large_runs) = (of(sizes[0]), of(sizes[1]));
        let at = |runs: &[&Cost]| Some(ms(runs)).filter(|v| !v.is_empty()).map(|v| median(&v));
        let (small, large) = (at(&small_runs), at(&large_runs));
        // The absolute goal holds at both sizes; a miss names the statement
        // that took the most time.
        let most = if batch == 1 { 1.2 } else { 0.5 };
        for (rows, runs) in [(sizes[0], &small_runs), (sizes[1], &large_runs)] {
            let Some(m) = at(runs) else {
                continue;
            };
            let slowest = runs
                .iter()
                .find_map(|c| c.slowest.clone())
                .filter(|_| m > most)
                .map_or(String::new(), |s| {
                    format!("; the statement taking the most time: {s}")
                });
            let loads: Vec<&RunLoad> = runs.iter().map(|c| &c.load).collect();
            machine::goal_on(
                &format!(
                    "PostgreSQL CPU per event, worker ×1 batch {batch}, {rows} rows preloaded ≤ {most} ms"
                ),
                format!("{}{slowest}", spread_of(&ms(runs), "ms")),
                m <= most,
                &loads,
            );
        }
        let shown = |ms: Option<f64>| ms.map_or("–".to_owned(), |ms| format!("{ms:.2} ms"));
        // Each round's big over the same round's small.
        let ratios: Vec<f64> = large_runs
            .iter()
            .zip(&small_runs)
            .filter_map(|(l, s)| Some(l.ms? / s.ms.filter(|s| *s > 0.0)?))
            .collect();
        let vs = if ratios.is_empty() {
            "not measured".to_owned()
        } else {
            let r = median(&ratios);
            let loads: Vec<&RunLoad> = large_runs
                .iter()
                .chain(&small_runs)
                .map(|c| &c.load)
                .collect();
            machine::goal_on(
                &format!(
                    "cost flat as the tables grow (worker ×1 batch {batch}, PostgreSQL CPU per event at {} rows ≤ {GOAL:.2}× at {} rows)",
                    sizes[1], sizes[0]
                ),
                spread(&ratios),
                r <= GOAL,
                &loads,
            );
            format!(
                "big / small {r:.2}× (goal ≤ {GOAL:.2}×), {} interleaved",
                spread(&ratios)
            )
        };
        out.push(Row {
            measurement: format!(
                "growth: worker ×1 batch {batch}, PostgreSQL CPU per event, {} → {} rows",
                sizes[0], sizes[1]
            ),
            throughput: format!("{} → {}", shown(small), shown(large)),
            p50: "–".to_owned(),
            p90: "–".to_owned(),
            p99: "–".to_owned(),
            vs,
        });
    }
    notes.push(
        "growth: PostgreSQL CPU is the whole server's over the drain, less the bench's own polling; \
         the statements behind it are in the growth sections of \"Where PostgreSQL's time goes\""
            .to_owned(),
    );
    (out, notes)
}

/// `rows` paid orders with a captured payment (linked to its order), a
/// processed webhook and a published order event each, in one transaction.
async fn preload(pool: &PgPool, rows: i64) {
    let statements = [
        "SET LOCAL session_replication_role = replica",
        "INSERT INTO orders (order_ref, customer_email, amount_minor, currency, status,
                             paid_at, paid_by, stock_applied, created_at, updated_at)
         SELECT 'grow_' || n, 'grow_' || n || '@example.com', 10000, 'INR', 'paid',
                t, 'razorpay:pay_grow_' || n, true, t, t
         FROM (SELECT n, now() - (n % 30 + 2) * interval '1 day' AS t
               FROM generate_series(1, $1::bigint) AS n) AS s",
        "INSERT INTO payments (provider, payment_id, order_id, status, amount_minor, currency,
                               event_id, created_at)
         SELECT 'razorpay', 'pay_' || o.order_ref, o.id, 'captured', 10000, 'INR',
                'evt_' || o.order_ref, o.created_at
         FROM orders o WHERE o.order_ref LIKE 'grow\\_%' AND $1::bigint > 0",
        "INSERT INTO payment_links (provider, payment_id, order_id, event_id, created_at)
         SELECT 'razorpay', 'pay_' || o.order_ref, o.id, 'evt_' || o.order_ref, o.created_at
         FROM orders o WHERE o.order_ref LIKE 'grow\\_%' AND $1::bigint > 0",
        "INSERT INTO processed_webhooks (source, event_id, body_sha256, provider, event_type,
                                         order_ref, outcome, received_at, processed_at,
                                         last_seen_at, payment_id, detail)
         SELECT 'razorpay', 'evt_grow_' || n, md5('grow_' || n), 'razorpay', 'payment.captured',
                'grow_' || n, 'applied', t, t, t, 'pay_grow_' || n, 'preloaded'
         FROM (SELECT n, now() - (n % 30 + 2) * interval '1 day' AS t
               FROM generate_series(1, $1::bigint) AS n) AS s",
        "INSERT INTO order_events (id, type, order_id, data, created_at, published_at)
         SELECT 'oev_' || o.order_ref, 'order.paid', o.id,
                jsonb_build_object('order_ref', o.order_ref), o.created_at, o.created_at
         FROM orders o WHERE o.order_ref LIKE 'grow\\_%' AND $1::bigint > 0",
    ];
    let mut tx = pool.begin().await.expect("begin the preload");
    for sql in statements {
        let query = sqlx::query(sql);
        let query = if sql.contains("$1") {
            query.bind(rows)
        } else {
            query
        };
        query
            .execute(&mut *tx)
            .await
            .expect("preload the growing tables");
    }
    tx.commit().await.expect("commit the preload");
}
