//! A real SMTP submission listener with TLS and a login, as a hosted email
//! provider runs one: `STARTTLS` on a plain port (587-style) or TLS from
//! the first byte (465-style), `AUTH PLAIN` / `AUTH LOGIN` offered only
//! once the session is encrypted, `MAIL` refused before a login. Its
//! certificate is made at run time, signed by a throw-away CA whose PEM is
//! written to the test's folder (the mailer's `ca_file`).
//!
//! The password it accepts can be changed while it runs (a provider-side
//! fix after a bad key), and it counts logins, refused logins and any
//! attempt to log in over the plain connection.
//!
//! It speaks the plain listener's dialogue (`smtp::dialogue`), extended.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, ServerConfig};

use crate::smtp::{Extensions, Step, dialogue, read_line};

/// How the listener protects its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkTls {
    /// Plain greeting, `STARTTLS` offered (submission on 587).
    StartTls,
    /// TLS from the first byte (465).
    Implicit,
    /// A plain listener that offers no `STARTTLS` (a misconfigured relay).
    NoStartTls,
}

#[derive(Default)]
struct State {
    password: Mutex<String>,
    user: String,
    messages: Mutex<Vec<String>>,
    logins: AtomicUsize,
    refused_logins: AtomicUsize,
    plaintext_logins: AtomicUsize,
}

/// The listener and what it saw.
pub struct SecureSmtpSink {
    pub port: u16,
    pub mode: SinkTls,
    /// The CA that signed the listener's certificate (PEM).
    pub ca_file: PathBuf,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl SecureSmtpSink {
    /// Listens on a free port of 127.0.0.1, accepting `user`/`password`.
    pub async fn start(mode: SinkTls, dir: &Path, user: &str, password: &str) -> SecureSmtpSink {
        let (config, ca_pem) = server_config();
        let ca_file = dir.join(format!("smtp-ca-{}.pem", uuid::Uuid::new_v4()));
        std::fs::write(&ca_file, ca_pem).expect("write the test CA");
        let state = Arc::new(State {
            password: Mutex::new(password.to_owned()),
            user: user.to_owned(),
            ..State::default()
        });
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the TLS SMTP listener");
        let port = listener.local_addr().expect("local addr").port();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (state, acceptor) = (shared.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let _ = serve(tcp, mode, &acceptor, &state).await;
                });
            }
        });
        SecureSmtpSink {
            port,
            mode,
            ca_file,
            state,
            task,
        }
    }

    /// The URL the mailer is given (without a login).
    pub fn url(&self) -> String {
        match self.mode {
            SinkTls::Implicit => format!("smtps://127.0.0.1:{}", self.port),
            SinkTls::StartTls | SinkTls::NoStartTls => {
                format!("smtp://127.0.0.1:{}?tls=starttls", self.port)
            }
        }
    }

    /// From now on, this password is the right one.
    pub fn set_password(&self, password: &str) {
        if let Ok(mut p) = self.state.password.lock() {
            *p = password.to_owned();
        }
    }

    pub fn messages(&self) -> Vec<String> {
        self.state
            .messages
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Logins accepted.
    pub fn logins(&self) -> usize {
        self.state.logins.load(Ordering::Relaxed)
    }

    /// Logins refused for a wrong user or password.
    pub fn refused_logins(&self) -> usize {
        self.state.refused_logins.load(Ordering::Relaxed)
    }

    /// `AUTH` attempted before the session was encrypted.
    pub fn plaintext_logins(&self) -> usize {
        self.state.plaintext_logins.load(Ordering::Relaxed)
    }
}

impl Drop for SecureSmtpSink {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.ca_file);
    }
}

/// A CA and a certificate for 127.0.0.1 and localhost signed by it.
fn server_config() -> (ServerConfig, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "oncehook test CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("server key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("server params");
    let cert = params.signed_by(&key, &issuer).expect("server certificate");
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .expect("server TLS config");
    (config, ca_cert.pem())
}

async fn serve(
    tcp: tokio::net::TcpStream,
    mode: SinkTls,
    acceptor: &TlsAcceptor,
    state: &State,
) -> std::io::Result<()> {
    match mode {
        SinkTls::Implicit => {
            let tls = acceptor.accept(tcp).await?;
            secure_dialogue(tls, state, true, false, true).await?;
        }
        SinkTls::StartTls | SinkTls::NoStartTls => {
            let offer = mode == SinkTls::StartTls;
            if let Some(plain) = secure_dialogue(tcp, state, false, offer, true).await? {
                let tls = acceptor.accept(plain).await?;
                secure_dialogue(tls, state, true, false, false).await?;
            }
        }
    }
    Ok(())
}

