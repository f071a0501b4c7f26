//! The upgrade test (`make upgrade-test`, deploy/local/upgrade-test.sh): a
//! release rolled out under load as an operator rolls it, from a previous
//! release built from git (`ONCEHOOK_UPGRADE_FROM_BIN`) to this checkout's
//! binaries (`target/debug`, or `ONCEHOOK_UPGRADE_TO_BIN`).
//!
//! The database is migrated by the OLD `oncehookctl`; the old release runs
//! every binary (two workers, the mailer to an SMTP listener, the notifier to
//! a receiver that verifies each event with the `standardwebhooks` library,
//! ingest, the API, the console) under a steady load: orders created and
//! cancelled through the API, signed Razorpay captures (with duplicates,
//! late copies, failed attempts before and after, second captures) and
//! refunds posted to ingest. At a fifth of the load the NEW `oncehookctl
//! migrate` runs (expand), then each binary is replaced in the guide's order
//! (the new one started and ready, the old one sent SIGTERM and expected to
//! exit 0; ingest and the API behind a switch, as a load balancer would
//! move them), then `oncehookctl migrate --finish` (contract and catch-up).
//! `rollback` rolls forward, back to the old release (in the reverse order,
//! ingest first) and forward again within the window. After the load
//! everything drains and the checks are
//! absolute (no control run):
//!
//! - the books: every acked delivery recorded, one payment per capture,
//!   stock moved once per paid order, one confirmation per paid order,
//!   every email at the SMTP listener once;
//! - nothing stuck: queues empty, outbox sent, order events published and
//!   delivered, no dead letters, every SIGTERM exit 0;
//! - every order event verified at the receiver; per order, one version
//!   has one state across its events, and the shop's "keep the highest
//!   version" ends on the order's state from `GET /v1/orders/{ref}`;
//! - `GET /v1/orders?updated_after=<just before migrate>` lists every order
//!   whose facts changed after it; no changed order at version 1; no
//!   `updated_at` older than the order's last change;
//! - a refund intent for every owed payment; `order.paid` for every
//!   cancelled order a capture covered (before or after the cancellation);
//! - a second `migrate --finish` changes no order's state and writes no
//!   row (a version may move: reported).
//!
//! Knobs: `ONCEHOOK_UPGRADE_SECS` (the load's length, 240),
//! `ONCEHOOK_UPGRADE_ORDERS` (300). `test = false` in Cargo.toml: `cargo
//! test --workspace` does not run it; the script does, one scenario at a
//! time, and each run appends its figures to target/upgrade-report.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use oncehook_e2e::api::{FULL_KEY, config_with_keys};
use oncehook_e2e::console::hash_line;
use oncehook_e2e::process::Proc;
use oncehook_e2e::receiver::{Received, Receiver, SECRET};
use oncehook_e2e::rng::Lcg;
use oncehook_e2e::{SmtpSink, TestEnv, broker, free_port};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SignedDelivery;
use serde_json::Value;
use sqlx::Row;

// ---------------------------------------------------------------------------
// Releases and the fleet of binaries

/// One release's binaries.
#[derive(Clone, Debug)]
struct Release {
    label: &'static str,
    dir: PathBuf,
}

