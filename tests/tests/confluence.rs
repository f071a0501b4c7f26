//! Confluence: the same set of events, delivered in any order, with any
//! duplicates, to any number of workers, gives the same books
//! (`docs/ledger.md`).
//!
//! For N random orders (`ONCEHOOK_CONFLUENCE_ORDERS`, default 200; `make
//! confluence` runs 5,000) over all five gateways, each order is created
//! twice ("twins": same amounts and items, ids differing by a twin tag). Each
//! twin's event set is delivered in its own random permutation with random
//! duplicates (every event posted 1–3 times), all twins interleaved and
//! posted concurrently through the real ingest to two real workers. Then
//! every order's books are compared with the reference model
//! (`oncehook_e2e::ledger_model`) and twin A's with twin B's — and so are
//! its order events (the set the shop is told, by type and fact) and its
//! refund intents (docs/refunds.md: one per owed payment, the same id,
//! reason, amount and state whatever the order of delivery).
//!
//! The twins are two tenants' (docs/tenants.md): twin A is the default
//! tenant's, posted to the sources named for their gateways; twin B is the
//! tenant `globex`'s, posted to its own sources (`globex-razorpay`, …) and
//! its reconciled facts stamped with its tenant. Each twin's books must be
//! the model's and the other's, and every row of each order its own
//! tenant's.
//!
//! A fact can also come by reconciliation (docs/reconciliation.md): for
//! about half of the events that record a fact, the envelope the reconciler
//! would publish for it goes straight to the events exchange — instead of
//! the webhook, or besides it — so the books must be the same whether a
//! fact came by webhook, by reconciliation, or both.
//!
//! The seed (`ONCEHOOK_CONFLUENCE_SEED`, default: from the clock) is always
//! printed, and repeated in every assertion message: rerun with it to get
//! the same orders, events and permutations (the interleaving of concurrent
//! requests and workers is the only thing a seed does not fix).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncehook_common::tenant::TenantId;
use oncehook_common::{Envelope, Topology, amqp};
use oncehook_e2e::env::send;
use oncehook_e2e::ledger_gen::{self, GenOrder, Rng, normalise};
use oncehook_e2e::ledger_model::{self, Flag, Intent, LedgerState, Told};
use oncehook_e2e::{Shop, TestEnv, broker};
use oncehook_gateways::sample::SignedDelivery;
use oncehook_gateways::{EventKind, Gateway};
use oncehook_ledger::{Cancel, Ledger};
use sqlx::{PgPool, Row};

/// Orders per run (each created twice).
fn orders() -> usize {
    std::env::var("ONCEHOOK_CONFLUENCE_ORDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

fn seed() -> u64 {
    std::env::var("ONCEHOOK_CONFLUENCE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 ^ u64::from(std::process::id()))
                .unwrap_or(1)
        })
}

/// Orders signed and posted together: their signed timestamps must stay
/// within the sources' 300 s tolerance until the last copy is posted.
const BATCH: usize = 250;
/// Requests in flight at once.
const IN_FLIGHT: usize = 16;
/// Attempts per request before the run gives up (a non-200 is retried).
const ATTEMPTS: usize = 5;
/// Mismatching orders printed in full.
const PRINTED: usize = 10;

/// One post: which twin (`2 * order + twin`), which event, which copy,
/// and whether it is the webhook or the reconciler's envelope of its fact.
#[derive(Clone, Copy)]
struct Post {
    slot: usize,
    /// An index into the twin's events, or [`CANCEL`].
    event: usize,
    copy: u64,
    reconciled: bool,
}

/// The envelope the reconciler would publish for the fact an event
/// records (`None` for an event that records none): the same fact, under
/// the reconciler's identity, with no signature.
fn reconciled(gateway: Gateway, delivery: &SignedDelivery) -> Option<Envelope> {
    let mut event = oncehook_gateways::parse(gateway, &delivery.headers, &delivery.body).ok()?;
    event.event_id = match event.kind {
        EventKind::Other => return None,
        EventKind::Refunded => format!("reconciliation:{}:processed", event.refund_id.as_ref()?),
        kind => format!(
            "reconciliation:{}:{}",
            event.payment_id.as_ref()?,
            kind.as_str()
        ),
    };
    Some(Envelope::reconciled(gateway.as_str(), event))
}

/// Publishes a reconciliation envelope with confirms; `Some` with what failed.
async fn publish(
    channel: lapin::Channel,
    exchange: String,
    envelope: Arc<Envelope>,
) -> Option<String> {
    amqp::publish_confirmed(
        &channel,
        &exchange,
        &envelope.routing_key(),
        &envelope.to_bytes(),
        envelope.properties(),
        Duration::from_secs(10),
    )
    .await
    .err()
    .map(|e| format!("publishing {}: {e}", envelope.message_id()))
}

/// The shop's cancellation of the twin's order, as a "post" among its events.
const CANCEL: usize = usize::MAX;

/// Twin B's tenant.
const SECOND: &str = "globex";

/// The tenant a twin belongs to.
fn tenant_of(twin: char) -> &'static str {
    if twin == 'B' { SECOND } else { "default" }
}

