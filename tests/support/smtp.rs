//! A real SMTP listener for tests: speaks enough SMTP for lettre (EHLO, MAIL,
//! RCPT, DATA, RSET, NOOP, QUIT), keeps every accepted message, and can be
//! stopped and restarted on the same port to simulate an outage. It can
//! take its time to accept a message (like a server that scans it first:
//! the delay is before the answer to the end of `DATA`), and counts the
//! connections it accepted and the most sessions it had open at once.
//!
//! Its dialogue ([`dialogue`]) is the one `smtp_tls` extends with
//! `STARTTLS` and `AUTH`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
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

/// What a plain session does with a message: holds its answer for the
/// listener's delay, keeps it and counts it.
struct PlainSession<'a> {
    messages: &'a Mutex<Vec<String>>,
    counters: &'a Counters,
    answer_delay: Duration,
}

impl<S> Extensions<S> for PlainSession<'_> {
    async fn accept(&mut self, message: String) {
        if !self.answer_delay.is_zero() {
            tokio::time::sleep(self.answer_delay).await;
        }
        if let Ok(mut m) = self.messages.lock() {
            m.push(message);
        }
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
    }
}

async fn session(
    stream: tokio::net::TcpStream,
    messages: &Mutex<Vec<String>>,
    counters: &Counters,
    answer_delay: Duration,
) -> std::io::Result<()> {
    let mut plain = PlainSession {
        messages,
        counters,
        answer_delay,
    };
    dialogue(stream, "oncehook-test-sink", true, &mut plain).await?;
    Ok(())
}

/// What a session of one of the test listeners adds to [`dialogue`]: more
/// capabilities, commands of its own (`STARTTLS`, `AUTH`, refusals), and
/// what it does with a message.
pub(crate) trait Extensions<S> {
    /// Capabilities `EHLO` lists after the name and `8BITMIME`.
    fn capabilities(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Answers `line` (`upper`: in capitals) if it is a command of its own.
    async fn command(
        &mut self,
        _io: &mut BufReader<S>,
        _line: &str,
        _upper: &str,
    ) -> std::io::Result<Step> {
        Ok(Step::Unhandled)
    }

    /// A message the client sent (dot-unstuffed), before it is answered.
    async fn accept(&mut self, message: String);
}

/// What [`Extensions::command`] made of a line.
pub(crate) enum Step {
    /// Not one of its commands: the dialogue answers it.
    Unhandled,
    /// Answered.
    Answered,
    /// `STARTTLS` accepted: the dialogue hands the stream back.
    StartTls,
}

/// One SMTP dialogue on `stream`, greeting as `name` when `greet`: `EHLO`,
/// `DATA`, `QUIT`, `250 ok` to anything else, and what `ext` adds. Returns
/// the stream when the client said `STARTTLS` (to go on encrypted), `None`
/// when the dialogue is over.
pub(crate) async fn dialogue<S, E>(
    stream: S,
    name: &str,
    greet: bool,
    ext: &mut E,
) -> std::io::Result<Option<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    E: Extensions<S>,
{
    let mut io = BufReader::new(stream);
    if greet {
        io.get_mut()
            .write_all(format!("220 {name} ESMTP\r\n").as_bytes())
            .await?;
    }
    while let Some(line) = read_line(&mut io).await? {
        let upper = line.to_ascii_uppercase();
        match ext.command(&mut io, &line, &upper).await? {
            Step::Unhandled => {}
            Step::Answered => continue,
            Step::StartTls => return Ok(Some(io.into_inner())),
        }
        if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            let caps: Vec<&str> = [name, "8BITMIME"]
                .into_iter()
                .chain(ext.capabilities())
                .collect();
            let last = caps.len() - 1;
            let mut text = String::new();
            for (i, c) in caps.iter().enumerate() {
                text.push_str(&format!("250{}{c}\r\n", if i == last { ' ' } else { '-' }));
            }
            io.get_mut().write_all(text.as_bytes()).await?;
        } else if upper.starts_with("DATA") {
            io.get_mut()
                .write_all(b"354 end with <CRLF>.<CRLF>\r\n")
                .await?;
            let mut data = String::new();
            while let Some(l) = read_line(&mut io).await? {
                if l == "." {
                    break;
                }
                data.push_str(l.strip_prefix('.').unwrap_or(&l));
                data.push('\n');
            }
            ext.accept(data).await;
            io.get_mut().write_all(b"250 queued\r\n").await?;
        } else if upper.starts_with("QUIT") {
            io.get_mut().write_all(b"221 bye\r\n").await?;
            return Ok(None);
        } else {
            io.get_mut().write_all(b"250 ok\r\n").await?;
        }
    }
    Ok(None)
}

/// The next line without its line end; `None` at the end of the stream.
pub(crate) async fn read_line<S: AsyncRead + Unpin>(
    io: &mut BufReader<S>,
) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if io.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned()))
}
