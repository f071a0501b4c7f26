//! The chaos suite: real process kills and service restarts under load,
//! then the invariants (nothing acked lost, nothing doubled, stock adds up,
//! one confirmation per paid order, queues drained). Each scenario prints its
//! figures; `make chaos` runs them with more load and shows the table.
//!
//! Scenarios take a shared lock: they run one at a time, so a broker or
//! database restart only ever hits the scenario that caused it.

use std::time::Duration;

use oncehook_common::dead_letter::{DeadLetterKind, DeadLetteredBy};
use oncehook_e2e::chaos::{self, Plan, Report};
use oncehook_e2e::cluster::Cluster;
use oncehook_e2e::services::{restart_postgres, run};
use oncehook_e2e::{Proc, SmtpSink, TestEnv, broker};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Orders per scenario (`ONCEHOOK_CHAOS_ORDERS`; `make chaos` raises it).
fn orders() -> usize {
    std::env::var("ONCEHOOK_CHAOS_ORDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

/// How long the load is spread over.
fn spread() -> Duration {
    Duration::from_millis((orders() as u64 * 150).max(6_000))
}

struct Stack {
    ingest: Proc,
    addr: String,
    url: String,
    workers: Vec<Proc>,
    mailer: Proc,
}

async fn stack(env: &mut TestEnv, workers: usize) -> Stack {
    let addr = format!("127.0.0.1:{}", oncehook_e2e::free_port());
    let (ingest, url) = env.spawn_ingest_at(&addr, &[]);
    env.wait_ready(ingest.metrics_url(), "/readyz").await;
    let mut ws = Vec::new();
    for _ in 0..workers {
        ws.push(env.start_worker().await);
    }
    let mailer = env.start_mailer().await;
    Stack {
        ingest,
        addr,
        url,
        workers: ws,
        mailer,
    }
}

fn finish(report: Report) {
    report.publish();
    assert_eq!(report.lost, 0, "acked events lost: {:?}", report.notes);
    assert_eq!(report.doubled, 0, "effects doubled: {:?}", report.notes);
    assert!(report.notes.is_empty(), "invariants: {:?}", report.notes);
}

fn run_load(s: &Stack, plan: &Plan) -> tokio::task::JoinHandle<chaos::LoadResult> {
    chaos::start_load(s.url.clone(), plan, 6, spread())
}

#[tokio::test]
async fn chaos_sigkill_workers_during_load() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    let plan = chaos::plan(&env, orders(), "kill").await;
    let mut s = stack(&mut env, 3).await;
    let load = run_load(&s, &plan);
    let kills: usize = 5;
    for i in 0..kills {
        tokio::time::sleep(spread() / (kills as u32 + 1)).await;
        let victim = i % s.workers.len();
        s.workers[victim].signal("KILL");
        s.workers[victim].wait_exit(Duration::from_secs(5));
        s.workers[victim] = env.start_worker().await;
    }
    let load = load.await.expect("load");
    assert_eq!(load.gave_up, 0, "ingest kept accepting while workers died");
    finish(
        chaos::settle_and_check(&env, "SIGKILL a worker 5x (3 workers)", &plan, &load, &[]).await,
    );
}

#[tokio::test]
async fn chaos_restart_rabbitmq_during_load() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    let plan = chaos::plan(&env, orders(), "rmq").await;
    let s = stack(&mut env, 2).await;
    let load = run_load(&s, &plan);
    tokio::time::sleep(spread() / 4).await;
    run("rabbitmqctl", &["stop_app"]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // While the broker is away ingest must refuse, not pretend.
    let ready = env
        .http
        .get(format!("{}/readyz", s.ingest.metrics_url()))
        .send()
        .await
        .map(|r| r.status().as_u16());
    run("rabbitmqctl", &["start_app"]).await;
    // Asserted only now, so a failure never leaves the broker stopped.
    assert_eq!(
        ready.ok(),
        Some(503),
        "readyz is red while the broker is down"
    );

    env.wait_ready(s.ingest.metrics_url(), "/readyz").await;
    let load = load.await.expect("load");
    assert_eq!(load.gave_up, 0, "every event was eventually accepted");
    assert!(
        load.non_200_answers > 0,
        "the outage was visible to the client as 503s"
    );
    finish(chaos::settle_and_check(&env, "restart RabbitMQ", &plan, &load, &[]).await);
    drop(s);
}

#[tokio::test]
async fn chaos_restart_postgres_during_load() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    let plan = chaos::plan(&env, orders(), "pg").await;
    let s = stack(&mut env, 2).await;
    let load = run_load(&s, &plan);
    tokio::time::sleep(spread() / 3).await;
    restart_postgres().await;
    let load = load.await.expect("load");
    assert_eq!(load.gave_up, 0, "ingest does not depend on Postgres");
    finish(chaos::settle_and_check(&env, "restart Postgres", &plan, &load, &[]).await);
    drop(s);
}

