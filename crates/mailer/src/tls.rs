//! TLS for the SMTP sessions: which certificate authorities are trusted
//! (the public roots, plus `[mail] ca_file` for a private relay) and the
//! two ways a session is encrypted — `STARTTLS` after the greeting
//! (lettre upgrades the session, given [`TlsTrust::starttls`]) or TLS from
//! the first byte (`smtps://`, [`TlsTrust::connect`]).
//!
//! Both are built once at start-up from the same roots, so the two modes
//! trust exactly the same servers. The implicit mode wraps the pool's own
//! TCP socket (with `TCP_NODELAY`, see [`crate::smtp`]) instead of letting
//! lettre open one, which it would open without.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use lettre::transport::smtp::client::{AsyncTokioStream, Certificate, TlsParameters};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// Why TLS could not be set up at start-up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("reading the SMTP CA file {path} (mail.ca_file): {source}")]
    ReadCa {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the SMTP CA file {path} (mail.ca_file) holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("the SMTP CA file {path} (mail.ca_file): {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{host:?} is not a name TLS can check a certificate against")]
    ServerName { host: String },
    #[error("setting up TLS: {0}")]
    Rustls(String),
}

/// The trust both TLS modes use, for one server name.
#[derive(Clone)]
pub struct TlsTrust {
    starttls: TlsParameters,
    connector: TlsConnector,
    server_name: ServerName<'static>,
}

impl TlsTrust {
    /// Trust for `host`: the public roots plus every certificate in `ca_file`.
    pub fn new(host: &str, ca_file: Option<&Path>) -> Result<TlsTrust, TlsSetupError> {
        let extra = match ca_file {
            Some(path) => read_ca(path)?,
            None => Vec::new(),
        };
        let mut starttls = TlsParameters::builder(host.to_owned());
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for der in &extra {
            let bad = |reason: String| TlsSetupError::BadCertificate {
                path: ca_file.map(Path::to_path_buf).unwrap_or_default(),
                reason,
            };
            roots.add(der.clone()).map_err(|e| bad(e.to_string()))?;
            let cert = Certificate::from_der(der.to_vec()).map_err(|e| bad(e.to_string()))?;
            starttls = starttls.add_root_certificate(cert);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Rustls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_name =
            ServerName::try_from(host.to_owned()).map_err(|_| TlsSetupError::ServerName {
                host: host.to_owned(),
            })?;
        Ok(TlsTrust {
            starttls: starttls
                .build_rustls()
                .map_err(|e| TlsSetupError::Rustls(e.to_string()))?,
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
        })
    }

    /// What lettre's `STARTTLS` upgrade checks the server against.
    pub fn starttls(&self) -> TlsParameters {
        self.starttls.clone()
    }

    /// The TLS handshake on a fresh connection (`smtps://`).
    pub async fn connect(&self, tcp: TcpStream) -> std::io::Result<TlsSocket> {
        let stream = self
            .connector
            .connect(self.server_name.clone(), tcp)
            .await?;
        Ok(TlsSocket(stream))
    }
}

fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let pem = std::fs::read(path).map_err(|source| TlsSetupError::ReadCa {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsSetupError::BadCertificate {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// An encrypted SMTP session's socket, handed to lettre as its stream.
pub struct TlsSocket(TlsStream<TcpStream>);

impl std::fmt::Debug for TlsSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsSocket")
    }
}

impl AsyncRead for TlsSocket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsSocket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl AsyncTokioStream for TlsSocket {
    fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.0.get_ref().0.peer_addr()
    }
}
