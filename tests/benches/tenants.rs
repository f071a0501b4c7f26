//! Platform size (`ONCEHOOK_BENCH_ONLY=tenants`; docs/tenants.md, "At
//! platform size"): the same deployment with one merchant onboarded and
//! with `ONCEHOOK_BENCH_TENANTS` (10,000), each with two Razorpay sources
//! made at runtime (rows of `sources` with a sealed secret, as the admin
//! API writes them) and two orders, ingest reading the sources feed.
//!
//! Both deployments are built first, then measured in
//! `ONCEHOOK_BENCH_ROUNDS` interleaved rounds (the order alternating):
//!
//! * ingest: signed captures to every tenant's sources in turn, a closed
//!   loop at `ONCEHOOK_BENCH_CONCURRENCY` for `ONCEHOOK_BENCH_SECS`: acks
//!   per second and p50/p99; its resident memory (VmRSS) after;
//! * the shop's API: `GET /v1/orders?limit=50` of one shop (the default
//!   tenant's 500 orders in both) in a closed loop: p50/p99;
//! * one worker (the deploy files' settings) draining
//!   `ONCEHOOK_BENCH_EVENTS` captures of one tenant, loaded with no worker
//!   running: events/s;
//! * at the large size, also the same number of captures spread over as
//!   many tenants, one each (reported; each transaction holds one
//!   tenant's deliveries).
//!
//! Goals: at the large size each figure within 1.2× of one merchant's
//! (ingest RSS, ack p50 and p99, API list p99 no more than 1.2×; worker
//! events/s at least 1/1.2), the median of the rounds' ratios.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oncehook_common::sealed::KeyRing;
use oncehook_common::sources_feed::secret_place;
use oncehook_e2e::api::{Api, FULL_KEY};
use oncehook_e2e::shop::Shop;
use oncehook_e2e::{Proc, TestEnv};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::{self, SignedDelivery};
use sha2::{Digest, Sha256};

use crate::load::{RunLoad, Watch};
use crate::{Knobs, Row, Stats, closed_loop, http_client, machine, median, ms, post, spread};

const FEED_KEY: &str = "ohk_feed_bench_0123456789abcdefghijklmnopqrstuv";
const SECRET: &str = "rzp_bench_runtime_secret_5d0c1f";
/// The default tenant's orders (the API's list reads them).
const LISTED: usize = 500;
/// The most a figure at the large size may be of one merchant's.
const GOAL: f64 = 1.2;

pub fn only() -> bool {
    crate::only_phase("tenants")
}

fn large() -> usize {
    crate::env_count("ONCEHOOK_BENCH_TENANTS", 10_000, 2, 200_000)
}

fn tenant(i: usize) -> String {
    format!("t{i:05}")
}

fn source(i: usize, which: char) -> String {
    format!("t{i:05}-{which}")
}

/// One deployment of `tenants` merchants.
struct Platform {
    tenants: usize,
    env: TestEnv,
    api: Api,
    ingest: Proc,
    url: String,
}

/// One round's figures of one deployment.
struct Round {
    ack: Stats,
    rss_kib: Option<u64>,
    list: Stats,
    worker: f64,
    spread: Option<f64>,
    load: RunLoad,
}

pub async fn phase(knobs: &Knobs) -> (Vec<Row>, Vec<String>) {
    let sizes = [1, large()];
    let mut notes = Vec::new();
    let mut platforms = Vec::new();
    for n in sizes {
        let started = Instant::now();
        platforms.push(Platform::build(n, knobs).await);
        notes.push(format!(
            "tenants: {n} merchant(s), {} runtime sources, built and served by ingest in {:.1} s",
            2 * n,
            started.elapsed().as_secs_f64()
        ));
    }
    let mut rounds: Vec<(usize, Round)> = Vec::new();
    let mut offset = 0usize;
    for round in 1..=knobs.rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let p = &mut platforms[i];
            let r = p.round(knobs, round, &mut offset).await;
            notes.push(format!(
                "tenants: {} merchant(s), round {round}: ingest {:.0} acks/s, RSS {} KiB; API list p99 {}; worker {:.0} events/s{}",
                p.tenants,
                r.ack.rate(),
                r.rss_kib.map_or("–".to_owned(), |k| k.to_string()),
                ms(r.list.p99()),
                r.worker,
                r.spread
                    .map_or(String::new(), |s| format!(", {s:.0} events/s spread one per tenant"))
            ));
            rounds.push((p.tenants, r));
        }
    }
    report(&sizes, &rounds, notes)
}

