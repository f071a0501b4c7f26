//! Where ingest's time goes, suspect by suspect, in one run: the same
//! envelope published with confirms
//!
//! * B  — to a throwaway quorum queue through the default exchange (the
//!   pipeline's ceiling B);
//! * B′ — to the real events exchange (topic) and queue, with their
//!   arguments (delivery limit, dead-lettering, reject-publish): the broker's
//!   cost of oncehook's topology;
//! * B″ — as B′, but from two single-threaded runtimes on threads of their
//!   own while the connection lives on a third, as actix's workers publish:
//!   the cost of the hop between runtimes;
//!
//! * B + arguments — as B, to a quorum queue with one group of the events
//!   queue's arguments at a time (delivery limit; reject-publish; the
//!   at-least-once dead-lettering with its reject-publish; all of them
//!   through the default exchange): which argument costs what;
//!
//! and ingest itself (signed POSTs, same concurrency) with 1, 2 and 4 actix
//! workers. Each measurement gets a fresh environment (empty queues). B, B′
//! and the ingest runs are metered for CPU ([`cpu_report`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lapin::types::AMQPValue;
use oncehook_common::{Envelope, amqp};
use oncehook_e2e::{TestEnv, broker, free_port};
use oncehook_gateways::sample::SignedDelivery;

use super::memory::Peaks;
use crate::cpu::{self, Budget, CpuMeter, CpuUse, Who};
use crate::{
    Knobs, Row, Stats, WARMUP, broker_ceiling, captured, closed_loop, histogram_percentiles,
    http_client, lat_ratio, ms, post, queue_ceiling, sample_envelope, versus,
};

/// The actix worker counts tried.
const WORKERS: [&str; 3] = ["1", "2", "4"];

pub struct IngestRun {
    pub workers: String,
    pub stats: Stats,
    pub publish: Option<[Duration; 3]>,
    pub cpu: CpuUse,
}