/// The source a twin's webhooks of `gateway` are posted to.
fn source_of(twin: char, gateway: Gateway) -> String {
    if twin == 'B' {
        format!("{SECOND}-{}", gateway.as_str())
    } else {
        gateway.as_str().to_owned()
    }
}

/// The second tenant and its sources, one per gateway, with the secrets of
/// the default tenant's (the same gateway accounts' test secrets).
async fn second_tenant(env: &TestEnv) {
    let (code, out, err) = env
        .ctl(&["tenants", "create", SECOND, "--name", "Globex"])
        .await;
    assert_eq!(code, 0, "tenants create: {out}{err}");
    let config = std::fs::read_to_string(&env.config_path).expect("test config");
    let mut extra = String::new();
    for gateway in [
        Gateway::Razorpay,
        Gateway::Cashfree,
        Gateway::Payu,
        Gateway::Stripe,
        Gateway::Standard,
    ] {
        let merchant = if gateway == Gateway::Payu {
            format!(
                "merchant_key = \"{}\"\n",
                oncehook_gateways::sample::SAMPLE_PAYU_KEY
            )
        } else {
            String::new()
        };
        extra.push_str(&format!(
            "\n[[source]]\nname = \"{}\"\ngateway = \"{}\"\nsecrets = [\"{}\"]\ntenant = \"{SECOND}\"\n{merchant}",
            source_of('B', gateway),
            gateway.as_str(),
            oncehook_e2e::Secrets::for_gateway(gateway),
        ));
    }
    assert!(!config.contains(&source_of('B', Gateway::Razorpay)));
    env.append_config(&extra);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluence_same_facts_give_the_same_books() {
    let seed = seed();
    let n = orders();
    let rerun = format!(
        "seed {seed} (rerun: ONCEHOOK_CONFLUENCE_SEED={seed} ONCEHOOK_CONFLUENCE_ORDERS={n})"
    );
    println!("confluence: {n} orders x 2 twins, {rerun}");
    let started = Instant::now();

    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    second_tenant(&env).await;
    let (_ingest, url) = env.start_ingest().await;
    let conn = amqp::connect(&env.amqp_urls, "confluence")
        .await
        .expect("connect to RabbitMQ");
    let channel = amqp::confirm_channel(&conn).await.expect("confirm channel");
    let exchange = Topology::new(env.prefix.clone()).events();
    let _workers = [env.start_worker().await, env.start_worker().await];

    let mut rng = Rng::new(seed);
    let plans: Vec<_> = (0..n).map(|i| ledger_gen::plan(&mut rng, i)).collect();
    let twins: Vec<GenOrder> = plans
        .iter()
        .flat_map(|p| [p.twin('A'), p.twin('B')])
        .collect();
    seed_shop(&env.pool, &twins).await;

    // Post: batch by batch, each batch's twins interleaved in one shuffle.
    let mut delivered: Vec<Vec<String>> = vec![Vec::new(); twins.len()];
    let (mut posts_total, mut events_total, mut reconciled_total) = (0usize, 0usize, 0usize);
    let http = env.http.clone();
    for batch in (0..twins.len()).collect::<Vec<_>>().chunks(BATCH * 2) {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let mut signed: BTreeMap<(usize, usize), Arc<SignedDelivery>> = BTreeMap::new();
        let mut envelopes: BTreeMap<(usize, usize), Arc<Envelope>> = BTreeMap::new();
        let mut posts = Vec::new();
        for &slot in batch {
            for (e, ev) in twins[slot].events.iter().enumerate() {
                let mut spec = ev.spec.clone();
                spec.timestamp = now;
                let delivery = env.sign(ev.gateway, ev.name, &spec);
                // 0, 1: the webhook; 2: the reconciler's envelope only; 3: both.
                let twin = twins[slot].twin;
                let via = match reconciled(ev.gateway, &delivery) {
                    Some(envelope) => {
                        let mut envelope = envelope;
                        if twin == 'B' {
                            envelope.source = source_of(twin, ev.gateway);
                            envelope =
                                envelope.for_tenant(&TenantId::parse(SECOND).expect("a tenant id"));
                        }
                        envelopes.insert((slot, e), Arc::new(envelope));
                        rng.below(4)
                    }
                    None => 0,
                };
                signed.insert((slot, e), Arc::new(delivery));
                events_total += 1;
                if via >= 2 {
                    reconciled_total += 1;
                    for copy in 0..=rng.below(2) {
                        posts.push(Post {
                            slot,
                            event: e,
                            copy,
                            reconciled: true,
                        });
                    }
                }
                if via != 2 {
                    for copy in 0..=rng.below(3) {
                        posts.push(Post {
                            slot,
                            event: e,
                            copy,
                            reconciled: false,
                        });
                    }
                }
            }
            if twins[slot].cancel {
                for copy in 0..=rng.below(2) {
                    posts.push(Post {
                        slot,
                        event: CANCEL,
                        copy,
                        reconciled: false,
                    });
                }
            }
        }
        rng.shuffle(&mut posts);
        posts_total += posts.len();

        let deadline = Instant::now() + Duration::from_secs(120 + posts.len() as u64 / 20);
        let mut tasks = tokio::task::JoinSet::new();
        let mut next = 0;
        let mut failures: Vec<String> = Vec::new();
        while next < posts.len() || !tasks.is_empty() {
            while next < posts.len() && tasks.len() < IN_FLIGHT {
                let post = posts[next];
                next += 1;
                if post.event == CANCEL {
                    let order_ref = twins[post.slot].order_ref.clone();
                    let tenant = tenant_of(twins[post.slot].twin);
                    delivered[post.slot].push(format!("cancel (copy {})", post.copy));
                    tasks.spawn(cancel(env.pool.clone(), order_ref, tenant));
                    continue;
                }
                let ev = &twins[post.slot].events[post.event];
                let via = if post.reconciled {
                    " by reconciliation"
                } else {
                    ""
                };
                delivered[post.slot].push(if post.copy == 0 {
                    format!("{}{via}", ev.label)
                } else {
                    format!("{}{via} (copy {})", ev.label, post.copy)
                });
                if post.reconciled {
                    let envelope = Arc::clone(&envelopes[&(post.slot, post.event)]);
                    tasks.spawn(publish(channel.clone(), exchange.clone(), envelope));
                    continue;
                }
                let delivery = Arc::clone(&signed[&(post.slot, post.event)]);
                let (http, url) = (
                    http.clone(),
                    format!(
                        "{url}/webhooks/{}",
                        source_of(twins[post.slot].twin, ev.gateway)
                    ),
                );
                let label = ev.label.clone();
                tasks.spawn(async move {
                    let mut last = (0, String::new());
                    for attempt in 0..ATTEMPTS {
                        last = send(&http, &url, &delivery).await;
                        if last.0 == 200 {
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                    }
                    Some(format!("{label}: {} {}", last.0, last.1))
                });
            }
            if Instant::now() > deadline {
                tasks.abort_all();
                panic!(
                    "posting batch took longer than its deadline ({} of {} posted); {rerun}",
                    next,
                    posts.len()
                );
            }
            if let Some(done) = tasks.join_next().await
                && let Some(failure) = done.unwrap_or_else(|e| Some(format!("task: {e}")))
            {
                failures.push(failure);
            }
        }
        assert!(
            failures.is_empty(),
            "{} posts never got a 200 after {ATTEMPTS} attempts, e.g. {:?}; {rerun}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
    }
    let posted_secs = started.elapsed().as_secs_f64();

    // Settle: the events queue drained and the delivery records stable.
    let settled = settle(&env, events_total).await;
    let settled_secs = started.elapsed().as_secs_f64();

    // Compare.
    let tenants = read_tenants(&env.pool).await;
    let actual = read_books(&env.pool).await;
    let told = read_order_events(&env.pool).await;
    let mut mismatches = 0usize;
    let mut printed = 0usize;
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        let pair = [&twins[2 * i], &twins[2 * i + 1]];
        let mut problems = Vec::new();
        let mut normalised = Vec::new();
        let mut told_normalised = Vec::new();
        let mut expectations = Vec::new();
        for t in pair {
            let want = ledger_model::expected(&t.model, &t.facts).unwrap_or_else(|e| {
                panic!("the generator made an inconsistent set: {e:?}; {rerun}")
            });
            let mut got = actual.get(&t.order_ref).cloned();
            // A confirmation written while the order was paid, before its
            // cancellation, cannot be unsent: the one part of a cancelled
            // order's books that depends on the order of events.
            if let Some(g) = got.as_mut()
                && want.status == "cancelled"
                && g.confirmations <= 1
            {
                g.confirmations = want.confirmations;
            }
            match tenants.get(&t.order_ref) {
                Some(Ok(tenant)) if tenant == tenant_of(t.twin) => {}
                Some(Ok(tenant)) => problems.push(format!(
                    "twin {}: the order is tenant {tenant}'s, not {}'s",
                    t.twin,
                    tenant_of(t.twin)
                )),
                Some(Err(table)) => problems.push(format!(
                    "twin {}: a row of {table} is another tenant's than its order's",
                    t.twin
                )),
                None => {}
            }
            match &got {
                None => problems.push(format!("twin {}: order not found", t.twin)),
                Some(g) if *g != want => {
                    problems.push(format!("twin {}: books differ from the model", t.twin))
                }
                Some(_) => {}
            }
            normalised.push(got.as_ref().map(|g| normalise_state(g, i, t.twin)));
            let events = told.get(&t.order_ref).cloned().unwrap_or_default();
            let told = ledger_model::told(&t.model, &t.facts);
            if let Some(p) = events_problem(&want, told, t.cancel, &events) {
                problems.push(format!("twin {}: order events {p}", t.twin));
            }
            told_normalised.push(comparable_events(&events, i, t.twin));
            expectations.push((want, got));
        }
        if normalised[0] != normalised[1] {
            problems.push("twin A's books differ from twin B's".to_owned());
        }
        if told_normalised[0] != told_normalised[1] {
            problems.push(format!(
                "twin A's order events differ from twin B's: {:?} vs {:?}",
                told_normalised[0], told_normalised[1]
            ));
        }
        let want = &expectations[0].0;
        *tally.entry(format!("status {}", want.status)).or_default() += 1;
        *tally
            .entry(format!("gateway {}", plan.gateway))
            .or_default() += 1;
        if want.oversold {
            *tally.entry("oversold".into()).or_default() += 1;
        }
        if plan.cancel {
            *tally.entry("cancelled by the shop".into()).or_default() += 1;
        }
        for flag in want.payments.values().flatten() {
            *tally.entry(format!("flag {}", flag.as_str())).or_default() += 1;
        }
        for intent in want.refund_intents.values() {
            *tally
                .entry(format!("refund intent {} {}", intent.reason, intent.state))
                .or_default() += 1;
        }
        if problems.is_empty() {
            continue;
        }
        mismatches += 1;
        if printed >= PRINTED {
            continue;
        }
        printed += 1;
        println!(
            "\nMISMATCH order #{i} ({gateway}, {model:?}); {rerun}",
            gateway = plan.gateway,
            model = plan.model
        );
        for p in &problems {
            println!("  - {p}");
        }
        for (t, (want, got)) in pair.iter().zip(&expectations) {
            println!(
                "  twin {} {} events in delivery order:",
                t.twin, t.order_ref
            );
            for (k, label) in delivered[2 * i + usize::from(t.twin == 'B')]
                .iter()
                .enumerate()
            {
                println!("    {k:>3}. {label}");
            }
            println!("  twin {} expected: {want:#?}", t.twin);
            println!("  twin {} actual:   {got:#?}", t.twin);
        }
    }

    let dead = broker::peek(&Topology::new(env.prefix.clone()).dead()).await;
    let parked = parked_events(&env.pool).await;
    let total_secs = started.elapsed().as_secs_f64();
    println!(
        "\ncoverage (model, twin A): {tally:?}; {reconciled_total} of {events_total} events came by reconciliation (alone or beside their webhook)"
    );
    let header = "| seed | orders | twins | events | deliveries posted | permutations | mismatches | dead-lettered | parked | settled | posted s | settled s | total s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";
    let row = format!(
        "| {seed} | {n} | {} | {events_total} | {posts_total} | {} | {mismatches} | {} | {parked} | {settled} | {posted_secs:.1} | {settled_secs:.1} | {total_secs:.1} |",
        twins.len(),
        twins.len(),
        dead.len()
    );
    println!("{header}\n{row}");
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/confluence-report.md");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        use std::io::Write;
        let _ = writeln!(f, "{row}");
    }

    for d in dead.iter().take(5) {
        println!("dead letter: {d:?} {}", String::from_utf8_lossy(&d.body));
    }
    assert!(
        reconciled_total > 0 || events_total < 20,
        "no fact came by reconciliation; {rerun}"
    );
    assert_eq!(
        mismatches, 0,
        "{mismatches} of {n} orders differ from the model or from their twin; {rerun}"
    );
    assert!(dead.is_empty(), "{} dead letters; {rerun}", dead.len());
    assert_eq!(parked, 0, "events still parked; {rerun}");
    assert!(settled, "the books never settled; {rerun}");
}

/// Cancels an order as `POST /v1/orders/{ref}/cancel` does (the ledger's
/// `cancel`, in a transaction of its own); `Some` with what failed.
async fn cancel(pool: PgPool, order_ref: String, tenant: &'static str) -> Option<String> {
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        let done = async {
            let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
            // In the twin's tenant's scope, as the API's cancel runs.
            sqlx::query("SELECT set_config('oncehook.tenants', $1, true)")
                .bind(tenant)
                .execute(&mut *tx)
                .await
                .map_err(|e| e.to_string())?;
            let cancel = Cancel {
                order_ref: &order_ref,
                by: "confluence",
                reason: "",
                trace_parent: None,
            };
            Ledger::default()
                .apply(&mut tx, cancel)
                .await
                .map_err(|e| e.to_string())?;
            tx.commit().await.map_err(|e| e.to_string())
        };
        match done.await {
            Ok(()) => return None,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
    }
    Some(format!("cancel {order_ref}: {last}"))
}

/// Products and pending orders for every twin, in its tenant, three
/// statements a tenant.
async fn seed_shop(pool: &PgPool, twins: &[GenOrder]) {
    for twin in ['A', 'B'] {
        twins
            .iter()
            .filter(|t| t.twin == twin)
            .fold(Shop::new(), |shop, t| {
                shop.product(&t.sku, t.model.stock).order_of(
                    &t.order_ref,
                    t.model.amount_minor,
                    &t.model.currency,
                    &[(&t.sku, t.model.qty)],
                )
            })
            .seed_in(pool, tenant_of(twin))
            .await;
    }
}

/// Waits until the events queue is empty and the number of delivery
/// records has stopped moving (and reached `events` — one per distinct
/// event — or stayed put for several seconds). Bounded in time.
async fn settle(env: &TestEnv, events: usize) -> bool {
    let limit = Duration::from_secs(60 + events as u64 / 50);
    let started = Instant::now();
    let (mut last, mut stable) = (-1i64, 0u32);
    while started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let depth = broker::events_depth(&env.prefix).await;
        let rows = env.count("SELECT count(*) FROM processed_webhooks").await;
        if depth == Some(0) && rows == last {
            stable += 1;
        } else {
            stable = 0;
        }
        last = rows;
        if (stable >= 3 && rows as usize >= events) || stable >= 12 {
            return true;
        }
    }
    println!("not settled after {limit:?}: {last} delivery records for {events} events");
    false
}

