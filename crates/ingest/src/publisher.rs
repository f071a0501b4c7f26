//! The broker session of ingest: keeps one connection and one confirm-mode
//! channel alive, reconnecting with backoff whenever the broker goes away,
//! and publishes envelopes through it. While disconnected, `publish` fails
//! fast (the handler answers 503) and the readiness flag is down.

use std::sync::Arc;
use std::time::Duration;

use lapin::Channel;
use oncehook_common::amqp::{self, PublishError};
use oncehook_common::broker_nodes::BrokerNodes;
use oncehook_common::health::Readiness;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::topology::QueueSettings;
use oncehook_common::{Envelope, RetryPolicy, Topology};
use tokio::sync::{Notify, RwLock};

/// Publishes envelopes with confirms over a self-healing connection.
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<Inner>,
}

struct Inner {
    channel: RwLock<Option<Channel>>,
    broken: Notify,
    ready: Readiness,
    topology: Topology,
    timeout: Duration,
    /// How the session retries connecting to the broker.
    connect: RetryPolicy,
}

impl Publisher {
    /// Starts the session loop in the background; the first connection may
    /// still be pending when this returns.
    pub fn start(
        nodes: BrokerNodes,
        topology: Topology,
        queues: QueueSettings,
        timeout: Duration,
        shutdown: Shutdown,
    ) -> Self {
        let inner = Arc::new(Inner {
            channel: RwLock::new(None),
            broken: Notify::new(),
            ready: Readiness::default(),
            topology,
            timeout,
            connect: RetryPolicy::BROKER_CONNECT,
        });
        let this = Publisher { inner };
        let session = this.clone();
        tokio::spawn(async move { session.run(nodes, queues, shutdown).await });
        this
    }

    async fn run(self, nodes: BrokerNodes, queues: QueueSettings, shutdown: Shutdown) {
        while !shutdown.is_triggered() {
            let Some(conn) = amqp::connect_with_backoff(
                &nodes,
                "oncehook-ingest",
                &self.inner.connect,
                shutdown.wait(),
            )
            .await
            else {
                break;
            };
            let setup = async {
                self.inner.topology.declare(&conn, &queues).await?;
                let ch = amqp::confirm_channel(&conn).await?;
                Ok::<_, lapin::Error>(ch)
            };
            match setup.await {
                Ok(ch) => {
                    tracing::info!("connected to broker; publishing with confirms");
                    metrics::gauge!("oncehook_ingest_broker_connected").set(1.0);
                    *self.inner.channel.write().await = Some(ch.clone());
                    self.inner.ready.set(true);
                    // Hold the session until the channel dies or a publish reports trouble.
                    loop {
                        tokio::select! {
                            () = shutdown.wait() => break,
                            () = self.inner.broken.notified() => {}
                            () = tokio::time::sleep(Duration::from_millis(250)) => {}
                        }
                        if !ch.status().connected() || !conn.status().connected() {
                            break;
                        }
                    }
                    self.inner.ready.set(false);
                    *self.inner.channel.write().await = None;
                    // Close the channel before the connection (a channel still
                    // closing when the connection goes makes the client log an error).
                    let _ = ch.close(200, "ingest session ends".into()).await;
                    metrics::gauge!("oncehook_ingest_broker_connected").set(0.0);
                    if !shutdown.is_triggered() {
                        tracing::warn!("broker connection lost; answering 503 until it is back");
                    }
                }
                Err(err) => {
                    tracing::error!(%err, "declaring the topology failed; reconnecting");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            let _ = conn.close(200, "ingest session ends".into()).await;
        }
    }

    /// The readiness flag the session loop maintains (for the ops listener).
    pub fn readiness(&self) -> Readiness {
        self.inner.ready.clone()
    }

    /// Publishes `envelope` to the events exchange and waits for the confirm.
    pub async fn publish(&self, envelope: &Envelope) -> Result<(), PublishError> {
        let Some(ch) = self.inner.channel.read().await.clone() else {
            return Err(PublishError::NotConnected);
        };
        let result = amqp::publish_confirmed(
            &ch,
            &self.inner.topology.events(),
            &envelope.routing_key(),
            &envelope.to_bytes(),
            envelope.properties(),
            self.inner.timeout,
        )
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
