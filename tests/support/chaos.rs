//! The chaos harness: a load client that posts signed events (new ones and
//! duplicates, several gateways, some failures before the success) and
//! records every identity that got a 200, and the invariant check that runs
//! after each scenario: nothing acked is lost, nothing happens twice, stock
//! adds up, one confirmation per paid order, queues drained.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::rng::Lcg;

use oncehook_common::Envelope;
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SignedDelivery;
use sqlx::Row;

use crate::{TestEnv, broker, shop};

const GATEWAYS: [Gateway; 5] = [
    Gateway::Razorpay,
    Gateway::Cashfree,
    Gateway::Payu,
    Gateway::Stripe,
    Gateway::Standard,
];
const PRODUCTS: [(&str, i32); 3] = [("SKU-A", 1_000), ("SKU-B", 1_000), ("SKU-C", 1_000)];

/// One planned POST.
#[derive(Clone)]
struct Post {
    source: &'static str,
    delivery: SignedDelivery,
    identity: (String, String),
}

/// The load a scenario sends.
pub struct Plan {
    posts: Vec<Post>,
    /// Distinct delivery identities.
    pub events: usize,
    /// Orders whose captured event is in the plan.
    pub orders: Vec<String>,
}

/// Creates `orders` pending orders (+ products) and plans their events:
/// each order gets a captured event from a rotating gateway, posted 1–3
/// times; every fifth order first gets a failed attempt.
pub async fn plan(env: &TestEnv, orders: usize, tag: &str) -> Plan {
    for (sku, stock) in PRODUCTS {
        shop::product(&env.pool, sku, stock).await;
    }
    let mut posts = Vec::new();
    let mut refs = Vec::new();
    let mut identities = BTreeSet::new();
    let mut rng = Lcg(orders as u64 * 7919 + tag.len() as u64);
    for i in 0..orders {
        let order_ref = format!("{tag}_{i:04}");
        let sku = PRODUCTS[i % PRODUCTS.len()].0;
        let qty = 1 + (i % 3) as i32;
        shop::order(&env.pool, &order_ref, 10_000, "INR", &[(sku, qty)]).await;
        let gateway = GATEWAYS[i % GATEWAYS.len()];
        let mut events = Vec::new();
        if i % 5 == 0 {
            events.push((
                "failed",
                format!("pay_{order_ref}_f"),
                format!("evt_{order_ref}_f"),
            ));
        }
        events.push((
            "captured",
            format!("pay_{order_ref}"),
            format!("evt_{order_ref}"),
        ));
        for (kind, payment, event_id) in events {
            let spec = env.spec(&order_ref, &payment, &event_id, 10_000);
            let delivery = env.sign(gateway, kind, &spec);
            let parsed = oncehook_gateways::parse(gateway, &delivery.headers, &delivery.body)
                .expect("sample parses");
            let identity = (gateway.as_str().to_owned(), parsed.event_id);
            identities.insert(identity.clone());
            let copies = 1 + rng.draw() % 3;
            for _ in 0..copies {
                posts.push(Post {
                    source: gateway.as_str(),
                    delivery: delivery.clone(),
                    identity: identity.clone(),
                });
            }
        }
        refs.push(order_ref);
    }
    // Interleave: duplicates arrive spread out, not back to back.
    for i in (1..posts.len()).rev() {
        let j = (rng.draw() as usize) % (i + 1);
        posts.swap(i, j);
    }
    Plan {
        events: identities.len(),
        posts,
        orders: refs,
    }
}

/// What the load client saw.
#[derive(Default, Debug)]
pub struct LoadResult {
    pub posts: usize,
    pub acked_posts: usize,
    pub acked: BTreeSet<(String, String)>,
    pub gave_up: usize,
    pub non_200_answers: usize,
}

