//! A minimal HTTP listener for the worker and the mailer: `/metrics`
//! (Prometheus text), `/healthz` (process alive) and `/readyz` (connected to
//! what it needs). Ingest serves the same paths from actix-web instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::shutdown::Shutdown;

/// Readiness flag flipped by the session loop as connections come and go.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Binds `addr` and serves until shutdown. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    ready: Readiness,
    shutdown: Shutdown,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = shutdown.wait() => return,
            };
            let Ok((mut stream, _)) = accepted else {
                continue;
            };
            let metrics = metrics.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                    .await
                {
                    Ok(Ok(n)) => n,
                    _ => return,
                };
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let (status, content_type, body) = match path {
                    "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
                    "/healthz" => (
                        "200 OK",
                        "application/json",
                        "{\"status\":\"ok\"}".to_owned(),
                    ),
                    "/readyz" if ready.get() => (
                        "200 OK",
                        "application/json",
                        "{\"status\":\"ready\"}".to_owned(),
                    ),
                    "/readyz" => (
                        "503 Service Unavailable",
                        "application/json",
                        "{\"status\":\"not_ready\"}".to_owned(),
                    ),
                    _ => (
                        "404 Not Found",
                        "application/json",
                        "{\"error\":\"not_found\"}".to_owned(),
                    ),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Ok(local)
}