/// The previous release (from git) and this checkout's.
fn releases() -> (Release, Release) {
    let old = std::env::var("ONCEHOOK_UPGRADE_FROM_BIN").unwrap_or_else(|_| {
        panic!(
            "ONCEHOOK_UPGRADE_FROM_BIN is not set: it names the previous release's binaries. \
             Run `make upgrade-test` (deploy/local/upgrade-test.sh builds them from git)"
        )
    });
    let old = PathBuf::from(old);
    for bin in oncehook_e2e::env::binaries() {
        assert!(
            old.join(bin).exists(),
            "{} is missing from ONCEHOOK_UPGRADE_FROM_BIN ({})",
            bin,
            old.display()
        );
    }
    let new = std::env::var("ONCEHOOK_UPGRADE_TO_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| oncehook_e2e::process::bin_dir());
    for bin in oncehook_e2e::env::binaries() {
        assert!(
            new.join(bin).exists(),
            "{} is missing from {}: `cargo build --workspace --bins`",
            bin,
            new.display()
        );
    }
    (
        Release {
            label: "old",
            dir: old,
        },
        Release {
            label: "new",
            dir: new,
        },
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Worker(usize),
    Mailer,
    Notifier,
    Api,
    Console,
    Ingest,
}

/// The order binaries are rolled in (docs/operations.md, "Deploying a new
/// version"): the workers, the mailer, the notifier, the API, the console,
/// then ingest (oncehookctl needs no restart: the new one is used from the
/// expand step on). A rollback within the window rolls in the reverse
/// order, ingest first.
const ROLL_ORDER: [Role; 7] = [
    Role::Worker(0),
    Role::Worker(1),
    Role::Mailer,
    Role::Notifier,
    Role::Api,
    Role::Console,
    Role::Ingest,
];

impl Role {
    fn bin(self) -> &'static str {
        match self {
            Role::Worker(_) => "oncehook-worker",
            Role::Mailer => "oncehook-mailer",
            Role::Notifier => "oncehook-notifier",
            Role::Api => "oncehook-api",
            Role::Console => "oncehook-console",
            Role::Ingest => "oncehook-ingest",
        }
    }

    fn name(self) -> String {
        match self {
            Role::Worker(i) => format!("worker {}", i + 1),
            other => other.bin().trim_start_matches("oncehook-").to_owned(),
        }
    }
}

struct Running {
    role: Role,
    release: &'static str,
    proc: Proc,
}

/// The running binaries, and where ingest and the API are reached (what a
/// load balancer would switch).
struct Fleet {
    running: Vec<Running>,
    ingest_url: Arc<RwLock<String>>,
    api_url: Arc<RwLock<String>>,
    console_url: String,
    /// (what, exit code) of every binary stopped with SIGTERM.
    exits: Vec<(String, Option<i32>)>,
    /// What the operator did, with the time since the load began.
    journal: Vec<String>,
}

async fn start(env: &mut TestEnv, role: Role, rel: &Release) -> (Proc, Option<String>) {
    let dir = rel.dir.clone();
    match role {
        Role::Worker(_) | Role::Mailer | Role::Notifier => {
            let proc = env.spawn_from(&dir, role.bin(), &[], &[]);
            env.wait_ready(proc.metrics_url(), "/readyz").await;
            (proc, None)
        }
        Role::Ingest => {
            let addr = format!("127.0.0.1:{}", free_port());
            let proc = env.spawn_from(&dir, role.bin(), &[("ONCEHOOK_INGEST_ADDR", &addr)], &[]);
            env.wait_ready(proc.metrics_url(), "/readyz").await;
            (proc, Some(format!("http://{addr}")))
        }
        Role::Api => {
            let addr = format!("127.0.0.1:{}", free_port());
            let metrics = format!("127.0.0.1:{}", free_port());
            let proc = env.spawn_from(
                &dir,
                role.bin(),
                &[
                    ("ONCEHOOK_API_ADDR", &addr),
                    ("ONCEHOOK_METRICS_ADDR", &metrics),
                ],
                &[],
            );
            env.wait_ready(&format!("http://{metrics}"), "/readyz")
                .await;
            (proc, Some(format!("http://{addr}")))
        }
        Role::Console => {
            let addr = format!("127.0.0.1:{}", free_port());
            let metrics = format!("127.0.0.1:{}", free_port());
            let proc = env.spawn_from(
                &dir,
                role.bin(),
                &[
                    ("ONCEHOOK_CONSOLE_ADDR", &addr),
                    ("ONCEHOOK_METRICS_ADDR", &metrics),
                    ("ONCEHOOK_CONSOLE_SECURE_COOKIES", "false"),
                ],
                &[],
            );
            let base = format!("http://{addr}");
            env.wait_ready(&base, "/login").await;
            (proc, Some(base))
        }
    }
}

impl Fleet {
    async fn start_all(env: &mut TestEnv, rel: &Release) -> Fleet {
        let mut fleet = Fleet {
            running: Vec::new(),
            ingest_url: Arc::default(),
            api_url: Arc::default(),
            console_url: String::new(),
            exits: Vec::new(),
            journal: Vec::new(),
        };
        for role in ROLL_ORDER {
            let (proc, url) = start(env, role, rel).await;
            fleet.point(role, url);
            fleet.running.push(Running {
                role,
                release: rel.label,
                proc,
            });
        }
        fleet
    }

    fn point(&mut self, role: Role, url: Option<String>) {
        let Some(url) = url else { return };
        match role {
            Role::Ingest => *self.ingest_url.write().expect("ingest url") = url,
            Role::Api => *self.api_url.write().expect("api url") = url,
            Role::Console => self.console_url = url,
            _ => {}
        }
    }

    /// Replaces `role` with `rel`'s binary: the new one started and ready
    /// (traffic switched to it), then the old one sent SIGTERM; its exit
    /// code is recorded.
    async fn replace(&mut self, env: &mut TestEnv, role: Role, rel: &Release, t0: Instant) {
        let (proc, url) = start(env, role, rel).await;
        self.point(role, url);
        let at = self
            .running
            .iter()
            .position(|r| r.role == role)
            .expect("a running binary for the role");
        let old = std::mem::replace(
            &mut self.running[at],
            Running {
                role,
                release: rel.label,
                proc,
            },
        );
        let what = format!("{} ({})", role.name(), old.release);
        let code = stop(old.proc).await;
        self.journal.push(format!(
            "+{:>5.1}s {} {} -> {} (SIGTERM exit {})",
            t0.elapsed().as_secs_f64(),
            role.name(),
            old.release,
            rel.label,
            code.map_or("none within 60 s".to_owned(), |c| c.to_string())
        ));
        self.exits.push((what, code));
    }

    /// Stops every binary with SIGTERM (consumers before ingest and the API).
    async fn stop_all(&mut self) {
        for r in std::mem::take(&mut self.running) {
            let what = format!("{} ({}, at the end)", r.role.name(), r.release);
            let code = stop(r.proc).await;
            self.exits.push((what, code));
        }
    }
}

/// SIGTERM, then up to 60 s for the exit code.
async fn stop(mut proc: Proc) -> Option<i32> {
    proc.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(60);
    while proc.is_running() {
        if Instant::now() > deadline {
            proc.kill();
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proc.wait_exit(Duration::from_secs(1))
}

/// `oncehookctl` of `rel` with `args`: (exit code, stdout, stderr).
async fn ctl(env: &TestEnv, rel: &Release, args: &[&str]) -> (i32, String, String) {
    env.ctl_from(&rel.dir, args).await
}

// ---------------------------------------------------------------------------
// The load

const PRODUCTS: [(&str, i32); 3] = [("UP-A", 100_000), ("UP-B", 100_000), ("UP-C", 100_000)];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Fact {
    Capture(String),
    Failure(String),
    Refund(String),
}

#[derive(Clone)]
enum Step {
    Create,
    Cancel,
    /// `copies` posts of one delivery, all at once.
    Post {
        fact: Fact,
        event_id: String,
        delivery: SignedDelivery,
        copies: usize,
    },
}

struct Script {
    order_ref: String,
    body: String,
    steps: Vec<(Duration, Step)>,
}

/// What the load did.
#[derive(Default)]
struct LoadLog {
    posts: usize,
    acked_posts: usize,
    non_200: usize,
    gave_up: Vec<String>,
    acked_events: BTreeSet<String>,
    captures: BTreeSet<String>,
    failures: BTreeSet<String>,
    refunds: BTreeSet<String>,
    created: BTreeSet<String>,
    cancelled: BTreeSet<String>,
    api_calls: usize,
    api_retries: usize,
    /// Answers that were not a success, by who gave them and what they
    /// were ("ingest 503", "api no answer"): how many, and the first and
    /// last time (s since the load began).
    refusals: BTreeMap<String, (usize, f64, f64)>,
}

impl LoadLog {
    fn refused(&mut self, what: String, t0: Instant) {
        let at = t0.elapsed().as_secs_f64();
        let entry = self.refusals.entry(what).or_insert((0, at, at));
        entry.0 += 1;
        entry.2 = at;
    }
}

/// "503", or "no answer" for a request that got none.
fn answer(status: u16) -> String {
    if status == 0 {
        "no answer".to_owned()
    } else {
        status.to_string()
    }
}

/// One planned delivery of an order: `copies` posts at once at `t` seconds
/// (of a 240 s window) after the order's creation.
struct Planned {
    t: f64,
    event: &'static str,
    fact: Fact,
    event_id: String,
    payment_id: String,
    amount: i64,
    copies: usize,
}

/// The per-order scripts: creation through the API, then its facts.
/// Among `n` orders (300 by default): a failed attempt before the capture
/// for one in four, a late failed attempt after it for one in ten, no
/// capture for one in 25, a second capture (paid twice) for 18, a
/// cancellation through the API for 12 (half before the capture, half
/// after), a refund (whole or half) for one in four paid orders and of the
/// second capture for six of the paid twice; captures posted one to three
/// times at once, a quarter of them once more a little later.
fn plan(env: &TestEnv, n: usize, window: Duration) -> Vec<Script> {
    let unit = window.as_secs_f64() / 240.0;
    let at = |secs: f64| Duration::from_secs_f64(secs * unit);
    let mut rng = Lcg(0x5eed_0041);
    // Each order's script lasts at most ~28 units: the last ends with the window.
    let span = (window.as_secs_f64() - 28.0 * unit).max(1.0);
    let mut scripts = Vec::with_capacity(n);
    for i in 0..n {
        let order_ref = format!("up_{i:04}");
        let (sku, qty) = (PRODUCTS[i % 3].0, 1 + (i % 3) as i64);
        let unit_minor = 10_000 + 500 * (i % 7) as i64;
        let amount = unit_minor * qty;
        let body = format!(
            r#"{{"order_ref": "{order_ref}", "customer_email": "{order_ref}@shop.example", "currency": "INR",
                "amount_minor": {amount}, "items": [{{"sku": "{sku}", "qty": {qty}, "unit_minor": {unit_minor}}}],
                "metadata": {{"upgrade": true}}}}"#
        );
        let cancelled = i % 25 == 7;
        let cancel_first = cancelled && (i / 25) % 2 == 0;
        let twice = [3, 20, 37].contains(&(i % 50));
        let never_paid = [11, 44].contains(&(i % 50));
        let pay = format!("pay_{order_ref}");
        let mut steps = vec![(Duration::ZERO, Step::Create)];
        let mut posts = Vec::new();
        let planned = |t, event, fact: Fact, id: &str, payment: &str, amount, copies| Planned {
            t,
            event,
            fact,
            event_id: format!("evt_{order_ref}_{id}"),
            payment_id: payment.to_owned(),
            amount,
            copies,
        };
        if i % 4 == 1 {
            let failed = format!("{pay}_f");
            let (t, copies) = (rng.secs(1, 3) as f64, 1 + (rng.draw() % 2) as usize);
            posts.push(planned(
                t,
                "payment.failed",
                Fact::Failure(failed.clone()),
                "f",
                &failed,
                amount,
                copies,
            ));
        }
        if cancel_first {
            steps.push((at(3.0), Step::Cancel));
        }
        if !never_paid {
            let t = rng.secs(4, 8) as f64;
            // Once (2 in 5), twice at once (2 in 5) or three times (1 in 5).
            let copies = [1, 1, 2, 2, 3][(rng.draw() % 5) as usize];
            posts.push(planned(
                t,
                "payment.captured",
                Fact::Capture(pay.clone()),
                "c",
                &pay,
                amount,
                copies,
            ));
            if rng.draw().is_multiple_of(4) {
                let late = t + rng.secs(6, 14) as f64;
                posts.push(planned(
                    late,
                    "payment.captured",
                    Fact::Capture(pay.clone()),
                    "c",
                    &pay,
                    amount,
                    1,
                ));
            }
            if twice {
                let second = format!("{pay}_b");
                let t2 = t + rng.secs(2, 6) as f64;
                let copies = 1 + (rng.draw() % 2) as usize;
                posts.push(planned(
                    t2,
                    "payment.captured",
                    Fact::Capture(second.clone()),
                    "b",
                    &second,
                    amount,
                    copies,
                ));
                if i % 50 == 20 {
                    let id = format!("evt_{order_ref}_rb");
                    let (t3, copies) = (t2 + rng.secs(8, 12) as f64, 1 + (rng.draw() % 2) as usize);
                    posts.push(planned(
                        t3,
                        "refund.processed",
                        Fact::Refund(id),
                        "rb",
                        &second,
                        amount,
                        copies,
                    ));
                }
            }
            if i % 10 == 6 {
                let failed = format!("{pay}_g");
                let late = t + rng.secs(5, 12) as f64;
                posts.push(planned(
                    late,
                    "payment.failed",
                    Fact::Failure(failed.clone()),
                    "g",
                    &failed,
                    amount,
                    1,
                ));
            }
            if cancelled && !cancel_first {
                steps.push((at(t + 4.0), Step::Cancel));
            }
            if !cancelled && i % 4 == 2 {
                let refunded = if i % 8 == 2 { amount } else { amount / 2 };
                let id = format!("evt_{order_ref}_r");
                let (t3, copies) = (t + rng.secs(8, 18) as f64, 1 + (rng.draw() % 2) as usize);
                posts.push(planned(
                    t3,
                    "refund.processed",
                    Fact::Refund(id),
                    "r",
                    &pay,
                    refunded,
                    copies,
                ));
            }
        }
        for p in posts {
            let spec = env.spec(&order_ref, &p.payment_id, &p.event_id, p.amount);
            let delivery = env.sign(Gateway::Razorpay, p.event, &spec);
            steps.push((
                at(p.t),
                Step::Post {
                    fact: p.fact,
                    event_id: p.event_id,
                    delivery,
                    copies: p.copies,
                },
            ));
        }
        steps.sort_by_key(|(t, _)| *t);
        let offset = Duration::from_secs_f64(span * i as f64 / n as f64);
        scripts.push(Script {
            order_ref,
            body,
            steps: steps.into_iter().map(|(t, s)| (offset + t, s)).collect(),
        });
    }
    scripts
}

/// Runs every script on its own task, against whichever ingest and API
/// the fleet points at when each request is made.
fn start_load(
    scripts: Vec<Script>,
    t0: Instant,
    ingest: Arc<RwLock<String>>,
    api: Arc<RwLock<String>>,
    log: Arc<Mutex<LoadLog>>,
) -> tokio::task::JoinSet<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client");
    let mut tasks = tokio::task::JoinSet::new();
    for script in scripts {
        let (http, ingest, api, log) = (http.clone(), ingest.clone(), api.clone(), log.clone());
        tasks.spawn(async move {
            for (at, step) in script.steps {
                tokio::time::sleep_until((t0 + at).into()).await;
                match step {
                    Step::Create => {
                        let key = format!("create-{}", script.order_ref);
                        let ok =
                            api_call(&http, &api, &log, t0, "/v1/orders", &script.body, &key).await;
                        if let Ok(mut l) = log.lock() {
                            if ok {
                                l.created.insert(script.order_ref.clone());
                            } else {
                                l.gave_up.push(format!("create {}", script.order_ref));
                            }
                        }
                    }
                    Step::Cancel => {
                        let path = format!("/v1/orders/{}/cancel", script.order_ref);
                        let ok = api_call(
                            &http,
                            &api,
                            &log,
                            t0,
                            &path,
                            r#"{"reason": "customer left"}"#,
                            "",
                        )
                        .await;
                        if let Ok(mut l) = log.lock() {
                            if ok {
                                l.cancelled.insert(script.order_ref.clone());
                            } else {
                                l.gave_up.push(format!("cancel {}", script.order_ref));
                            }
                        }
                    }
                    Step::Post {
                        fact,
                        event_id,
                        delivery,
                        copies,
                    } => {
                        let mut all = tokio::task::JoinSet::new();
                        for _ in 0..copies {
                            let (http, ingest, delivery, log) =
                                (http.clone(), ingest.clone(), delivery.clone(), log.clone());
                            all.spawn(
                                async move { post(&http, &ingest, &delivery, &log, t0).await },
                            );
                        }
                        while let Some(r) = all.join_next().await {
                            let acked = r.unwrap_or(false);
                            let Ok(mut l) = log.lock() else { continue };
                            l.posts += 1;
                            if acked {
                                l.acked_posts += 1;
                                l.acked_events.insert(event_id.clone());
                                match &fact {
                                    Fact::Capture(p) => l.captures.insert(p.clone()),
                                    Fact::Failure(p) => l.failures.insert(p.clone()),
                                    Fact::Refund(r) => l.refunds.insert(r.clone()),
                                };
                            } else {
                                l.gave_up.push(format!("post {event_id}"));
                            }
                        }
                    }
                }
            }
        });
    }
    tasks
}

