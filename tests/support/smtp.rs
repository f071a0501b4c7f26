//! A real SMTP listener for tests: speaks enough SMTP for lettre (EHLO, MAIL,
//! RCPT, DATA, RSET, NOOP, QUIT), keeps every accepted message, and can be
//! stopped and restarted on the same port to simulate an outage.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The listener and what it received.
pub struct SmtpSink {
    pub port: u16,
    messages: Arc<Mutex<Vec<String>>>,
    task: Option<JoinHandle<()>>,
}

impl SmtpSink {
    pub async fn start() -> SmtpSink {
        let mut sink = SmtpSink {
            port: crate::free_port(),
            messages: Arc::default(),
            task: None,
        };
        sink.resume().await;
        sink
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Messages received so far (raw DATA, dot-unstuffed).
    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Stops listening (connections are refused until [`SmtpSink::resume`]).
    pub fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
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
        self.task = Some(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let messages = messages.clone();
                tokio::spawn(async move {
                    let _ = session(stream, messages).await;
                });
            }
        }));
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn session(
    stream: tokio::net::TcpStream,
    messages: Arc<Mutex<Vec<String>>>,
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
            if let Ok(mut m) = messages.lock() {
                m.push(data);
            }
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
