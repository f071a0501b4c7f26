//! The console's pages with a backlog an incident could leave: 10,000 dead
//! letters, made by the real pipeline (captures for orders that do not
//! exist, posted through ingest and dead-lettered by a worker), and
//! 1,000,000 processed events (inserted in one statement, spread over 30
//! days, gateways, sources and outcomes as production would have them).
//!
//! Every page is requested one request at a time, as an operator would,
//! after a warm-up (the first read of the dead-letter queue happens there),
//! and its latency percentiles are compared with the goal of 200 ms per
//! page. `ONCEHOOK_BENCH_ONLY=console` runs only this phase; the backlog's
//! size is set by `ONCEHOOK_BENCH_LETTERS` (10,000) and
//! `ONCEHOOK_BENCH_ROWS` (1,000,000).

use std::time::{Duration, Instant};

use oncehook_common::dead_letter::DeadLetterKind;
use oncehook_e2e::console::{Console, OPERATOR};
use oncehook_e2e::{TestEnv, broker, eventually};
use oncehook_gateways::Gateway;

use crate::{Row, Stats};

/// What every page should answer within.
const GOAL: Duration = Duration::from_millis(200);
/// Requests per page (after the warm-up).
const REQUESTS: usize = 30;
/// Upper bound on waiting for the pipeline to dead-letter the backlog.
const SEED_TIMEOUT: Duration = Duration::from_secs(600);

/// The whole table, in one statement: 1 in 200 deliveries parked, 1 in 100
/// flagged, 3 in 200 ignored, the rest applied; one every 2.5 s back from now.
const SEED_EVENTS: &str = "
INSERT INTO processed_webhooks
    (provider, source, event_id, body_sha256, event_type, order_ref, payment_id, receipt_id,
     outcome, detail, deliveries, received_at, processed_at, last_seen_at)
SELECT g, g, 'evt_bench_' || i, md5(i::text), 'payment.captured',
       'order_bench_' || (i / 2), 'pay_bench_' || i, NULL,
       CASE WHEN i % 200 = 0 THEN 'parked' WHEN i % 100 = 1 THEN 'flagged'
            WHEN i % 200 IN (2, 3, 4) THEN 'ignored' ELSE 'applied' END,
       NULL, 1 + (i % 3 = 0)::int, t, t, t
FROM generate_series(1, $1::int) AS i,
     LATERAL (SELECT (ARRAY['razorpay', 'cashfree', 'payu', 'stripe', 'standard'])[1 + i % 5] AS g,
                     now() - i * interval '2.5 seconds' AS t) AS x";

fn knob(name: &str, default: usize, max: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
        .clamp(1, max)
}

/// Whether only this phase should run.
pub fn only() -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "console")
}

