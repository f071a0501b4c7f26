//! Fairness (`ONCEHOOK_BENCH_ONLY=fairness`; docs/tenants.md, "Fairness"):
//! a quiet tenant's payment while another tenant's backlog drains.
//!
//! One deployment (ingest and one worker, the deploy files' settings) with
//! two tenants: `default`, whose Razorpay source floods, and `quiet`, with
//! a Razorpay source of its own. In each of `ONCEHOOK_BENCH_ROUNDS` rounds,
//! the order alternating:
//!
//! * **alone**: with no worker running, the flooding tenant's backlog of
//!   `ONCEHOOK_BENCH_BACKLOG` (10,000) captures is loaded through ingest;
//!   a worker starts and drains it: the flood's events/s;
//! * **with the quiet tenant**: the same backlog, drained the same way,
//!   while the quiet tenant posts one capture every [`CADENCE`]: each
//!   one's post → committed (the time its row appeared, polled every
//!   [`POLL`]), and the flood's events/s;
//! * **quiet, no backlog**: the quiet tenant's posts at the same cadence
//!   against an idle worker.
//!
//! Goals (`make bench`): the quiet tenant's p99 with the backlog at most
//! 2× its p99 without, or under 1 s, whichever is larger; the flood's
//! events/s with the quiet tenant at least 0.8× alone — each the median of
//! the rounds' ratios.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use oncehook_e2e::shop::Shop;
use oncehook_e2e::{Proc, TestEnv};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SignedDelivery;
use tokio::sync::Mutex;

use crate::load::{RunLoad, Watch};
use crate::{Knobs, Row, Stats, http_client, machine, median, ms, post, spread};

/// The quiet tenant and its source.
const QUIET: &str = "quiet";
const QUIET_SOURCE: &str = "quiet-razorpay";
/// One quiet capture this often.
const CADENCE: Duration = Duration::from_millis(50);
/// How often committed rows are looked for.
const POLL: Duration = Duration::from_millis(5);
/// The most a quiet p99 with the backlog may be: 2× without, or 1 s.
const LATENCY_RATIO: f64 = 2.0;
const LATENCY_FLOOR: Duration = Duration::from_secs(1);
/// The least the flood's rate with the quiet tenant may be, of alone.
const THROUGHPUT_RATIO: f64 = 0.8;

pub fn only() -> bool {
    crate::only_phase("fairness")
}

fn backlog() -> usize {
    crate::env_count("ONCEHOOK_BENCH_BACKLOG", 10_000, 20, 200_000)
}

/// The deployment and what each run needs.
struct Bench {
    env: TestEnv,
    url: String,
    _ingest: Proc,
    http: reqwest::Client,
    concurrency: usize,
}

/// One drain of the flood: its rate, what other processes did meanwhile,
/// and the quiet tenant's latencies (when it posted).
struct Drain {
    rate: f64,
    quiet: Vec<Duration>,
    load: RunLoad,
}

pub async fn phase(knobs: &Knobs) -> (Vec<Row>, Vec<String>) {
    let n = backlog();
    let mut bench = Bench::start(knobs, n).await;
    let mut notes = Vec::new();
    let (mut alone, mut mixed, mut calm) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=knobs.rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for which in order {
            let tag = format!("{}{round}", if which == 0 { "a" } else { "m" });
            let drain = bench.drain(n, &tag, which == 1).await;
            notes.push(format!(
                "fairness, round {round}: the flood's {n} events drained at {:.0} events/s {}",
                drain.rate,
                if which == 1 {
                    format!(
                        "with the quiet tenant posting ({} posts)",
                        drain.quiet.len()
                    )
                } else {
                    "alone".to_owned()
                }
            ));
            if which == 0 {
                alone.push(drain);
            } else {
                mixed.push(drain);
            }
        }
        let posts = mixed.last().map_or(20, |d| d.quiet.len().max(20));
        calm.push(bench.calm(posts, &format!("c{round}")).await);
    }
    report(n, &alone, &mixed, &calm, notes)
}

