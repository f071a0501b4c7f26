//! `oncehook-console`: the operators' web console. Server-rendered pages
//! over the same library `oncehookctl` is built from (dead letters, replay,
//! purge, trace, stats, the notifier's deliveries, refunds) plus the processed
//! events and the audit trail, behind a login. It listens on its own address (`ONCEHOOK_CONSOLE_ADDR`,
//! default 127.0.0.1:8081), never on the public ingest port.
//!
//! Security, in one place each: `auth` (login, logout, roles, CSRF,
//! same-origin), `session` (signed cookies, server-held sessions),
//! `throttle` (failed logins, concurrent password checks), `input` (filter
//! values and the page after a login), and the headers every answer
//! carries ([`security_headers`]). Stops cleanly on SIGTERM/SIGINT.

mod assets;
mod auth;
mod dead_letters;
mod form;
mod html;
mod input;
mod pages;
mod said;
mod session;
mod state;
mod throttle;

use actix_web::middleware::DefaultHeaders;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use oncehook_common::config::ConsoleConfig;
use oncehook_common::shutdown::Shutdown;
use oncehook_common::store::Pooled;
use oncehook_common::{Config, Topology, telemetry};
use rand::RngCore as _;

use session::{SessionKey, Sessions};
use state::State;

/// The headers every answer carries: no inline script or style, no framing,
/// no MIME sniffing, no referrer outside the console.
fn security_headers() -> DefaultHeaders {
    DefaultHeaders::new()
        .add((
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
        ))
        .add(("X-Frame-Options", "DENY"))
        .add(("X-Content-Type-Options", "nosniff"))
        .add(("Referrer-Policy", "same-origin"))
        .add(("Cross-Origin-Opener-Policy", "same-origin"))
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    // `--version` / `-V` answers before any configuration is read.
    oncehook_common::build::exit_on_version_flag(env!("CARGO_BIN_NAME"));
    let settings = Config::load().context("reading configuration")?;
    let traces = telemetry::init_logging(&settings.telemetry, "oncehook-console");
    let console = settings.console.clone();
    warn_about(&console);
    let pool = Pooled::open_tenant_facing(&settings.database, settings.database.pool_size(4))
        .context("database URL")?;
    let state = web::Data::new(shared_state(settings, &console, pool.clone())?);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(web::PayloadConfig::new(1024 * 1024))
            .wrap(security_headers())
            .configure(routes)
    })
    .workers(2)
    .disable_signals()
    .bind(console.addr)
    .with_context(|| {
        format!(
            "binding the console listener {} (set ONCEHOOK_CONSOLE_ADDR to another address)",
            console.addr
        )
    })?
    .run();
    tracing::info!(addr = %console.addr, "oncehook-console listening");
    let handle = server.handle();
    let shutdown = Shutdown::on_signals();
    tokio::spawn(async move {
        shutdown.wait().await;
        handle.stop(true).await;
    });
    server.await.context("serving the console")?;
    pool.close().await;
    tracing::info!("oncehook-console stopped");
    traces.shutdown();
    Ok(())
}

/// Says at start-up what in `[console]` makes it less than production-ready
/// (nobody can log in, cookies over plain http).
fn warn_about(console: &ConsoleConfig) {
    if console.users.is_empty() {
        tracing::warn!(
            "no [[console.user]] configured: nobody can log in (`oncehookctl console-user NAME` prints an entry)"
        );
    }
    if !console.secure_cookies {
        tracing::warn!(
            "ONCEHOOK_CONSOLE_SECURE_COOKIES=false: session cookies also travel over plain http (local use only)"
        );
    }
}

/// The key sessions are signed with: the configured one, or a random one
/// (sessions then end when the console restarts).
fn session_key(console: &ConsoleConfig) -> SessionKey {
    match &console.session_key {
        Some(k) => SessionKey::new(k.expose().as_bytes()),
        None => {
            tracing::warn!(
                "ONCEHOOK_CONSOLE_SESSION_KEY is not set: sessions are signed with a random key and end when the console restarts"
            );
            SessionKey::random()
        }
    }
}

/// A hash of random noise nobody knows: unknown names are checked against
/// it, so they cost as much as a wrong password.
fn decoy_hash() -> anyhow::Result<String> {
    let mut noise = [0u8; 24];
    rand::rng().fill_bytes(&mut noise);
    oncehook_ops::password::hash(&hex::encode(noise))
}

/// What every handler shares.
fn shared_state(settings: Config, console: &ConsoleConfig, pool: Pooled) -> anyhow::Result<State> {
    let topology = Topology::new(settings.broker.prefix.clone());
    Ok(State {
        dead_letters: dead_letters::DeadLetters::new(settings.clone(), topology.clone()),
        topology,
        sessions: Sessions::new(session_key(console), console.session_ttl),
        throttle: throttle::Throttle::default(),
        password_checks: std::sync::Arc::new(tokio::sync::Semaphore::new(throttle::MAX_CHECKS)),
        pool,
        decoy_hash: decoy_hash()?,
        settings,
    })
}

/// Every page, action and asset of the console.
fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/login", web::get().to(auth::login_page))
        .route("/login", web::post().to(auth::login))
        .route("/logout", web::post().to(auth::logout))
        .route("/", web::get().to(pages::overview::show))
        .route("/letters", web::get().to(pages::letters::list))
        .route("/letters/preview", web::post().to(pages::letters::preview))
        .route("/letters/replay", web::post().to(pages::letters::replay))
        .route("/letters/purge", web::post().to(pages::letters::purge))
        .route("/letters/{id}", web::get().to(pages::letters::detail))
        .route("/events", web::get().to(pages::events::show))
        .route("/trace", web::get().to(pages::trace::show))
        .route("/notifications", web::get().to(pages::notifications::show))
        .route(
            "/notifications/replay",
            web::post().to(pages::notifications::replay),
        )
        .route(
            "/notifications/enable",
            web::post().to(pages::notifications::enable),
        )
        .route("/refunds", web::get().to(pages::refunds::show))
        .route("/refunds/approve", web::post().to(pages::refunds::approve))
        .route("/refunds/cancel", web::post().to(pages::refunds::cancel))
        .route("/refunds/pause", web::post().to(pages::refunds::pause))
        .route("/refunds/resume", web::post().to(pages::refunds::resume))
        .route("/audit", web::get().to(pages::audit::show))
        .route("/static/console.css", web::get().to(assets::css))
        .route("/static/console.js", web::get().to(assets::js))
        .default_service(web::to(assets::not_found));
}