/// Rows left in `parked_events` (0 where the table does not exist yet).
async fn parked_events(pool: &PgPool) -> i64 {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('parked_events') IS NOT NULL")
        .fetch_one(pool)
        .await
        .expect("catalog");
    if !exists {
        return 0;
    }
    sqlx::query_scalar("SELECT count(*) FROM parked_events")
        .fetch_one(pool)
        .await
        .expect("count parked events")
}

/// Every order's tenant, by order reference, or the first table holding a
/// row of the order that is another tenant's.
async fn read_tenants(pool: &PgPool) -> BTreeMap<String, Result<String, String>> {
    let rows = sqlx::query(
        "SELECT o.order_ref, o.tenant_id,
                CASE WHEN EXISTS (SELECT FROM order_items x WHERE x.order_id = o.id AND x.tenant_id <> o.tenant_id) THEN 'order_items'
                     WHEN EXISTS (SELECT FROM payments x WHERE x.order_id = o.id AND x.tenant_id <> o.tenant_id) THEN 'payments'
                     WHEN EXISTS (SELECT FROM refunds x WHERE x.order_id = o.id AND x.tenant_id <> o.tenant_id) THEN 'refunds'
                     WHEN EXISTS (SELECT FROM order_events x WHERE x.order_id = o.id AND x.tenant_id <> o.tenant_id) THEN 'order_events'
                     WHEN EXISTS (SELECT FROM refund_intents x WHERE x.order_id = o.id AND x.tenant_id <> o.tenant_id) THEN 'refund_intents'
                     WHEN EXISTS (SELECT FROM email_outbox x WHERE x.order_id = o.id AND x.tenant_id <> o.tenant_id) THEN 'email_outbox'
                END AS foreign_row
         FROM orders o",
    )
    .fetch_all(pool)
    .await
    .expect("read the orders' tenants");
    rows.into_iter()
        .map(|r| {
            let foreign: Option<String> = r.get("foreign_row");
            (
                r.get("order_ref"),
                foreign.map_or_else(|| Ok(r.get("tenant_id")), Err),
            )
        })
        .collect()
}