impl Bench {
    async fn start(knobs: &Knobs, n: usize) -> Bench {
        let mut env = TestEnv::new().await;
        // The backlog is loaded as fast as ingest takes it: the flooding
        // source's rate is not what this phase measures.
        env.set_env("ONCEHOOK_INGEST_RATE_PER_SECOND", "10000000");
        env.tenant_with_source(QUIET, QUIET_SOURCE, Gateway::Razorpay)
            .await;
        // Orders for every flood (two per round) and for the quiet posts.
        // The flood's orders over the bench's 50 products (one hot product
        // would measure its row lock, not the lanes).
        let floods = n * 2 * knobs.rounds;
        let sku = |i: usize| format!("FLOOD-{:02}", i % crate::SKUS as usize);
        let mut shop = Shop::new();
        for i in 0..crate::SKUS as usize {
            shop = shop.product(&sku(i), 1_000_000_000);
        }
        for i in 0..floods {
            shop = shop.order_of(&format!("flood_{i}"), 10_000, "INR", &[(sku(i), 1)]);
        }
        shop.seed(&env.pool).await;
        let mut quiet = Shop::new().product("QUIET", 1_000_000_000);
        for i in 0..QUIET_ORDERS {
            quiet = quiet.order_of(&format!("quiet_{i}"), 10_000, "INR", &[("QUIET", 1)]);
        }
        quiet.seed_in(&env.pool, QUIET).await;
        crate::analyze_filled(&env.pool).await;
        let (ingest, url) = env.start_ingest().await;
        Bench {
            env,
            url,
            _ingest: ingest,
            http: http_client(knobs.concurrency),
            concurrency: knobs.concurrency,
        }
    }

    fn capture(&self, order: &str, tag: &str, i: usize) -> SignedDelivery {
        let spec = self.env.spec(
            order,
            &format!("pay_{tag}_{i}"),
            &format!("evt_{tag}_{i}"),
            10_000,
        );
        self.env.sign(Gateway::Razorpay, "payment.captured", &spec)
    }

    /// Loads the flood's backlog (no worker running), then drains it with
    /// one worker, the quiet tenant posting meanwhile when `quiet`.
    async fn drain(&mut self, n: usize, tag: &str, quiet: bool) -> Drain {
        let first = FLOOD_OFFSET.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        let deliveries: Vec<SignedDelivery> = (0..n)
            .map(|i| self.capture(&format!("flood_{}", first + i), tag, i))
            .collect();
        eprintln!("bench: fairness: loading a backlog of {n} ({tag})");
        let answers = self
            .env
            .post_all(&self.url, "razorpay", deliveries, self.concurrency)
            .await;
        let refused = answers.iter().filter(|(s, _)| *s != 200).count();
        assert_eq!(refused, 0, "the backlog was refused in part");
        let worker = self.env.start_worker().await;
        let watch = Watch::start();
        let started = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        // Posting while the backlog drains: a task of its own.
        let posting = quiet.then(|| tokio::spawn(self.quiet_posts(tag, stop.clone())));
        let like = format!("evt\\_{tag}\\_%");
        let done = crate::wait_processed(&self.env.pool, &like, n).await;
        let took = started.elapsed();
        stop.store(true, Ordering::SeqCst);
        let quiet = match posting {
            Some(p) => p.await.unwrap_or_default(),
            None => Vec::new(),
        };
        let load = watch.finish(&format!("fairness {tag}"), 1);
        drop(worker);
        if !done {
            eprintln!("bench: fairness: warning: the backlog {tag} did not drain in time");
        }
        Drain {
            rate: n as f64 / took.as_secs_f64().max(1e-9),
            quiet,
            load,
        }
    }

    /// The quiet tenant's posts at the cadence against an idle worker.
    async fn calm(&mut self, posts: usize, tag: &str) -> Drain {
        let worker = self.env.start_worker().await;
        let watch = Watch::start();
        let stop = Arc::new(AtomicBool::new(false));
        let posting = self.quiet_posts_n(tag, stop, posts);
        let quiet = posting.await;
        let load = watch.finish(&format!("fairness {tag}"), 1);
        drop(worker);
        Drain {
            rate: 0.0,
            quiet,
            load,
        }
    }

