//! The consuming binaries' session (worker, mailer), run by the one broker
//! supervisor (`broker::session`): before each connection wait for Postgres
//! and for a schema at least as new as the binary; on the connection declare
//! the topology and open a confirm channel for dead letters (and for the
//! caller's session tasks, e.g. the worker's outbox relay); consume until
//! the connection breaks or shutdown, then stop the session tasks and close
//! up. The supervisor reconnects and clears readiness whenever no session
//! runs.

use std::sync::Arc;
use std::time::Duration;

use crate::store::Pooled;
use lapin::{Channel, Connection};

use super::Handler;
use super::broker::{BrokerDeadLetters, Window, consume};
use crate::background::{self, Supervised};
use crate::broker::{Session, SessionError, Supervisor};
use crate::broker_nodes::BrokerNodes;
use crate::config::BrokerConfig;
use crate::config::QueueSettings;
use crate::health::Readiness;
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;
use crate::{Topology, amqp, db};

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
    /// Prefetch and how many deliveries are handled at once.
    pub window: Window,
    pub queues: QueueSettings,
    /// How long a dead-letter publish may wait for its confirm.
    pub publish_timeout: Duration,
    /// How the supervisor pauses between connections.
    pub connect: RetryPolicy,
}

impl ConsumerSpec {
    /// The spec from the broker section; `queue` picks the queue from the
    /// topology. Deliveries are handled as concurrently as they are
    /// prefetched unless [`ConsumerSpec::with_concurrency`] says otherwise.
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
            window: Window::new(prefetch),
            queues: broker.queue_settings(),
            publish_timeout: broker.publish_timeout,
            connect: RetryPolicy::BROKER_CONNECT,
        }
    }

    /// Handles at most `concurrency` deliveries at once (the prefetch is
    /// raised to it when lower).
    pub fn with_concurrency(mut self, concurrency: u16) -> Self {
        self.window = Window::with_concurrency(self.window.prefetch, concurrency);
        self
    }
}

/// Tasks that live as long as one broker session (given the connection, for
/// channels of their own, its confirm channel and a stop signal that fires
/// when the session ends), each started by `background::supervise` under
/// that stop.
pub trait SessionTasks: Send {
    fn start(
        &mut self,
        conn: &Arc<Connection>,
        channel: &Channel,
        stop: &Shutdown,
    ) -> Vec<Supervised>;
}

/// No session tasks.
impl SessionTasks for () {
    fn start(
        &mut self,
        _conn: &Arc<Connection>,
        _channel: &Channel,
        _stop: &Shutdown,
    ) -> Vec<Supervised> {
        Vec::new()
    }
}

/// Runs broker sessions for `handler` until shutdown.
pub async fn run_sessions<H: Handler>(
    spec: &ConsumerSpec,
    handler: Arc<H>,
    db: &Pooled,
    readiness: &Readiness,
    shutdown: &Shutdown,
    tasks: impl SessionTasks,
) {
    let supervisor = Supervisor::new(spec.nodes.clone(), spec.name, spec.connect);
    let mut session = Consuming {
        spec,
        handler,
        db,
        readiness,
        tasks,
    };
    supervisor.run(&mut session, readiness, shutdown).await;
}

/// One consumer's session: what `run_sessions` hands the supervisor.
struct Consuming<'a, H, T> {
    spec: &'a ConsumerSpec,
    handler: Arc<H>,
    db: &'a Pooled,
    readiness: &'a Readiness,
    tasks: T,
}

impl<H: Handler, T: SessionTasks> Session for Consuming<'_, H, T> {
    /// The confirm channel for dead letters and the session tasks.
    type Open = Channel;

    async fn prepare(&mut self, shutdown: &Shutdown) -> bool {
        db::wait_for_database(self.db, shutdown).await
            && db::wait_for_schema(self.db, shutdown).await
    }

    async fn open(&mut self, conn: &Arc<Connection>) -> lapin::Result<Channel> {
        self.spec.topology.declare(conn, &self.spec.queues).await?;
        amqp::confirm_channel(conn).await
    }

    /// Session tasks, then consume; the tasks stop when consuming does.
    async fn serve(
        &mut self,
        conn: &Arc<Connection>,
        pub_ch: Channel,
        shutdown: &Shutdown,
    ) -> Result<(), SessionError> {
        let spec = self.spec;
        let stop = Shutdown::new();
        let running = self.tasks.start(conn, &pub_ch, &stop);
        let sink = Arc::new(BrokerDeadLetters {
            channel: pub_ch.clone(),
            exchange: spec.topology.dead(),
            origin: spec.queue.clone(),
            delivery_limit: Some(spec.queues.delivery_limit),
            timeout: spec.publish_timeout,
        });
        let result = consume(
            conn,
            &spec.queue,
            spec.window,
            self.readiness,
            shutdown,
            self.handler.clone(),
            sink,
        )
        .await;
        stop.trigger();
        background::join_all(running).await;
        let _ = pub_ch.close(200, "session ends".into()).await;
        result.map_err(SessionError::from)
    }
}
