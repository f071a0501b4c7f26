//! `oncehook-notifier`: tells the shop's backend what became of its orders
//! (docs/shop-integration.md#order-events). The worker's ledger writes the
//! order events in its transaction; here they go out:
//!
//! - `relay`: publishes every order event to `P.order-events` (routing key
//!   = its type), for the notifier's queue and in-house consumers;
//! - `fanout`: consumes `P.notify` (on the common consume loop) and makes
//!   one delivery row per endpoint the event is for;
//! - `dispatch`: one loop per endpoint sends its due rows, within its own
//!   concurrency limit, and writes how each attempt ended;
//! - `attempt`: one signed POST (Standard Webhooks, signed by `oncehook_gateways::standard_webhooks`, the code that verifies the `standard` gateway) and what it
//!   means for the row — delivered, due again on the schedule (honouring
//!   `Retry-After`), failed and kept, or (410) the endpoint disabled.

pub mod attempt;
pub mod dispatch;
pub mod fanout;
pub mod relay;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lapin::{Channel, Connection};
use oncehook_common::background::{self, Supervised, supervise};
use oncehook_common::consume::session::{self, ConsumerSpec, SessionTasks};
use oncehook_common::health::Readiness;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{NotifierSettings, Topology, db};
use tokio::sync::Notify;

/// Messages the broker hands the fan-out ahead (making rows is quick).
const PREFETCH: u16 = 16;

/// Shared state of one notifier process.
pub struct Notifier {
    pub db: Pooled,
    pub http: reqwest::Client,
    pub settings: NotifierSettings,
    pub topology: Topology,
    pub readiness: Readiness,
    pub shutdown: Shutdown,
    /// Per configured endpoint (same order): wakes its dispatcher.
    wakers: Vec<Arc<Notify>>,
}

/// Why the notifier cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("building the HTTP client failed: {0}")]
    Http(#[from] reqwest::Error),
}

impl Notifier {
    pub fn new(
        pool: Pooled,
        settings: NotifierSettings,
        shutdown: Shutdown,
    ) -> Result<Arc<Self>, StartError> {
        let timeout = settings.notify.timeout;
        // Only the configured URLs: a redirect is an answer, never followed.
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(usize::from(settings.notify.concurrency))
            .user_agent(concat!("oncehook-notifier/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let wakers = settings
            .notify
            .endpoints
            .iter()
            .map(|_| Arc::new(Notify::new()))
            .collect();
        Ok(Arc::new(Notifier {
            db: pool,
            http,
            topology: Topology::new(settings.broker.prefix.clone()),
            settings,
            readiness: Readiness::default(),
            shutdown,
            wakers,
        }))
    }

    /// The configured endpoints' names.
    pub fn endpoint_names(&self) -> Vec<String> {
        let endpoints = &self.settings.notify.endpoints;
        endpoints.iter().map(|e| e.name.clone()).collect()
    }

    /// Every configured endpoint as `(name, tenant)`.
    pub fn endpoint_tenants(&self) -> Vec<(String, String)> {
        let endpoints = &self.settings.notify.endpoints;
        endpoints
            .iter()
            .map(|e| (e.name.clone(), e.tenant.to_string()))
            .collect()
    }

    /// Wakes the dispatchers of `endpoints`.
    pub fn wake(&self, endpoints: &[String]) {
        for (e, waker) in self.settings.notify.endpoints.iter().zip(&self.wakers) {
            if endpoints.contains(&e.name) {
                waker.notify_one();
            }
        }
    }

    /// Runs `call` until it succeeds, waiting out database trouble; `None`
    /// on shutdown.
    pub async fn with_db<T, F, Fut>(&self, call: F) -> Option<T>
    where
        F: Fn(Pooled) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        db::Hold::new(&self.db, &self.shutdown)
            .retry(
                || call(self.db.clone()),
                |err| tracing::warn!(%err, "notifier database call failed; retrying"),
            )
            .await
    }

    /// Runs the dispatchers, the gauges and broker sessions (relay and
    /// fan-out) until shutdown; then waits for the attempts in flight.
    pub async fn run(self: Arc<Self>) {
        let endpoints = self.endpoint_tenants();
        if self
            .with_db(|db| {
                let endpoints = endpoints.clone();
                async move { oncehook_common::store::notify::ensure_endpoints(&db, &endpoints).await }
            })
            .await
            .is_none()
        {
            return;
        }
        // Supervised: restarted after a panic (`background`).
        let mut loops: Vec<Supervised> = self
            .settings
            .notify
            .endpoints
            .iter()
            .zip(&self.wakers)
            .map(|(e, waker)| {
                let (n, endpoint, waker) = (self.clone(), Arc::new(e.clone()), waker.clone());
                supervise("notify dispatcher", &self.shutdown, move || {
                    dispatch::run(n.clone(), endpoint.clone(), waker.clone())
                })
            })
            .collect();
        let n = self.clone();
        loops.push(supervise("notify gauges", &self.shutdown, move || {
            dispatch::gauges(n.clone())
        }));
        let spec = ConsumerSpec::new(
            &self.settings.broker,
            PREFETCH,
            "oncehook-notifier",
            Topology::notify,
        );
        let tasks = RelayTask {
            pool: self.db.clone(),
            topology: self.topology.clone(),
            timeout: self.settings.broker.publish_timeout,
        };
        let handler = Arc::new(fanout::FanOut(self.clone()));
        session::run_sessions(
            &spec,
            handler,
            &self.db,
            &self.readiness,
            &self.shutdown,
            tasks,
        )
        .await;
        background::join_all(loops).await;
    }
}

/// The relay, for as long as a broker session lasts.
struct RelayTask {
    pool: Pooled,
    topology: Topology,
    timeout: Duration,
}

impl SessionTasks for RelayTask {
    fn start(
        &mut self,
        _conn: &Arc<Connection>,
        channel: &Channel,
        stop: &Shutdown,
    ) -> Vec<Supervised> {
        let (pool, channel, topology) = (self.pool.clone(), channel.clone(), self.topology.clone());
        let (timeout, session_stop) = (self.timeout, stop.clone());
        vec![supervise("order-event relay", stop, move || {
            let (pool, channel, topology) = (pool.clone(), channel.clone(), topology.clone());
            relay::run(pool, channel, topology, timeout, session_stop.clone())
        })]
    }
}