    fn quiet_posts(
        &self,
        tag: &str,
        stop: Arc<AtomicBool>,
    ) -> impl std::future::Future<Output = Vec<Duration>> + use<> {
        self.quiet_posts_n(tag, stop, QUIET_ORDERS / 8)
    }

    /// Posts one quiet capture every [`CADENCE`] until `stop` or `most`
    /// posts, then waits for each to be committed; each one's post →
    /// committed.
    fn quiet_posts_n(
        &self,
        tag: &str,
        stop: Arc<AtomicBool>,
        most: usize,
    ) -> impl std::future::Future<Output = Vec<Duration>> + use<> {
        let first = QUIET_OFFSET.fetch_add(most, std::sync::atomic::Ordering::Relaxed);
        let deliveries: Vec<(String, SignedDelivery)> = (0..most)
            .map(|i| {
                let id = format!("evt_q{tag}_{i}");
                let order = format!("quiet_{}", (first + i) % QUIET_ORDERS);
                (id, self.capture(&order, &format!("q{tag}"), i))
            })
            .collect();
        let (http, url, pool) = (
            self.http.clone(),
            format!("{}/webhooks/{QUIET_SOURCE}", self.url),
            self.env.pool.clone(),
        );
        async move {
            let posted: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
            let mut committed: Vec<Duration> = Vec::new();
            let poller = {
                let posted = posted.clone();
                let pool = pool.clone();
                tokio::spawn(async move {
                    let mut seen: HashMap<String, Duration> = HashMap::new();
                    let deadline = Instant::now() + crate::PHASE_TIMEOUT;
                    loop {
                        let ids: Vec<String> = sqlx::query_scalar(
                            "SELECT event_id FROM processed_webhooks WHERE source = $1 AND event_id = ANY($2)",
                        )
                        .bind(QUIET_SOURCE)
                        .bind(posted.lock().await.keys().filter(|k| !seen.contains_key(*k)).cloned().collect::<Vec<_>>())
                        .fetch_all(&pool)
                        .await
                        .unwrap_or_default();
                        let now = Instant::now();
                        {
                            let posted = posted.lock().await;
                            for id in ids {
                                if let Some(at) = posted.get(&id) {
                                    seen.entry(id).or_insert_with(|| now.duration_since(*at));
                                }
                            }
                            if posted.get("").is_some() && seen.len() + 1 >= posted.len() {
                                return seen.into_values().collect::<Vec<_>>();
                            }
                        }
                        if now > deadline {
                            return seen.into_values().collect();
                        }
                        tokio::time::sleep(POLL).await;
                    }
                })
            };
            let mut next = Instant::now();
            for (id, d) in &deliveries {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep_until(next.into()).await;
                next += CADENCE;
                let at = Instant::now();
                if post(&http, &url, d).await {
                    posted.lock().await.insert(id.clone(), at);
                }
            }
            // The end marker: every real post is in.
            posted.lock().await.insert(String::new(), Instant::now());
            if let Ok(times) = poller.await {
                committed = times;
            }
            committed
        }
    }
}

/// Quiet orders seeded (posts cycle over them: a capture repeated on a
/// paid order is a duplicate payment, as cheap to commit).
const QUIET_ORDERS: usize = 4_000;
static FLOOD_OFFSET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static QUIET_OFFSET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn stats_of(latencies: &[Duration]) -> Stats {
    let mut us: Vec<u32> = latencies
        .iter()
        .map(|d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX))
        .collect();
    us.sort_unstable();
    Stats {
        ok: us.len() as u64,
        latencies_us: us,
        ..Stats::default()
    }
}

