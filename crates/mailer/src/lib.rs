//! oncehook-mailer as a library: `transport` (SMTP or `.eml` files),
//! `smtp` (pooled SMTP sessions, reused across sends), `tls` (the trust
//! and the two ways a session is encrypted),
//! `outbox` (lease / mark sent / mark failed, never holding a lock across
//! the send) and `service` (the handler: lease, send with retries, the verdict that
//! `oncehook_common::consume` settles).

pub mod outbox;
pub mod service;
pub mod smtp;
pub mod tls;
pub mod transport;