/// What a session adds to the plain dialogue: `STARTTLS` offered on a
/// plain connection that may take it, `AUTH` only once encrypted, `MAIL`
/// refused before a login.
struct SecureSession<'a> {
    state: &'a State,
    encrypted: bool,
    offer_starttls: bool,
    logged_in: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Extensions<S> for SecureSession<'_> {
    fn capabilities(&self) -> Vec<&'static str> {
        let mut caps = Vec::new();
        if self.offer_starttls && !self.encrypted {
            caps.push("STARTTLS");
        }
        if self.encrypted {
            caps.push("AUTH PLAIN LOGIN");
        }
        caps
    }

    async fn command(
        &mut self,
        io: &mut BufReader<S>,
        line: &str,
        upper: &str,
    ) -> std::io::Result<Step> {
        if upper.starts_with("STARTTLS") && self.offer_starttls && !self.encrypted {
            io.get_mut().write_all(b"220 go ahead\r\n").await?;
            return Ok(Step::StartTls);
        }
        if upper.starts_with("AUTH") {
            self.login(io, line).await?;
        } else if upper.starts_with("MAIL") && !self.logged_in {
            io.get_mut()
                .write_all(b"530 5.7.0 authentication required\r\n")
                .await?;
        } else {
            return Ok(Step::Unhandled);
        }
        Ok(Step::Answered)
    }

    async fn accept(&mut self, message: String) {
        if let Ok(mut m) = self.state.messages.lock() {
            m.push(message);
        }
    }
}

impl SecureSession<'_> {
    /// Answers an `AUTH`: refused before encryption (and counted), else
    /// the login checked against the current password.
    async fn login<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut BufReader<S>,
        line: &str,
    ) -> std::io::Result<()> {
        let state = self.state;
        if !self.encrypted {
            state.plaintext_logins.fetch_add(1, Ordering::Relaxed);
            return io
                .get_mut()
                .write_all(b"538 5.7.11 encryption required\r\n")
                .await;
        }
        let (user, password) = read_login(io, line).await?;
        let right = state.password.lock().map(|p| p.clone()).unwrap_or_default();
        if user == state.user && password == right {
            self.logged_in = true;
            state.logins.fetch_add(1, Ordering::Relaxed);
            io.get_mut().write_all(b"235 2.7.0 accepted\r\n").await
        } else {
            state.refused_logins.fetch_add(1, Ordering::Relaxed);
            io.get_mut()
                .write_all(b"535 5.7.8 authentication credentials invalid\r\n")
                .await
        }
    }
}

/// One dialogue of the listener on `stream` (see [`dialogue`]).
async fn secure_dialogue<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    state: &State,
    encrypted: bool,
    offer_starttls: bool,
    greet: bool,
) -> std::io::Result<Option<S>> {
    let mut session = SecureSession {
        state,
        encrypted,
        offer_starttls,
        logged_in: false,
    };
    dialogue(stream, "oncehook-tls-sink", greet, &mut session).await
}

/// The user and password of an `AUTH PLAIN` (inline or after `334`) or
/// `AUTH LOGIN` exchange.
async fn read_login<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut BufReader<S>,
    line: &str,
) -> std::io::Result<(String, String)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let decode = |s: &str| {
        b64.decode(s.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default()
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let mechanism = words
        .get(1)
        .map(|m| m.to_ascii_uppercase())
        .unwrap_or_default();
    if mechanism == "LOGIN" {
        io.get_mut().write_all(b"334 VXNlcm5hbWU6\r\n").await?;
        let user = decode(&read_line(io).await?.unwrap_or_default());
        io.get_mut().write_all(b"334 UGFzc3dvcmQ6\r\n").await?;
        let password = decode(&read_line(io).await?.unwrap_or_default());
        return Ok((user, password));
    }
    let initial = match words.get(2) {
        Some(inline) => (*inline).to_owned(),
        None => {
            io.get_mut().write_all(b"334 \r\n").await?;
            read_line(io).await?.unwrap_or_default()
        }
    };
    let plain = decode(&initial);
    let mut parts = plain.split('\0').skip(1);
    let user = parts.next().unwrap_or_default().to_owned();
    let password = parts.next().unwrap_or_default().to_owned();
    Ok((user, password))
}