fn report(
    n: usize,
    alone: &[Drain],
    mixed: &[Drain],
    calm: &[Drain],
    mut notes: Vec<String>,
) -> (Vec<Row>, Vec<String>) {
    let p99 = |d: &Drain| stats_of(&d.quiet).p99();
    // Per round: the quiet p99 with the backlog over without, and the
    // flood's rate with the quiet tenant over alone.
    let latency: Vec<f64> = mixed
        .iter()
        .zip(calm)
        .filter_map(|(m, c)| Some(p99(m)?.as_secs_f64() / p99(c)?.as_secs_f64().max(1e-6)))
        .collect();
    let bound: Vec<bool> = mixed
        .iter()
        .zip(calm)
        .filter_map(|(m, c)| {
            let (m, c) = (p99(m)?, p99(c)?);
            Some(m <= (c.mul_f64(LATENCY_RATIO)).max(LATENCY_FLOOR))
        })
        .collect();
    let throughput: Vec<f64> = mixed
        .iter()
        .zip(alone)
        .map(|(m, a)| m.rate / a.rate.max(1e-9))
        .collect();
    let loads: Vec<&RunLoad> = alone
        .iter()
        .chain(mixed)
        .chain(calm)
        .map(|d| &d.load)
        .collect();
    let all = |runs: &[Drain]| -> Vec<Duration> {
        runs.iter().flat_map(|d| d.quiet.iter().copied()).collect()
    };
    let (with, without) = (stats_of(&all(mixed)), stats_of(&all(calm)));
    let rounds_met = bound.iter().filter(|b| **b).count();
    machine::goal_on(
        &format!(
            "fairness: a quiet tenant's post → committed p99 with another tenant's {n}-event backlog ≤ {LATENCY_RATIO}× without, or under {} s",
            LATENCY_FLOOR.as_secs()
        ),
        format!(
            "{} ({}); met in {rounds_met} of {} rounds",
            spread(&latency),
            ms(with.p99()),
            bound.len()
        ),
        !bound.is_empty() && rounds_met * 2 > bound.len(),
        &loads,
    );
    machine::goal_on(
        &format!(
            "fairness: the flooding tenant's events/s with the quiet tenant ≥ {THROUGHPUT_RATIO}× alone"
        ),
        spread(&throughput),
        !throughput.is_empty() && median(&throughput) >= THROUGHPUT_RATIO,
        &loads,
    );
    let rate = |runs: &[Drain]| median(&runs.iter().map(|d| d.rate).collect::<Vec<_>>());
    let rows = vec![
        Row {
            measurement: "fairness: a quiet tenant's post → committed, no backlog".to_owned(),
            throughput: format!("{} posts", without.ok),
            p50: ms(without.p50()),
            p90: ms(without.p90()),
            p99: ms(without.p99()),
            vs: "(its own ceiling)".to_owned(),
        },
        Row {
            measurement: format!(
                "fairness: a quiet tenant's post → committed, another tenant's {n}-event backlog draining"
            ),
            throughput: format!("{} posts", with.ok),
            p50: ms(with.p50()),
            p90: ms(with.p90()),
            p99: ms(with.p99()),
            vs: format!(
                "p99 {} of no backlog (goal ≤ {LATENCY_RATIO}× or under {} s)",
                spread(&latency),
                LATENCY_FLOOR.as_secs()
            ),
        },
        Row {
            measurement: format!("fairness: the flooding tenant's {n} events drained, alone"),
            throughput: format!("{:.0} events/s", rate(alone)),
            p50: "–".to_owned(),
            p90: "–".to_owned(),
            p99: "–".to_owned(),
            vs: "(ceiling)".to_owned(),
        },
        Row {
            measurement: format!(
                "fairness: the flooding tenant's {n} events drained, the quiet tenant posting"
            ),
            throughput: format!("{:.0} events/s", rate(mixed)),
            p50: "–".to_owned(),
            p90: "–".to_owned(),
            p99: "–".to_owned(),
            vs: format!(
                "{} of alone (goal ≥ {THROUGHPUT_RATIO}×)",
                spread(&throughput)
            ),
        },
    ];
    notes.push(format!(
        "fairness: one ingest and one worker with the deploy files' settings; the quiet tenant posts every {} ms; committed = its processed_webhooks row seen (polled every {} ms)",
        CADENCE.as_millis(),
        POLL.as_millis()
    ));
    (rows, notes)
}
