//! Wiring: builds the shared state (sources, publisher, metrics handle), binds
//! the listener(s) and returns an [`Application`] that tests can start on a
//! random port (`ONCEHOOK_INGEST_ADDR=127.0.0.1:0`). Every answer of the
//! public port says `X-Content-Type-Options: nosniff`.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::http::header::X_CONTENT_TYPE_OPTIONS;
use actix_web::middleware::DefaultHeaders;
use actix_web::{App, HttpServer, web};
use metrics_exporter_prometheus::PrometheusHandle;
use oncehook_common::background::Supervised;
use oncehook_common::background::supervise;
use oncehook_common::health;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::{IngestSettings, Topology};

use crate::admission::Admission;
use crate::publisher::Publisher;
use crate::routes;
use crate::sources::{self, Sources};

/// How long the exit waits for the broker session to close.
const SESSION_CLOSE: std::time::Duration = std::time::Duration::from_secs(5);

/// Everything handlers share.
pub struct IngestState {
    pub sources: Arc<Sources>,
    pub publisher: Publisher,
    pub body_limit: usize,
    pub metrics: PrometheusHandle,
    /// Each source's rate and each tenant's share of the main lane.
    pub admission: Admission,
}

impl IngestState {
    /// The configured sources by name and a publisher, whose broker session
    /// (the task returned) runs until `shutdown`; every source's counters
    /// start at zero.
    fn new(
        settings: &IngestSettings,
        metrics: PrometheusHandle,
        shutdown: Shutdown,
    ) -> (Self, Supervised) {
        let (publisher, session) = Publisher::start(
            settings.broker.nodes.clone(),
            Topology::new(settings.broker.prefix.clone()),
            settings.broker.queue_settings(),
            settings.broker.publish_timeout,
            shutdown,
        );
        routes::zero_counters(settings.ingest.sources.iter().map(|s| s.name.as_str()));
        let sources = Sources::new(
            &settings.ingest.sources,
            settings.ingest.sources_feed.is_some(),
        );
        let state = IngestState {
            sources: Arc::new(sources),
            publisher,
            body_limit: settings.ingest.body_limit_bytes,
            metrics,
            admission: Admission::new(
                settings.ingest.rate_limits.clone(),
                settings.ingest.fairness,
            ),
        };
        (state, session)
    }
}

/// A bound, not yet running, ingest server.
pub struct Application {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    server: Server,
    shutdown: Shutdown,
    /// The broker session's task, joined once the server stopped.
    session: Supervised,
    /// The sources feed's reader, if a feed is configured.
    feed: Option<Supervised>,
}

impl Application {
    pub async fn build(
        settings: IngestSettings,
        metrics: PrometheusHandle,
    ) -> std::io::Result<Self> {
        let shutdown = Shutdown::new();
        let (state, session) = IngestState::new(&settings, metrics, shutdown.clone());
        let feed = match (&settings.ingest.sources_feed, &settings.secrets.keys) {
            (Some(feed), Some(ring)) => {
                let (sources, feed, ring, stop) = (
                    state.sources.clone(),
                    feed.clone(),
                    ring.clone(),
                    shutdown.clone(),
                );
                Some(supervise("sources feed", &shutdown, move || {
                    sources::follow(sources.clone(), feed.clone(), ring.clone(), stop.clone())
                }))
            }
            _ => None,
        };
        let state = web::Data::new(state);
        let (addr, server) = webhook_server(&settings, state.clone())?;
        // Metrics, liveness and readiness: a listener of their own, never the public port.
        let metrics_addr = match settings.metrics_addr {
            Some(maddr) => Some(metrics_listener(maddr, &state, shutdown.clone()).await?),
            None => None,
        };
        Ok(Application {
            addr,
            metrics_addr,
            server,
            shutdown,
            session,
            feed,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Runs until SIGTERM or SIGINT (both graceful): the listener closes,
    /// in-flight requests finish (up to 10 s) and still publish, then the
    /// broker session closes.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let signals = Shutdown::on_signals();
        let handle = self.server.handle();
        actix_web::rt::spawn(async move {
            signals.wait().await;
            handle.stop(true).await;
        });
        let result = self.server.await;
        self.shutdown.trigger();
        if let Some(feed) = self.feed {
            feed.join().await;
        }
        // The connection's close, bounded: a broker that does not answer
        // does not hold the exit.
        if tokio::time::timeout(SESSION_CLOSE, self.session.join())
            .await
            .is_err()
        {
            tracing::warn!(waited = ?SESSION_CLOSE, "the broker session did not close in time; exiting without it");
        }
        result
    }
}

/// The public webhook listener, bound (its address, for a port 0) but not
/// yet running.
fn webhook_server(
    settings: &IngestSettings,
    state: web::Data<IngestState>,
) -> std::io::Result<(SocketAddr, Server)> {
    let listener = TcpListener::bind(settings.ingest.addr).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("binding the webhook listener {}: {e}", settings.ingest.addr),
        )
    })?;
    let addr = listener.local_addr()?;
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            // Every answer, errors included: a browser pointed at this
            // port must never guess a type for what it gets back.
            .wrap(DefaultHeaders::new().add((X_CONTENT_TYPE_OPTIONS, "nosniff")))
            .configure(routes::configure)
    });
    if let Some(workers) = settings.ingest.workers {
        server = server.workers(usize::from(workers));
    }
    let server = server
        .client_request_timeout(Duration::from_secs(5))
        .client_disconnect_timeout(Duration::from_secs(2))
        .shutdown_timeout(10)
        // actix treats SIGINT as a forced stop; ours are all graceful (see
        // `Application::run_until_stopped`), so Ctrl-C drains like SIGTERM.
        .disable_signals()
        .listen(listener)?;
    Ok((addr, server.run()))
}

/// The metrics, liveness and readiness listener on `addr`, running until
/// `shutdown`; its bound address.
async fn metrics_listener(
    addr: SocketAddr,
    state: &IngestState,
    shutdown: Shutdown,
) -> std::io::Result<SocketAddr> {
    health::serve(
        addr,
        state.metrics.clone(),
        state.publisher.readiness(),
        shutdown,
    )
    .await
    .map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "binding the metrics listener {addr}: {e} (set ONCEHOOK_METRICS_ADDR to another address, or `off`)"
            ),
        )
    })
}