/// POSTs a delivery like a gateway: anything but a 200 is retried every
/// 250 ms for up to 90 s. Whether it was acked.
async fn post(
    http: &reqwest::Client,
    ingest: &RwLock<String>,
    delivery: &SignedDelivery,
    log: &Mutex<LoadLog>,
    t0: Instant,
) -> bool {
    let started = Instant::now();
    loop {
        let base = ingest.read().map(|u| u.clone()).unwrap_or_default();
        let mut req = http
            .post(format!("{base}/webhooks/razorpay"))
            .body(delivery.body.clone());
        for (n, v) in delivery.headers.iter() {
            req = req.header(n, v);
        }
        let status = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
        if status == 200 {
            return true;
        }
        if let Ok(mut l) = log.lock() {
            l.non_200 += 1;
            l.refused(format!("ingest {}", answer(status)), t0);
        }
        if started.elapsed() > Duration::from_secs(90) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A POST to the API (an `Idempotency-Key` when given), retried on no
/// answer or a 5xx / 409 `idempotency_key_in_use` for up to 90 s.
async fn api_call(
    http: &reqwest::Client,
    api: &RwLock<String>,
    log: &Mutex<LoadLog>,
    t0: Instant,
    path: &str,
    body: &str,
    key: &str,
) -> bool {
    let started = Instant::now();
    loop {
        let base = api.read().map(|u| u.clone()).unwrap_or_default();
        let mut req = http
            .post(format!("{base}{path}"))
            .header("Authorization", format!("Bearer {FULL_KEY}"))
            .header("Content-Type", "application/json")
            .body(body.to_owned());
        if !key.is_empty() {
            req = req.header("Idempotency-Key", key);
        }
        let status = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
        if let Ok(mut l) = log.lock() {
            l.api_calls += 1;
            if status != 200 && status != 201 {
                let route = if key.is_empty() { "cancel" } else { "create" };
                l.refused(format!("api {route} {}", answer(status)), t0);
            }
        }
        match status {
            200 | 201 => return true,
            0 | 409 | 500..=599 if started.elapsed() < Duration::from_secs(90) => {
                if let Ok(mut l) = log.lock() {
                    l.api_retries += 1;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            _ => return false,
        }
    }
}

// ---------------------------------------------------------------------------
// The scenario

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Upgrade,
    Rollback,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Upgrade => "upgrade",
            Scenario::Rollback => "rollback",
        }
    }
}

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One check: how many things are wrong (0 passes), out of how many, and
/// what they are.
struct Check {
    name: &'static str,
    bad: usize,
    of: Option<usize>,
    detail: String,
}

fn check(name: &'static str, bad: usize, of: Option<usize>, detail: String) -> Check {
    Check {
        name,
        bad,
        of,
        detail,
    }
}

/// A few of `items`, for a message.
fn some<T: std::fmt::Debug>(items: impl IntoIterator<Item = T>) -> String {
    let all: Vec<T> = items.into_iter().collect();
    let shown: Vec<String> = all.iter().take(6).map(|i| format!("{i:?}")).collect();
    if all.len() > 6 {
        format!("{}, … ({} in all)", shown.join(", "), all.len())
    } else {
        shown.join(", ")
    }
}

async fn run(scenario: Scenario) {
    let began = Instant::now();
    let (old, new) = releases();
    let window = Duration::from_secs(knob("ONCEHOOK_UPGRADE_SECS", 240).max(30));
    let n_orders = knob("ONCEHOOK_UPGRADE_ORDERS", 300).max(10) as usize;
    let from = std::env::var("ONCEHOOK_UPGRADE_FROM_REV").unwrap_or_else(|_| "?".to_owned());
    let to = std::env::var("ONCEHOOK_UPGRADE_TO_REV").unwrap_or_else(|_| "?".to_owned());

    let mut env = TestEnv::new().await;
    // The database as the previous release left it: TestEnv migrated it with
    // this checkout's migrations, so start over and let the OLD oncehookctl
    // migrate it.
    sqlx::raw_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        .execute(&env.pool)
        .await
        .expect("empty the test database");
    let smtp = SmtpSink::start().await;
    let receiver = Receiver::start(SECRET).await;
    env.set_env("ONCEHOOK_SMTP_URL", &smtp.url());
    // Every capture comes after its order; a refund after its capture was
    // acked, but maybe before a worker applied it: let it wait.
    env.set_env("ONCEHOOK_UNLINKED_TTL", "120s");
    env.set_env("ONCEHOOK_NOTIFY_RETRY_SCHEDULE", "1s,1s,2s,5s,10s,20s");
    env.set_env("ONCEHOOK_NOTIFY_TIMEOUT", "5s");
    env.append_config(&format!(
        "[[notify.endpoint]]\nname = \"shop\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"order.*\"]\n",
        receiver.url
    ));
    let operator = hash_line(&env, "olga", "operator", "operator-password-1").await;
    env.append_config(&operator);
    std::fs::write(&env.config_path, config_with_keys(&env)).expect("write the config");

    let (code, out, err) = ctl(&env, &old, &["migrate"]).await;
    assert_eq!(code, 0, "the old oncehookctl migrate: {out}{err}");
    let mut fleet = Fleet::start_all(&mut env, &old).await;
    let api_base = fleet.api_url.read().expect("api").clone();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client");
    for (sku, stock) in PRODUCTS {
        let r = http
            .put(format!("{api_base}/v1/products/{sku}"))
            .header("Authorization", format!("Bearer {FULL_KEY}"))
            .header("Content-Type", "application/json")
            .body(format!(r#"{{"name": "{sku}", "stock": {stock}}}"#))
            .send()
            .await
            .expect("PUT product");
        assert!(r.status().is_success(), "PUT {sku}: {}", r.status());
    }

    // The load, and the operator on a timeline: migrate at a fifth of the
    // window, the rolls evenly spread after it, finish at the window's end.
    let scripts = plan(&env, n_orders, window);
    let log = Arc::new(Mutex::new(LoadLog::default()));
    let t0 = Instant::now();
    let mut load = start_load(
        scripts,
        t0,
        fleet.ingest_url.clone(),
        fleet.api_url.clone(),
        log.clone(),
    );
    let mut rolls: Vec<(Role, &Release)> = ROLL_ORDER.iter().map(|r| (*r, &new)).collect();
    if scenario == Scenario::Rollback {
        rolls.extend(ROLL_ORDER.iter().rev().map(|r| (*r, &old)));
        rolls.extend(ROLL_ORDER.iter().map(|r| (*r, &new)));
    }
    let migrate_at = window / 5;
    let step = (window - migrate_at) / (rolls.len() as u32 + 1);

    tokio::time::sleep_until((t0 + migrate_at).into()).await;
    let migrated_at: String = sqlx::query_scalar(
        "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    )
    .fetch_one(&env.pool)
    .await
    .expect("now");
    let (code, out, err) = ctl(&env, &new, &["migrate"]).await;
    fleet.journal.push(format!(
        "+{:>5.1}s new oncehookctl migrate: exit {code}",
        t0.elapsed().as_secs_f64()
    ));
    assert_eq!(code, 0, "the new oncehookctl migrate: {out}{err}");
    println!("migrate (new):\n{out}{err}");

    for (k, (role, rel)) in rolls.iter().enumerate() {
        tokio::time::sleep_until((t0 + migrate_at + step * (k as u32 + 1)).into()).await;
        fleet.replace(&mut env, *role, rel, t0).await;
    }
    tokio::time::sleep_until((t0 + migrate_at + step * (rolls.len() as u32 + 1)).into()).await;
    let (finish_code, out, err) = ctl(&env, &new, &["migrate", "--finish"]).await;
    fleet.journal.push(format!(
        "+{:>5.1}s new oncehookctl migrate --finish: exit {finish_code}",
        t0.elapsed().as_secs_f64()
    ));
    println!("migrate --finish (new), exit {finish_code}:\n{out}{err}");
    let finish_detail = if finish_code == 0 {
        String::new()
    } else {
        format!("exit {finish_code}: {}", err.lines().last().unwrap_or(""))
    };

    while load.join_next().await.is_some() {}
    let load_secs = t0.elapsed().as_secs_f64();
    fleet.journal.push(format!("+{load_secs:>5.1}s load done"));
    let log = std::mem::take(&mut *log.lock().expect("load log"));
    let drained = drain(&env, &log).await;

    // The contract step again: harmless. No order's state moves, nothing
    // new is written; a version may move once more (docs/operations.md).
    let before = snapshot(&env).await;
    let (again_code, out, err) = ctl(&env, &new, &["migrate", "--finish"]).await;
    println!("migrate --finish again, exit {again_code}:\n{out}{err}");
    if again_code == 0 {
        drain(&env, &log).await;
    }
    let after = snapshot(&env).await;
    let changed_again: Vec<String> = after
        .states
        .iter()
        .filter(|(r, st)| before.states.get(*r).map(|b| &b.1) != Some(&st.1))
        .map(|(r, st)| format!("{r}: {:?} -> {}", before.states.get(r).map(|b| &b.1), st.1))
        .chain(
            before
                .counts
                .iter()
                .zip(&after.counts)
                .filter(|(b, a)| b != a)
                .map(|(b, a)| format!("{}: {} -> {}", b.0, b.1, a.1)),
        )
        .collect();
    let versions_moved = after
        .states
        .iter()
        .filter(|(r, st)| before.states.get(*r).map(|b| b.0) != Some(st.0))
        .count();

    let mut checks = Vec::new();
    checks.push(check(
        "migrate --finish succeeded",
        usize::from(finish_code != 0),
        None,
        finish_detail,
    ));
    checks.push(check(
        "a second migrate --finish changed an order's state or wrote rows",
        usize::from(again_code != 0) + changed_again.len(),
        None,
        format!("exit {again_code}; {}", some(&changed_again)),
    ));
    checks.push(check(
        "load: requests given up",
        log.gave_up.len(),
        None,
        some(&log.gave_up),
    ));
    checks.push(check(
        "everything drained within 180 s",
        usize::from(!drained.is_empty()),
        None,
        drained,
    ));
    books(&env, &log, &smtp, &mut checks).await;
    stuck(&env, &mut checks).await;
    let mut notes = Vec::new();
    let figures = events(
        &env,
        &receiver,
        &http,
        &fleet,
        &migrated_at,
        &mut checks,
        &mut notes,
    )
    .await;
    fleet.stop_all().await;
    let bad_exits: Vec<&(String, Option<i32>)> =
        fleet.exits.iter().filter(|(_, c)| *c != Some(0)).collect();
    checks.push(check(
        "SIGTERM exits other than 0",
        bad_exits.len(),
        Some(fleet.exits.len()),
        some(&bad_exits),
    ));

    // The figures.
    let failed: Vec<&Check> = checks.iter().filter(|c| c.bad > 0).collect();
    println!(
        "\nupgrade test, scenario {}: {} -> {}",
        scenario.name(),
        from,
        to
    );
    for line in &fleet.journal {
        println!("  {line}");
    }
    println!("\n| check | wrong | of |\n|---|---:|---:|");
    for c in &checks {
        println!(
            "| {} | {} | {} |",
            c.name,
            c.bad,
            c.of.map_or(String::new(), |o| o.to_string())
        );
    }
    for c in &failed {
        println!("  FAILED {}: {}", c.name, c.detail);
    }
    println!("  note: a second migrate --finish moved {versions_moved} orders' versions");
    for n in &notes {
        println!("  note: {n}");
    }
    let duration = began.elapsed().as_secs_f64();
    let row = format!(
        "| {date} | {from} | {to} | {scenario} | {orders} | {posts} ({acked} acked, {dups} duplicate or late, {non200} answers not 200) | {db_events} events, {received} deliveries received, {unverified} unverified | {versions} | {owed} owed, {intents} intents | {changed} changed after migrate, {listed} listed | {load:.0} s load, {duration:.0} s in all | {result} |",
        date = today(),
        scenario = scenario.name(),
        orders = log.created.len(),
        posts = log.posts,
        acked = log.acked_posts,
        dups = log.posts.saturating_sub(log.acked_events.len()),
        non200 = log.non_200,
        db_events = figures.db_events,
        received = figures.received,
        unverified = figures.unverified,
        versions = figures.versions_checked,
        owed = figures.owed,
        intents = figures.intents,
        changed = figures.changed_after,
        listed = figures.listed_after,
        load = load_secs,
        result = if failed.is_empty() {
            "pass".to_owned()
        } else {
            format!(
                "FAIL: {}",
                failed
                    .iter()
                    .map(|c| format!(
                        "{} {}{}",
                        c.name,
                        c.bad,
                        c.of.map_or(String::new(), |o| format!(" of {o}"))
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        },
    );
    println!(
        "\n| date (UTC) | from | to | scenario | orders | deliveries | order events | versions checked | refund intents | updated_after | duration | result |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n{row}"
    );
    println!(
        "  load: {} cancelled, {} captures, {} failed attempts, {} refunds; API calls {} ({} retried)",
        log.cancelled.len(),
        log.captures.len(),
        log.failures.len(),
        log.refunds.len(),
        log.api_calls,
        log.api_retries
    );
    for (what, (n, first, last)) in &log.refusals {
        println!("  refused: {what}: {n} times, +{first:.1}s to +{last:.1}s");
    }
    let report =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/upgrade-report.md");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(report)
    {
        use std::io::Write;
        let _ = writeln!(f, "{row}");
    }
    assert!(
        failed.is_empty(),
        "upgrade test {} failed: {}",
        scenario.name(),
        failed
            .iter()
            .map(|c| format!("{} ({})", c.name, c.bad))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn today() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute()
    )
}

/// The books at one moment: every order's version and state, and how
/// many rows of each kind the ledger wrote.
struct Snapshot {
    states: BTreeMap<String, (i64, String)>,
    counts: Vec<(&'static str, i64)>,
}

async fn snapshot(env: &TestEnv) -> Snapshot {
    let states = sqlx::query(
        "SELECT o.order_ref, o.version, concat_ws(' ', o.status, o.refunded_minor, o.paid_by, o.oversold,
                (SELECT string_agg(p.payment_id || '=' || coalesce(p.flag, '-'), ',' ORDER BY p.payment_id)
                 FROM payments p WHERE p.order_id = o.id)) AS state
         FROM orders o",
    )
    .fetch_all(&env.pool)
    .await
    .expect("orders")
    .iter()
    .map(|r| (r.get("order_ref"), (r.get("version"), r.get("state"))))
    .collect();
    let mut counts = Vec::new();
    for (what, sql) in [
        ("order events", "SELECT count(*) FROM order_events"),
        ("payments", "SELECT count(*) FROM payments"),
        ("refunds", "SELECT count(*) FROM refunds"),
        ("emails", "SELECT count(*) FROM email_outbox"),
        ("refund intents", "SELECT count(*) FROM refund_intents"),
        (
            "stock",
            "SELECT coalesce(sum(stock), 0)::bigint FROM products",
        ),
    ] {
        counts.push((what, env.count(sql).await));
    }
    Snapshot { states, counts }
}

/// Waits (180 s) until nothing is left to do: every acked delivery recorded,
/// the queues empty, every email sent, every order event published and
/// delivered. What was still waiting at the deadline, or "" once quiet.
async fn drain(env: &TestEnv, log: &LoadLog) -> String {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let waiting = waiting(env, log).await;
        if waiting.is_empty() {
            return String::new();
        }
        if Instant::now() > deadline {
            return waiting;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn waiting(env: &TestEnv, log: &LoadLog) -> String {
    let mut out = Vec::new();
    for q in ["events", "emails", "notify"] {
        let queue = format!("{}.{q}", env.prefix);
        match broker::depth_on(&env.amqp_urls, &queue).await {
            Some(0) => {}
            None if q == "notify" => {}
            d => out.push(format!("{queue}: {d:?}")),
        }
    }
    let recorded: BTreeSet<String> =
        sqlx::query_scalar("SELECT event_id FROM processed_webhooks WHERE provider = 'razorpay'")
            .fetch_all(&env.pool)
            .await
            .unwrap_or_default()
            .into_iter()
            .collect();
    let missing = log.acked_events.difference(&recorded).count();
    if missing > 0 {
        out.push(format!("{missing} acked deliveries not recorded"));
    }
    for (what, sql) in [
        (
            "emails not sent",
            "SELECT count(*) FROM email_outbox WHERE sent_at IS NULL AND failed_at IS NULL",
        ),
        (
            "order events not published",
            "SELECT count(*) FROM order_events WHERE published_at IS NULL",
        ),
        (
            "order events not delivered",
            "SELECT count(*) FROM notify_deliveries WHERE status = 'pending'",
        ),
    ] {
        let n = env.count(sql).await;
        if n > 0 {
            out.push(format!("{what}: {n}"));
        }
    }
    out.join("; ")
}

/// The books: every acked delivery recorded, one payment per capture and
/// failed attempt, stock moved once per paid order, one confirmation per
/// paid order, every email at the SMTP listener once.
async fn books(env: &TestEnv, log: &LoadLog, smtp: &SmtpSink, checks: &mut Vec<Check>) {
    let recorded: BTreeSet<String> =
        sqlx::query_scalar("SELECT event_id FROM processed_webhooks WHERE provider = 'razorpay'")
            .fetch_all(&env.pool)
            .await
            .expect("processed")
            .into_iter()
            .collect();
    let lost: Vec<&String> = log.acked_events.difference(&recorded).collect();
    checks.push(check(
        "acked deliveries not recorded (lost)",
        lost.len(),
        Some(log.acked_events.len()),
        some(lost),
    ));

    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT payment_id, status, count(*) FROM payments GROUP BY payment_id, status",
    )
    .fetch_all(&env.pool)
    .await
    .expect("payments");
    let captured: BTreeMap<&str, i64> = rows
        .iter()
        .filter(|r| r.1 == "captured")
        .map(|r| (r.0.as_str(), r.2))
        .collect();
    let failed: BTreeMap<&str, i64> = rows
        .iter()
        .filter(|r| r.1 == "failed")
        .map(|r| (r.0.as_str(), r.2))
        .collect();
    let wrong: Vec<String> = log
        .captures
        .iter()
        .filter(|p| captured.get(p.as_str()) != Some(&1))
        .map(|p| format!("{p}: {:?}", captured.get(p.as_str())))
        .chain(
            captured
                .keys()
                .filter(|p| !log.captures.contains(**p))
                .map(|p| format!("{p}: never acked")),
        )
        .collect();
    checks.push(check(
        "captures not recorded exactly once",
        wrong.len(),
        Some(log.captures.len()),
        some(wrong),
    ));
    let wrong: Vec<&String> = log
        .failures
        .iter()
        .filter(|p| failed.get(p.as_str()) != Some(&1))
        .collect();
    checks.push(check(
        "failed attempts not recorded exactly once",
        wrong.len(),
        Some(log.failures.len()),
        some(wrong),
    ));

    let mut off = Vec::new();
    for (sku, initial) in PRODUCTS {
        let taken: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(i.qty), 0)::bigint FROM order_items i JOIN orders o ON o.id = i.order_id
             WHERE i.sku = $1 AND o.status IN ('paid', 'partially_refunded', 'refunded')",
        )
        .bind(sku)
        .fetch_one(&env.pool)
        .await
        .expect("paid qty");
        let stock: i32 = sqlx::query_scalar("SELECT stock FROM products WHERE sku = $1")
            .bind(sku)
            .fetch_one(&env.pool)
            .await
            .expect("stock");
        if i64::from(stock) != i64::from(initial) - taken {
            off.push(format!("{sku}: {stock}, expected {initial} - {taken}"));
        }
    }
    checks.push(check(
        "products whose stock is off",
        off.len(),
        Some(PRODUCTS.len()),
        off.join("; "),
    ));

    let confirmations: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT o.order_ref, o.status, count(e.id) FROM orders o
         LEFT JOIN email_outbox e ON e.order_id = o.id AND e.kind = 'confirmation'
         GROUP BY o.order_ref, o.status",
    )
    .fetch_all(&env.pool)
    .await
    .expect("confirmations");
    let paid = |s: &str| ["paid", "partially_refunded", "refunded"].contains(&s);
    let wrong: Vec<String> = confirmations
        .iter()
        .filter(|(_, s, n)| *n > 1 || (paid(s) && *n != 1))
        .map(|(r, s, n)| format!("{r} ({s}): {n}"))
        .collect();
    let n_paid = confirmations.iter().filter(|(_, s, _)| paid(s)).count();
    checks.push(check(
        "paid orders without exactly one confirmation (or any order with two)",
        wrong.len(),
        Some(n_paid),
        some(wrong),
    ));

    let outbox: BTreeSet<String> = sqlx::query_scalar(
        "SELECT '<' || id::text || '@oncehook>' FROM email_outbox WHERE sent_at IS NOT NULL",
    )
    .fetch_all(&env.pool)
    .await
    .expect("outbox")
    .into_iter()
    .collect();
    let mut at_smtp: BTreeMap<String, usize> = BTreeMap::new();
    for m in smtp.messages() {
        let id = m
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("message-id")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default();
        *at_smtp.entry(id).or_default() += 1;
    }
    let wrong: Vec<String> = outbox
        .iter()
        .filter(|id| at_smtp.get(*id) != Some(&1))
        .map(|id| format!("{id}: {:?}", at_smtp.get(id)))
        .chain(
            at_smtp
                .keys()
                .filter(|id| !outbox.contains(*id))
                .map(|id| format!("{id}: not a sent outbox row")),
        )
        .collect();
    checks.push(check(
        "emails not received exactly once at the SMTP listener",
        wrong.len(),
        Some(outbox.len()),
        some(wrong),
    ));
}

/// Nothing stuck: queues empty, no dead letters, outbox sent, order events
/// published and delivered.
async fn stuck(env: &TestEnv, checks: &mut Vec<Check>) {
    let mut stuck = Vec::new();
    for q in ["events", "emails", "notify"] {
        let queue = format!("{}.{q}", env.prefix);
        match broker::depth_on(&env.amqp_urls, &queue).await {
            Some(0) => {}
            None if q == "notify" => {}
            d => stuck.push(format!("{queue}: {d:?}")),
        }
    }
    for (what, sql) in [
        (
            "emails unpublished or unsent",
            "SELECT count(*) FROM email_outbox WHERE sent_at IS NULL",
        ),
        (
            "order events unpublished",
            "SELECT count(*) FROM order_events WHERE published_at IS NULL",
        ),
        (
            "order event deliveries not delivered",
            "SELECT count(*) FROM notify_deliveries WHERE status <> 'delivered'",
        ),
        ("events parked", "SELECT count(*) FROM parked_events"),
    ] {
        let n = env.count(sql).await;
        if n > 0 {
            stuck.push(format!("{what}: {n}"));
        }
    }
    checks.push(check("things stuck", stuck.len(), None, stuck.join("; ")));
    let dead = broker::peek_on(&env.amqp_urls, &format!("{}.dead", env.prefix)).await;
    checks.push(check(
        "dead letters",
        dead.len(),
        None,
        some(dead.iter().map(|d| format!("{:?}", d.kind()))),
    ));
}

struct EventFigures {
    db_events: i64,
    received: usize,
    unverified: usize,
    versions_checked: usize,
    owed: usize,
    intents: i64,
    changed_after: usize,
    listed_after: usize,
}

/// What the shop was told, against the books.
async fn events(
    env: &TestEnv,
    receiver: &Receiver,
    http: &reqwest::Client,
    fleet: &Fleet,
    migrated_at: &str,
    checks: &mut Vec<Check>,
    notes: &mut Vec<String>,
) -> EventFigures {
    let received: Vec<Received> = receiver.received();
    let unverified: Vec<&str> = received
        .iter()
        .filter(|r| !r.verified)
        .map(|r| r.webhook_id.as_str())
        .collect();
    checks.push(check(
        "event deliveries the receiver could not verify",
        unverified.len(),
        Some(received.len()),
        some(&unverified),
    ));
    let ids: BTreeSet<&str> = received
        .iter()
        .filter(|r| r.verified)
        .map(|r| r.webhook_id.as_str())
        .collect();
    let db_events: Vec<String> = sqlx::query_scalar("SELECT id FROM order_events")
        .fetch_all(&env.pool)
        .await
        .expect("order events");
    let missing: Vec<&String> = db_events
        .iter()
        .filter(|id| !ids.contains(id.as_str()))
        .collect();
    checks.push(check(
        "order events never received (verified) by the shop",
        missing.len(),
        Some(db_events.len()),
        some(&missing),
    ));

    // One version, one state; the shop keeps the highest version (a later
    // one with the same version is older news).
    let mut states: BTreeMap<(String, i64), BTreeSet<String>> = BTreeMap::new();
    let mut kept: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for r in received.iter().filter(|r| r.verified) {
        let order = &r.event["order"];
        let (Some(order_ref), Some(version), Some(status)) = (
            order["order_ref"].as_str(),
            order["version"].as_i64(),
            order["status"].as_str(),
        ) else {
            continue;
        };
        states
            .entry((order_ref.to_owned(), version))
            .or_default()
            .insert(status.to_owned());
        let held = kept
            .entry(order_ref.to_owned())
            .or_insert((i64::MIN, String::new()));
        if version > held.0 {
            *held = (version, status.to_owned());
        }
    }
    let conflicts: BTreeMap<&String, Vec<(i64, &BTreeSet<String>)>> = states
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .fold(BTreeMap::new(), |mut m, ((o, v), s)| {
            m.entry(o).or_insert_with(Vec::new).push((*v, s));
            m
        });
    checks.push(check(
        "orders with one version and two states in their events",
        conflicts.len(),
        Some(kept.len()),
        some(&conflicts),
    ));

    let api = fleet.api_url.read().expect("api").clone();
    let mut stale = Vec::new();
    for (order_ref, (version, status)) in &kept {
        let view: Value = http
            .get(format!("{api}/v1/orders/{order_ref}"))
            .header("Authorization", format!("Bearer {FULL_KEY}"))
            .send()
            .await
            .expect("GET order")
            .text()
            .await
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        if view["status"].as_str() != Some(status.as_str()) {
            stale.push(format!(
                "{order_ref}: kept v{version} {status}, the API says v{} {}",
                view["version"], view["status"]
            ));
        }
    }
    checks.push(check(
        "orders where the highest version's state is not the final state",
        stale.len(),
        Some(kept.len()),
        some(&stale),
    ));

    // Changed after the migration vs GET /v1/orders?updated_after=.
    let changed: BTreeSet<String> = sqlx::query_scalar(
        "SELECT o.order_ref FROM orders o WHERE o.created_at > $1::timestamptz
         OR EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id AND p.created_at > $1::timestamptz)
         OR EXISTS (SELECT 1 FROM refunds r WHERE r.order_id = o.id AND r.created_at > $1::timestamptz)
         OR EXISTS (SELECT 1 FROM email_outbox e WHERE e.order_id = o.id AND e.created_at > $1::timestamptz)
         OR EXISTS (SELECT 1 FROM order_cancellations c WHERE c.order_id = o.id AND c.cancelled_at > $1::timestamptz)
         OR EXISTS (SELECT 1 FROM order_events v WHERE v.order_id = o.id AND v.created_at > $1::timestamptz)",
    )
    .bind(migrated_at)
    .fetch_all(&env.pool)
    .await
    .expect("changed orders")
    .into_iter()
    .collect();
    let mut listed = BTreeSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![
            ("updated_after", migrated_at.to_owned()),
            ("limit", "100".to_owned()),
        ];
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let page: Value = http
            .get(format!("{api}/v1/orders"))
            .query(&query)
            .header("Authorization", format!("Bearer {FULL_KEY}"))
            .send()
            .await
            .expect("GET orders")
            .text()
            .await
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        for o in page["data"].as_array().cloned().unwrap_or_default() {
            if let Some(r) = o["order_ref"].as_str() {
                listed.insert(r.to_owned());
            }
        }
        match page["next_cursor"].as_str() {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => break,
        }
    }
    let unlisted: Vec<&String> = changed.difference(&listed).collect();
    checks.push(check(
        "orders changed after the migration missing from updated_after",
        unlisted.len(),
        Some(changed.len()),
        some(&unlisted),
    ));

    // Versions and updated_at against the facts.
    let last_change = "SELECT o.order_ref, o.version, o.updated_at < GREATEST(
            (SELECT max(p.created_at) FROM payments p WHERE p.order_id = o.id),
            (SELECT max(r.created_at) FROM refunds r WHERE r.order_id = o.id),
            (SELECT max(e.created_at) FROM email_outbox e WHERE e.order_id = o.id),
            (SELECT c.cancelled_at FROM order_cancellations c WHERE c.order_id = o.id),
            (SELECT max(v.created_at) FROM order_events v WHERE v.order_id = o.id)) AS stale,
          EXISTS (SELECT 1 FROM payments p WHERE p.order_id = o.id)
          OR EXISTS (SELECT 1 FROM refunds r WHERE r.order_id = o.id)
          OR EXISTS (SELECT 1 FROM order_cancellations c WHERE c.order_id = o.id)
          OR EXISTS (SELECT 1 FROM order_events v WHERE v.order_id = o.id) AS changed
        FROM orders o";
    let rows = sqlx::query(last_change)
        .fetch_all(&env.pool)
        .await
        .expect("versions and facts");
    let at_one: Vec<String> = rows
        .iter()
        .filter(|r| r.get::<bool, _>("changed") && r.get::<i64, _>("version") == 1)
        .map(|r| r.get("order_ref"))
        .collect();
    let n_changed = rows.iter().filter(|r| r.get::<bool, _>("changed")).count();
    checks.push(check(
        "orders changed but still at version 1",
        at_one.len(),
        Some(n_changed),
        some(&at_one),
    ));
    let stale_at: Vec<String> = rows
        .iter()
        .filter(|r| r.get::<Option<bool>, _>("stale") == Some(true))
        .map(|r| r.get("order_ref"))
        .collect();
    checks.push(check(
        "orders whose updated_at is older than their last change",
        stale_at.len(),
        Some(n_changed),
        some(&stale_at),
    ));

    // Refund intents for every owed payment.
    let has_intents: bool = sqlx::query_scalar("SELECT to_regclass('refund_intents') IS NOT NULL")
        .fetch_one(&env.pool)
        .await
        .expect("refund_intents?");
    // Owed: a capture that is not the order's payment (paid twice, a
    // cancelled order's, the wrong amount) whose amount is known. One owed
    // and refunded since (flag `refunded`) has a settled intent where the
    // ledger minted it: reported, not held against the release.
    let owed: Vec<(String, String, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT p.payment_id, p.flag, {} FROM payments p
         WHERE p.status = 'captured' AND p.flag IN ('needs_refund', 'amount_mismatch', 'refunded')
           AND p.amount_minor IS NOT NULL",
        if has_intents {
            "EXISTS (SELECT 1 FROM refund_intents ri WHERE ri.provider = p.provider AND ri.payment_id = p.payment_id)"
        } else {
            "false"
        }
    )))
    .fetch_all(&env.pool)
    .await
    .expect("owed payments");
    let (refunded, owed): (Vec<_>, Vec<_>) =
        owed.into_iter().partition(|(_, f, _)| f == "refunded");
    let without: Vec<&String> = owed
        .iter()
        .filter(|(_, _, i)| !i)
        .map(|(p, _, _)| p)
        .collect();
    checks.push(check(
        "payments owed back with no refund intent",
        without.len(),
        Some(owed.len()),
        some(&without),
    ));
    let refunded_without: Vec<&String> = refunded
        .iter()
        .filter(|(_, _, i)| !i)
        .map(|(p, _, _)| p)
        .collect();
    notes.push(format!(
        "owed payments refunded since: {}, of which without an intent: {} {}",
        refunded.len(),
        refunded_without.len(),
        some(&refunded_without)
    ));
    let intents = if has_intents {
        env.count("SELECT count(*) FROM refund_intents").await
    } else {
        0
    };

    // order.paid for every cancelled order a capture covered.
    let cancelled: Vec<(String, bool, bool)> = sqlx::query_as(
        "SELECT o.order_ref, c.cancelled_at < min(p.created_at) AS before,
                EXISTS (SELECT 1 FROM order_events v WHERE v.order_id = o.id AND v.type = 'order.paid') AS told
         FROM orders o JOIN order_cancellations c ON c.order_id = o.id
         JOIN payments p ON p.order_id = o.id AND p.status = 'captured'
              AND p.amount_minor = o.amount_minor AND upper(p.currency) = upper(o.currency)
         GROUP BY o.id, o.order_ref, c.cancelled_at",
    )
    .fetch_all(&env.pool)
    .await
    .expect("cancelled orders");
    let before = cancelled.iter().filter(|c| c.1).count();
    let untold: Vec<String> = cancelled
        .iter()
        .filter(|c| !c.2)
        .map(|c| {
            format!(
                "{} (cancelled {} its capture)",
                c.0,
                if c.1 { "before" } else { "after" }
            )
        })
        .collect();
    checks.push(check(
        "cancelled orders a capture covered without order.paid",
        untold.len(),
        Some(cancelled.len()),
        format!(
            "{} cancelled before their capture; {}",
            before,
            some(&untold)
        ),
    ));

    EventFigures {
        db_events: db_events.len() as i64,
        received: received.len(),
        unverified: unverified.len(),
        versions_checked: states.len(),
        owed: owed.len(),
        intents,
        changed_after: changed.len(),
        listed_after: listed.len(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upgrade() {
    run(Scenario::Upgrade).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback() {
    run(Scenario::Rollback).await;
}
