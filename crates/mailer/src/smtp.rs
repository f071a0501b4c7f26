//! Pooled SMTP connections: one connection per send in flight, kept open
//! and reused for the next email instead of a new TCP connection, greeting,
//! `EHLO` and `QUIT` per email.
//!
//! Connections are made here rather than by lettre's transport so the socket
//! gets `TCP_NODELAY`: lettre writes the message and its terminating
//! `<CRLF>.<CRLF>` separately, and with Nagle's algorithm the terminator
//! waits for the server's delayed ACK (about 40 ms on Linux) before the
//! server can even start answering. The whole send — connect, greeting and
//! `EHLO` included — is bounded by one timeout.
//!
//! A connection goes back to the pool only after a send that succeeded; one
//! that failed in any way is closed, so the next send starts from a clean
//! session. A connection idle for a while is checked with `NOOP` before it
//! is used again (the server may have closed it), and one idle for longer is
//! closed instead of reused.
//!
//! A session is protected as `[mail] tls` says — plain, `STARTTLS` right
//! after the greeting (a server that does not offer it is refused, never
//! used in the clear), or TLS from the first byte — and logs in with
//! `AUTH PLAIN` or `LOGIN` once encrypted. A failed login is an error that
//! names the user and the server, never the password, and is retried like
//! any other failed send: the email waits, it is not dropped.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lettre::address::Envelope;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::extension::ClientId;
use oncehook_common::config::{SmtpConfig, SmtpTls};
use tokio::net::TcpStream;

use crate::tls::{TlsSetupError, TlsTrust};

/// A parked connection idle longer than this is checked with `NOOP` first.
const CHECK_AFTER: Duration = Duration::from_secs(2);
/// A parked connection idle longer than this is closed, not reused (servers
/// close idle sessions after a few minutes; RFC 5321 asks for at least 5).
const MAX_IDLE: Duration = Duration::from_secs(60);
/// How long closing the idle sessions at shutdown may take.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
pub enum SmtpError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Protocol(#[from] lettre::transport::smtp::Error),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error(
        "{addr} does not offer STARTTLS (mail.tls = \"starttls\"): refusing to send in the clear"
    )]
    NoStartTls { addr: String },
    #[error("TLS with {addr} failed: {reason} (a private relay's CA goes in mail.ca_file)")]
    Tls { addr: String, reason: String },
    #[error(
        "logging in to {addr} as {user:?} failed: {reason} (check mail.username and mail.password)"
    )]
    Auth {
        addr: String,
        user: String,
        reason: String,
    },
}

impl SmtpError {
    /// A refusal retrying will not change (5xx for this message). A failed
    /// login or TLS handshake is not one: the account or the certificate is
    /// fixed on the server or in the configuration, and the email waits.
    pub fn is_permanent(&self) -> bool {
        matches!(self, SmtpError::Protocol(e) if e.is_permanent())
    }
}

/// The server and how sessions with it are opened.
struct Server {
    host: String,
    port: u16,
    tls: SmtpTls,
    /// Set for the two TLS modes.
    trust: Option<TlsTrust>,
    login: Option<(String, Credentials)>,
}

