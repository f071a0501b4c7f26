//! oncehook-mailer as a library: `transport` (SMTP or `.eml` files),
//! `outbox` (claim / mark sent / mark failed, never holding a lock across
//! the send) and `service` (the consuming session and the retry policy).

pub mod outbox;
pub mod service;
pub mod transport;