/// Every order's books as the database holds them, by order reference.
async fn read_books(pool: &PgPool) -> BTreeMap<String, LedgerState> {
    let mut books = BTreeMap::new();
    let mut ids = BTreeMap::new();
    // `to_jsonb` so that a column the worker does not have yet reads as absent.
    let rows = sqlx::query(
        "SELECT o.id, o.order_ref, to_jsonb(o) AS o, p.stock FROM orders o
         JOIN order_items i ON i.order_id = o.id
         JOIN products p ON p.sku = i.sku AND p.tenant_id = i.tenant_id",
    )
    .fetch_all(pool)
    .await
    .expect("read orders");
    for r in rows {
        let o: serde_json::Value = r.get("o");
        let order_ref: String = r.get("order_ref");
        ids.insert(r.get::<i64, _>("id"), order_ref.clone());
        books.insert(
            order_ref,
            LedgerState {
                status: o["status"].as_str().unwrap_or_default().to_owned(),
                refunded_minor: o["refunded_minor"].as_i64().unwrap_or(-1),
                paid_by: o["paid_by"].as_str().map(str::to_owned),
                stock: r.get("stock"),
                oversold: o["oversold"].as_bool().unwrap_or(false),
                payments: BTreeMap::new(),
                confirmations: 0,
                refund_emails: BTreeSet::new(),
                refund_intents: BTreeMap::new(),
            },
        );
    }
    let rows = sqlx::query("SELECT order_id, provider, payment_id, status, flag FROM payments")
        .fetch_all(pool)
        .await
        .expect("read payments");
    for r in rows {
        let Some(book) = ids
            .get(&r.get::<i64, _>("order_id"))
            .and_then(|o| books.get_mut(o))
        else {
            continue;
        };
        let flag: Option<String> = r.get("flag");
        // An unknown flag is shown as a mismatch, not dropped.
        let flag = flag.map(|f| Flag::parse(&f).unwrap_or(Flag::AmountMismatch));
        book.payments.insert(
            (r.get("provider"), r.get("payment_id"), r.get("status")),
            flag,
        );
    }
    let rows = sqlx::query(
        "SELECT order_id, id, provider, payment_id, reason, amount_minor, refunded_minor, state
         FROM refund_intents",
    )
    .fetch_all(pool)
    .await
    .expect("read refund intents");
    for r in rows {
        let Some(book) = ids
            .get(&r.get::<i64, _>("order_id"))
            .and_then(|o| books.get_mut(o))
        else {
            continue;
        };
        book.refund_intents.insert(
            (r.get("provider"), r.get("payment_id")),
            Intent {
                id: r.get("id"),
                reason: r.get("reason"),
                amount_minor: r.get("amount_minor"),
                refunded_minor: r.get("refunded_minor"),
                state: r.get("state"),
            },
        );
    }
    let rows = sqlx::query("SELECT order_id, kind, dedup_key FROM email_outbox")
        .fetch_all(pool)
        .await
        .expect("read outbox");
    for r in rows {
        let Some(order_id) = r.get::<Option<i64>, _>("order_id") else {
            continue;
        };
        let Some(book) = ids.get(&order_id).and_then(|o| books.get_mut(o)) else {
            continue;
        };
        let (kind, key): (String, String) = (r.get("kind"), r.get("dedup_key"));
        if kind == "confirmation" && key == format!("order:{order_id}:confirmation") {
            book.confirmations += 1;
        } else if kind == "refund" {
            book.refund_emails.insert(key);
        } else {
            // Anything else shows up in the comparison.
            book.refund_emails.insert(format!("{kind}:{key}"));
        }
    }
    books
}

