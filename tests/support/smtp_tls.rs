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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, ServerConfig};

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
            dialogue(tls, state, true, false, true).await?;
        }
        SinkTls::StartTls | SinkTls::NoStartTls => {
            let offer = mode == SinkTls::StartTls;
            if let Some(plain) = dialogue(tcp, state, false, offer, true).await? {
                let tls = acceptor.accept(plain).await?;
                dialogue(tls, state, true, false, false).await?;
            }
        }
    }
    Ok(())
}

/// One SMTP dialogue on `stream`; returns the stream when the client said
/// `STARTTLS` (to go on encrypted), `None` when it is over.
async fn dialogue<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    state: &State,
    encrypted: bool,
    offer_starttls: bool,
    greet: bool,
) -> std::io::Result<Option<S>> {
    let mut io = BufReader::new(stream);
    if greet {
        io.get_mut()
            .write_all(b"220 oncehook-tls-sink ESMTP\r\n")
            .await?;
    }
    let mut logged_in = false;
    loop {
        let Some(line) = read_line(&mut io).await? else {
            return Ok(None);
        };
        let upper = line.to_ascii_uppercase();
        let out = io.get_mut();
        if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            let mut caps = vec!["oncehook-tls-sink", "8BITMIME"];
            if offer_starttls && !encrypted {
                caps.push("STARTTLS");
            }
            if encrypted {
                caps.push("AUTH PLAIN LOGIN");
            }
            let last = caps.len() - 1;
            let mut text = String::new();
            for (i, c) in caps.iter().enumerate() {
                text.push_str(&format!("250{}{c}\r\n", if i == last { ' ' } else { '-' }));
            }
            out.write_all(text.as_bytes()).await?;
        } else if upper.starts_with("STARTTLS") && offer_starttls && !encrypted {
            out.write_all(b"220 go ahead\r\n").await?;
            return Ok(Some(io.into_inner()));
        } else if upper.starts_with("AUTH") {
            if !encrypted {
                state.plaintext_logins.fetch_add(1, Ordering::Relaxed);
                out.write_all(b"538 5.7.11 encryption required\r\n").await?;
                continue;
            }
            let (user, password) = read_login(&mut io, &line).await?;
            let right = state.password.lock().map(|p| p.clone()).unwrap_or_default();
            if user == state.user && password == right {
                logged_in = true;
                state.logins.fetch_add(1, Ordering::Relaxed);
                io.get_mut().write_all(b"235 2.7.0 accepted\r\n").await?;
            } else {
                state.refused_logins.fetch_add(1, Ordering::Relaxed);
                io.get_mut()
                    .write_all(b"535 5.7.8 authentication credentials invalid\r\n")
                    .await?;
            }
        } else if upper.starts_with("MAIL") && !logged_in {
            out.write_all(b"530 5.7.0 authentication required\r\n")
                .await?;
        } else if upper.starts_with("DATA") {
            out.write_all(b"354 end with <CRLF>.<CRLF>\r\n").await?;
            let mut data = String::new();
            while let Some(l) = read_line(&mut io).await? {
                if l == "." {
                    break;
                }
                data.push_str(l.strip_prefix('.').unwrap_or(&l));
                data.push('\n');
            }
            if let Ok(mut m) = state.messages.lock() {
                m.push(data);
            }
            io.get_mut().write_all(b"250 queued\r\n").await?;
        } else if upper.starts_with("QUIT") {
            out.write_all(b"221 bye\r\n").await?;
            return Ok(None);
        } else {
            out.write_all(b"250 ok\r\n").await?;
        }
    }
}

async fn read_line<S: AsyncRead + Unpin>(io: &mut BufReader<S>) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if io.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned()))
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
