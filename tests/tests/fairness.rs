//! No tenant starves another (docs/tenants.md, "Fairness"), through the
//! real binaries, broker and database:
//!
//! * at the door, a source flooded past its rate gets `429` with a
//!   `Retry-After` it can keep to, nothing of a refused delivery is
//!   published, and the same delivery sent again after the wait is
//!   accepted — while another tenant's source on the same ingest keeps
//!   answering 200 as fast as before the flood;
//! * in the worker, a tenant's webhooks beyond its share of the main lane
//!   wait in its bulk lane, and a quiet tenant's lone payment posted after
//!   that backlog is committed before most of it.

use std::time::{Duration, Instant};

use oncehook_common::config::{ENV_RATE_BURST, ENV_RATE_PER_SECOND};
use oncehook_common::config::{ENV_SHARE_BURST, ENV_SHARE_PER_SECOND};
use oncehook_common::tenant::TenantId;
use oncehook_common::topology::{Topology, lane_of};
use oncehook_e2e::shop::Shop;
use oncehook_e2e::{TestEnv, broker, eventually, metrics};
use oncehook_gateways::Gateway;
use oncehook_gateways::sample::SignedDelivery;

/// The second tenant and its Razorpay source.
const QUIET: &str = "quiet";
const QUIET_SOURCE: &str = "quiet-razorpay";

/// One POST: its status, its `Retry-After`, its body and how long it took.
struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: String,
    took: Duration,
}

async fn post(
    http: &reqwest::Client,
    base: &str,
    source: &str,
    delivery: &SignedDelivery,
) -> Answer {
    let started = Instant::now();
    let mut req = http
        .post(format!("{base}/webhooks/{source}"))
        .body(delivery.body.clone());
    for (name, value) in delivery.headers.iter() {
        req = req.header(name, value);
    }
    let resp = req.send().await.expect("ingest answers");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let body = resp.text().await.unwrap_or_default();
    Answer {
        status,
        retry_after,
        body,
        took: started.elapsed(),
    }
}

fn slowest(answers: &[Answer]) -> Duration {
    answers.iter().map(|a| a.took).max().unwrap_or_default()
}

#[tokio::test]
async fn a_source_flooded_past_its_rate_gets_429_with_retry_after_while_another_tenants_source_answers_as_before()
 {
    let mut env = TestEnv::new().await;
    env.tenant_with_source(QUIET, QUIET_SOURCE, Gateway::Razorpay)
        .await;
    // The default tenant's sources: 5 per second, 10 at once.
    env.set_env(ENV_RATE_PER_SECOND, "5");
    env.set_env(ENV_RATE_BURST, "10");
    // The quiet tenant's: a rate of its own, never reached here.
    env.append_config(&format!(
        "[[ingest.rate_limit.tenant]]\ntenant = \"{QUIET}\"\nper_second = 1000\n"
    ));
    let (ingest, url) = env.start_ingest().await;

    // The quiet source's usual latency, before any flood.
    let mut before = Vec::new();
    for n in 0..20 {
        let d = env.captured(
            &format!("q_before_{n}"),
            &format!("pay_qb_{n}"),
            &format!("evt_qb_{n}"),
        );
        before.push(post(&env.http, &url, QUIET_SOURCE, &d).await);
    }
    assert!(
        before.iter().all(|a| a.status == 200),
        "the quiet source before the flood"
    );

    // The flood: 200 distinct deliveries, 16 at a time, and meanwhile the
    // quiet source's deliveries one by one.
    let flood: Vec<SignedDelivery> = (0..200)
        .map(|n| {
            env.captured(
                &format!("f_{n}"),
                &format!("pay_f_{n}"),
                &format!("evt_f_{n}"),
            )
        })
        .collect();
    let started = Instant::now();
    let flooding = async {
        let mut answers = Vec::new();
        for chunk in flood.chunks(16) {
            let mut sent = tokio::task::JoinSet::new();
            for d in chunk {
                let (http, url, d) = (env.http.clone(), url.clone(), d.clone());
                sent.spawn(async move { post(&http, &url, "razorpay", &d).await });
            }
            while let Some(answer) = sent.join_next().await {
                answers.push(answer.expect("a post"));
            }
        }
        answers
    };
    let quiet = async {
        let mut answers = Vec::new();
        for n in 0..20 {
            let d = env.captured(
                &format!("q_during_{n}"),
                &format!("pay_qd_{n}"),
                &format!("evt_qd_{n}"),
            );
            answers.push(post(&env.http, &url, QUIET_SOURCE, &d).await);
        }
        answers
    };
    let (flooded, during) = tokio::join!(flooding, quiet);
    let elapsed = started.elapsed();

    // The flood: 200 or 429, no other answer; at most the burst plus the
    // rate over the flood's time got in.
    let accepted = flooded.iter().filter(|a| a.status == 200).count();
    let limited: Vec<&Answer> = flooded.iter().filter(|a| a.status == 429).collect();
    assert_eq!(accepted + limited.len(), flood.len(), "only 200 or 429");
    let most = 10 + (elapsed.as_secs_f64() * 5.0).ceil() as usize + 1;
    assert!(
        (10..=most).contains(&accepted),
        "{accepted} of the flood accepted in {elapsed:?}, at most {most}"
    );
    for a in &limited {
        let wait = a.retry_after.expect("429 says Retry-After");
        assert!((1..=2).contains(&wait), "Retry-After {wait}");
        let body: serde_json::Value = serde_json::from_str(&a.body).expect("JSON error");
        assert_eq!(body["error"], "rate_limited", "{body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("razorpay")),
            "{body}"
        );
    }

    // The quiet tenant: every one accepted, as fast as before the flood
    // (the slowest within three times the slowest before, or 250 ms).
    assert!(
        during.iter().all(|a| a.status == 200),
        "the quiet source during the flood"
    );
    let (usual, now) = (slowest(&before), slowest(&during));
    assert!(
        now <= (usual * 3).max(Duration::from_millis(250)),
        "the quiet source's slowest answer went from {usual:?} to {now:?} during another tenant's flood"
    );

    // Nothing of a refused delivery was published: the queues hold the
    // accepted ones only (no worker runs).
    let published = broker::events_depth(&env.prefix).await;
    assert_eq!(published, u32::try_from(accepted + 40).ok());

    // Each refusal is counted, under its source.
    let text = metrics::scrape(ingest.metrics_url()).await;
    let counted = metrics::series(
        &text,
        "oncehook_ingest_requests_total",
        &[("source", "razorpay"), ("outcome", "rate_limited")],
    );
    assert_eq!(counted as usize, limited.len(), "{text}");
    let by_source = metrics::series(
        &text,
        "oncehook_ingest_rate_limited_total",
        &[("source", "razorpay")],
    );
    assert_eq!(by_source as usize, limited.len(), "{text}");
    assert_eq!(
        metrics::series(
            &text,
            "oncehook_ingest_rate_limited_total",
            &[("source", QUIET_SOURCE)]
        ),
        0.0
    );
    // And logged, not once per request.
    let log = ingest.log_text();
    let lines = log.matches("source over its rate").count();
    assert!(
        lines >= 1 && lines <= 2 + elapsed.as_secs() as usize,
        "{lines} log lines for {} refusals",
        limited.len()
    );

    // The gateway's retry after the wait is accepted: nothing is lost.
    let refused_first = flooded
        .iter()
        .position(|a| a.status == 429)
        .expect("some were refused");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = post(&env.http, &url, "razorpay", &flood[refused_first]).await;
    assert_eq!(again.status, 200, "{}", again.body);
}

