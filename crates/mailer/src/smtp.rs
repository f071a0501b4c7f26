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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lettre::address::Envelope;
use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::extension::ClientId;
use tokio::net::TcpStream;

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
}

impl SmtpError {
    /// A refusal retrying will not change (5xx).
    pub fn is_permanent(&self) -> bool {
        matches!(self, SmtpError::Protocol(e) if e.is_permanent())
    }
}

struct Parked {
    conn: AsyncSmtpConnection,
    since: Instant,
}

/// Open SMTP sessions to one server, reused across sends.
pub struct SmtpPool {
    host: String,
    port: u16,
    timeout: Duration,
    hello: ClientId,
    /// At most this many idle sessions are kept.
    max_idle: usize,
    idle: Mutex<Vec<Parked>>,
}

impl SmtpPool {
    /// A pool for `host:port`, keeping up to `max_idle` sessions open;
    /// each send (connecting included) must finish within `timeout`.
    pub fn new(host: &str, port: u16, timeout: Duration, max_idle: usize) -> SmtpPool {
        SmtpPool {
            host: host.to_owned(),
            port,
            timeout,
            hello: ClientId::default(),
            max_idle: max_idle.max(1),
            idle: Mutex::new(Vec::new()),
        }
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

    async fn connect(&self) -> Result<AsyncSmtpConnection, SmtpError> {
        let addr = format!("{}:{}", self.host, self.port);
        let stream = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|source| SmtpError::Connect {
                addr: addr.clone(),
                source,
            })?;
        stream
            .set_nodelay(true)
            .map_err(|source| SmtpError::Connect { addr, source })?;
        let conn =
            AsyncSmtpConnection::connect_with_transport(Box::new(stream), &self.hello).await?;
        metrics::counter!("oncehook_mailer_smtp_connections_total").increment(1);
        Ok(conn)
    }
}
