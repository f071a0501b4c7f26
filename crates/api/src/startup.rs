//! Wiring: the pool, the keys, the routes and the metrics/health listener,
//! bound into an [`Application`] that tests start on a random port
//! (`ONCEHOOK_API_ADDR=127.0.0.1:0`). `/readyz` is green while the database
//! answers (checked every 5 s); old idempotency keys are pruned in the
//! background ([`crate::prune`]). Both are supervised
//! (`oncehook_common::background`: restarted after a panic) and joined when
//! the server stops. Every answer says `nosniff` and is counted
//! in `oncehook_api_requests_total{route, status}`.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{Server, ServiceRequest, ServiceResponse};
use actix_web::http::header::X_CONTENT_TYPE_OPTIONS;
use actix_web::middleware::{DefaultHeaders, Next, from_fn};
use actix_web::{App, HttpServer, web};
use metrics_exporter_prometheus::PrometheusHandle;
use oncehook_common::ApiSettings;
use oncehook_common::background::{self, Supervised, supervise};
use oncehook_common::health::{self, Readiness};
use oncehook_common::periodic::{self, Periodic};
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::{self, Pooled};

use crate::auth::Auth;
use crate::routes;
use crate::state::State;

/// A bound, not yet running, API server.
pub struct Application {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    server: Server,
    shutdown: Shutdown,
    /// The readiness watch and the pruning, joined when the server stops.
    tasks: Vec<Supervised>,
}

impl Application {
    pub async fn build(settings: ApiSettings, metrics: PrometheusHandle) -> anyhow::Result<Self> {
        let shutdown = Shutdown::new();
        let api = settings.api;
        if api.keys.is_empty() && api.admin_keys.is_empty() {
            tracing::warn!(
                "no [[api.key]] and no [[api.admin_key]] configured: only keys issued at runtime are served \
                 (`oncehookctl api-key NAME --scope …` prints an entry)"
            );
        }
        let pool = Pooled::open_tenant_facing(&settings.database, settings.database.pool_size(8))?;
        let ready = Readiness::default();
        let (tasks, disabled, issued) =
            background_tasks(&pool, &ready, api.idempotency_ttl, &shutdown);
        let state = web::Data::new(State {
            pool,
            auth: Auth::with_issued(
                api.keys.clone(),
                api.admin_keys.clone(),
                issued,
                api.auth_failures_per_minute,
                disabled,
            ),
            max_items: api.max_items,
            max_page_size: api.max_page_size,
            ring: settings.secrets.keys.clone(),
        });
        let listener = TcpListener::bind(api.addr).map_err(|e| {
            anyhow::anyhow!(
                "binding the API listener {}: {e} (set ONCEHOOK_API_ADDR to another address)",
                api.addr
            )
        })?;
        let addr = listener.local_addr()?;
        let body_limit = api.body_limit_bytes;
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .wrap(from_fn(count))
                .wrap(DefaultHeaders::new().add((X_CONTENT_TYPE_OPTIONS, "nosniff")))
                .configure(|cfg| routes::configure(cfg, body_limit))
        })
        .client_request_timeout(Duration::from_secs(10))
        .shutdown_timeout(10)
        .disable_signals()
        .listen(listener)?
        .run();
        let metrics_addr = match settings.metrics_addr {
            Some(maddr) => Some(
                health::serve(maddr, metrics, ready, shutdown.clone())
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "binding the metrics listener {maddr}: {e} (set ONCEHOOK_METRICS_ADDR to another address, or `off`)"
                        )
                    })?,
            ),
            None => None,
        };
        Ok(Application {
            addr,
            metrics_addr,
            server,
            shutdown,
            tasks,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Runs until SIGTERM or SIGINT (both graceful: in-flight requests finish).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let signals = Shutdown::on_signals();
        let handle = self.server.handle();
        actix_web::rt::spawn(async move {
            signals.wait().await;
            handle.stop(true).await;
        });
        let result = self.server.await;
        self.shutdown.trigger();
        background::join_all(self.tasks).await;
        result
    }
}

/// Keeps `/readyz` to whether the database answers, checked every 5 s.
async fn watch_database(
    pool: oncehook_common::store::Pooled,
    ready: Readiness,
    shutdown: Shutdown,
) {
    Periodic::every("database readiness", Duration::from_secs(5))
        .logs(
            "the database does not answer; /readyz is red",
            "the database answers again; /readyz is green",
        )
        .run(&shutdown, || async {
            let answered = store::ping(&pool).await;
            ready.set(answered.is_ok());
            answered.map(|()| periodic::Next::Pause)
        })
        .await;
}

/// Counts each answer by route pattern and status.
async fn count(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = req.method().to_string();
    let resp = next.call(req).await?;
    metrics::counter!("oncehook_api_requests_total",
        "route" => format!("{method} {route}"),
        "status" => resp.status().as_u16().to_string())
    .increment(1);
    Ok(resp)
}

/// The supervised tasks beside the server: the database's readiness, the
/// idempotency keys' pruning, and the disabled tenants and issued keys read
/// every second (with the sets they keep).
fn background_tasks(
    pool: &Pooled,
    ready: &Readiness,
    ttl: Duration,
    shutdown: &Shutdown,
) -> (
    Vec<Supervised>,
    crate::disabled::Disabled,
    crate::issued::Issued,
) {
    let (db, readiness, stop) = (pool.clone(), ready.clone(), shutdown.clone());
    let watch = supervise("database readiness", shutdown, move || {
        watch_database(db.clone(), readiness.clone(), stop.clone())
    });
    let (db, stop) = (pool.clone(), shutdown.clone());
    let prune = supervise("idempotency key pruning", shutdown, move || {
        crate::prune::run(db.clone(), ttl, stop.clone())
    });
    let disabled = crate::disabled::Disabled::default();
    let issued = crate::issued::Issued::default();
    let (db, known, set, stop) = (
        pool.clone(),
        issued.clone(),
        disabled.clone(),
        shutdown.clone(),
    );
    let keys = supervise(
        "issued API keys and disabled tenants",
        shutdown,
        move || crate::issued::run(db.clone(), known.clone(), set.clone(), stop.clone()),
    );
    (vec![watch, prune, keys], disabled, issued)
}