impl Server {
    fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

struct Parked {
    conn: AsyncSmtpConnection,
    since: Instant,
}

/// Open SMTP sessions to one server, reused across sends.
pub struct SmtpPool {
    server: Server,
    timeout: Duration,
    hello: ClientId,
    /// At most this many idle sessions are kept.
    max_idle: usize,
    idle: Mutex<Vec<Parked>>,
}

impl SmtpPool {
    /// A pool for the configured server, keeping up to `max_idle` sessions
    /// open; each send (connecting and logging in included) must finish
    /// within `timeout`. Fails only on a bad `ca_file`.
    pub fn new(
        config: &SmtpConfig,
        timeout: Duration,
        max_idle: usize,
    ) -> Result<SmtpPool, TlsSetupError> {
        let trust = match config.tls {
            SmtpTls::None => None,
            SmtpTls::StartTls | SmtpTls::Implicit => {
                Some(TlsTrust::new(&config.host, config.ca_file.as_deref())?)
            }
        };
        // Exist at zero from the start, so the first refusal is an increase.
        metrics::counter!("oncehook_mailer_smtp_connections_total").increment(0);
        metrics::counter!("oncehook_mailer_smtp_login_failures_total").increment(0);
        let login = config.credentials.as_ref().map(|c| {
            let creds = Credentials::new(c.username.clone(), c.password.expose().to_owned());
            (c.username.clone(), creds)
        });
        Ok(SmtpPool {
            server: Server {
                host: config.host.clone(),
                port: config.port,
                tls: config.tls,
                trust,
                login,
            },
            timeout,
            hello: ClientId::default(),
            max_idle: max_idle.max(1),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Sends one message on a pooled session (a new one if none is idle).
    pub async fn send(&self, envelope: &Envelope, message: &[u8]) -> Result<(), SmtpError> {
        let attempt = async {
            let mut conn = self.checkout().await?;
            match conn.send(envelope, message).await {
                Ok(_) => {
                    self.checkin(conn);
                    Ok(())
                }
                Err(err) => {
                    conn.abort().await;
                    Err(SmtpError::Protocol(err))
                }
            }
        };
        // A timeout drops the session in the middle: it is never reused.
        tokio::time::timeout(self.timeout, attempt)
            .await
            .unwrap_or(Err(SmtpError::TimedOut(self.timeout)))
    }

    /// The server, its TLS mode and login, for the start-up log line.
    pub fn describe(&self) -> String {
        let s = &self.server;
        let login = s.login.as_ref().map_or_else(
            || "no login".to_owned(),
            |(user, _)| format!("login {user:?}"),
        );
        format!("smtp {} (tls {}, {login})", s.addr(), s.tls.as_str())
    }

    /// Sessions open and idle right now.
    pub fn idle(&self) -> usize {
        self.idle.lock().map_or(0, |idle| idle.len())
    }

    /// Says `QUIT` on every idle session (at shutdown), waiting at most
    /// [`CLOSE_WAIT`] for a server that does not answer.
    pub async fn close(&self) {
        let parked = match self.idle.lock() {
            Ok(mut idle) => std::mem::take(&mut *idle),
            Err(_) => return,
        };
        let quit_all = async {
            for mut p in parked {
                p.conn.abort().await;
            }
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, quit_all).await;
    }

    /// An idle session that still answers, else a new one.
    async fn checkout(&self) -> Result<AsyncSmtpConnection, SmtpError> {
        loop {
            let parked = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            let Some(mut p) = parked else {
                return self.connect().await;
            };
            let idle_for = p.since.elapsed();
            if idle_for > MAX_IDLE {
                p.conn.abort().await;
                continue;
            }
            if idle_for > CHECK_AFTER && !p.conn.test_connected().await {
                p.conn.abort().await;
                continue;
            }
            return Ok(p.conn);
        }
    }

    fn checkin(&self, conn: AsyncSmtpConnection) {
        if conn.has_broken() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push(Parked {
                conn,
                since: Instant::now(),
            });
        }
        // Over the cap (or a poisoned lock): the session is dropped, which
        // closes the socket without `QUIT`.
    }

    /// A new session: TCP, then TLS as configured, then the login.
    async fn connect(&self) -> Result<AsyncSmtpConnection, SmtpError> {
        let server = &self.server;
        let addr = server.addr();
        let stream = TcpStream::connect((server.host.as_str(), server.port))
            .await
            .map_err(|source| SmtpError::Connect {
                addr: addr.clone(),
                source,
            })?;
        stream
            .set_nodelay(true)
            .map_err(|source| SmtpError::Connect {
                addr: addr.clone(),
                source,
            })?;
        let tls_failed = |reason: String| SmtpError::Tls {
            addr: addr.clone(),
            reason,
        };
        let mut conn = match (&server.trust, server.tls) {
            (Some(trust), SmtpTls::Implicit) => {
                let tls = trust
                    .connect(stream)
                    .await
                    .map_err(|e| tls_failed(e.to_string()))?;
                AsyncSmtpConnection::connect_with_transport(Box::new(tls), &self.hello).await?
            }
            (Some(trust), SmtpTls::StartTls) => {
                let mut conn =
                    AsyncSmtpConnection::connect_with_transport(Box::new(stream), &self.hello)
                        .await?;
                if !conn.can_starttls() {
                    conn.abort().await;
                    return Err(SmtpError::NoStartTls { addr });
                }
                if let Err(e) = conn.starttls(trust.starttls(), &self.hello).await {
                    // Dropped, not aborted: after a failed handshake lettre
                    // holds no stream to say QUIT on.
                    drop(conn);
                    return Err(tls_failed(e.to_string()));
                }
                conn
            }
            _ => AsyncSmtpConnection::connect_with_transport(Box::new(stream), &self.hello).await?,
        };
        if let Some((user, creds)) = &server.login {
            let mechanisms = [Mechanism::Plain, Mechanism::Login];
            if let Err(e) = conn.auth(&mechanisms, creds).await {
                conn.abort().await;
                metrics::counter!("oncehook_mailer_smtp_login_failures_total").increment(1);
                return Err(SmtpError::Auth {
                    addr,
                    user: user.clone(),
                    reason: e.to_string(),
                });
            }
        }
        metrics::counter!("oncehook_mailer_smtp_connections_total").increment(1);
        Ok(conn)
    }
}
