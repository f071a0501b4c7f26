//! The broker as a list of nodes, and queues that outlive an upgrade, on the
//! system broker (nothing here stops a node; the cluster chaos scenario is
//! in chaos.rs):
//!
//! * every binary given a URL list with an unreachable node connects to the
//!   reachable one, and logs the node without credentials;
//! * a node that refuses connections and later accepts them: every binary's
//!   session supervisor keeps retrying (not ready meanwhile, ingest answers
//!   503), then connects and serves;
//! * queues declared by an older version (without
//!   `x-quorum-initial-group-size`), or with another group size, keep
//!   working: RabbitMQ would refuse the changed arguments with
//!   `PRECONDITION_FAILED`, and the binaries must keep starting.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::AMQPValue;
use oncehook_common::Topology;
use oncehook_common::topology::ARG_QUORUM_INITIAL_GROUP_SIZE;
use oncehook_e2e::{Shop, TestEnv, broker, eventually, shop};
use oncehook_gateways::Gateway;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(30);

/// Pays `order_ref` through ingest at `url` and waits until the order is
/// paid and its email sent.
async fn pay_one(env: &TestEnv, url: &str, order_ref: &str) {
    Shop::mugs(10, &[order_ref]).seed(&env.pool).await;
    let pay = format!("pay_{order_ref}");
    let evt = format!("evt_{order_ref}");
    env.post_ok(url, "razorpay", &env.captured(order_ref, &pay, &evt))
        .await;
    shop::wait_paid_and_mailed(&env.pool, order_ref).await;
}

#[tokio::test]
async fn a_list_with_an_unreachable_node_connects_to_the_reachable_one() {
    let mut env = TestEnv::new().await;
    let dead = format!(
        "amqp://guest:guest@127.0.0.1:{}/%2f",
        oncehook_e2e::free_port()
    );
    env.use_broker(&format!("{dead},{}", broker::AMQP_URL));
    let app = env.pipeline().await;
    pay_one(&env, &app.url, "order_nodes_1").await;

    let (code, out, err) = env.ctl(&["stats"]).await;
    assert_eq!(
        code, 0,
        "oncehookctl stats with a dead node listed: {out}{err}"
    );

    for proc in app.procs() {
        let log = proc.log_text();
        assert!(
            log.contains("connected to RabbitMQ node") && log.contains("127.0.0.1:5672"),
            "{} names the node it connected to:\n{log}",
            proc.name
        );
        assert!(
            !log.contains("guest:guest"),
            "{} logs no credentials:\n{log}",
            proc.name
        );
    }
}

/// A node on `port` that forwards every connection to the system broker,
/// until dropped.
struct Forwarder(JoinHandle<()>);

impl Forwarder {
    async fn start(port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind the node's port");
        Forwarder(tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect("127.0.0.1:5672").await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        }))
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test]
async fn a_node_that_refuses_then_accepts_is_connected_to_once_it_accepts() {
    let mut env = TestEnv::new().await;
    let port = oncehook_e2e::free_port();
    let node = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let extra = [("ONCEHOOK_AMQP_URL", node.as_str())];
    let (ingest, url) = env.spawn_ingest(&extra);
    let worker = env.spawn("oncehook-worker", &extra, &[]);
    let mailer = env.spawn("oncehook-mailer", &extra, &[]);
    let procs = [&ingest, &worker, &mailer];

    eventually("every binary retried the refusing node", WAIT, || async {
        procs
            .iter()
            .all(|p| {
                p.log_text()
                    .matches("broker not reachable; retrying")
                    .count()
                    >= 2
            })
            .then_some(())
    })
    .await;
    for proc in procs {
        let ready = env
            .http
            .get(format!("{}/readyz", proc.metrics_url()))
            .send()
            .await
            .map(|r| r.status().as_u16());
        assert_eq!(ready.ok(), Some(503), "{} not ready", proc.name);
    }
    let spec = env.spec("order_refused", "pay_refused", "evt_refused_0", 50_000);
    let delivery = env.sign(Gateway::Razorpay, "payment.captured", &spec);
    let (status, body) = env.post(&url, "razorpay", &delivery).await;
    assert_eq!(status, 503, "{body}");

    let _node = Forwarder::start(port).await;
    for proc in procs {
        env.wait_ready(proc.metrics_url(), "/readyz").await;
        let log = proc.log_text();
        assert!(
            log.contains(&format!("127.0.0.1:{port}"))
                && log.contains("connected to RabbitMQ node"),
            "{} connected to the node once it accepted:\n{log}",
            proc.name
        );
    }
    pay_one(&env, &url, "order_refused_1").await;
}

/// Declares the queues as an older version did: the topology's arguments
/// without the group size, with `extra` added to each.
async fn declare_old_queues(prefix: &str, extra: Option<(&str, AMQPValue)>) {
    let (conn, ch) = broker::confirm_channel_on(broker::AMQP_URL).await;
    for (queue, mut args) in Topology::new(prefix).queue_args(5) {
        if let Some((k, v)) = &extra {
            args.insert((*k).into(), v.clone());
        }
        ch.queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            args,
        )
        .await
        .expect("declare as the old version did");
    }
    let _ = conn.close(200, "bye".into()).await;
}

#[tokio::test]
async fn queues_declared_before_the_group_size_keep_working() {
    let mut env = TestEnv::new().await;
    declare_old_queues(&env.prefix, None).await;
    let app = env.pipeline().await;
    pay_one(&env, &app.url, "order_upgrade_1").await;
    let (code, out, err) = env.ctl(&["stats"]).await;
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test]
async fn queues_declared_with_another_group_size_keep_working() {
    let mut env = TestEnv::new().await;
    declare_old_queues(
        &env.prefix,
        Some((ARG_QUORUM_INITIAL_GROUP_SIZE, AMQPValue::LongInt(1))),
    )
    .await;
    let app = env.pipeline().await;
    pay_one(&env, &app.url, "order_upgrade_2").await;
}

#[tokio::test]
async fn a_changed_delivery_limit_is_still_refused() {
    let mut env = TestEnv::new().await;
    declare_old_queues(&env.prefix, None).await;
    // The queues say 5; this worker is configured with 7.
    let addr = format!("127.0.0.1:{}", oncehook_e2e::free_port());
    let mut worker = env.spawn(
        "oncehook-worker",
        &[
            ("ONCEHOOK_DELIVERY_LIMIT", "7"),
            ("ONCEHOOK_METRICS_ADDR", addr.as_str()),
        ],
        &[],
    );
    eventually(
        "the worker reports the inequivalent delivery limit",
        WAIT,
        || async {
            let log = worker.log_text();
            (log.contains("PRECONDITION_FAILED") && log.contains("x-delivery-limit")).then_some(())
        },
    )
    .await;
    let ready = env
        .http
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(
        ready.ok(),
        Some(503),
        "not ready with the wrong queue arguments"
    );
    worker.kill();
}
