//! Counting the statements a client sends Postgres: a TCP proxy on
//! 127.0.0.1:0 in front of the real server that reads the frontend side of
//! the wire protocol and counts every statement executed — `Execute` in the
//! extended protocol (sqlx's prepared statements) and `Query` in the simple
//! one (`BEGIN`, `COMMIT`) — and every `COMMIT`. Point a pool (or a worker
//! binary's `ONCEHOOK_DATABASE_URL`) at [`StatementCounter::url`]; the bytes
//! pass through unchanged. TLS is refused (the server's answer to an
//! `SSLRequest` is passed on), so every message is readable. It also keeps
//! the text of every statement of every committed transaction
//! ([`StatementCounter::transactions`]), so a test can hold a ceiling's
//! script to the statements a binary really sends.
//!
//! The proxy must not add latency of its own: both sockets have
//! `TCP_NODELAY` (as the Postgres clients and server set it), and each
//! message goes on in one write. Written in pieces without it, a message's
//! tail waits for the ACK of its head — Nagle's algorithm against the
//! peer's delayed ACK, about 40 ms per message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy has counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Statements executed (`Execute` + simple `Query` messages).
    pub statements: u64,
    /// Simple queries that were `COMMIT`.
    pub commits: u64,
}

/// The proxy; see the module documentation.
pub struct StatementCounter {
    url: String,
    statements: Arc<AtomicU64>,
    commits: Arc<AtomicU64>,
    transactions: Committed,
    task: tokio::task::JoinHandle<()>,
}

/// The statements of each committed transaction, in commit order.
type Committed = Arc<Mutex<Vec<Vec<String>>>>;

impl StatementCounter {
    /// Starts a proxy to the Postgres `database_url` points at (a
    /// `postgres://user@host:port/db` URL); its own URL has the proxy's port.
    pub async fn start(database_url: &str) -> StatementCounter {
        let upstream = host_port(database_url).expect("a postgres://user@host:port/db URL");
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the statement counter");
        let port = listener.local_addr().expect("local address").port();
        let url = database_url.replacen(&upstream, &format!("127.0.0.1:{port}"), 1);
        let statements = Arc::new(AtomicU64::new(0));
        let commits = Arc::new(AtomicU64::new(0));
        let transactions = Committed::default();
        let (s, c, t) = (statements.clone(), commits.clone(), transactions.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                if client.set_nodelay(true).is_err() || server.set_nodelay(true).is_err() {
                    continue;
                }
                tokio::spawn(relay(client, server, s.clone(), c.clone(), t.clone()));
            }
        });
        StatementCounter {
            url,
            statements,
            commits,
            transactions,
            task,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The statements (SQL text, as sent) of every transaction committed
    /// through the proxy so far, `BEGIN` and `COMMIT` left out (what a
    /// `BEGIN` message sets with it, `SET LOCAL …`, is kept).
    pub fn transactions(&self) -> Vec<Vec<String>> {
        self.transactions
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    pub fn counted(&self) -> Counted {
        Counted {
            statements: self.statements.load(Ordering::SeqCst),
            commits: self.commits.load(Ordering::SeqCst),
        }
    }
}

impl Drop for StatementCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn host_port(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split('/').next()?;
    Some(authority.rsplit('@').next()?.to_owned())
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    statements: Arc<AtomicU64>,
    commits: Arc<AtomicU64>,
    transactions: Committed,
) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let down = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
    });
    let counters = Counters {
        statements: &statements,
        commits: &commits,
        transactions: &transactions,
    };
    let _ = read_frontend(&mut client_rx, &mut server_tx, counters).await;
    down.abort();
}

/// Where one connection's relay counts.
struct Counters<'a> {
    statements: &'a AtomicU64,
    commits: &'a AtomicU64,
    transactions: &'a Mutex<Vec<Vec<String>>>,
}

/// One connection's statements: the prepared ones by name, which each
/// portal runs, and the open transaction's texts.
#[derive(Default)]
struct Texts {
    prepared: HashMap<String, String>,
    portals: HashMap<String, String>,
    open: Vec<String>,
}