/// Every order's events as `"<type> <fact>"` (`order.refunded
/// refund:razorpay:rfnd_1`, `order.paid`), by order reference.
async fn read_order_events(pool: &PgPool) -> BTreeMap<String, BTreeSet<String>> {
    let rows = sqlx::query(
        "SELECT o.order_ref, e.type, e.data FROM order_events e JOIN orders o ON o.id = e.order_id",
    )
    .fetch_all(pool)
    .await
    .expect("read order events");
    let mut told: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in rows {
        let (order_ref, kind, data): (String, String, serde_json::Value) =
            (r.get("order_ref"), r.get("type"), r.get("data"));
        let s = |k: &str| data[k].as_str().unwrap_or("?").to_owned();
        let fact = match kind.as_str() {
            "order.refunded" => format!(" refund:{}:{}", s("provider"), s("refund_id")),
            "order.payment_failed" => format!(" failed:{}:{}", s("provider"), s("payment_id")),
            "order.needs_refund" | "order.amount_mismatch" => {
                format!(" capture:{}:{}", s("provider"), s("payment_id"))
            }
            _ => String::new(),
        };
        told.entry(order_ref)
            .or_default()
            .insert(format!("{kind}{fact}"));
    }
    told
}

/// Where the order events disagree with the model's books: one
/// `order.refunded` per refund (as the refund emails), one
/// `order.payment_failed` per failed attempt, one `order.needs_refund` or
/// `order.amount_mismatch` per capture that is not the primary payment,
/// `order.cancelled` iff the shop cancelled, and `order.paid` and
/// `order.oversold` as the model tells them (`ledger_model::told`: the same
/// rule for cancelled orders, whatever came first).
fn events_problem(
    want: &LedgerState,
    told: Told,
    cancelled: bool,
    events: &BTreeSet<String>,
) -> Option<String> {
    let mut expected: BTreeSet<String> = want
        .refund_emails
        .iter()
        .map(|k| format!("order.refunded {k}"))
        .collect();
    for ((provider, payment, status), flag) in &want.payments {
        let key = format!("{provider}:{payment}");
        match (status.as_str(), flag) {
            ("failed", _) => expected.insert(format!("order.payment_failed failed:{key}")),
            ("captured", Some(Flag::AmountMismatch)) => {
                expected.insert(format!("order.amount_mismatch capture:{key}"))
            }
            ("captured", Some(Flag::NeedsRefund)) => {
                expected.insert(format!("order.needs_refund capture:{key}"))
            }
            // Refunded since: owed back either way.
            ("captured", Some(Flag::Refunded)) => {
                let either = [
                    format!("order.needs_refund capture:{key}"),
                    format!("order.amount_mismatch capture:{key}"),
                ];
                match either.iter().find(|e| events.contains(*e)) {
                    Some(e) => expected.insert(e.clone()),
                    None => expected.insert(either[0].clone()),
                }
            }
            _ => false,
        };
    }
    if cancelled {
        expected.insert("order.cancelled".to_owned());
    }
    if told.paid {
        expected.insert("order.paid".to_owned());
    }
    if told.oversold {
        expected.insert("order.oversold".to_owned());
    }
    (*events != expected)
        .then(|| format!("differ from the model: got {events:?}, expected {expected:?}"))
}

/// The events, with the twin's ids neutral.
fn comparable_events(events: &BTreeSet<String>, index: usize, twin: char) -> BTreeSet<String> {
    events.iter().map(|e| normalise(e, index, twin)).collect()
}

/// `s` with the twin's ids rewritten to a neutral token.
fn normalise_state(s: &LedgerState, index: usize, twin: char) -> LedgerState {
    let n = |x: &str| normalise(x, index, twin);
    LedgerState {
        paid_by: s.paid_by.as_deref().map(n),
        payments: s
            .payments
            .iter()
            .map(|((pr, p, st), f)| ((pr.clone(), n(p), st.clone()), *f))
            .collect(),
        refund_emails: s.refund_emails.iter().map(|k| n(k)).collect(),
        // The ids derive from the twins' different payment ids: each is
        // checked against the model, the rest compared here.
        refund_intents: s
            .refund_intents
            .iter()
            .map(|((pr, p), i)| {
                let id = String::new();
                ((pr.clone(), n(p)), Intent { id, ..i.clone() })
            })
            .collect(),
        ..s.clone()
    }
}
