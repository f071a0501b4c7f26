//! `make compose-test`: deploy/compose/compose.yaml on a real Docker engine,
//! driven from outside through its published ports only (the shop's API,
//! ingest, the console, the receiver's list of verified events, Mailpit's
//! API, RabbitMQ's management API, Postgres on the host's loopback for the
//! checks), plus `docker compose run ctl …` inside the stack.
//!
//! * `compose_stack`: every service compose.yaml defines outside the
//!   "cluster" profile up and healthy (the "shop" profile's receiver
//!   included; `ctl` run on demand); every connection the stack opened to
//!   Postgres made as `oncehook_service`, none as the tables' owner
//!   (`pg_stat_activity`); a product and the orders created through
//!   `oncehook-api` with an `Idempotency-Key` (a replay answered the same);
//!   signed events for every gateway (duplicates included) through ingest,
//!   orders paid, one email each caught by the SMTP service, each order's
//!   `order.paid` delivered by `oncehook-notifier` to the receiver, which
//!   verified it with Python's `standardwebhooks`, and listed by
//!   `GET /v1/events`; the console's login page; `oncehookctl` in the stack
//!   (`send`, `stats`, `trace order`, `dlq list`, `notify list`);
//!   `--scale worker=3`, a worker container SIGKILLed and Postgres restarted
//!   under load: lost 0, doubled 0, every event delivered; then `down -v`.
//! * `compose_cluster_partition`: the "cluster" profile (three RabbitMQ
//!   nodes, pause_minority) under load; one node cut off with `docker network
//!   disconnect` and reconnected, then the events queue's leader's node:
//!   lost 0, doubled 0, the DLQ empty; figures in target/compose-report.md.
//!
//! Both are `#[ignore]`: they need an engine, the images and the env file
//! that deploy/compose/test.sh prepares (ONCEHOOK_COMPOSE_ENV), and take
//! minutes. Every wait is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncehook_common::Topology;
use oncehook_common::store::scope::SERVICE_ROLE;
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::{self, SampleSpec, SignedDelivery};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

const GATEWAYS: [(Gateway, &str); 5] = [
    (Gateway::Razorpay, "razorpay"),
    (Gateway::Cashfree, "cashfree"),
    (Gateway::Payu, "payu"),
    (Gateway::Stripe, "stripe"),
    (Gateway::Standard, "standard"),
];
const AMOUNT: i64 = 10_000;

/// The stack under test: the compose command, its env file and the values
/// read from it.
struct Stack {
    dir: PathBuf,
    env_file: PathBuf,
    /// `docker-compose` or `docker compose`.
    compose: Vec<String>,
    vars: BTreeMap<String, String>,
    /// Extra process environment for compose (the cluster profile's settings).
    extra: Vec<(String, String)>,
    profiles: Vec<String>,
    http: reqwest::Client,
}

/// One answer of the shop's API.
#[derive(Debug)]
struct Answer {
    status: u16,
    json: serde_json::Value,
    replayed: bool,
}

impl Stack {
    fn from_env() -> Stack {
        let env_file = PathBuf::from(
            std::env::var("ONCEHOOK_COMPOSE_ENV")
                .expect("ONCEHOOK_COMPOSE_ENV: the env file deploy/compose/test.sh writes"),
        );
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/compose");
        let compose = std::env::var("ONCEHOOK_COMPOSE_CMD")
            .unwrap_or_else(|_| "docker-compose".into())
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let vars = std::fs::read_to_string(&env_file)
            .expect("read the env file")
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        Stack {
            dir,
            env_file,
            compose,
            vars,
            extra: Vec::new(),
            // The shop's endpoint the test config points the notifier at.
            profiles: vec!["shop".to_owned()],
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .expect("http client"),
        }
    }

    fn var(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{key} missing from {}", self.env_file.display()))
    }