impl Platform {
    async fn build(n: usize, knobs: &Knobs) -> Platform {
        let mut env = TestEnv::new().await;
        let hash = hex::encode(Sha256::digest(FEED_KEY.as_bytes()));
        env.append_config(&format!(
            "\n[[api.admin_key]]\nname = \"ingest-feed\"\nhash = \"{hash}\"\nscopes = [\"sources:feed\"]\n"
        ));
        let ring_line = KeyRing::generate_key_line("bench").expect("a key line");
        let ring: KeyRing = ring_line.parse().expect("the key ring");
        seed(&env, n, knobs, &ring).await;
        crate::analyze_filled(&env.pool).await;
        let api = Api::start(&mut env, &[("ONCEHOOK_SECRET_KEYS", ring_line.as_str())]).await;
        let (ingest, url) = env.spawn_ingest(&[
            ("ONCEHOOK_INGEST_SOURCES_FEED_URL", api.base.as_str()),
            ("ONCEHOOK_INGEST_SOURCES_FEED_KEY", FEED_KEY),
            ("ONCEHOOK_SECRET_KEYS", ring_line.as_str()),
        ]);
        env.wait_ready(ingest.metrics_url(), "/readyz").await;
        let p = Platform {
            tenants: n,
            env,
            api,
            ingest,
            url,
        };
        // Served once the last merchant's source answers 200.
        let last = source(n - 1, 'b');
        let probe = p.capture(n - 1, 0, "probe");
        let served = crate::wait_for(Duration::from_secs(120), || async {
            let url = format!("{}/webhooks/{last}", p.url);
            post(&p.env.http, &url, &probe).await.then_some(())
        })
        .await;
        assert!(served.is_some(), "ingest never served {last}");
        p
    }

    /// A signed capture of merchant `i`'s order `k`.
    fn capture(&self, i: usize, k: usize, tag: &str) -> SignedDelivery {
        let spec = self.env.spec(
            &format!("o_{}_{k}", tenant(i)),
            &format!("pay_{tag}"),
            &format!("evt_{tag}"),
            10_000,
        );
        sample::build(Gateway::Razorpay, "payment.captured", &spec, SECRET).expect("a sample")
    }

    async fn round(&mut self, knobs: &Knobs, round: usize, offset: &mut usize) -> Round {
        let watch = Watch::start();
        let ack = self.acks(knobs, round).await;
        let rss_kib = rss_kib(self.ingest.pid());
        purge(&self.env.amqp_urls, &self.env.prefix).await;
        let list = self.list(knobs).await;
        let k = knobs.events;
        let one: Vec<SignedDelivery> = (0..k)
            .map(|j| {
                let order = FIRST_ORDERS + *offset + j;
                self.capture(0, order, &format!("w{round}_{}", *offset + j))
            })
            .collect();
        *offset += k;
        let worker = self.drain(knobs, one, &format!("w{round}")).await;
        let spread = if self.tenants > 1 {
            let n = knobs.events.min(self.tenants);
            let spread: Vec<SignedDelivery> = (0..n)
                .map(|i| self.capture(i, round, &format!("s{round}_{i}")))
                .collect();
            Some(self.drain(knobs, spread, &format!("s{round}")).await)
        } else {
            None
        };
        Round {
            ack,
            rss_kib,
            list,
            worker,
            spread,
            load: watch.finish(&format!("tenants {} round {round}", self.tenants), 1),
        }
    }

