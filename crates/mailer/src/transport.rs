//! Where emails go: SMTP when `ONCEHOOK_SMTP_URL` is set (a local relay
//! over plain `smtp://`, or a hosted provider with STARTTLS or implicit TLS
//! and a login; lettre speaks the protocol on the pooled sessions of
//! [`crate::smtp`]), else `.eml` files in `ONCEHOOK_MAIL_DIR`. Every email carries a stable `Message-ID` derived
//! from its outbox id, so a resend after a crash is recognisably the same.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lettre::Message;
use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use uuid::Uuid;

use oncehook_common::config::MailConfig;

use crate::smtp::SmtpPool;
use crate::tls::TlsSetupError;

/// The longest one SMTP send may take, connecting included.
pub const SMTP_TIMEOUT: Duration = Duration::from_secs(10);

/// One email to send.
#[derive(Debug, Clone)]
pub struct Email {
    pub outbox_id: Uuid,
    pub to: String,
    pub subject: String,
    pub body: String,
    /// Its tenant's sender; `None`: `mail.from`.
    pub from: Option<String>,
}

/// Why sending failed; `permanent` ones are not retried.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("invalid address {addr:?}: {reason}")]
    Address { addr: String, reason: String },
    #[error("could not build the message: {0}")]
    Build(String),
    #[error("SMTP: {message}")]
    Smtp { message: String, permanent: bool },
    #[error("writing {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl SendError {
    pub fn is_permanent(&self) -> bool {
        match self {
            SendError::Address { .. } | SendError::Build(_) => true,
            SendError::Smtp { permanent, .. } => *permanent,
            SendError::File { .. } => false,
        }
    }
}

/// The delivery mechanism could not be set up (a bad `ca_file`).
#[derive(Debug, thiserror::Error)]
#[error("SMTP server {server}: {source}")]
pub struct TransportConfigError {
    /// `host:port` only: no part of the URL that could hold a secret.
    server: String,
    source: TlsSetupError,
}

/// The configured delivery mechanism.
pub enum Transport {
    Smtp(Box<SmtpPool>),
    Files(PathBuf),
}

impl Transport {
    /// SMTP if `[mail]` names a server (keeping up to `concurrency`
    /// sessions open for reuse: one per concurrent send), else files under
    /// `dir`.
    pub fn from_config(mail: &MailConfig) -> Result<Self, TransportConfigError> {
        let Some(smtp) = &mail.smtp else {
            return Ok(Transport::Files(mail.dir.clone()));
        };
        let pool =
            SmtpPool::new(smtp, SMTP_TIMEOUT, usize::from(mail.concurrency)).map_err(|source| {
                TransportConfigError {
                    server: smtp.address(),
                    source,
                }
            })?;
        Ok(Transport::Smtp(Box::new(pool)))
    }

    /// A file transport into `dir` (tests).
    pub fn files(dir: PathBuf) -> Self {
        Transport::Files(dir)
    }

    pub fn describe(&self) -> String {
        match self {
            Transport::Smtp(pool) => pool.describe(),
            Transport::Files(dir) => format!("files in {}", dir.display()),
        }
    }

    /// Closes the SMTP sessions kept open (at shutdown).
    pub async fn close(&self) {
        if let Transport::Smtp(pool) = self {
            pool.close().await;
        }
    }

    pub async fn send(&self, from: &str, email: &Email) -> Result<(), SendError> {
        let message = build(from, email)?;
        match self {
            Transport::Smtp(pool) => pool
                .send(message.envelope(), &message.formatted())
                .await
                .map_err(|e| SendError::Smtp {
                    permanent: e.is_permanent(),
                    message: e.to_string(),
                }),
            Transport::Files(dir) => write_file(dir, email.outbox_id, &message.formatted()).await,
        }
    }
}

/// The stable Message-ID of an outbox row.
pub fn message_id(outbox_id: Uuid) -> String {
    format!("<{outbox_id}@oncehook>")
}

fn build(from: &str, email: &Email) -> Result<Message, SendError> {
    let from: Mailbox =
        from.parse()
            .map_err(|e: lettre::address::AddressError| SendError::Address {
                addr: from.to_owned(),
                reason: e.to_string(),
            })?;
    let to: Mailbox = email
        .to
        .parse()
        .map_err(|e: lettre::address::AddressError| SendError::Address {
            addr: email.to.clone(),
            reason: e.to_string(),
        })?;
    Message::builder()
        .from(from)
        .to(to)
        .subject(email.subject.clone())
        .message_id(Some(message_id(email.outbox_id)))
        .header(ContentType::TEXT_PLAIN)
        .body(email.body.clone())
        .map_err(|e| SendError::Build(e.to_string()))
}

/// Writes `<nanos>-<outbox id>.eml` atomically (temp file + rename). Each
/// send is its own file, so a double send would be visible.
async fn write_file(dir: &PathBuf, outbox_id: Uuid, bytes: &[u8]) -> Result<(), SendError> {
    let io = |path: PathBuf| move |source| SendError::File { path, source };
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(io(dir.clone()))?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{nanos}-{outbox_id}.eml");
    let tmp = dir.join(format!(".{name}.tmp"));
    let path = dir.join(name);
    tokio::fs::write(&tmp, bytes)
        .await
        .map_err(io(tmp.clone()))?;
    tokio::fs::rename(&tmp, &path)
        .await
        .map_err(io(path.clone()))?;
    Ok(())
}
