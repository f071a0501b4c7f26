//! `oncehookctl send <source> <event>`: builds a realistic payload for the
//! source's gateway, signs it with the source's first configured secret (and,
//! for PayU, writes the source's merchant key into the form) and
//! posts it to ingest, N times with C in parallel. Same arguments → same
//! event id, so repeating a send exercises dedup. `--stale` and `--tamper`
//! produce deliveries ingest must refuse.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use oncehook_common::{Settings, db};
use oncehook_gateways::sample::{self, SampleSpec, SignedDelivery};
use sqlx::Row;
use time::OffsetDateTime;

use crate::output::Output;

#[derive(Args)]
pub struct SendArgs {
    /// A configured source name (the `{source}` of `/webhooks/{source}`).
    pub source: String,
    /// The gateway's event name (`payment.captured`, `PAYMENT_SUCCESS_WEBHOOK`, …) or an alias: captured, failed, authorized, refunded.
    pub event: String,
    /// The order the event pays for.
    #[arg(long, default_value = "order_1001")]
    pub order: String,
    /// How many times to post the same event.
    #[arg(long, default_value_t = 1)]
    pub times: u32,
    /// How many posts in flight at once.
    #[arg(long, default_value_t = 1)]
    pub concurrency: u32,
    /// Payment id (default: derived from the order).
    #[arg(long)]
    pub payment_id: Option<String>,
    /// Event id (default: derived from source, event, order and payment, so repeats are duplicates).
    #[arg(long)]
    pub event_id: Option<String>,
    /// Amount in minor units (default: the order's amount from the database).
    #[arg(long)]
    pub amount: Option<i64>,
    /// Sign a timestamp outside the source's tolerance (ingest must answer 401).
    #[arg(long)]
    pub stale: bool,
    /// Change one byte of the body after signing (ingest must answer 401).
    #[arg(long)]
    pub tamper: bool,
    /// Ingest base URL (default: http://ONCEHOOK_INGEST_ADDR).
    #[arg(long)]
    pub url: Option<String>,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 10)]
    pub timeout_secs: u64,
}

/// What the order looks like, as far as the payload is concerned.
struct OrderFacts {
    amount_minor: i64,
    currency: String,
    email: String,
    found: bool,
}