/// Posts the plan with `concurrency` clients spread over `spread`; a post
/// that does not get 200 is retried (like a gateway would) for up to 60 s.
pub fn start_load(
    base: String,
    plan: &Plan,
    concurrency: usize,
    spread: Duration,
) -> tokio::task::JoinHandle<LoadResult> {
    let posts = Arc::new(Mutex::new(
        plan.posts.clone().into_iter().rev().collect::<Vec<_>>(),
    ));
    let total = plan.posts.len().max(1);
    let pause = spread / total as u32 * concurrency as u32;
    tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("http client");
        let result = Arc::new(Mutex::new(LoadResult::default()));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let (posts, http, base, result) =
                (posts.clone(), http.clone(), base.clone(), result.clone());
            tasks.spawn(async move {
                loop {
                    let next = posts.lock().ok().and_then(|mut p| p.pop());
                    let Some(post) = next else { return };
                    let started = Instant::now();
                    let mut refused = 0;
                    let acked = loop {
                        let mut req = http
                            .post(format!("{base}/webhooks/{}", post.source))
                            .body(post.delivery.body.clone());
                        for (n, v) in post.delivery.headers.iter() {
                            req = req.header(n, v);
                        }
                        match req.send().await {
                            Ok(r) if r.status().as_u16() == 200 => break true,
                            _ => refused += 1,
                        }
                        if started.elapsed() > Duration::from_secs(60) {
                            break false;
                        }
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    };
                    if let Ok(mut r) = result.lock() {
                        r.posts += 1;
                        r.non_200_answers += refused;
                        if acked {
                            r.acked_posts += 1;
                            r.acked.insert(post.identity.clone());
                        } else {
                            r.gave_up += 1;
                        }
                    }
                    tokio::time::sleep(pause).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let mut out = LoadResult::default();
        if let Ok(mut r) = result.lock() {
            std::mem::swap(&mut out, &mut r);
        }
        out
    })
}

/// The figures of one scenario.
#[derive(Debug)]
pub struct Report {
    pub scenario: String,
    pub events: usize,
    pub posts: usize,
    pub acked_posts: usize,
    pub applied: i64,
    pub duplicates: i64,
    pub dead: usize,
    pub lost: usize,
    pub doubled: usize,
    pub notes: Vec<String>,
}

impl Report {
    pub fn header() -> &'static str {
        "| scenario | events | posts | acked | applied | duplicates absorbed | dead-lettered | lost | doubled |\n|---|---|---|---|---|---|---|---|---|"
    }

    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.scenario,
            self.events,
            self.posts,
            self.acked_posts,
            self.applied,
            self.duplicates,
            self.dead,
            self.lost,
            self.doubled
        )
    }

    /// Prints the row and appends it to `target/chaos-report.md`.
    pub fn publish(&self) {
        println!("{}\n{}", Self::header(), self.row());
        for n in &self.notes {
            println!("  note: {n}");
        }
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/chaos-report.md");
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            use std::io::Write;
            let _ = writeln!(f, "{}", self.row());
        }
    }
}

/// The (provider, event id) of every delivery the ledger recorded.
async fn recorded_events(env: &TestEnv) -> BTreeSet<(String, String)> {
    sqlx::query("SELECT provider, event_id FROM processed_webhooks")
        .fetch_all(&env.pool)
        .await
        .expect("processed")
        .iter()
        .map(|r| (r.get("provider"), r.get("event_id")))
        .collect()
}

/// The messages in this test's dead-letter queue (peeked, left in place).
async fn dead_letters(env: &TestEnv) -> Vec<broker::Dead> {
    broker::peek_on(&env.amqp_urls, &format!("{}.dead", env.prefix)).await
}

/// The (provider, event id) of the events among `letters`.
fn dead_lettered(letters: &[broker::Dead]) -> BTreeSet<(String, String)> {
    letters
        .iter()
        .filter_map(|m| Envelope::from_bytes(&m.body).ok())
        .filter_map(|e| Some((e.gateway.to_string(), e.identity()?.to_owned())))
        .collect()
}

