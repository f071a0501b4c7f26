//! Health and metrics, answered in one place: `/metrics` (Prometheus text),
//! `/healthz` (process alive) and `/readyz` (connected to what it needs).
//! [`answer`] decides every answer; [`serve`] is the small listener on
//! `ONCEHOOK_METRICS_ADDR` that every binary runs (loopback by default, a
//! distinct port per binary). None of this is served on ingest's public
//! port, which keeps only the load balancer's `/healthz`.

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

/// The response to a `GET` of one of the health paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 200, 503 (not ready) or 404 (not a health path).
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

/// The answer to `GET path`, given whether the process is ready.
pub fn answer(path: &str, ready: bool, metrics: &PrometheusHandle) -> Answer {
    let json = |status, body: &str| Answer {
        status,
        content_type: "application/json",
        body: body.to_owned(),
    };
    match path {
        "/metrics" => Answer {
            status: 200,
            content_type: "text/plain; version=0.0.4",
            body: metrics.render(),
        },
        "/healthz" => json(200, r#"{"status":"ok"}"#),
        "/readyz" if ready => json(200, r#"{"status":"ready"}"#),
        "/readyz" => json(503, r#"{"status":"not_ready"}"#),
        _ => json(404, r#"{"error":"not_found"}"#),
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
                let Answer {
                    status,
                    content_type,
                    body,
                } = answer(path, ready.get(), &metrics);
                let status = match status {
                    200 => "200 OK",
                    503 => "503 Service Unavailable",
                    _ => "404 Not Found",
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\nx-content-type-options: nosniff\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
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

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    #[test]
    fn readiness_decides_readyz_only() {
        let metrics = PrometheusBuilder::new().build_recorder().handle();
        assert_eq!(answer("/healthz", false, &metrics).status, 200);
        assert_eq!(answer("/readyz", true, &metrics).status, 200);
        let not_ready = answer("/readyz", false, &metrics);
        assert_eq!(not_ready.status, 503);
        assert_eq!(not_ready.body, r#"{"status":"not_ready"}"#);
        assert_eq!(
            answer("/metrics", false, &metrics).content_type,
            "text/plain; version=0.0.4"
        );
        assert_eq!(answer("/nope", true, &metrics).status, 404);
    }
}
