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
//! * Every event must end delivered exactly once per round: a mismatch is
//!   a note (timings fail nothing). `ONCEHOOK_BENCH_ONLY=notify` runs only
//!   this phase.

use std::time::{Duration, Instant};

use oncehook_e2e::TestEnv;
use oncehook_e2e::receiver::{Answer, Receiver, SECRET};

use crate::{Knobs, PHASE_TIMEOUT, Row, Stats, histogram_percentiles, ms, ratio, seed_shop};

pub fn only() -> bool {
    std::env::var("ONCEHOOK_BENCH_ONLY").is_ok_and(|v| v.trim() == "notify")
}

/// The rows and notes of this phase; `worker_rate` (events/s of one
/// worker in the same run) is what each row is put next to.
pub async fn phase(knobs: &Knobs, worker_rate: Option<f64>) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let n = knobs.events.min(20_000);
    let rounds = [
        ("answers at once", Answer::Status(200), 4, n),
        (
            "answers in 200 ms",
            Answer::Slow(Duration::from_millis(200)),
            4,
            n.min(400),
        ),
        (
            "answers in 200 ms",
            Answer::Slow(Duration::from_millis(200)),
            32,
            n.min(2_000),
        ),
    ];
    for (what, answer, concurrency, events) in rounds {
        let (stats, delivered, received) = round(answer, concurrency, events).await;
        let vs = match worker_rate {
            Some(w) => format!("vs worker ×1: {}", ratio(stats.rate(), w)),
            None => "(the worker's rate: the full bench)".to_owned(),
        };
        rows.push(Row::new(
            format!("notifier: order events to an endpoint that {what}, concurrency {concurrency}"),
            "events/s",
            &stats,
            vs,
        ));
        if delivered != events as i64 || received != events {
            notes.push(format!(
                "notifier ({what}, concurrency {concurrency}): {delivered} of {events} delivered, {received} requests received"
            ));
        }
    }
    notes.push(format!(
        "notifier latencies are per HTTP attempt (oncehook_notify_delivery_duration_seconds); p50 {} would be the 200 ms answer",
        ms(Some(Duration::from_millis(200)))
    ));
    (rows, notes)
}

/// One round: a fresh database with `events` paid orders' events, a
/// receiver answering `answer`, the notifier with `concurrency`. Returns
/// the rate, the rows delivered and the requests received.
async fn round(answer: Answer, concurrency: u16, events: usize) -> (Stats, i64, usize) {
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
    let c = concurrency.to_string();
    let notifier = env
        .start_consumer(
            "oncehook-notifier",
            &[("ONCEHOOK_NOTIFY_CONCURRENCY", c.as_str())],
        )
        .await;
    let target = events as i64;
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut first: Option<(Instant, i64)> = None;
    let mut last = 0;
    while Instant::now() < deadline {
        last = delivered(&env).await;
        if last > 0 && first.is_none() {
            first = Some((Instant::now(), last));
        }
        if last >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done = Instant::now();
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
    (stats, last, rx.received().len())
}

async fn delivered(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM notify_deliveries WHERE status = 'delivered'")
        .fetch_one(&env.pool)
        .await
        .unwrap_or(0)
}
