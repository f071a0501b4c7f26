//! Session supervision of the consuming binaries (worker, mailer): wait for
//! Postgres and for a schema at least as new as the binary, connect to the broker with backoff, declare the topology, open
//! a confirm channel for dead letters (and for the caller's session tasks,
//! e.g. the worker's outbox relay), consume until the connection breaks or
//! shutdown, stop the session tasks, close up and start over. Readiness is
//! cleared whenever no session runs.

use std::sync::Arc;
use std::time::Duration;

use lapin::{Channel, Connection};
use sqlx::PgPool;
use tokio::task::JoinHandle;

use super::Handler;
use super::broker::{BrokerDeadLetters, consume};
use crate::broker_nodes::BrokerNodes;
use crate::config::BrokerConfig;
use crate::health::Readiness;
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;
use crate::topology::QueueSettings;
use crate::{Topology, amqp, db};

/// The pause before reconnecting after a session ended in an error.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// What one consuming binary consumes, and how.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// The connection name shown in the broker's UI (`oncehook-worker`, …).
    pub name: &'static str,
    /// The broker's node(s); each (re)connection goes to the next one.
    pub nodes: BrokerNodes,
    pub topology: Topology,
    /// The queue to consume (one of the topology's).
    pub queue: String,
    pub prefetch: u16,
    pub queues: QueueSettings,
    /// How long a dead-letter publish may wait for its confirm.
    pub publish_timeout: Duration,
    /// How to retry connecting to the broker.
    pub connect: RetryPolicy,
}

impl ConsumerSpec {
    /// The spec from the broker section; `queue` picks the queue from the topology.
    pub fn new(
        broker: &BrokerConfig,
        prefetch: u16,
        name: &'static str,
        queue: fn(&Topology) -> String,
    ) -> Self {
        let topology = Topology::new(broker.prefix.clone());
        ConsumerSpec {
            name,
            nodes: broker.nodes.clone(),
            queue: queue(&topology),
            topology,
            prefetch,
            queues: broker.queue_settings(),
            publish_timeout: broker.publish_timeout,
            connect: RetryPolicy::BROKER_CONNECT,
        }
    }
}

/// Tasks that live as long as one broker session (given the connection, for
/// channels of their own, its confirm channel and a stop signal that fires
/// when the session ends).
pub trait SessionTasks: Send {
    fn start(
        &mut self,
        conn: &Arc<Connection>,
        channel: &Channel,
        stop: &Shutdown,
    ) -> Vec<JoinHandle<()>>;
}

/// No session tasks.
impl SessionTasks for () {
    fn start(
        &mut self,
        _conn: &Arc<Connection>,
        _channel: &Channel,
        _stop: &Shutdown,
    ) -> Vec<JoinHandle<()>> {
        Vec::new()
    }
}

/// Runs broker sessions for `handler` until shutdown.
pub async fn run_sessions<H: Handler>(
    spec: &ConsumerSpec,
    handler: Arc<H>,
    pool: &PgPool,
    readiness: &Readiness,
    shutdown: &Shutdown,
    mut tasks: impl SessionTasks,
) {
    while !shutdown.is_triggered() {
        if !db::wait_for_database(pool, shutdown).await
            || !db::wait_for_schema(pool, shutdown).await
        {
            break;
        }
        let Some(conn) =
            amqp::connect_with_backoff(&spec.nodes, spec.name, &spec.connect, shutdown.wait())
                .await
        else {
            break;
        };
        let conn = Arc::new(conn);
        let result = session(
            spec,
            &conn,
            handler.clone(),
            readiness,
            shutdown,
            &mut tasks,
        )
        .await;
        if let Err(err) = result {
            tracing::warn!(%err, "broker session ended; reconnecting");
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
        readiness.set(false);
        let _ = conn.close(200, "session ends".into()).await;
    }
}

/// One session on `conn`: topology, dead-letter channel, session tasks, consume.
async fn session<H: Handler>(
    spec: &ConsumerSpec,
    conn: &Arc<Connection>,
    handler: Arc<H>,
    readiness: &Readiness,
    shutdown: &Shutdown,
    tasks: &mut impl SessionTasks,
) -> lapin::Result<()> {
    spec.topology.declare(conn, &spec.queues).await?;
    let pub_ch = amqp::confirm_channel(conn).await?;
    let stop = Shutdown::new();
    let running = tasks.start(conn, &pub_ch, &stop);
    let sink = Arc::new(BrokerDeadLetters {
        channel: pub_ch.clone(),
        exchange: spec.topology.dead(),
        origin: spec.queue.clone(),
        timeout: spec.publish_timeout,
    });
    let result = consume(
        conn,
        &spec.queue,
        spec.prefetch,
        readiness,
        shutdown,
        handler,
        sink,
    )
    .await;
    stop.trigger();
    for task in running {
        let _ = task.await;
    }
    let _ = pub_ch.close(200, "session ends".into()).await;
    result
}
