//! The broker session of ingest: one connection and one confirm-mode
//! channel, kept alive by the broker session supervisor (reconnecting with
//! its backoff whenever the broker goes away), and publishing envelopes
//! through it. While disconnected, `publish` fails fast (the handler answers
//! 503) and the readiness flag is down. The session's task is supervised
//! (`oncehook_common::background`): a panic is logged, counted and the
//! session started again (readiness down and no channel until it opens).

use std::sync::Arc;
use std::time::Duration;

use lapin::{Channel, Connection};
use oncehook_common::amqp::{self, PublishError};
use oncehook_common::background::{Supervised, supervise};
use oncehook_common::broker::{Session, SessionError, Supervisor};
use oncehook_common::broker_nodes::BrokerNodes;
use oncehook_common::config::QueueSettings;
use oncehook_common::health::Readiness;
use oncehook_common::periodic::{Next, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::{Envelope, RetryPolicy, Topology, otel};
use tokio::sync::{Notify, RwLock};
use tracing::Instrument as _;

use crate::admission::Lane;

/// How often a held session checks that its channel and connection live.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Publishes envelopes with confirms over a self-healing connection.
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<Inner>,
}

struct Inner {
    channel: RwLock<Option<Channel>>,
    broken: Arc<Notify>,
    ready: Readiness,
    topology: Topology,
    timeout: Duration,
}

impl Publisher {
    /// Starts the supervised session in the background; the first
    /// connection may still be pending when this returns. The session's
    /// task ends on `shutdown` (join it to wait for the connection's close).
    pub fn start(
        nodes: BrokerNodes,
        topology: Topology,
        queues: QueueSettings,
        timeout: Duration,
        shutdown: Shutdown,
    ) -> (Self, Supervised) {
        let inner = Arc::new(Inner {
            channel: RwLock::new(None),
            broken: Arc::new(Notify::new()),
            ready: Readiness::default(),
            topology,
            timeout,
        });
        let (session_inner, stop) = (inner.clone(), shutdown.clone());
        let task = supervise("broker session", &shutdown, move || {
            let supervisor = Supervisor::new(
                nodes.clone(),
                "oncehook-ingest",
                RetryPolicy::BROKER_CONNECT,
            );
            let (inner, stop) = (session_inner.clone(), stop.clone());
            async move {
                // A session that panicked left neither a channel nor readiness.
                *inner.channel.write().await = None;
                inner.ready.set(false);
                let ready = inner.ready.clone();
                let mut session = Publishing { inner, queues };
                supervisor.run(&mut session, &ready, &stop).await;
            }
        });
        (Publisher { inner }, task)
    }

    /// The readiness flag the session loop maintains (for the ops listener).
    pub fn readiness(&self) -> Readiness {
        self.inner.ready.clone()
    }

    /// Publishes `envelope` to its lane — the events exchange, or its
    /// tenant's bulk lane — and waits for the confirm.
    pub async fn publish(&self, envelope: &Envelope, lane: Lane) -> Result<(), PublishError> {
        let Some(ch) = self.inner.channel.read().await.clone() else {
            return Err(PublishError::NotConnected);
        };
        let topology = &self.inner.topology;
        let (exchange, routing_key) = match lane {
            Lane::Main => (topology.events(), envelope.routing_key()),
            Lane::Bulk => topology.bulk_route(&envelope.tenant, &envelope.routing_key()),
        };
        // The producer span; the message carries its context to the worker.
        let span = otel::producer_span(&exchange, &routing_key, &envelope.message_id());
        let properties = span.in_scope(|| envelope.properties());
        let result = amqp::publish_confirmed(
            &ch,
            &exchange,
            &routing_key,
            &envelope.to_bytes(),
            properties,
            self.inner.timeout,
        )
        .instrument(span)
        .await;
        if matches!(
            result,
            Err(PublishError::Channel(_)) | Err(PublishError::Timeout(_))
        ) {
            self.inner.broken.notify_one();
        }
        result
    }
}

/// Ingest's session: the topology and a confirm channel, held until the
/// channel dies or a publish reports trouble.
struct Publishing {
    inner: Arc<Inner>,
    queues: QueueSettings,
}

impl Session for Publishing {
    type Open = Channel;

    async fn open(&mut self, conn: &Arc<Connection>) -> lapin::Result<Channel> {
        self.inner.topology.declare(conn, &self.queues).await?;
        amqp::confirm_channel(conn).await
    }

    async fn serve(
        &mut self,
        conn: &Arc<Connection>,
        ch: Channel,
        shutdown: &Shutdown,
    ) -> Result<(), SessionError> {
        tracing::info!("connected to broker; publishing with confirms");
        metrics::gauge!("oncehook_ingest_broker_connected").set(1.0);
        *self.inner.channel.write().await = Some(ch.clone());
        self.inner.ready.set(true);
        // Serves until the connection or the channel is gone (a failed
        // publish wakes the check at once) or shutdown.
        Periodic::every("broker session watch", CHECK_EVERY)
            .first_after_a_pause()
            .woken_by(self.inner.broken.clone())
            .run(shutdown, || async {
                let open = ch.status().connected() && conn.status().connected();
                Ok::<_, std::convert::Infallible>(if open { Next::Pause } else { Next::Stop })
            })
            .await;
        self.inner.ready.set(false);
        *self.inner.channel.write().await = None;
        // Close the channel before the connection (a channel still closing
        // when the connection goes makes the client log an error).
        let _ = ch.close(200, "ingest session ends".into()).await;
        metrics::gauge!("oncehook_ingest_broker_connected").set(0.0);
        if shutdown.is_triggered() {
            return Ok(());
        }
        Err(SessionError::Lost(
            "the confirm channel or the connection closed; answering 503 until it is back",
        ))
    }
}