/// Seeds the backlog, starts a console and times every page.
pub async fn phase() -> (Vec<Row>, Vec<String>) {
    let letters = knob("ONCEHOOK_BENCH_LETTERS", 10_000, 60_000);
    let events = knob("ONCEHOOK_BENCH_ROWS", 1_000_000, 10_000_000);
    let mut env = TestEnv::new().await;
    let mut notes = Vec::new();

    let started = Instant::now();
    let dead = seed_letters(&mut env, letters).await;
    notes.push(format!(
        "console: {dead} dead letters made by the pipeline (ingest and a worker) in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let started = Instant::now();
    match seed_events(&env, events).await {
        Ok(()) => notes.push(format!(
            "console: {events} processed events inserted and analysed in {:.1} s",
            started.elapsed().as_secs_f64()
        )),
        Err(e) => notes.push(format!("console: could not insert the events: {e}")),
    }

    let console = Console::start(&mut env, &[]).await;
    let cookie = console.login(OPERATOR).await;
    // The first dead-letter page reads the whole queue into the snapshot.
    let first_read = Instant::now();
    let list = console.get("/letters", Some(&cookie)).await;
    notes.push(format!(
        "console: the first dead-letter page, which reads all {dead} letters into the console's snapshot, took {:.0} ms (status {})",
        first_read.elapsed().as_secs_f64() * 1000.0,
        list.status
    ));
    let letter = list
        .letter_ids()
        .into_iter()
        .next()
        .unwrap_or_else(|| "none".to_owned());
    let csrf = list.csrf();
    // The Events page's third page: the cursor after the first 100 rows.
    let deep = older_link(&console, &cookie, "/events", 2).await;

    let pages: Vec<(String, String)> = [
        ("overview", "/".to_owned()),
        ("dead letters", "/letters".to_owned()),
        (
            "dead letters, one kind",
            "/letters?kind=unknown_order".to_owned(),
        ),
        (
            "dead letters, no match",
            "/letters?gateway=stripe".to_owned(),
        ),
        ("one dead letter", format!("/letters/{letter}")),
        ("events", "/events".to_owned()),
        ("events, third page", deep),
        ("events, one gateway", "/events?gateway=payu".to_owned()),
        ("events, parked", "/events?outcome=parked".to_owned()),
        (
            "events, source + last hour",
            "/events?source=stripe&within=1h".to_owned(),
        ),
        (
            "events, no match",
            "/events?source=razorpay_second".to_owned(),
        ),
        ("trace by order", "/trace?q=order_bench_250000".to_owned()),
        ("trace by event id", "/trace?q=evt_bench_500001".to_owned()),
        ("trace, unknown", "/trace?q=nobody".to_owned()),
        ("audit", "/audit".to_owned()),
    ]
    .into_iter()
    .map(|(name, path)| (name.to_owned(), path))
    .collect();

    let mut rows = Vec::new();
    for (name, path) in &pages {
        let stats = time_page(&console, &cookie, path, None).await;
        rows.push(row(name, path, &stats));
    }
    // The dry run of a bulk replay reads the same snapshot.
    let preview = [
        ("csrf", csrf.as_str()),
        ("action", "replay"),
        ("kind", DeadLetterKind::UnknownOrder.as_str()),
    ];
    let stats = time_page(&console, &cookie, "/letters/preview", Some(&preview)).await;
    rows.push(row("replay dry run, all", "POST /letters/preview", &stats));
    notes.push(format!(
        "console: {dead} dead letters and {events} processed events; each page requested \
         {REQUESTS} times one after another after two warm-ups; dead-letter pages read the \
         console's snapshot of the queue, read again in the background when the queue changes"
    ));
    (rows, notes)
}

/// Posts `n` captures for orders that do not exist and waits until the
/// worker has dead-lettered them; returns the dead-letter queue's depth.
async fn seed_letters(env: &mut TestEnv, n: usize) -> u32 {
    let (_ingest, url) = env.start_ingest().await;
    let worker = env.start_worker().await;
    let deliveries = (0..n)
        .map(|i| {
            let spec = env.spec(
                &format!("order_missing_{i}"),
                &format!("pay_missing_{i}"),
                &format!("evt_missing_{i}"),
                10_000 + i as i64,
            );
            env.sign(Gateway::Razorpay, "payment.captured", &spec)
        })
        .collect();
    let answers = env.post_all(&url, "razorpay", deliveries, 16).await;
    let refused = answers.iter().filter(|(s, _)| *s != 200).count();
    if refused > 0 {
        eprintln!("bench: console: {refused} of {n} captures were refused");
    }
    let queue = format!("{}.dead", env.prefix);
    let want = u32::try_from(n - refused).unwrap_or(u32::MAX);
    eventually("the backlog dead-lettered", SEED_TIMEOUT, || async {
        (broker::depth(&queue).await >= Some(want)).then_some(())
    })
    .await;
    drop(worker);
    broker::depth(&queue).await.unwrap_or(0)
}

async fn seed_events(env: &TestEnv, n: usize) -> Result<(), sqlx::Error> {
    sqlx::query(SEED_EVENTS)
        .bind(i32::try_from(n).unwrap_or(i32::MAX))
        .execute(&env.pool)
        .await?;
    sqlx::query("ANALYZE processed_webhooks")
        .execute(&env.pool)
        .await?;
    Ok(())
}

/// The link `hops` "older →" clicks away from `path`.
async fn older_link(console: &Console, cookie: &str, path: &str, hops: usize) -> String {
    let mut at = path.to_owned();
    for _ in 0..hops {
        let Some(next) = console.get(&at, Some(cookie)).await.older_link() else {
            break;
        };
        at = next;
    }
    at
}

/// `REQUESTS` sequential requests of one page (GET, or POST with `form`)
/// after two warm-ups; a non-200 answer counts as an error.
async fn time_page(
    console: &Console,
    cookie: &str,
    path: &str,
    form: Option<&[(&str, &str)]>,
) -> Stats {
    let request = || async {
        match form {
            Some(f) => console.post(path, Some(cookie), f).await.status,
            None => console.get(path, Some(cookie)).await.status,
        }
    };
    for _ in 0..2 {
        request().await;
    }
    let mut stats = Stats::default();
    let started = Instant::now();
    for _ in 0..REQUESTS {
        let t = Instant::now();
        let status = request().await;
        if status == 200 {
            stats.ok += 1;
            stats
                .latencies_us
                .push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
        } else {
            stats.errors += 1;
        }
    }
    stats.window = started.elapsed();
    stats.latencies_us.sort_unstable();
    stats
}

fn row(name: &str, path: &str, stats: &Stats) -> Row {
    let verdict = match stats.p99() {
        Some(p99) if stats.errors == 0 => format!(
            "p99 {:.2}× the {} ms goal{}",
            p99.as_secs_f64() / GOAL.as_secs_f64(),
            GOAL.as_millis(),
            if p99 <= GOAL { "" } else { " — over" }
        ),
        _ => format!("{} of {} requests failed", stats.errors, REQUESTS),
    };
    // Long paths (a keyset cursor) would widen the table for nothing.
    let shown = if path.len() <= 36 { path } else { "…" };
    Row::new(format!("console {name} ({shown})"), "req/s", stats, verdict)
}