/// Database trouble never counts toward the delivery limit: with a limit of
/// 2 and two attempts per delivery, a restart that fails every in-flight
/// transaction (57P01, lost connections) dead-letters nothing.
#[tokio::test]
async fn chaos_restart_postgres_with_a_low_delivery_limit() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    env.set_env("ONCEHOOK_DELIVERY_LIMIT", "2");
    env.set_env("ONCEHOOK_MAX_ATTEMPTS", "2");
    let plan = chaos::plan(&env, orders(), "pglimit").await;
    let s = stack(&mut env, 2).await;
    let load = run_load(&s, &plan);
    tokio::time::sleep(spread() / 3).await;
    restart_postgres().await;
    let load = load.await.expect("load");
    let report = chaos::settle_and_check(
        &env,
        "restart Postgres (delivery limit 2)",
        &plan,
        &load,
        &[],
    )
    .await;
    let dead = broker::depth(&format!("{}.dead", env.prefix)).await;
    assert_eq!(dead, Some(0), "nothing dead-lettered");
    drop(s);
    finish(report);
}

#[tokio::test]
async fn chaos_smtp_down_for_a_while() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    let mut smtp = SmtpSink::start().await;
    env.set_env("ONCEHOOK_SMTP_URL", &smtp.url());
    let plan = chaos::plan(&env, orders(), "smtp").await;
    let s = stack(&mut env, 2).await;
    let load = run_load(&s, &plan);
    tokio::time::sleep(Duration::from_secs(1)).await;
    smtp.stop();
    tokio::time::sleep(Duration::from_secs(6)).await;
    smtp.resume().await;
    let load = load.await.expect("load");
    let report = chaos::settle_and_check(&env, "SMTP down 6 s", &plan, &load, &[]).await;
    let paid = env
        .count("SELECT count(*) FROM orders WHERE status = 'paid'")
        .await;
    assert_eq!(
        smtp.messages().len() as i64,
        paid,
        "one email per paid order over SMTP"
    );
    let retried = env
        .count("SELECT count(*) FROM email_outbox WHERE attempts > 1")
        .await;
    assert!(retried > 0, "the outage forced retries");
    drop(s);
    finish(report);
}

#[tokio::test]
async fn chaos_poison_message_is_dead_lettered_by_the_delivery_limit() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    let plan = chaos::plan(&env, orders(), "poison").await;
    let poison = plan.orders[3].clone();
    env.set_env("ONCEHOOK_FAULT_PANIC_ORDER_REF", &poison);
    let mut s = stack(&mut env, 2).await;
    let load = run_load(&s, &plan);
    let load = load.await.expect("load");
    let report = chaos::settle_and_check(
        &env,
        "poison message (panics every time)",
        &plan,
        &load,
        &[&poison],
    )
    .await;
    let dead = broker::peek(&format!("{}.dead", env.prefix)).await;
    assert!(
        !dead.is_empty()
            && dead.iter().all(|m| {
                m.kind() == &DeadLetterKind::DeliveryLimit && m.record.by == DeadLetteredBy::Broker
            }),
        "the broker dead-lettered it through the delivery limit: {dead:?}"
    );
    for w in &mut s.workers {
        assert!(w.is_running(), "workers keep serving");
    }
    finish(report);
}

