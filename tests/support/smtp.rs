//! A real SMTP listener for tests: speaks enough SMTP for lettre (EHLO, MAIL,
//! RCPT, DATA, RSET, NOOP, QUIT), keeps every accepted message, and can be
//! stopped and restarted on the same port to simulate an outage. It can
//! take its time to accept a message (like a server that scans it first:
//! the delay is before the answer to the end of `DATA`), and counts the
//! connections it accepted and the most sessions it had open at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The listener and what it received.
pub struct SmtpSink {
    pub port: u16,
    messages: Arc<Mutex<Vec<String>>>,
    counters: Arc<Counters>,
    answer_delay: Duration,
    task: Option<JoinHandle<()>>,
    /// Open sessions, closed by [`SmtpSink::stop`] like a server going down.
    sessions: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicUsize,
    connections: AtomicUsize,
    open: AtomicUsize,
    peak_open: AtomicUsize,
}

impl SmtpSink {
    pub async fn start() -> SmtpSink {
        SmtpSink::start_with_delay(Duration::ZERO).await
    }

    /// A listener that waits `answer_delay` before accepting each message.
    pub async fn start_with_delay(answer_delay: Duration) -> SmtpSink {
        let mut sink = SmtpSink {
            port: crate::free_port(),
            messages: Arc::default(),
            counters: Arc::default(),
            answer_delay,
            task: None,
            sessions: Arc::default(),
        };
        sink.resume().await;
        sink
    }

    /// How many messages were accepted (cheaper than [`SmtpSink::messages`]).
    pub fn accepted(&self) -> usize {
        self.counters.accepted.load(Ordering::Relaxed)
    }

    /// How many connections were accepted.
    pub fn connections(&self) -> usize {
        self.counters.connections.load(Ordering::Relaxed)
    }

    /// The most sessions that were open at the same time.
    pub fn peak_sessions(&self) -> usize {
        self.counters.peak_open.load(Ordering::Relaxed)
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Messages received so far (raw DATA, dot-unstuffed).
    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Stops listening and closes every open session (connections are
    /// refused until [`SmtpSink::resume`]), as a server going down does.
    pub fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if let Ok(mut sessions) = self.sessions.lock() {
            for s in sessions.drain(..) {
                s.abort();
            }
        }
    }

    /// Listens again on the same port.
    pub async fn resume(&mut self) {
        self.stop();
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        };
        let messages = self.messages.clone();
        let counters = self.counters.clone();
        let delay = self.answer_delay;
        let sessions = self.sessions.clone();
        self.task = Some(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let messages = messages.clone();
                let counters = counters.clone();
                counters.connections.fetch_add(1, Ordering::Relaxed);
                let open = counters.open.fetch_add(1, Ordering::Relaxed) + 1;
                counters.peak_open.fetch_max(open, Ordering::Relaxed);
                let handle = tokio::spawn(async move {
                    // Counted closed however the session ends (even aborted).
                    let _open = OpenSession(counters.clone());
                    let _ = session(stream, &messages, &counters, delay).await;
                });
                if let Ok(mut sessions) = sessions.lock() {
                    sessions.retain(|s| !s.is_finished());
                    sessions.push(handle);
                }
            }
        }));
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Decrements the count of open sessions when dropped.
struct OpenSession(Arc<Counters>);

impl Drop for OpenSession {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn session(
    stream: tokio::net::TcpStream,
    messages: &Mutex<Vec<String>>,
    counters: &Counters,
    answer_delay: Duration,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 oncehook-test-sink ESMTP\r\n").await?;
    while let Some(line) = lines.next_line().await? {
        let upper = line.to_ascii_uppercase();
        if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            write
                .write_all(b"250-oncehook-test-sink\r\n250 8BITMIME\r\n")
                .await?;
        } else if upper.starts_with("DATA") {
            write.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
            let mut data = String::new();
            while let Some(l) = lines.next_line().await? {
                if l == "." {
                    break;
                }
                data.push_str(l.strip_prefix('.').unwrap_or(&l));
                data.push('\n');
            }
            if !answer_delay.is_zero() {
                tokio::time::sleep(answer_delay).await;
            }
            if let Ok(mut m) = messages.lock() {
                m.push(data);
            }
            counters.accepted.fetch_add(1, Ordering::Relaxed);
            write.write_all(b"250 queued\r\n").await?;
        } else if upper.starts_with("QUIT") {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else {
            write.write_all(b"250 ok\r\n").await?;
        }
    }
    Ok(())
}
