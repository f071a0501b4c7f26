//! The shop's webhook receiver, for the notifier's tests: a real HTTP
//! listener on 127.0.0.1 that verifies every request's Standard Webhooks
//! signature with the `standardwebhooks` crate (as a shop would), records
//! what it received, and answers as the test says — 200 by default, or
//! the next queued answers: a status (500, 410, 429 with `Retry-After`),
//! an answer after a delay, or no answer at all (a hang).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A secret the receivers share with the notifier's configuration.
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How the receiver answers one request.
#[derive(Debug, Clone)]
pub enum Answer {
    Status(u16),
    /// A status with a `Retry-After` in seconds.
    RetryAfter(u16, u64),
    /// 200 after this long.
    Slow(Duration),
    /// Never answers (holds the connection for a minute).
    Hang,
}

/// One request received.
#[derive(Debug, Clone)]
pub struct Received {
    pub webhook_id: String,
    pub timestamp: String,
    pub signature: String,
    /// The body, parsed.
    pub event: Value,
    /// Whether `standardwebhooks` verified it.
    pub verified: bool,
    pub traceparent: Option<String>,
    pub at: Instant,
    /// The status it was answered (`None` while hanging).
    pub answered: Option<u16>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Answer>,
    /// Once the queue is empty: every request gets this.
    default: Option<Answer>,
    received: Vec<Received>,
}

/// A running receiver.
pub struct Receiver {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Starts a receiver verifying with `secret`.
    pub async fn start(secret: &str) -> Receiver {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the receiver");
        let addr = listener.local_addr().expect("receiver address");
        let state = Arc::new(Mutex::new(State::default()));
        let verifier = Arc::new(standardwebhooks::Webhook::new(secret).expect("a whsec_ secret"));
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, state.clone(), verifier.clone()));
                }
            }
        });
        Receiver {
            url: format!("http://{addr}/hooks"),
            state,
            task,
        }
    }

    /// The next requests get these answers, in turn.
    pub fn answer(&self, answers: impl IntoIterator<Item = Answer>) {
        self.lock().queue.extend(answers);
    }

    /// Every request after the queue gets `answer`.
    pub fn always(&self, answer: Answer) {
        self.lock().default = Some(answer);
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// The requests for `webhook_id`.
    pub fn of(&self, webhook_id: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.webhook_id == webhook_id)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn serve(
    stream: TcpStream,
    state: Arc<Mutex<State>>,
    verifier: Arc<standardwebhooks::Webhook>,
) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
        return;
    }
    let mut headers = http::HeaderMap::new();
    let mut length = 0usize;
    loop {
        line.clear();
        if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().unwrap_or(0);
            }
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(name.trim().as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                headers.append(n, v);
            }
        }
    }
    let mut body = vec![0u8; length.min(16 * 1024 * 1024)];
    if reader.read_exact(&mut body).await.is_err() {
        return;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let answer = {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        let answer = s
            .queue
            .pop_front()
            .or_else(|| s.default.clone())
            .unwrap_or(Answer::Status(200));
        s.received.push(Received {
            webhook_id: header("webhook-id").unwrap_or_default(),
            timestamp: header("webhook-timestamp").unwrap_or_default(),
            signature: header("webhook-signature").unwrap_or_default(),
            event: serde_json::from_slice(&body).unwrap_or(Value::Null),
            verified: verifier.verify(&body, &headers).is_ok(),
            traceparent: header("traceparent"),
            at: Instant::now(),
            answered: None,
        });
        answer
    };
    let index = state.lock().map(|s| s.received.len() - 1).unwrap_or(0);
    let (status, extra) = match answer {
        Answer::Status(s) => (s, String::new()),
        Answer::RetryAfter(s, secs) => (s, format!("retry-after: {secs}\r\n")),
        Answer::Slow(d) => {
            tokio::time::sleep(d).await;
            (200, String::new())
        }
        Answer::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            return;
        }
    };
    if let Ok(mut s) = state.lock()
        && let Some(r) = s.received.get_mut(index)
    {
        r.answered = Some(status);
    }
    let text = format!("answer {status}");
    let response = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{text}",
        text.len()
    );
    let mut stream = reader.into_inner();
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