#[tokio::test]
async fn chaos_sigterm_each_binary_mid_load() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    let plan = chaos::plan(&env, orders(), "term").await;
    let mut s = stack(&mut env, 2).await;
    let load = run_load(&s, &plan);
    let step = spread() / 4;

    tokio::time::sleep(step).await;
    s.ingest.signal("TERM");
    assert_eq!(
        s.ingest.wait_exit(Duration::from_secs(15)),
        Some(0),
        "ingest exits 0 on SIGTERM"
    );
    let (ingest, _) = env.spawn_ingest_at(&s.addr.clone(), &[]);
    s.ingest = ingest;
    env.wait_ready(s.ingest.metrics_url(), "/readyz").await;

    tokio::time::sleep(step).await;
    s.workers[0].signal("TERM");
    assert_eq!(
        s.workers[0].wait_exit(Duration::from_secs(30)),
        Some(0),
        "worker exits 0 on SIGTERM"
    );
    s.workers[0] = env.start_worker().await;

    tokio::time::sleep(step).await;
    s.mailer.signal("TERM");
    assert_eq!(
        s.mailer.wait_exit(Duration::from_secs(30)),
        Some(0),
        "mailer exits 0 on SIGTERM"
    );
    s.mailer = env.start_mailer().await;

    let load = load.await.expect("load");
    assert_eq!(load.gave_up, 0);
    finish(
        chaos::settle_and_check(
            &env,
            "SIGTERM ingest, a worker, the mailer",
            &plan,
            &load,
            &[],
        )
        .await,
    );
}

/// A three-node cluster (`deploy/local/cluster.sh`, started here when it is
/// not running) with ingest, two workers and the mailer given all three
/// nodes: under load, the node that leads the events queue is stopped and
/// started again, then a follower. Quorum queues keep every confirmed
/// message; binaries on a stopped node reconnect to another one.
#[tokio::test]
async fn chaos_cluster_node_loss() {
    let _turn = ONE_AT_A_TIME.lock().await;
    // No cluster (not installed, or it fails to start) fails this test.
    let cluster = Cluster::ensure().await;
    let _restart = cluster.restart_on_panic();
    let mut env = TestEnv::new().await;
    env.set_env("ONCEHOOK_UNLINKED_TTL", "1h");
    env.use_broker(&cluster.urls);
    let plan = chaos::plan(&env, orders(), "cluster").await;
    let s = stack(&mut env, 2).await;
    let events = format!("{}.events", env.prefix);
    let queue = cluster
        .queue_nodes(&events)
        .await
        .expect("the events queue on the cluster");
    assert_eq!(
        queue.members.len(),
        cluster.nodes.len(),
        "a replica of the events queue on every node: {queue:?}"
    );
    // The node restarts take ~10 s each: spread the load over all of them.
    let spread = spread().max(Duration::from_secs(30));
    let load = chaos::start_load(s.url.clone(), &plan, 6, spread);
    let mut notes = Vec::new();

    tokio::time::sleep(spread / 6).await;
    let leader = queue.leader.clone();
    cluster.stop_node(&leader).await;
    let (new_leader, took) = cluster
        .new_leader(&events, &leader, Duration::from_secs(30))
        .await
        .expect("a new leader elected among the other nodes");
    notes.push(format!(
        "leader {leader} stopped; {new_leader} led after {:.1} s",
        took.as_secs_f64()
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.start_node(&leader).await;

    let now = cluster.queue_nodes(&events).await.expect("events queue");
    let follower = now
        .members
        .iter()
        .find(|m| **m != now.leader)
        .cloned()
        .expect("a follower");
    cluster.stop_node(&follower).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.start_node(&follower).await;
    notes.push(format!("follower {follower} stopped and started"));

    let load = load.await.expect("load");
    assert_eq!(load.gave_up, 0, "every event was eventually accepted");
    let procs = [&s.ingest, &s.mailer].into_iter().chain(&s.workers);
    let connects: usize = procs
        .map(|p| p.log_text().matches("connected to RabbitMQ node").count())
        .sum();
    notes.push(format!(
        "{} non-200 answers (retried by the clients); {} reconnections, each to the next node",
        load.non_200_answers,
        connects.saturating_sub(2 + s.workers.len())
    ));
    let report = chaos::settle_and_check(
        &env,
        "cluster: stop the leader, then a follower",
        &plan,
        &load,
        &[],
    )
    .await;
    let dead = broker::depth_on(&env.amqp_urls, &format!("{}.dead", env.prefix)).await;
    drop(s);
    for n in &notes {
        println!("  cluster: {n}");
    }
    assert_eq!(dead, Some(0), "nothing dead-lettered");
    finish(report);
}