/// Waits for the pipeline to go quiet, then checks every invariant.
/// `expect_dead` lists order refs whose events are expected in the DLQ.
pub async fn settle_and_check(
    env: &TestEnv,
    scenario: &str,
    plan: &Plan,
    load: &LoadResult,
    expect_dead: &[&str],
) -> Report {
    let emails_q = format!("{}.emails", env.prefix);
    let drained = || async {
        let events = broker::events_depth_on(&env.amqp_urls, &env.prefix).await;
        let emails = broker::depth_on(&env.amqp_urls, &emails_q).await;
        let pending = env
            .count("SELECT count(*) FROM email_outbox WHERE sent_at IS NULL AND failed_at IS NULL")
            .await;
        events == Some(0) && emails == Some(0) && pending == 0
    };
    // An empty queue counts only ready messages: a delivery a worker still
    // holds (waiting out database trouble, e.g. behind PgBouncer, which
    // refuses logins for `server_login_retry` after a failed one) is in
    // flight, not lost. So the pipeline is quiet when, besides, every acked
    // event is recorded or dead-lettered; one that never is, by the
    // deadline, is reported lost below.
    let accounted = || async {
        let recorded = recorded_events(env).await;
        let missing: Vec<&(String, String)> = load
            .acked
            .iter()
            .filter(|id| !recorded.contains(*id))
            .collect();
        if missing.is_empty() {
            return true;
        }
        let dead = dead_lettered(&dead_letters(env).await);
        missing.iter().all(|id| dead.contains(*id))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let quiet = drained().await;
        if quiet && accounted().await {
            break;
        }
        if std::time::Instant::now() > deadline {
            assert!(
                quiet,
                "timed out after 90 s waiting for: queues drained and outbox sent"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut notes = Vec::new();
    let processed = recorded_events(env).await;
    let dead_msgs = dead_letters(env).await;
    let dead = dead_lettered(&dead_msgs);
    let lost: Vec<&(String, String)> = load
        .acked
        .iter()
        .filter(|id| !processed.contains(*id) && !dead.contains(*id))
        .collect();
    if !lost.is_empty() {
        notes.push(format!("lost: {lost:?}"));
    }

    let (applied, duplicates): (i64, i64) = {
        let row = sqlx::query(
            "SELECT count(*) FILTER (WHERE outcome = 'applied') AS applied, COALESCE(sum(deliveries - 1), 0)::bigint AS dups
             FROM processed_webhooks",
        )
        .fetch_one(&env.pool)
        .await
        .expect("counts");
        (row.get("applied"), row.get("dups"))
    };

    let mut doubled = 0;
    let double_pay: i64 = env
        .count(
            "SELECT count(*) FROM (SELECT order_id FROM payments WHERE status = 'captured' AND flag IS NULL
             GROUP BY order_id HAVING count(*) > 1) d",
        )
        .await;
    let double_mail: i64 = env
        .count("SELECT count(*) FROM (SELECT order_id FROM email_outbox GROUP BY order_id, kind HAVING count(*) > 1) d")
        .await;
    doubled += (double_pay + double_mail) as usize;
    if double_pay + double_mail > 0 {
        notes.push(format!(
            "orders paid twice: {double_pay}, emails written twice: {double_mail}"
        ));
    }
    // stock = initial − Σ qty of paid orders, per product.
    for (sku, initial) in PRODUCTS {
        let paid_qty: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(i.qty), 0)::bigint FROM order_items i JOIN orders o ON o.id = i.order_id
             WHERE i.sku = $1 AND o.status = 'paid'",
        )
        .bind(sku)
        .fetch_one(&env.pool)
        .await
        .expect("paid qty");
        let stock = i64::from(shop::stock(&env.pool, sku).await);
        if stock != i64::from(initial) - paid_qty {
            doubled += 1;
            notes.push(format!(
                "{sku}: stock {stock}, expected {} - {paid_qty}",
                initial
            ));
        }
    }
    // One confirmation per paid order, each sent once.
    let paid = env
        .count("SELECT count(*) FROM orders WHERE status = 'paid'")
        .await;
    let confirmations = env
        .count(
            "SELECT count(*) FROM email_outbox WHERE kind = 'confirmation' AND sent_at IS NOT NULL",
        )
        .await;
    if confirmations != paid {
        doubled += 1;
        notes.push(format!(
            "{paid} paid orders but {confirmations} confirmations sent"
        ));
    }
    let files = env.mail_files();
    if !files.is_empty() {
        let mut per_outbox: BTreeMap<String, usize> = BTreeMap::new();
        for f in &files {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let id = name
                .split_once('-')
                .map(|(_, rest)| rest.to_owned())
                .unwrap_or(name);
            *per_outbox.entry(id).or_default() += 1;
        }
        let resent = per_outbox.values().filter(|n| **n > 1).count();
        if resent > 0 {
            doubled += resent;
            notes.push(format!("{resent} email(s) delivered more than once"));
        }
    }
    // Every planned order whose captured event was acked is paid, unless expected dead.
    let unpaid: Vec<String> = {
        let mut v = Vec::new();
        for o in &plan.orders {
            if expect_dead.contains(&o.as_str()) {
                continue;
            }
            if shop::order_status(&env.pool, o).await != "paid" {
                v.push(o.clone());
            }
        }
        v
    };
    if !unpaid.is_empty() && load.gave_up == 0 {
        notes.push(format!(
            "orders not paid although every post was acked: {unpaid:?}"
        ));
    }
    for o in expect_dead {
        let in_dlq = dead_msgs.iter().any(|m| {
            Envelope::from_bytes(&m.body)
                .ok()
                .and_then(|e| e.body().ok())
                .is_some_and(|b| String::from_utf8_lossy(&b).contains(o))
        });
        if !in_dlq {
            notes.push(format!("expected {o} in the dead-letter queue"));
        }
    }
    Report {
        scenario: scenario.to_owned(),
        events: plan.events,
        posts: load.posts,
        acked_posts: load.acked_posts,
        applied,
        duplicates,
        dead: dead_msgs.len(),
        lost: lost.len(),
        doubled,
        notes,
    }
}