    /// Signed captures to every merchant's sources in turn.
    async fn acks(&self, knobs: &Knobs, round: usize) -> Stats {
        let n = self.tenants;
        let deliveries: Arc<Vec<(String, SignedDelivery)>> = Arc::new(
            (0..(2 * n).min(4_000))
                .map(|j| {
                    let i = (j * 7919) % n;
                    let which = if j % 2 == 0 { 'a' } else { 'b' };
                    let url = format!("{}/webhooks/{}", self.url, source(i, which));
                    (url, self.capture(i, 0, &format!("a{round}_{j}")))
                })
                .collect(),
        );
        let http = http_client(knobs.concurrency);
        closed_loop(
            knobs.concurrency,
            crate::WARMUP,
            knobs.duration(),
            2_000_000,
            move |i| {
                let (http, deliveries) = (http.clone(), deliveries.clone());
                async move {
                    let (url, d) = &deliveries[i % deliveries.len()];
                    post(&http, url, d).await
                }
            },
        )
        .await
    }

    /// The default tenant's first page of orders, again and again.
    async fn list(&self, knobs: &Knobs) -> Stats {
        let (http, url) = (
            http_client(knobs.concurrency),
            format!("{}/v1/orders?limit=50", self.api.base),
        );
        closed_loop(
            knobs.concurrency,
            crate::WARMUP,
            knobs.duration() / 2,
            2_000_000,
            move |_| {
                let (http, url) = (http.clone(), url.clone());
                async move {
                    match http.get(&url).bearer_auth(FULL_KEY).send().await {
                        Ok(r) => r.status().as_u16() == 200 && r.bytes().await.is_ok(),
                        Err(_) => false,
                    }
                }
            },
        )
        .await
    }