pub struct IngestProbe {
    /// B with one group of the events queue's arguments at a time.
    pub b_args: Vec<(&'static str, Stats)>,
    pub b: Stats,
    pub b_topology: Stats,
    /// CPU over the measured windows of B and B′.
    pub b_cpu: CpuUse,
    pub b_topology_cpu: CpuUse,
    pub b_hop: Stats,
    pub runs: Vec<IngestRun>,
}

pub async fn ingest_probe(knobs: &Knobs, peaks: &mut Peaks) -> IngestProbe {
    let mut runs = Vec::new();
    let mut envelope = None;
    for workers in WORKERS {
        let mut env = TestEnv::new().await;
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let (mut ingest, base) = env.spawn_ingest(&[
            ("ONCEHOOK_INGEST_WORKERS", workers),
            ("ONCEHOOK_METRICS_ADDR", metrics_addr.as_str()),
        ]);
        env.wait_ready(&format!("http://{metrics_addr}"), "/readyz")
            .await;
        eprintln!(
            "bench: ingest with {workers} actix worker(s), c={}",
            knobs.concurrency
        );
        let meter = CpuMeter::new().with(Who::Ingest, [ingest.pid()]);
        let tag = format!("i{workers}");
        let load = post_load(&env, &base, knobs, &tag);
        let (stats, cpu) = cpu::during(&meter, WARMUP, knobs.duration(), load).await;
        let metrics = [format!("http://{metrics_addr}/metrics")];
        let publish =
            histogram_percentiles(&env, &metrics, "oncehook_ingest_publish_duration_seconds").await;
        peaks.record(
            "oncehook-ingest",
            ingest.pid(),
            &format!("c={} POSTs, {workers} worker(s)", knobs.concurrency),
        );
        if envelope.is_none() {
            envelope = Some(sample_envelope(&format!("{}.events", env.prefix)).await);
        }
        ingest.signal("TERM");
        ingest.wait_exit(Duration::from_secs(15));
        runs.push(IngestRun {
            workers: workers.to_owned(),
            stats,
            publish,
            cpu,
        });
    }
    let envelope = envelope.expect("an envelope from the first ingest run");

    let env = TestEnv::new().await;
    eprintln!("bench: B  publish+confirm, throwaway quorum queue");
    let (b, b_cpu) = metered(knobs, broker_ceiling(&env.prefix, &envelope, knobs)).await;
    drop(env);

    let env = TestEnv::new().await;
    declare_topology(&env.prefix).await;
    eprintln!("bench: B′ publish+confirm, the events exchange and queue");
    let b_topology = topology_ceiling(&env.prefix, &envelope, knobs, false);
    let (b_topology, b_topology_cpu) = metered(knobs, b_topology).await;
    drop(env);

    let env = TestEnv::new().await;
    declare_topology(&env.prefix).await;
    eprintln!("bench: B″ as B′, from two single-threaded runtimes");
    let b_hop = topology_ceiling(&env.prefix, &envelope, knobs, true).await;
    drop(env);

    let mut b_args = Vec::new();
    for (label, args) in argument_groups() {
        let env = TestEnv::new().await;
        eprintln!("bench: B  + {label}");
        let stats = args_ceiling(&env.prefix, &envelope, knobs, args).await;
        b_args.push((label, stats));
        drop(env);
    }

    IngestProbe {
        b_args,
        b,
        b_topology,
        b_cpu,
        b_topology_cpu,
        b_hop,
        runs,
    }
}

/// `load`, a closed loop with the usual warm-up, metered for CPU (the
/// bench, PostgreSQL, RabbitMQ).
async fn metered<T>(knobs: &Knobs, load: impl Future<Output = T>) -> (T, CpuUse) {
    cpu::during(&CpuMeter::new(), WARMUP, knobs.duration(), load).await
}

/// CPU per message of B and B′ and per request of ingest, and what they
/// say about goal 2: on this machine, and with RabbitMQ on cores of its own.
pub fn cpu_report(probe: &IngestProbe, knobs: &Knobs) -> cpu::Report {
    let c = knobs.concurrency;
    let b = Budget::of_rate(
        format!("B  throwaway quorum queue, {c} publishers (probe)"),
        "msg",
        probe.b.rate(),
        probe.b_cpu.clone(),
    );
    let topology = Budget::of_rate(
        format!("B′ events exchange + queue, {c} publishers"),
        "msg",
        probe.b_topology.rate(),
        probe.b_topology_cpu.clone(),
    );
    let mut report = cpu::Report::default();
    report.notes.push(cpu::limit_line(
        "the events topology, B′ vs B",
        &topology,
        &b,
        Who::Rabbitmq,
    ));
    let runs: Vec<Budget> = probe
        .runs
        .iter()
        .map(|run| {
            let label = format!("ingest, {} actix worker(s), c={c}", run.workers);
            Budget::of_rate(label, "req", run.stats.rate(), run.cpu.clone())
        })
        .collect();
    for run in &runs {
        let goal = format!("goal 2 (≥ 0.80× B), {}", run.label);
        report
            .notes
            .push(cpu::limit_line(&goal, run, &b, Who::Rabbitmq));
    }
    // The default (one actix worker per core here) against its own topology.
    let default = probe.runs.iter().zip(&runs).find(|(r, _)| r.workers == "2");
    if let Some((_, run)) = default {
        let vs = format!("{} vs B′", run.label);
        report
            .notes
            .push(cpu::limit_line(&vs, run, &topology, Who::Rabbitmq));
    }
    report.budgets.extend([b, topology]);
    report.budgets.extend(runs);
    report
}

/// The events queue's arguments, a group at a time (as `Topology` declares them).
fn argument_groups() -> Vec<(&'static str, Vec<(&'static str, AMQPValue)>)> {
    let limit = || ("x-delivery-limit", AMQPValue::LongInt(5));
    let overflow = || ("x-overflow", AMQPValue::LongString("reject-publish".into()));
    let dlx = || {
        [
            (
                "x-dead-letter-exchange",
                AMQPValue::LongString("bench.dead".into()),
            ),
            (
                "x-dead-letter-strategy",
                AMQPValue::LongString("at-least-once".into()),
            ),
        ]
    };
    let mut all = vec![limit(), overflow()];
    all.extend(dlx());
    let mut dead_lettering = vec![overflow()];
    dead_lettering.extend(dlx());
    vec![
        ("x-delivery-limit", vec![limit()]),
        ("x-overflow=reject-publish", vec![overflow()]),
        (
            "at-least-once dead-lettering + reject-publish",
            dead_lettering,
        ),
        ("all four (the events queue's), default exchange", all),
    ]
}