pub async fn run(settings: &Settings, args: SendArgs, out: &Output) -> anyhow::Result<ExitCode> {
    let source = settings.source(&args.source).with_context(|| {
        let known: Vec<&str> = settings.sources.iter().map(|s| s.name.as_str()).collect();
        format!(
            "no source named {:?} in the configuration (configured: {}); set ONCEHOOK_CONFIG",
            args.source,
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )
    })?;
    if args.times == 0 || args.concurrency == 0 {
        bail!("--times and --concurrency must be at least 1");
    }
    let gateway = source.gateway;
    let facts = order_facts(settings, &args.order).await;
    let payment_id = args
        .payment_id
        .clone()
        .unwrap_or_else(|| format!("pay_{}", args.order.trim_start_matches("order_")));
    let event_id = args.event_id.clone().unwrap_or_else(|| {
        format!(
            "evt_{:016x}",
            fnv1a(&[&args.source, &args.event, &args.order, &payment_id])
        )
    });
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let timestamp = if args.stale {
        now - i64::try_from(source.tolerance_secs).unwrap_or(300) - 120
    } else {
        now
    };
    let spec = SampleSpec {
        order_ref: args.order.clone(),
        payment_id: payment_id.clone(),
        event_id: event_id.clone(),
        amount_minor: args.amount.unwrap_or(facts.amount_minor),
        currency: facts.currency.clone(),
        email: facts.email.clone(),
        timestamp,
        // PayU: the form's `key` must be the source's merchant key.
        merchant_key: source.merchant_key.clone(),
    };
    let secret = source.secrets.first().context("source has no secret")?;
    let mut delivery = sample::build(gateway, &args.event, &spec, secret)?;
    if args.tamper {
        sample::tamper(&mut delivery);
    }
    let base = args
        .url
        .clone()
        .unwrap_or_else(|| format!("http://{}", settings.ingest_addr));
    let url = format!("{}/webhooks/{}", base.trim_end_matches('/'), args.source);
    if !facts.found {
        out.progress(&format!(
            "note: order {} not found in the database; using {} {} and {}",
            args.order, spec.amount_minor, spec.currency, spec.email
        ));
    }

    let results = post_all(
        &url,
        delivery,
        args.times,
        args.concurrency,
        Duration::from_secs(args.timeout_secs),
    )
    .await?;
    let expected = if args.tamper || args.stale { 401 } else { 200 };
    let mut by_status: BTreeMap<String, u32> = BTreeMap::new();
    let mut latencies: Vec<Duration> = Vec::new();
    let mut sample_error = None;
    for r in &results {
        match r {
            Ok((status, took, body)) => {
                *by_status.entry(status.to_string()).or_default() += 1;
                latencies.push(*took);
                if *status != 200 && sample_error.is_none() {
                    sample_error = Some(body.clone());
                }
            }
            Err(e) => {
                *by_status.entry("error".to_owned()).or_default() += 1;
                if sample_error.is_none() {
                    sample_error = Some(e.clone());
                }
            }
        }
    }
    latencies.sort();
    let p = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let idx = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies[idx.min(latencies.len() - 1)].as_secs_f64() * 1000.0
    };
    let ok = by_status.len() == 1 && by_status.contains_key(&expected.to_string());
    let summary = by_status
        .iter()
        .map(|(k, v)| format!("{k} x{v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut text = format!(
        "{} {} for {} (event {event_id}, payment {payment_id}, {} {}) x{} -> {summary}   p50 {:.1} ms, p99 {:.1} ms",
        args.source,
        args.event,
        args.order,
        spec.amount_minor,
        spec.currency,
        args.times,
        p(0.5),
        p(0.99)
    );
    if let Some(e) = &sample_error {
        text.push_str(&format!("\n  response: {e}"));
    }
    if !ok {
        text.push_str(&format!("\n  expected every answer to be {expected}"));
    }
    out.done(
        &text,
        serde_json::json!({
            "source": args.source, "gateway": gateway.as_str(), "event": args.event,
            "order_ref": args.order, "event_id": event_id, "payment_id": payment_id,
            "amount_minor": spec.amount_minor, "currency": spec.currency,
            "times": args.times, "responses": by_status, "expected": expected, "ok": ok,
            "latency_ms": { "p50": p(0.5), "p99": p(0.99) },
            "first_error": sample_error,
        }),
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

type PostResult = Result<(u16, Duration, String), String>;

async fn post_all(
    url: &str,
    delivery: SignedDelivery,
    times: u32,
    concurrency: u32,
    timeout: Duration,
) -> anyhow::Result<Vec<PostResult>> {
    let client = reqwest::Client::builder().timeout(timeout).build()?;
    let delivery = Arc::new(delivery);
    let next = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency.min(times) {
        let (client, delivery, next, url) = (
            client.clone(),
            delivery.clone(),
            next.clone(),
            url.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < times {
                results.push(post_one(&client, &url, &delivery).await);
            }
            results
        }));
    }
    let mut all = Vec::with_capacity(times as usize);
    for t in tasks {
        all.extend(t.await.context("sender task")?);
    }
    Ok(all)
}

async fn post_one(client: &reqwest::Client, url: &str, delivery: &SignedDelivery) -> PostResult {
    let mut req = client.post(url).body(delivery.body.clone());
    for (name, value) in delivery.headers.iter() {
        req = req.header(name, value);
    }
    let started = Instant::now();
    let resp = req.send().await.map_err(|e| format!("POST {url}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    Ok((status, started.elapsed(), body))
}

async fn order_facts(settings: &Settings, order_ref: &str) -> OrderFacts {
    let fallback = OrderFacts {
        amount_minor: 49_900,
        currency: "INR".to_owned(),
        email: "customer@example.com".to_owned(),
        found: false,
    };
    let Ok(pool) = db::connect(&settings.database_url, 1, 0).await else {
        return fallback;
    };
    let row = sqlx::query(
        "SELECT amount_minor, currency, customer_email FROM orders WHERE order_ref = $1",
    )
    .bind(order_ref)
    .fetch_optional(&pool)
    .await;
    match row {
        Ok(Some(row)) => OrderFacts {
            amount_minor: row.try_get("amount_minor").unwrap_or(fallback.amount_minor),
            currency: row.try_get("currency").unwrap_or(fallback.currency),
            email: row.try_get("customer_email").unwrap_or(fallback.email),
            found: true,
        },
        _ => fallback,
    }
}

/// FNV-1a over the parts (separated), for stable default ids.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