    /// Loads `deliveries` with no worker running, then drains them with
    /// one worker: events/s.
    async fn drain(&mut self, knobs: &Knobs, deliveries: Vec<SignedDelivery>, tag: &str) -> f64 {
        let n = deliveries.len();
        let by_url: Vec<(String, SignedDelivery)> = deliveries
            .into_iter()
            .map(|d| {
                let order = order_of(&d);
                (format!("{}/webhooks/{}", self.url, source_of(&order)), d)
            })
            .collect();
        let http = http_client(knobs.concurrency);
        let mut sent = tokio::task::JoinSet::new();
        for chunk in by_url.chunks(n.div_ceil(knobs.concurrency).max(1)) {
            let (http, chunk) = (http.clone(), chunk.to_vec());
            sent.spawn(async move {
                for (url, d) in chunk {
                    for _ in 0..5 {
                        if post(&http, &url, &d).await {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
        }
        while sent.join_next().await.is_some() {}
        let worker = self.env.start_worker().await;
        let started = Instant::now();
        let like = format!("evt\\_{tag}\\_%");
        let done = crate::wait_processed(&self.env.pool, &like, n).await;
        let took = started.elapsed();
        drop(worker);
        if !done {
            eprintln!("bench: tenants: warning: {tag} did not drain in time");
        }
        n as f64 / took.as_secs_f64().max(1e-9)
    }
}

/// The order a capture is for (`o_t00042_0`), from its body.
fn order_of(d: &SignedDelivery) -> String {
    let body = String::from_utf8_lossy(&d.body);
    body.split("\"o_")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(|o| format!("o_{o}"))
        .unwrap_or_default()
}

/// The merchant's first source, from its order's reference.
fn source_of(order: &str) -> String {
    let tenant = order
        .trim_start_matches("o_")
        .split('_')
        .next()
        .unwrap_or("t00000");
    format!("{tenant}-a")
}

/// Where the first merchant's orders for the one-merchant drains start.
const FIRST_ORDERS: usize = 1_000;

/// `n` merchants with two runtime sources each (sealed as the admin API
/// seals them) and an order for the ack load and one per round each (the
/// first merchant also one per capture of its drains), and the default
/// tenant's [`LISTED`] orders.
async fn seed(env: &TestEnv, n: usize, knobs: &Knobs, ring: &KeyRing) {
    let (rounds, events) = (knobs.rounds, knobs.events);
    let ids: Vec<String> = (0..n).map(tenant).collect();
    sqlx::query("INSERT INTO tenants (id, name) SELECT id, 'Bench shop ' || id FROM unnest($1::text[]) AS id")
        .bind(&ids)
        .execute(&env.pool)
        .await
        .expect("insert the tenants");
    let (mut names, mut owners, mut sealed) = (Vec::new(), Vec::new(), Vec::new());
    for (i, id) in ids.iter().enumerate() {
        for which in ['a', 'b'] {
            let name = source(i, which);
            sealed.push(ring.seal(SECRET.as_bytes(), &secret_place(&name, 1)));
            names.push(name);
            owners.push(id.clone());
        }
    }
    sqlx::query(
        "INSERT INTO sources (name, tenant_id, gateway, tolerance_secs)
         SELECT s, t, 'razorpay', 300 FROM unnest($1::text[], $2::text[]) AS x(s, t)",
    )
    .bind(&names)
    .bind(&owners)
    .execute(&env.pool)
    .await
    .expect("insert the sources");
    sqlx::query(
        "INSERT INTO source_secrets (source, no, tenant_id, sealed)
         SELECT s, 1, t, k FROM unnest($1::text[], $2::text[], $3::text[]) AS x(s, t, k)",
    )
    .bind(&names)
    .bind(&owners)
    .bind(&sealed)
    .execute(&env.pool)
    .await
    .expect("insert the sealed secrets");
    // Each merchant's shop, in its own scope; the first merchant's has an
    // order for every capture the rounds send it.
    let mut seeding = tokio::task::JoinSet::new();
    let per_task = n.div_ceil(8).max(1);
    for chunk in ids.chunks(per_task) {
        let (pool, chunk) = (env.pool.clone(), chunk.to_vec());
        seeding.spawn(async move {
            for id in chunk {
                // The first merchant's drains spread over the bench's 50
                // products (one hot product would measure its row lock).
                let (first, products) = if id == tenant(0) {
                    (
                        FIRST_ORDERS..FIRST_ORDERS + events * rounds,
                        crate::SKUS as usize,
                    )
                } else {
                    (0..0, 1)
                };
                let sku = |k: usize| format!("SKU-{:02}", k % products);
                let mut shop = Shop::new();
                for k in 0..products {
                    shop = shop.product(&sku(k), 1_000_000_000);
                }
                for k in (0..=rounds).chain(first) {
                    shop = shop.order_of(&format!("o_{id}_{k}"), 10_000, "INR", &[(sku(k), 1)]);
                }
                shop.seed_in(&pool, &id).await;
            }
        });
    }
    while let Some(done) = seeding.join_next().await {
        done.expect("seed the merchants' shops");
    }
    // The listed shop's orders last: newest, after every other shop's
    // in the order of change the list reads.
    let mut listed = Shop::new().product("LIST", 1_000_000);
    for k in 0..LISTED {
        listed = listed.order_of(&format!("listed_{k}"), 10_000, "INR", &[("LIST", 1)]);
    }
    listed.seed(&env.pool).await;
}

/// Empties every events queue of `prefix` (the ack measurement's captures
/// are not for the worker).
async fn purge(urls: &str, prefix: &str) {
    let conn = oncehook_e2e::broker::connect_on(urls).await;
    let t = oncehook_common::Topology::new(prefix);
    if let Ok(ch) = conn.create_channel().await {
        for queue in std::iter::once(t.events()).chain(t.bulk_lanes()) {
            let _ = ch
                .queue_purge(queue.as_str().into(), Default::default())
                .await;
        }
    }
    let _ = conn.close(200, "purged".into()).await;
}

/// A process's resident memory (`VmRSS`), in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn report(
    sizes: &[usize; 2],
    rounds: &[(usize, Round)],
    mut notes: Vec<String>,
) -> (Vec<Row>, Vec<String>) {
    let of = |n: usize| -> Vec<&Round> {
        rounds
            .iter()
            .filter(|(t, _)| *t == n)
            .map(|(_, r)| r)
            .collect()
    };
    let (small, big) = (of(sizes[0]), of(sizes[1]));
    let loads: Vec<&RunLoad> = rounds.iter().map(|(_, r)| &r.load).collect();
    // Each round's large over the same round's small (as figures where
    // more is worse; the worker's rate is inverted).
    let ratios = |f: &dyn Fn(&Round) -> Option<f64>| -> Vec<f64> {
        big.iter()
            .zip(&small)
            .filter_map(|(b, s)| Some(f(b)? / f(s).filter(|v| *v > 0.0)?))
            .collect()
    };
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
    let checks: [(&str, Vec<f64>); 5] = [
        ("ingest RSS", ratios(&|r| r.rss_kib.map(|k| k as f64))),
        ("ingest ack p50", ratios(&|r| secs(r.ack.p50()))),
        ("ingest ack p99", ratios(&|r| secs(r.ack.p99()))),
        ("API list p99", ratios(&|r| secs(r.list.p99()))),
        (
            "worker seconds per event",
            ratios(&|r| Some(1.0 / r.worker.max(1e-9))),
        ),
    ];
    let mut vs = Vec::new();
    for (what, v) in &checks {
        machine::goal_on(
            &format!(
                "tenants: {what} with {} merchants ≤ {GOAL}× with {}",
                sizes[1], sizes[0]
            ),
            spread(v),
            !v.is_empty() && median(v) <= GOAL,
            &loads,
        );
        vs.push(format!(
            "{what} {}",
            if v.is_empty() {
                "–".to_owned()
            } else {
                format!("{:.2}×", median(v))
            }
        ));
    }
    let mut rows = Vec::new();
    for (n, runs) in [(sizes[0], &small), (sizes[1], &big)] {
        let Some(mid) = runs.get(runs.len() / 2) else {
            continue;
        };
        let rss = median(
            &runs
                .iter()
                .filter_map(|r| r.rss_kib.map(|k| k as f64))
                .collect::<Vec<_>>(),
        );
        let worker = median(&runs.iter().map(|r| r.worker).collect::<Vec<_>>());
        rows.push(Row {
            measurement: format!(
                "tenants: {n} merchant(s), ingest acks (RSS {:.0} MiB)",
                rss / 1024.0
            ),
            throughput: format!("{:.0} req/s", mid.ack.rate()),
            p50: ms(mid.ack.p50()),
            p90: ms(mid.ack.p90()),
            p99: ms(mid.ack.p99()),
            vs: if n == sizes[1] {
                vs.join("; ")
            } else {
                "(one merchant)".to_owned()
            },
        });
        rows.push(Row {
            measurement: format!("tenants: {n} merchant(s), API GET /v1/orders?limit=50"),
            throughput: format!("{:.0} req/s", mid.list.rate()),
            p50: ms(mid.list.p50()),
            p90: ms(mid.list.p90()),
            p99: ms(mid.list.p99()),
            vs: String::new(),
        });
        rows.push(Row {
            measurement: format!("tenants: {n} merchant(s), worker ×1, one merchant's events"),
            throughput: format!("{worker:.0} events/s"),
            p50: "–".to_owned(),
            p90: "–".to_owned(),
            p99: "–".to_owned(),
            vs: String::new(),
        });
        let spread_rates: Vec<f64> = runs.iter().filter_map(|r| r.spread).collect();
        if !spread_rates.is_empty() {
            rows.push(Row {
                measurement: format!(
                    "tenants: {n} merchants, worker ×1, events spread one per merchant"
                ),
                throughput: format!("{:.0} events/s", median(&spread_rates)),
                p50: "–".to_owned(),
                p90: "–".to_owned(),
                p99: "–".to_owned(),
                vs: format!(
                    "{:.2}× of one merchant's events",
                    median(&spread_rates) / worker.max(1e-9)
                ),
            });
        }
    }
    notes.push(
        "tenants: each merchant has two runtime sources (sealed secrets, read by ingest from the admin API's feed) and two orders; the API lists the default tenant's 500 orders in both deployments".to_owned(),
    );
    (rows, notes)
}