/// Ceiling B against a quorum queue with `extra` arguments.
async fn args_ceiling(
    prefix: &str,
    envelope: &Envelope,
    knobs: &Knobs,
    extra: Vec<(&'static str, AMQPValue)>,
) -> Stats {
    let queue = format!("{prefix}.bench-args");
    queue_ceiling(broker::AMQP_URL, &queue, envelope, knobs, extra).await
}

/// Signed captured events posted by `knobs.concurrency` clients for the window.
async fn post_load(env: &TestEnv, base: &str, knobs: &Knobs, tag: &str) -> Stats {
    let deliveries: Arc<Vec<SignedDelivery>> =
        Arc::new((0..1024).map(|n| captured(env, n, tag)).collect());
    let http = http_client(knobs.concurrency);
    let url = Arc::new(format!("{base}/webhooks/razorpay"));
    closed_loop(
        knobs.concurrency,
        Duration::from_secs(1),
        knobs.duration(),
        2_000_000,
        move |i| {
            let (http, url, deliveries) = (http.clone(), url.clone(), deliveries.clone());
            async move { post(&http, &url, &deliveries[i % deliveries.len()]).await }
        },
    )
    .await
}

async fn declare_topology(prefix: &str) {
    let conn = broker::connect().await;
    let queues = oncehook_common::config::QueueSettings {
        delivery_limit: 5,
        initial_group_size: 3,
    };
    oncehook_common::Topology::new(prefix.to_owned())
        .declare(&conn, &queues)
        .await
        .expect("declare the topology");
    let _ = conn.close(200, "bye".into()).await;
}

/// The envelope published to the events exchange with its routing key;
/// from the bench's multi-threaded runtime, or (`hop`) from two
/// current-thread runtimes on threads of their own.
async fn topology_ceiling(prefix: &str, envelope: &Envelope, knobs: &Knobs, hop: bool) -> Stats {
    let (conn, ch) = broker::confirm_channel_on(broker::AMQP_URL).await;
    let exchange = Arc::new(format!("{prefix}.events"));
    let routing_key = Arc::new(envelope.routing_key());
    let payload = Arc::new(envelope.to_bytes());
    let props = envelope.properties();
    let publish = move |_| {
        let (ch, exchange, routing_key, payload, props) = (
            ch.clone(),
            exchange.clone(),
            routing_key.clone(),
            payload.clone(),
            props.clone(),
        );
        async move {
            amqp::publish_confirmed(
                &ch,
                &exchange,
                &routing_key,
                &payload,
                props,
                Duration::from_secs(5),
            )
            .await
            .is_ok()
        }
    };
    let warmup = Duration::from_secs(1);
    let stats = if hop {
        let per_thread = knobs.concurrency.div_ceil(2);
        let window = knobs.duration();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let publish = publish.clone();
                std::thread::spawn(move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map(|rt| {
                            rt.block_on(closed_loop(per_thread, warmup, window, 2_000_000, publish))
                        })
                        .unwrap_or_default()
                })
            })
            .collect();
        let mut all = Stats::default();
        for t in threads {
            let joined = tokio::task::spawn_blocking(move || t.join()).await;
            if let Ok(Ok(s)) = joined {
                all.ok += s.ok;
                all.errors += s.errors;
                all.window = all.window.max(s.window);
                all.latencies_us.extend(s.latencies_us);
            }
        }
        all.latencies_us.sort_unstable();
        all
    } else {
        closed_loop(
            knobs.concurrency,
            warmup,
            knobs.duration(),
            2_000_000,
            publish,
        )
        .await
    };
    let _ = conn.close(200, "bye".into()).await;
    stats
}

pub fn report(probe: &IngestProbe, knobs: &Knobs, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let c = knobs.concurrency;
    rows.push(Row::new(
        format!("B  publish+confirm, throwaway quorum queue, {c} publishers"),
        "msg/s",
        &probe.b,
        "(ceiling)".to_owned(),
    ));
    for (label, stats) in &probe.b_args {
        rows.push(Row::new(
            format!("B  + {label}, {c} publishers"),
            "msg/s",
            stats,
            versus("B", stats, &probe.b),
        ));
    }
    rows.push(Row::new(
        format!("B′ publish+confirm, events exchange + queue, {c} publishers"),
        "msg/s",
        &probe.b_topology,
        versus("B", &probe.b_topology, &probe.b),
    ));
    rows.push(Row::new(
        format!("B″ as B′ from 2 single-threaded runtimes, {c} publishers"),
        "msg/s",
        &probe.b_hop,
        versus("B′", &probe.b_hop, &probe.b_topology),
    ));
    for run in &probe.runs {
        rows.push(Row::new(
            format!("ingest, {} actix worker(s), c={c}", run.workers),
            "req/s",
            &run.stats,
            format!(
                "{}; {} (goal ≥ 0.80× B at p99 ≤ 10 ms)",
                versus("B′", &run.stats, &probe.b_topology),
                versus("B", &run.stats, &probe.b)
            ),
        ));
        rows.push(Row {
            measurement: format!(
                "  its publish + confirm (histogram), {} worker(s)",
                run.workers
            ),
            throughput: "–".to_owned(),
            p50: ms(run.publish.map(|p| p[0])),
            p90: ms(run.publish.map(|p| p[1])),
            p99: ms(run.publish.map(|p| p[2])),
            vs: format!(
                "vs B′: p50 {}, p99 {}",
                lat_ratio(run.publish.map(|p| p[0]), probe.b_topology.p50()),
                lat_ratio(run.publish.map(|p| p[2]), probe.b_topology.p99())
            ),
        });
        if run.stats.errors > 0 {
            notes.push(format!(
                "ingest, {} worker(s): {} failed requests",
                run.workers, run.stats.errors
            ));
        }
    }
}
