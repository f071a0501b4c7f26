//! The broker session of ingest: keeps one connection and a small pool of
//! confirm-mode channels alive, reconnecting with backoff whenever the
//! broker goes away, and publishes envelopes through them (round robin, so
//! concurrent requests do not queue behind one channel's confirms). While
//! disconnected, `publish` fails fast (the handler answers 503) and
//! `is_ready` is false.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lapin::Channel;
use oncehook_common::amqp::{self, PublishError};
use oncehook_common::health::Readiness;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::{Envelope, Topology};
use tokio::sync::{Notify, RwLock};

/// Publishes envelopes with confirms over a self-healing connection.
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<Inner>,
}

/// Confirm channels per connection.
const CHANNELS: usize = 4;

struct Inner {
    channels: RwLock<Vec<Channel>>,
    next: AtomicUsize,
    broken: Notify,
    ready: Readiness,
    topology: Topology,
    timeout: Duration,
}

impl Publisher {
    /// Starts the session loop in the background; the first connection may
    /// still be pending when this returns.
    pub fn start(
        amqp_url: String,
        topology: Topology,
        delivery_limit: u32,
        timeout: Duration,
        shutdown: Shutdown,
    ) -> Self {
        let inner = Arc::new(Inner {
            channels: RwLock::new(Vec::new()),
            next: AtomicUsize::new(0),
            broken: Notify::new(),
            ready: Readiness::default(),
            topology,
            timeout,
        });
        let this = Publisher { inner };
        let session = this.clone();
        tokio::spawn(async move { session.run(amqp_url, delivery_limit, shutdown).await });
        this
    }

    async fn run(self, amqp_url: String, delivery_limit: u32, shutdown: Shutdown) {
        while !shutdown.is_triggered() {
            let Some(conn) =
                amqp::connect_with_backoff(&amqp_url, "oncehook-ingest", shutdown.wait()).await
            else {
                break;
            };
            let setup = async {
                let mut channels = Vec::with_capacity(CHANNELS);
                for _ in 0..CHANNELS {
                    channels.push(amqp::confirm_channel(&conn).await?);
                }
                if let Some(first) = channels.first() {
                    self.inner.topology.declare(first, delivery_limit).await?;
                }
                Ok::<_, lapin::Error>(channels)
            };
            match setup.await {
                Ok(channels) => {
                    tracing::info!(
                        channels = channels.len(),
                        "connected to broker; publishing with confirms"
                    );
                    metrics::gauge!("oncehook_ingest_broker_connected").set(1.0);
                    *self.inner.channels.write().await = channels.clone();
                    self.inner.ready.set(true);
                    // Hold the session until the channel dies or a publish reports trouble.
                    loop {
                        tokio::select! {
                            () = shutdown.wait() => break,
                            () = self.inner.broken.notified() => {}
                            () = tokio::time::sleep(Duration::from_millis(250)) => {}
                        }
                        let all_up = channels.iter().all(|ch| ch.status().connected());
                        if !all_up || !conn.status().connected() {
                            break;
                        }
                    }
                    self.inner.ready.set(false);
                    self.inner.channels.write().await.clear();
                    for ch in &channels {
                        let _ = ch.close(200, "ingest session ends".into()).await;
                    }
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

    /// Whether the confirm channels are usable.
    pub async fn is_ready(&self) -> bool {
        let channels = self.inner.channels.read().await;
        !channels.is_empty()
            && channels
                .iter()
                .all(|ch| ch.status().connected() && ch.status().confirm())
    }

    /// Publishes `envelope` to the events exchange and waits for the confirm.
    pub async fn publish(&self, envelope: &Envelope) -> Result<(), PublishError> {
        let ch = {
            let channels = self.inner.channels.read().await;
            if channels.is_empty() {
                return Err(PublishError::NotConnected);
            }
            let i = self.inner.next.fetch_add(1, Ordering::Relaxed) % channels.len();
            channels[i].clone()
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