#[tokio::test]
async fn a_quiet_tenants_payment_posted_after_another_tenants_backlog_is_committed_before_most_of_it()
 {
    const BACKLOG: usize = 300;
    let mut env = TestEnv::new().await;
    env.tenant_with_source(QUIET, QUIET_SOURCE, Gateway::Razorpay)
        .await;
    // Five at once on the main lane per tenant, then one a second.
    env.set_env(ENV_SHARE_PER_SECOND, "1");
    env.set_env(ENV_SHARE_BURST, "5");
    let refs: Vec<String> = (0..BACKLOG).map(|n| format!("busy_{n}")).collect();
    Shop::mugs(10_000, &refs).seed(&env.pool).await;
    Shop::mugs(10, &["quiet_1"]).seed_in(&env.pool, QUIET).await;
    let (_ingest, url) = env.start_ingest().await;

    // The busy tenant's backlog, no worker running.
    let backlog: Vec<SignedDelivery> = refs
        .iter()
        .enumerate()
        .map(|(n, r)| env.captured(r, &format!("pay_b_{n}"), &format!("evt_b_{n}")))
        .collect();
    let answers = env.post_all(&url, "razorpay", backlog, 8).await;
    assert!(
        answers.iter().all(|(s, _)| *s == 200),
        "the backlog accepted"
    );
    // Then the quiet tenant's one payment.
    let quiet = env.captured("quiet_1", "pay_q_1", "evt_q_1");
    env.post_ok(&url, QUIET_SOURCE, &quiet).await;

    // The busy tenant's webhooks beyond its share wait in its bulk lane;
    // the main lane holds its share and the quiet payment.
    let t = Topology::new(env.prefix.clone());
    let busy_lane = t.bulk_lane(lane_of(&TenantId::default_tenant()));
    let main = broker::depth(&t.events()).await.expect("main lane");
    let bulk = broker::depth(&busy_lane).await.expect("bulk lane");
    assert_eq!(main as usize + bulk as usize, BACKLOG + 1);
    assert!(
        (6..=6 + 10).contains(&main),
        "the main lane holds the busy tenant's share and the quiet payment: {main}"
    );

    // The worker takes the main lane first: when the quiet payment is
    // committed, most of the backlog is still waiting.
    let _worker = env.start_worker().await;
    let committed_before = eventually(
        "the quiet payment committed",
        Duration::from_secs(60),
        || async {
            let quiet_done = env
                .count("SELECT count(*) FROM processed_webhooks WHERE event_id = 'evt_q_1'")
                .await;
            if quiet_done == 0 {
                return None;
            }
            Some(
                env.count(
                    "SELECT count(*) FROM processed_webhooks WHERE event_id LIKE 'evt\\_b\\_%'",
                )
                .await,
            )
        },
    )
    .await;
    assert!(
        (committed_before as usize) < BACKLOG / 2,
        "{committed_before} of the busy tenant's {BACKLOG} were committed before the quiet payment"
    );
    let status = oncehook_e2e::shop::order_status(&env.pool, "quiet_1").await;
    assert_eq!(status, "paid");

    // And the backlog drains, each once, nothing dead-lettered.
    env.wait_events_drained().await;
    eventually("the backlog committed", Duration::from_secs(60), || async {
        let n = env
            .count("SELECT count(*) FROM processed_webhooks WHERE event_id LIKE 'evt\\_b\\_%'")
            .await;
        (n as usize == BACKLOG).then_some(())
    })
    .await;
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await as usize,
        BACKLOG + 1
    );
    assert_eq!(broker::depth(&t.dead()).await, Some(0));
}