    fn url(&self, port_var: &str, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.var(port_var))
    }

    fn project(&self) -> &str {
        self.var("COMPOSE_PROJECT_NAME")
    }

    /// Runs compose with `args`, at most `limit`; returns (success, stdout + stderr).
    async fn compose(&self, args: &[&str], limit: Duration) -> (bool, String) {
        let mut cmd = tokio::process::Command::new(&self.compose[0]);
        cmd.args(&self.compose[1..])
            .arg("--env-file")
            .arg(&self.env_file)
            .args(["-f", "compose.yaml"]);
        for p in &self.profiles {
            cmd.args(["--profile", p]);
        }
        cmd.args(args)
            .current_dir(&self.dir)
            .envs(self.extra.iter().cloned())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        run(cmd, limit).await
    }

    /// Like [`Stack::compose`], panicking on failure.
    async fn compose_ok(&self, args: &[&str], limit: Duration) -> String {
        let (ok, out) = self.compose(args, limit).await;
        assert!(ok, "compose {args:?} failed:\n{out}");
        out
    }

    async fn docker(&self, args: &[&str], limit: Duration) -> (bool, String) {
        let mut cmd = tokio::process::Command::new("docker");
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        run(cmd, limit).await
    }

    /// The containers of `service`, by id.
    async fn containers(&self, service: &str) -> Vec<String> {
        let out = self
            .compose_ok(&["ps", "-q", service], Duration::from_secs(30))
            .await;
        out.lines()
            .map(str::trim)
            .filter(|l| l.len() >= 12 && l.chars().all(|c| c.is_ascii_hexdigit()))
            .map(str::to_owned)
            .collect()
    }

    async fn health(&self, container: &str) -> String {
        let (_, out) = self
            .docker(
                &[
                    "inspect",
                    "-f",
                    "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
                    container,
                ],
                Duration::from_secs(20),
            )
            .await;
        out.trim().to_owned()
    }

    /// Until `n` containers of `service` report healthy (at most `limit`).
    async fn wait_healthy(&self, service: &str, n: usize, limit: Duration) {
        let started = Instant::now();
        loop {
            let ids = self.containers(service).await;
            let mut healthy = 0;
            for id in &ids {
                if self.health(id).await == "healthy" {
                    healthy += 1;
                }
            }
            if healthy >= n {
                return;
            }
            if started.elapsed() > limit {
                let (_, logs) = self
                    .compose(&["logs", "--tail", "30", service], Duration::from_secs(30))
                    .await;
                panic!("{service}: {healthy} of {n} healthy after {limit:?}\n{logs}");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Until the one-shot `service` has exited 0 (at most `limit`).
    async fn wait_exited_0(&self, service: &str, limit: Duration) {
        let started = Instant::now();
        loop {
            let out = self
                .compose_ok(&["ps", "-a", "-q", service], Duration::from_secs(30))
                .await;
            let ids: Vec<&str> = out
                .lines()
                .map(str::trim)
                .filter(|l| l.len() >= 12 && l.chars().all(|c| c.is_ascii_hexdigit()))
                .collect();
            let mut states = Vec::new();
            for id in &ids {
                let (_, state) = self
                    .docker(
                        &["inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", id],
                        Duration::from_secs(20),
                    )
                    .await;
                states.push(state.trim().to_owned());
            }
            if !states.is_empty() && states.iter().all(|s| s == "exited 0") {
                return;
            }
            if started.elapsed() > limit
                || states
                    .iter()
                    .any(|s| s.starts_with("exited ") && s != "exited 0")
            {
                let (_, logs) = self
                    .compose(&["logs", "--tail", "30", service], Duration::from_secs(30))
                    .await;
                panic!(
                    "{service}: {states:?} after {:?}, not exited 0\n{logs}",
                    started.elapsed()
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The stack's Postgres on its published port, as the tables' owner
    /// (POSTGRES_USER), which sees every tenant's rows.
    fn owner_url(&self) -> String {
        format!(
            "postgres://oncehook:{}@127.0.0.1:{}/oncehook",
            self.var("POSTGRES_PASSWORD"),
            self.var("POSTGRES_PORT")
        )
    }

    async fn pool(&self) -> PgPool {
        let url = self.owner_url();
        PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .expect("connect to the stack's Postgres on its published port")
    }

    fn secret(&self, gateway: Gateway) -> String {
        self.var(match gateway {
            Gateway::Razorpay => "RAZORPAY_WEBHOOK_SECRET",
            Gateway::Cashfree => "CASHFREE_WEBHOOK_SECRET",
            Gateway::Payu => "PAYU_MERCHANT_SALT",
            Gateway::Stripe => "STRIPE_WEBHOOK_SECRET",
            Gateway::Standard => "STANDARD_WEBHOOK_SECRET",
            other => panic!("the compose stack has no source for gateway {other}"),
        })
        .to_owned()
    }

    /// A signed "captured" event for `order_ref`, as the gateway would send it.
    fn captured(&self, gateway: Gateway, order_ref: &str) -> SignedDelivery {
        let spec = SampleSpec {
            order_ref: order_ref.to_owned(),
            payment_id: format!("pay_{order_ref}"),
            event_id: format!("evt_{order_ref}"),
            amount_minor: AMOUNT,
            currency: "INR".to_owned(),
            email: format!("{order_ref}@example.com"),
            timestamp: time::OffsetDateTime::now_utc().unix_timestamp(),
            merchant_key: Some(self.var("PAYU_MERCHANT_KEY").to_owned()),
        };
        sample::build(gateway, "captured", &spec, &self.secret(gateway)).expect("sign a sample")
    }

    /// `method path` on the shop's API (its published port) with the test's
    /// key, a JSON body and headers.
    async fn api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut req = self
            .http
            .request(method, self.url("API_PORT", path))
            .bearer_auth(self.var("SHOP_API_KEY"));
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("the API answers {path}: {e}"));
        let status = resp.status().as_u16();
        let replayed = resp
            .headers()
            .get("Idempotent-Replayed")
            .is_some_and(|v| v.as_bytes() == b"true");
        let text = resp.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        Answer {
            status,
            json,
            replayed,
        }
    }

    /// `PUT /v1/products/{sku}` through the API; insists on success.
    async fn product(&self, sku: &str, stock: i32) {
        let body = serde_json::json!({"name": format!("Product {sku}"), "stock": stock});
        let a = self
            .api(
                reqwest::Method::PUT,
                &format!("/v1/products/{sku}"),
                Some(&body),
                &[],
            )
            .await;
        assert!(a.status == 201 || a.status == 200, "PUT product: {a:?}");
    }

    /// `POST /v1/orders` through the API with an `Idempotency-Key`: one
    /// unit of SKU-COMPOSE at [`AMOUNT`], the customer `{order_ref}@example.com`.
    async fn create_order(&self, order_ref: &str) -> Answer {
        let body = serde_json::json!({
            "order_ref": order_ref,
            "customer_email": format!("{order_ref}@example.com"),
            "currency": "INR",
            "amount_minor": AMOUNT,
            "items": [{"sku": "SKU-COMPOSE", "qty": 1, "unit_minor": AMOUNT}],
        });
        let key = format!("create-{order_ref}");
        self.api(
            reqwest::Method::POST,
            "/v1/orders",
            Some(&body),
            &[("Idempotency-Key", &key)],
        )
        .await
    }

    /// What the receiver (profile "shop") verified: (event id, type,
    /// order_ref) per request, and how many requests it refused.
    async fn received(&self) -> (Vec<(String, String, String)>, u64) {
        let Ok(resp) = self
            .http
            .get(self.url("RECEIVER_PORT", "/events"))
            .send()
            .await
        else {
            return (Vec::new(), 0);
        };
        let v: serde_json::Value =
            serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
        let verified = v["verified"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let text = |k: &str| e[k].as_str().unwrap_or("").to_owned();
                (text("webhook_id"), text("type"), text("order_ref"))
            })
            .collect();
        (verified, v["refused"].as_u64().unwrap_or(0))
    }

    /// Queue depth through RabbitMQ's management API on its published port.
    async fn queue_depth(&self, queue: &str) -> Option<u64> {
        let url = self.url(
            "RABBITMQ_MANAGEMENT_PORT",
            &format!("/api/queues/%2f/{queue}"),
        );
        let resp = self
            .http
            .get(url)
            .basic_auth(
                self.var("RABBITMQ_USER"),
                Some(self.var("RABBITMQ_PASSWORD")),
            )
            .send()
            .await
            .ok()?;
        let v: serde_json::Value = serde_json::from_str(&resp.text().await.ok()?).ok()?;
        v["messages"].as_u64()
    }

    /// Emails caught by the SMTP service: (recipient, Message-ID) per message.
    async fn caught_emails(&self) -> Vec<(String, String)> {
        let url = self.url("MAILPIT_PORT", "/api/v1/messages?limit=100000");
        let Ok(resp) = self.http.get(url).send().await else {
            return Vec::new();
        };
        let v: serde_json::Value =
            serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
        v["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .map(|m| {
                        (
                            m["To"][0]["Address"].as_str().unwrap_or("").to_owned(),
                            m["MessageID"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops and removes everything, volumes included.
    async fn down(&self) {
        let (ok, out) = self
            .compose(
                &["down", "-v", "--remove-orphans", "-t", "40"],
                Duration::from_secs(240),
            )
            .await;
        if !ok {
            eprintln!("compose down -v failed:\n{out}");
        }
    }
}

/// Runs `down -v` when a test ends, passed or not (set ONCEHOOK_COMPOSE_KEEP
/// to keep a failed stack for inspection).
struct DownOnDrop(Arc<Stack>);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("ONCEHOOK_COMPOSE_KEEP").is_some() {
            eprintln!("ONCEHOOK_COMPOSE_KEEP is set: the stack keeps running");
            return;
        }
        let s = &self.0;
        let mut cmd = std::process::Command::new(&s.compose[0]);
        cmd.args(&s.compose[1..])
            .arg("--env-file")
            .arg(&s.env_file)
            .args(["-f", "compose.yaml"]);
        for p in &s.profiles {
            cmd.args(["--profile", p]);
        }
        let status = cmd
            .args(["down", "-v", "--remove-orphans", "-t", "40"])
            .current_dir(&s.dir)
            .envs(s.extra.iter().cloned())
            .stdin(std::process::Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("compose down -v failed: {status:?}");
        }
    }
}

async fn run(mut cmd: tokio::process::Command, limit: Duration) -> (bool, String) {
    let what = format!("{cmd:?}");
    match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(out)) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Ok(Err(e)) => (false, format!("{what}: {e}")),
        Err(_) => (false, format!("{what}: timed out after {limit:?}")),
    }
}

/// What the load client saw.
#[derive(Default)]
struct Tally {
    posts: AtomicU64,
    /// Answers other than 200 (503s while a broker or a node was away,
    /// connection errors), each retried like a gateway would.
    retried: AtomicU64,
    /// When the latest non-200 answer came (ms after `epoch`).
    last_retry_ms: AtomicU64,
    epoch: Mutex<Option<Instant>>,
    acked: Mutex<BTreeSet<String>>,
    /// Orders whose every delivery gave up (no 200 after the retry budget).
    given_up: Mutex<BTreeSet<String>>,
}

impl Tally {
    fn since_epoch(&self) -> u64 {
        let mut epoch = self.epoch.lock().expect("epoch");
        epoch.get_or_insert_with(Instant::now).elapsed().as_millis() as u64
    }

    fn note_retry(&self) {
        let now = self.since_epoch();
        self.last_retry_ms.fetch_max(now, Ordering::SeqCst);
    }
}

/// Posts every (order, delivery) `copies` times like a gateway: non-200
/// answers are retried every 250 ms, at most 480 times (two minutes), then
/// counted as given up. `per_second` paces the load (0: as fast as possible).
async fn load(
    stack: Arc<Stack>,
    work: Vec<(String, &'static str, SignedDelivery, usize)>,
    concurrency: usize,
    per_second: u64,
    tally: Arc<Tally>,
) {
    let url = stack.url("INGEST_PORT", "");
    let queue = Arc::new(Mutex::new(work.into_iter().rev().collect::<Vec<_>>()));
    let started = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (stack, queue, tally, url, issued) = (
            stack.clone(),
            queue.clone(),
            tally.clone(),
            url.clone(),
            issued.clone(),
        );
        tasks.spawn(async move {
            loop {
                let next = queue.lock().expect("queue").pop();
                let Some((order_ref, source, delivery, copies)) = next else {
                    break;
                };
                let n = issued.fetch_add(1, Ordering::SeqCst);
                if let Some(ms) = (n * 1000).checked_div(per_second) {
                    tokio::time::sleep_until((started + Duration::from_millis(ms)).into()).await;
                }
                for _ in 0..copies {
                    let mut ok = false;
                    for _ in 0..480 {
                        tally.posts.fetch_add(1, Ordering::Relaxed);
                        let mut req = stack
                            .http
                            .post(format!("{url}/webhooks/{source}"))
                            .body(delivery.body.clone());
                        for (name, value) in delivery.headers.iter() {
                            req = req.header(name, value);
                        }
                        match req.send().await {
                            Ok(r) if r.status().as_u16() == 200 => {
                                ok = true;
                                break;
                            }
                            Ok(r) if r.status().is_client_error() => {
                                panic!(
                                    "{source} {order_ref}: {} {}",
                                    r.status(),
                                    r.text().await.unwrap_or_default()
                                )
                            }
                            _ => {
                                tally.retried.fetch_add(1, Ordering::Relaxed);
                                tally.note_retry();
                                tokio::time::sleep(Duration::from_millis(250)).await;
                            }
                        }
                    }
                    if ok {
                        tally.acked.lock().expect("acked").insert(order_ref.clone());
                    } else {
                        tally
                            .given_up
                            .lock()
                            .expect("given up")
                            .insert(order_ref.clone());
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Creates `n` pending orders tagged `tag` through the shop's API
/// (rotating over the gateways) and their signed captured events, posted
/// 1–3 times each.
async fn plan(
    stack: &Stack,
    tag: &str,
    n: usize,
) -> Vec<(String, &'static str, SignedDelivery, usize)> {
    let mut work = Vec::with_capacity(n);
    for i in 0..n {
        let order_ref = format!("{tag}_{i:04}");
        let (gateway, source) = GATEWAYS[i % GATEWAYS.len()];
        let created = stack.create_order(&order_ref).await;
        assert_eq!(
            created.status, 201,
            "POST /v1/orders {order_ref}: {created:?}"
        );
        work.push((
            order_ref.clone(),
            source,
            stack.captured(gateway, &order_ref),
            1 + i % 3,
        ));
    }
    work
}

/// The invariants for the orders tagged `tag`: (lost, doubled) and a
/// description of each violation.
async fn check(
    stack: &Stack,
    pool: &PgPool,
    tag: &str,
    acked: &BTreeSet<String>,
) -> (usize, usize, Vec<String>) {
    let like = format!("{tag}\\_%");
    let rows: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT o.order_ref, o.status,
                (SELECT count(*) FROM payments p WHERE p.order_id = o.id),
                (SELECT count(*) FROM email_outbox e WHERE e.order_id = o.id),
                (SELECT count(*) FROM processed_webhooks w WHERE w.order_ref = o.order_ref)
           FROM orders o WHERE o.order_ref LIKE $1",
    )
    .bind(&like)
    .fetch_all(pool)
    .await
    .expect("read orders");
    let mut mails: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut mail_count: BTreeMap<String, usize> = BTreeMap::new();
    for (to, id) in stack.caught_emails().await {
        *mail_count.entry(to.clone()).or_default() += 1;
        mails.entry(to).or_default().insert(id);
    }
    let (mut lost, mut doubled, mut why) = (0, 0, Vec::new());
    for (order_ref, status, payments, outbox, webhooks) in rows {
        if !acked.contains(&order_ref) {
            continue;
        }
        let to = format!("{order_ref}@example.com");
        let caught = mail_count.get(&to).copied().unwrap_or(0);
        if status != "paid" || payments == 0 || webhooks == 0 || caught == 0 {
            lost += 1;
            why.push(format!(
                "{order_ref}: status {status}, {payments} payments, {webhooks} webhooks, {caught} emails caught"
            ));
        } else if payments > 1 || outbox > 1 || webhooks > 1 || caught > 1 {
            doubled += 1;
            why.push(format!(
                "{order_ref}: {payments} payments, {outbox} outbox rows, {webhooks} webhooks, {caught} emails caught ({} Message-IDs)",
                mails.get(&to).map_or(0, BTreeSet::len)
            ));
        }
    }
    (lost, doubled, why)
}

/// Waits (at most `limit`) until every acked order of `tag` is paid with its
/// email caught, the events queue is empty and the result is stable.
async fn settle(
    stack: &Stack,
    pool: &PgPool,
    tag: &str,
    acked: &BTreeSet<String>,
    limit: Duration,
) -> (usize, usize, Vec<String>) {
    let started = Instant::now();
    loop {
        let (lost, _, _) = check(stack, pool, tag, acked).await;
        let mut drained = stack.queue_depth("oncehook.emails").await == Some(0);
        for queue in Topology::new("oncehook").all_names() {
            if Topology::new("oncehook").is_events_queue(&queue) {
                drained &= stack.queue_depth(&queue).await == Some(0);
            }
        }
        if (lost == 0 && drained) || started.elapsed() > limit {
            // Once more after a pause: a late duplicate would show up now.
            tokio::time::sleep(Duration::from_secs(3)).await;
            return check(stack, pool, tag, acked).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn report(section: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/compose-report.md");
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(section);
    std::fs::write(&path, text).expect("write target/compose-report.md");
    println!("{section}");
}

/// A service of compose.yaml, as far as bringing it up goes.
#[derive(Debug)]
struct Service {
    name: String,
    profiles: Vec<String>,
    healthcheck: bool,
    /// `restart: "no"`: a one-shot that must exit 0 (the migration).
    one_shot: bool,
}

/// Every service compose.yaml defines (a service's merge key `<<` read too).
fn services() -> Vec<Service> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/compose/compose.yaml");
    let text = std::fs::read_to_string(&path).expect("read compose.yaml");
    let file: serde_yaml::Value = serde_yaml::from_str(&text).expect("compose.yaml parses");
    let field = |service: &serde_yaml::Value, key: &str| -> Option<serde_yaml::Value> {
        if let Some(v) = service.get(key) {
            return Some(v.clone());
        }
        let merged = match service.get("<<")? {
            serde_yaml::Value::Sequence(items) => items.clone(),
            other => vec![other.clone()],
        };
        merged.iter().find_map(|m| m.get(key).cloned())
    };
    file["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .map(|(name, service)| Service {
            name: name.as_str().expect("a service name").to_owned(),
            profiles: field(service, "profiles")
                .and_then(|p| serde_yaml::from_value(p).ok())
                .unwrap_or_default(),
            healthcheck: field(service, "healthcheck").is_some(),
            one_shot: field(service, "restart").and_then(|r| r.as_str().map(str::to_owned))
                == Some("no".to_owned()),
        })
        .collect()
}

/// Brings the stack up (images built by compose as a user would) and waits
/// until every service of compose.yaml that the active profiles start is
/// healthy (the one-shot migration: exited 0); returns their names.
async fn up(stack: &Stack, workers: usize) -> Vec<String> {
    let scale = format!("worker={workers}");
    stack
        .compose_ok(
            &["up", "-d", "--build", "--scale", &scale],
            Duration::from_secs(900),
        )
        .await;
    let mut started = Vec::new();
    for service in services() {
        if !service.profiles.iter().all(|p| stack.profiles.contains(p)) {
            continue;
        }
        let n = if service.name == "worker" { workers } else { 1 };
        if service.one_shot {
            stack
                .wait_exited_0(&service.name, Duration::from_secs(240))
                .await;
        } else {
            assert!(
                service.healthcheck,
                "compose.yaml: {} has no health check, so nothing says it works",
                service.name
            );
            stack
                .wait_healthy(&service.name, n, Duration::from_secs(240))
                .await;
        }
        started.push(service.name);
    }
    started
}

/// The order events the receiver verified for the orders of `tag`:
/// event ids per (order, type), and every verified request (redeliveries
/// included) counted.
async fn delivered(
    stack: &Stack,
    tag: &str,
) -> (BTreeMap<(String, String), BTreeSet<String>>, usize, u64) {
    let (verified, refused) = stack.received().await;
    let prefix = format!("{tag}_");
    let mut events: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut requests = 0;
    for (id, kind, order_ref) in verified {
        if order_ref.starts_with(&prefix) {
            requests += 1;
            events.entry((order_ref, kind)).or_default().insert(id);
        }
    }
    (events, requests, refused)
}

/// Waits (at most `limit`) until the receiver has verified an `order.paid`
/// for every order of `acked`; then (missing, doubled, verified requests):
/// orders without one, and orders with more than one `order.paid` event id.
async fn notified(
    stack: &Stack,
    tag: &str,
    acked: &BTreeSet<String>,
    limit: Duration,
) -> (Vec<String>, Vec<String>, usize) {
    let started = Instant::now();
    loop {
        let (events, requests, _) = delivered(stack, tag).await;
        let paid = |o: &String| events.get(&(o.clone(), "order.paid".to_owned()));
        let missing: Vec<String> = acked
            .iter()
            .filter(|o| paid(o).is_none())
            .cloned()
            .collect();
        if missing.is_empty() || started.elapsed() > limit {
            let doubled = acked
                .iter()
                .filter(|o| paid(o).is_some_and(|ids| ids.len() > 1))
                .cloned()
                .collect();
            return (missing, doubled, requests);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every `order.paid` event `GET /v1/events` lists for the orders of `tag`:
/// event id -> order_ref, read a page at a time through the API.
async fn listed_events(stack: &Stack, tag: &str) -> BTreeMap<String, String> {
    let prefix = format!("{tag}_");
    let mut out = BTreeMap::new();
    let mut after = String::new();
    for _ in 0..1000 {
        let path = format!("/v1/events?type=order.paid&limit=100&after={after}");
        let page = stack.api(reqwest::Method::GET, &path, None, &[]).await;
        assert_eq!(page.status, 200, "GET {path}: {page:?}");
        for e in page.json["data"].as_array().into_iter().flatten() {
            let order_ref = e["order"]["order_ref"].as_str().unwrap_or("");
            if order_ref.starts_with(&prefix) {
                out.insert(
                    e["id"].as_str().unwrap_or("").to_owned(),
                    order_ref.to_owned(),
                );
            }
        }
        if page.json["has_more"] != serde_json::Value::Bool(true) {
            return out;
        }
        after = page.json["next_cursor"].as_str().unwrap_or("").to_owned();
    }
    panic!("GET /v1/events: more than 1000 pages");
}

/// The database users of the stack's connections to Postgres (over TCP,
/// from its containers; this one left out), with how many each: read once
/// the binaries' role shows (at most 60 s). Every binary, straight or
/// through PgBouncer, connects as [`SERVICE_ROLE`] (docs/tenants.md, "The
/// binaries' role"); the owner only migrates.
async fn connection_users(stack: &Stack) -> BTreeMap<String, i64> {
    let mut conn = PgConnection::connect(&stack.owner_url())
        .await
        .expect("connect to the stack's Postgres on its published port");
    let started = Instant::now();
    loop {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT coalesce(usename::text, ''), count(*) FROM pg_stat_activity
             WHERE datname = 'oncehook' AND backend_type = 'client backend'
               AND client_addr IS NOT NULL AND pid <> pg_backend_pid()
             GROUP BY 1",
        )
        .fetch_all(&mut conn)
        .await
        .expect("read pg_stat_activity");
        let users: BTreeMap<String, i64> = rows.into_iter().collect();
        if users.contains_key(SERVICE_ROLE) || started.elapsed() > Duration::from_secs(60) {
            let _ = conn.close().await;
            return users;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `oncehookctl ARGS` inside the stack (`compose run --rm ctl`); its output.
async fn ctl(stack: &Stack, args: &[&str]) -> String {
    let mut all = vec!["run", "--rm", "-T", "ctl"];
    all.extend_from_slice(args);
    stack.compose_ok(&all, Duration::from_secs(120)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine and the compose images: make compose-test"]
async fn compose_stack() {
    let stack = Arc::new(Stack::from_env());
    stack.down().await;
    let _down = DownOnDrop(stack.clone());
    let t0 = Instant::now();
    let started = up(&stack, 3).await;
    let up_secs = t0.elapsed().as_secs();
    // Every service compose.yaml defines: up here, run on demand (ctl,
    // below), or the "cluster" profile's nodes (compose_cluster_partition).
    let defined = services();
    for service in &defined {
        assert!(
            started.contains(&service.name)
                || service.name == "ctl"
                || service.profiles == ["cluster"],
            "compose.yaml defines {} ({:?}), which no compose test starts",
            service.name,
            service.profiles
        );
    }
    println!("up and healthy in {up_secs} s: {started:?}");
    let users = connection_users(&stack).await;
    println!("connections to Postgres by user: {users:?}");
    assert!(
        users.contains_key(SERVICE_ROLE) && users.keys().all(|u| u == SERVICE_ROLE),
        "the stack's binaries connect to Postgres as {users:?}; every one should be {SERVICE_ROLE}"
    );
    let pool = stack.pool().await;

    // The shop's API, through its published port: a product, and an order
    // whose Idempotency-Key, sent again, gets the same answer.
    stack.product("SKU-COMPOSE", 100_000).await;
    let first = stack.create_order("capi_0001").await;
    assert_eq!(first.status, 201, "POST /v1/orders: {first:?}");
    let again = stack.create_order("capi_0001").await;
    assert!(
        again.status == 201 && again.replayed && again.json == first.json,
        "the same Idempotency-Key again: {again:?}"
    );

    // The console's login page, through its published port.
    let login = stack
        .http
        .get(stack.url("CONSOLE_PORT", "/login"))
        .send()
        .await
        .expect("console /login");
    assert_eq!(login.status().as_u16(), 200, "console /login");
    let page = login.text().await.unwrap_or_default();
    assert!(
        page.contains("<form") && page.contains("password"),
        "console /login is not a login page:\n{page}"
    );

    // Phase 1: every gateway, duplicates included, on orders the API made.
    let mut work = plan(&stack, "cstack", 50).await;
    work.push((
        "capi_0001".to_owned(),
        "razorpay",
        stack.captured(Gateway::Razorpay, "capi_0001"),
        2,
    ));
    let events = work.len();
    let tally = Arc::new(Tally::default());
    load(stack.clone(), work, 8, 0, tally.clone()).await;
    let acked = tally.acked.lock().expect("acked").clone();
    assert_eq!(acked.len(), events, "every event acked");
    let stack_acked: BTreeSet<String> = acked
        .iter()
        .filter(|o| o.starts_with("cstack_"))
        .cloned()
        .collect();
    let (lost, doubled, why) = settle(
        &stack,
        &pool,
        "cstack",
        &stack_acked,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!((lost, doubled), (0, 0), "phase 1: {why:#?}");
    let api_acked = BTreeSet::from(["capi_0001".to_owned()]);
    let (lost, doubled, why) =
        settle(&stack, &pool, "capi", &api_acked, Duration::from_secs(60)).await;
    assert_eq!((lost, doubled), (0, 0), "the API's order: {why:#?}");
    let shown = stack
        .api(reqwest::Method::GET, "/v1/orders/capi_0001", None, &[])
        .await;
    assert!(
        shown.status == 200 && shown.json["status"] == "paid",
        "GET /v1/orders/capi_0001: {shown:?}"
    );
    println!(
        "phase 1: {events} events, {} posts, lost 0, doubled 0",
        tally.posts.load(Ordering::Relaxed)
    );

    // The order events: delivered by the notifier (through PgBouncer) to the
    // receiver, verified there with Python's standardwebhooks, and the same
    // events listed by GET /v1/events. A failure here is asserted at the
    // end, after the rest of the scenario has run and the report is written.
    let mut failed: Vec<String> = Vec::new();
    let notify_started = Instant::now();
    let (missing, doubled_events, requests1) =
        notified(&stack, "cstack", &stack_acked, Duration::from_secs(180)).await;
    let notify_secs = notify_started.elapsed().as_secs();
    let (_, refused) = stack.received().await;
    if !(missing.is_empty() && doubled_events.is_empty() && refused == 0) {
        failed.push(format!(
            "phase 1 order.paid at the receiver: missing {missing:?}, more than one event id {doubled_events:?}, {refused} requests refused"
        ));
    }
    let (api_missing, _, _) = notified(&stack, "capi", &api_acked, Duration::from_secs(60)).await;
    if !api_missing.is_empty() {
        failed.push("capi_0001's order.paid was not delivered to the receiver".to_owned());
    }
    let (events_at_receiver, _, _) = delivered(&stack, "cstack").await;
    let delivered_ids: BTreeMap<String, String> = events_at_receiver
        .iter()
        .filter(|((_, kind), _)| kind == "order.paid")
        .flat_map(|((o, _), ids)| ids.iter().map(|id| (id.clone(), o.clone())))
        .collect();
    let listed = listed_events(&stack, "cstack").await;
    if listed != delivered_ids {
        failed.push(format!(
            "GET /v1/events lists {} order.paid events of phase 1, the receiver verified {}: listed only {:?}, verified only {:?}",
            listed.len(),
            delivered_ids.len(),
            listed.keys().filter(|k| !delivered_ids.contains_key(*k)).collect::<Vec<_>>(),
            delivered_ids.keys().filter(|k| !listed.contains_key(*k)).collect::<Vec<_>>(),
        ));
    }

    // oncehookctl inside the stack: sign and send through ingest's service
    // name, read stats, trace the order, the dead letters and the deliveries.
    let created = stack.create_order("cctl_0001").await;
    assert_eq!(
        created.status, 201,
        "POST /v1/orders cctl_0001: {created:?}"
    );
    let amount = AMOUNT.to_string();
    ctl(
        &stack,
        &[
            "send",
            "razorpay",
            "payment.captured",
            "--order",
            "cctl_0001",
            "--amount",
            &amount,
            "--times",
            "3",
            "--concurrency",
            "3",
            "--url",
            "http://ingest:8080",
        ],
    )
    .await;
    let ctl_acked = BTreeSet::from(["cctl_0001".to_owned()]);
    let (lost, doubled, why) =
        settle(&stack, &pool, "cctl", &ctl_acked, Duration::from_secs(60)).await;
    assert_eq!((lost, doubled), (0, 0), "ctl send: {why:#?}");
    let stats = ctl(&stack, &["stats"]).await;
    assert!(stats.contains("oncehook.events"), "ctl stats:\n{stats}");
    let trace = ctl(&stack, &["trace", "order", "cctl_0001"]).await;
    assert!(trace.contains("cctl_0001"), "ctl trace:\n{trace}");
    let dlq = ctl(&stack, &["dlq", "list"]).await;
    assert!(
        dlq.contains("0 dead letter(s) in oncehook.dead"),
        "ctl dlq list:\n{dlq}"
    );
    let deliveries = ctl(
        &stack,
        &[
            "notify",
            "list",
            "--endpoint",
            "shop",
            "--status",
            "delivered",
            "--limit",
            "500",
        ],
    )
    .await;
    if !(deliveries.contains("order.paid") && deliveries.contains("cstack_")) {
        failed.push(format!(
            "ctl notify list shows no delivered order.paid:\n{deliveries}"
        ));
    }

    // Phase 2: paced load; one worker SIGKILLed, then Postgres restarted.
    let work = plan(&stack, "cchaos", 300).await;
    let events2 = work.len();
    let tally2 = Arc::new(Tally::default());
    let loader = tokio::spawn(load(stack.clone(), work, 8, 15, tally2.clone()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let workers = stack.containers("worker").await;
    assert_eq!(workers.len(), 3, "three workers: {workers:?}");
    let (ok, out) = stack
        .docker(
            &["kill", "-s", "KILL", &workers[0]],
            Duration::from_secs(30),
        )
        .await;
    assert!(ok, "docker kill: {out}");
    let killed_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stack
        .compose_ok(
            &["restart", "-t", "10", "postgres"],
            Duration::from_secs(120),
        )
        .await;
    let pg_restarted_after = killed_at.elapsed().as_secs();
    loader.await.expect("load task");
    // Back to three workers the way an operator would.
    stack
        .compose_ok(
            &["up", "-d", "--no-recreate", "--scale", "worker=3"],
            Duration::from_secs(300),
        )
        .await;
    let acked2 = tally2.acked.lock().expect("acked").clone();
    let given_up = tally2.given_up.lock().expect("given up").len();
    let (lost, doubled, why) =
        settle(&stack, &pool, "cchaos", &acked2, Duration::from_secs(180)).await;
    let dead = stack.queue_depth("oncehook.dead").await;
    let (missing2, doubled_events2, requests2) =
        notified(&stack, "cchaos", &acked2, Duration::from_secs(240)).await;
    let (_, refused2) = stack.received().await;
    let waited = |missing: &[String], secs: u64| {
        if missing.is_empty() {
            format!("all, {secs} s after the orders were paid")
        } else {
            format!("{} missing after {secs} s", missing.len())
        }
    };
    let notify1 = waited(&missing, notify_secs);
    let listed_vs_delivered = if listed == delivered_ids {
        format!(
            "`GET /v1/events` listed the {} order.paid events of phase 1 the receiver verified, no more, no fewer.",
            listed.len()
        )
    } else {
        format!(
            "`GET /v1/events` listed {} order.paid events of phase 1; the receiver verified {}.",
            listed.len(),
            delivered_ids.len()
        )
    };
    report(&format!(
        "\n## compose_stack\n\nServices up and healthy: {started:?}, in {up_secs} s (build included). \
         The stack's connections to Postgres by database user, once up: {users:?}.\n\n\
         | phase | events | posts | acked | non-200 answers retried | given up | lost | doubled | DLQ | order.paid verified at the receiver (requests) | missing | more than one event id |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n\
         | every gateway, duplicates, 3 workers | {events} | {} | {} | {} | 0 | 0 | 0 | | {} of {} ({requests1}), {notify1} | {} | {} |\n\
         | worker SIGKILLed, Postgres restarted {pg_restarted_after} s later | {events2} | {} | {} | {} | {given_up} | {lost} | {doubled} | {dead:?} | {} of {} ({requests2}) | {} | {} |\n\n\
         Requests the receiver refused (signature not verified): {refused2}. {listed_vs_delivered}\n",
        tally.posts.load(Ordering::Relaxed),
        acked.len(),
        tally.retried.load(Ordering::Relaxed),
        stack_acked.len() - missing.len(),
        stack_acked.len(),
        missing.len(),
        doubled_events.len(),
        tally2.posts.load(Ordering::Relaxed),
        acked2.len(),
        tally2.retried.load(Ordering::Relaxed),
        acked2.len() - missing2.len(),
        acked2.len(),
        missing2.len(),
        doubled_events2.len(),
    ))
    .await;
    assert_eq!((lost, doubled), (0, 0), "phase 2: {why:#?}");
    assert_eq!(given_up, 0, "events never acked");
    assert_eq!(dead, Some(0), "dead letters");
    if !(missing2.is_empty() && doubled_events2.is_empty() && refused2 == 0) {
        failed.push(format!(
            "phase 2 order.paid at the receiver: missing {missing2:?}, more than one event id {doubled_events2:?}, {refused2} refused"
        ));
    }
    if !failed.is_empty() {
        let (_, logs) = stack
            .compose(
                &["logs", "--tail", "40", "notifier"],
                Duration::from_secs(30),
            )
            .await;
        panic!(
            "{}\n\nthe notifier's last lines:\n{logs}",
            failed.join("\n")
        );
    }
}

/// The node names and the events queue's leader, as `node` sees them.
async fn leader(stack: &Stack, container: &str) -> Option<String> {
    let (ok, out) = stack
        .docker(
            &[
                "exec",
                container,
                "rabbitmqctl",
                "-q",
                "list_queues",
                "--no-table-headers",
                "name",
                "leader",
            ],
            Duration::from_secs(20),
        )
        .await;
    if !ok {
        return None;
    }
    out.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "oncehook.events").then(|| it.next().map(str::to_owned))?
        })
        .next()
}

/// Client connections per node, through the management API's published port.
async fn connections_per_node(stack: &Stack) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let Ok(resp) = stack
        .http
        .get(stack.url("RABBITMQ_MANAGEMENT_PORT", "/api/connections"))
        .basic_auth(
            stack.var("RABBITMQ_USER"),
            Some(stack.var("RABBITMQ_PASSWORD")),
        )
        .send()
        .await
    else {
        return out;
    };
    let v: serde_json::Value =
        serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
    for c in v.as_array().into_iter().flatten() {
        if let Some(node) = c["node"].as_str() {
            *out.entry(node.to_owned()).or_default() += 1;
        }
    }
    out
}

async fn running_nodes(stack: &Stack, container: &str) -> usize {
    let (ok, out) = stack
        .docker(
            &[
                "exec",
                container,
                "rabbitmq-diagnostics",
                "-q",
                "cluster_status",
                "--formatter",
                "json",
            ],
            Duration::from_secs(20),
        )
        .await;
    if !ok {
        return 0;
    }
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
    v["running_nodes"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine and the compose images: make compose-test"]
async fn compose_cluster_partition() {
    let mut stack = Stack::from_env();
    let (user, pass) = (
        stack.var("RABBITMQ_USER").to_owned(),
        stack.var("RABBITMQ_PASSWORD").to_owned(),
    );
    let more: String = ["rabbitmq-2", "rabbitmq-3"]
        .iter()
        .map(|h| format!(",amqp://{user}:{pass}@{h}:5672/%2f"))
        .collect();
    stack.profiles.push("cluster".into());
    stack
        .extra
        .push(("RABBITMQ_CLUSTER_SIZE".into(), "3".into()));
    stack.extra.push(("ONCEHOOK_AMQP_MORE_NODES".into(), more));
    let stack = Arc::new(stack);
    stack.down().await;
    let _down = DownOnDrop(stack.clone());
    up(&stack, 3).await;
    let network = format!("{}_default", stack.project().replace('.', ""));
    let mut nodes = BTreeMap::new();
    for service in ["rabbitmq", "rabbitmq-2", "rabbitmq-3"] {
        let id = stack.containers(service).await.pop().expect(service);
        nodes.insert(format!("rabbit@{service}"), (service, id));
    }
    let first = nodes["rabbit@rabbitmq"].1.clone();
    assert_eq!(
        running_nodes(&stack, &first).await,
        3,
        "three nodes running"
    );
    let (_, members) = stack
        .docker(
            &[
                "exec",
                &first,
                "rabbitmqctl",
                "-q",
                "list_queues",
                "name",
                "type",
                "members",
            ],
            Duration::from_secs(20),
        )
        .await;
    println!("queues:\n{members}");
    let pool = stack.pool().await;
    stack.product("SKU-COMPOSE", 100_000).await;

    // Leader watcher: polls every second from a node that is not cut off.
    let cut: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let leaders: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let watcher = {
        let (stack, cut, stop, leaders, nodes) = (
            stack.clone(),
            cut.clone(),
            stop.clone(),
            leaders.clone(),
            nodes.clone(),
        );
        tokio::spawn(async move {
            for _ in 0..1800 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let away = cut.lock().expect("cut").clone();
                let probe = nodes
                    .iter()
                    .find(|(name, _)| Some(*name) != away.as_ref())
                    .map(|(_, (_, id))| id.clone())
                    .expect("a node");
                if let Some(l) = leader(&stack, &probe).await {
                    let mut seen = leaders.lock().expect("leaders");
                    if seen.last() != Some(&l) {
                        seen.push(l);
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // About 3 minutes of load: both rounds happen under it.
    let work = plan(&stack, "cpart", 720).await;
    let events = work.len();
    let tally = Arc::new(Tally::default());
    let loader = tokio::spawn(load(stack.clone(), work, 8, 4, tally.clone()));

    let mut figures = String::new();
    let initial_leader = leader(&stack, &first).await.expect("events queue leader");
    // Round 1: a node that does not lead the events queue; round 2: the leader's node.
    for round in 0..2 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let current = leaders
            .lock()
            .expect("leaders")
            .last()
            .cloned()
            .unwrap_or_else(|| initial_leader.clone());
        // Round 1: the follower most clients are connected to.
        let conns = connections_per_node(&stack).await;
        let victim = if round == 0 {
            nodes
                .keys()
                .filter(|n| **n != current)
                .max_by_key(|n| conns.get(*n).copied().unwrap_or(0))
                .cloned()
                .expect("a follower")
        } else {
            current.clone()
        };
        let clients_on_victim = conns.get(&victim).copied().unwrap_or(0);
        let (service, id) = nodes[&victim].clone();
        let posts_before = tally.posts.load(Ordering::Relaxed);
        let retried_before = tally.retried.load(Ordering::Relaxed);
        *cut.lock().expect("cut") = Some(victim.clone());
        let (ok, out) = stack
            .docker(
                &["network", "disconnect", &network, &id],
                Duration::from_secs(30),
            )
            .await;
        assert!(ok, "disconnect {victim}: {out}");
        let cut_at = Instant::now();
        let cut_ms = tally.since_epoch();
        tokio::time::sleep(Duration::from_secs(30)).await;
        let (ok, out) = stack
            .docker(
                &["network", "connect", "--alias", service, &network, &id],
                Duration::from_secs(30),
            )
            .await;
        assert!(ok, "reconnect {victim}: {out}");
        let reconnected_at = Instant::now();
        // The cluster is whole again when every node sees three running nodes.
        let mut healed = None;
        for _ in 0..180 {
            let mut all = true;
            for (_, (_, cid)) in nodes.iter() {
                if running_nodes(&stack, cid).await != 3 {
                    all = false;
                }
            }
            if all {
                healed = Some(reconnected_at.elapsed().as_secs());
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let leader_now = leaders.lock().expect("leaders").last().cloned();
        // Clients recovered when the last non-200 answer of this round came.
        let last = tally.last_retry_ms.load(Ordering::SeqCst);
        let recovered = if tally.retried.load(Ordering::Relaxed) > retried_before && last >= cut_ms
        {
            format!("{:.1} s after the cut", (last - cut_ms) as f64 / 1000.0)
        } else {
            "no failed answer".to_owned()
        };
        *cut.lock().expect("cut") = None;
        let _ = writeln!(
            figures,
            "| {} | {victim} ({clients_on_victim} of {} client connections) | {} s cut off | {} | {} | {recovered} | {} | {:?} |",
            if round == 0 {
                "a follower"
            } else {
                "the events queue's leader"
            },
            conns.values().sum::<usize>(),
            reconnected_at.duration_since(cut_at).as_secs(),
            tally.posts.load(Ordering::Relaxed) - posts_before,
            tally.retried.load(Ordering::Relaxed) - retried_before,
            healed.map_or("not within 180 s".to_owned(), |s| format!(
                "{s} s after reconnecting"
            )),
            leader_now,
        );
        assert!(
            healed.is_some(),
            "cluster did not heal after cutting off {victim}"
        );
    }
    loader.await.expect("load task");
    stop.store(true, Ordering::SeqCst);
    let _ = watcher.await;
    let acked = tally.acked.lock().expect("acked").clone();
    let given_up = tally.given_up.lock().expect("given up").len();
    let (lost, doubled, why) =
        settle(&stack, &pool, "cpart", &acked, Duration::from_secs(240)).await;
    let dead = stack.queue_depth("oncehook.dead").await;
    let moves = leaders.lock().expect("leaders").clone();
    report(&format!(
        "\n## compose_cluster_partition\n\n\
         {events} events (each posted 1–3 times) at 4 per second, {} posts, {} acked, {} non-200 answers retried, {given_up} given up; \
         lost {lost}, doubled {doubled}, DLQ {dead:?}. Events queue leader, as `rabbitmqctl list_queues` reported it (polled every second from a node not cut off): {moves:?} ({} changes).\n\n\
         | round | node cut off | partition | posts meanwhile | non-200 answers retried meanwhile | ingest answering 200 again | cluster whole again | leader afterwards |\n|---|---|---|---|---|---|---|---|\n{figures}",
        tally.posts.load(Ordering::Relaxed),
        acked.len(),
        tally.retried.load(Ordering::Relaxed),
        moves.len().saturating_sub(1),
    ))
    .await;
    assert_eq!((lost, doubled), (0, 0), "partition: {why:#?}");
    assert_eq!(given_up, 0, "events never acked");
    assert_eq!(dead, Some(0), "dead letters");
}