/// The NUL-terminated strings at the start of a message body.
fn cstrings(body: &[u8], n: usize) -> Vec<String> {
    body.split(|b| *b == 0)
        .take(n)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

impl Texts {
    /// Notes a frontend message; a `COMMIT` hands the transaction's texts
    /// to `committed`.
    fn note(&mut self, kind: u8, body: &[u8], committed: &Mutex<Vec<Vec<String>>>) {
        match kind {
            b'P' => {
                if let [name, query] = &cstrings(body, 2)[..] {
                    self.prepared.insert(name.clone(), query.clone());
                }
            }
            b'B' => {
                if let [portal, name] = &cstrings(body, 2)[..] {
                    let text = self.prepared.get(name).cloned().unwrap_or_default();
                    self.portals.insert(portal.clone(), text);
                }
            }
            b'E' => {
                if let Some(portal) = cstrings(body, 1).first() {
                    let text = self.portals.get(portal).cloned().unwrap_or_default();
                    self.open.push(text);
                }
            }
            b'Q' => {
                let text = cstrings(body, 1).concat();
                let word = text.trim_start().to_ascii_uppercase();
                if word.starts_with("BEGIN") {
                    self.open.clear();
                    // What the same message sets for the transaction
                    // (`BEGIN; SET LOCAL …`) is one of its statements.
                    if let Some((_, rest)) = text.split_once(';') {
                        let rest = rest.trim().trim_end_matches(';').trim();
                        if !rest.is_empty() {
                            self.open.push(rest.to_owned());
                        }
                    }
                } else if word.starts_with("COMMIT") {
                    if let Ok(mut all) = committed.lock() {
                        all.push(std::mem::take(&mut self.open));
                    }
                } else if word.starts_with("ROLLBACK") {
                    self.open.clear();
                } else {
                    self.open.push(text);
                }
            }
            _ => {}
        }
    }
}

/// Passes the client's messages on, counting them.
async fn read_frontend(
    rx: &mut tokio::net::tcp::OwnedReadHalf,
    tx: &mut tokio::net::tcp::OwnedWriteHalf,
    counters: Counters<'_>,
) -> std::io::Result<()> {
    let Counters {
        statements,
        commits,
        transactions,
    } = counters;
    let mut texts = Texts::default();
    // Startup packets carry no type byte: an SSLRequest (answered `N` by
    // a server without TLS, or refused by the client's settings), then the
    // startup message itself.
    let mut message = Vec::new();
    loop {
        let len = rx.read_u32().await?;
        let body = read_message(rx, &mut message, None, len).await?;
        let code = body
            .get(..4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        tx.write_all(&message).await?;
        // 80877103: SSLRequest; 80877104: GSSENCRequest.
        if !matches!(code, Some(80_877_103 | 80_877_104)) {
            break;
        }
    }
    loop {
        let kind = rx.read_u8().await?;
        let len = rx.read_u32().await?;
        let body = read_message(rx, &mut message, Some(kind), len).await?;
        texts.note(kind, body, transactions);
        match kind {
            b'E' => {
                statements.fetch_add(1, Ordering::SeqCst);
            }
            b'Q' => {
                statements.fetch_add(1, Ordering::SeqCst);
                let text = String::from_utf8_lossy(body).to_ascii_uppercase();
                if text.trim_start().starts_with("COMMIT") {
                    commits.fetch_add(1, Ordering::SeqCst);
                }
            }
            _ => {}
        }
        tx.write_all(&message).await?;
    }
}

/// Reads the body of a message whose type byte (if any) and length were
/// read, into `message` whole — type, length, body — ready for one write;
/// returns the body.
async fn read_message<'a>(
    rx: &mut tokio::net::tcp::OwnedReadHalf,
    message: &'a mut Vec<u8>,
    kind: Option<u8>,
    len: u32,
) -> std::io::Result<&'a [u8]> {
    message.clear();
    message.extend(kind);
    message.extend_from_slice(&len.to_be_bytes());
    let head = message.len();
    message.resize(head + (len as usize).saturating_sub(4), 0);
    rx.read_exact(&mut message[head..]).await?;
    Ok(&message[head..])
}
