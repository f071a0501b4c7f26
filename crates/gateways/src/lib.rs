//! Payment-gateway webhook schemes: signature verification and payload
//! normalisation. Pure code (no I/O, no clock): callers pass in the current
//! time, so the same functions serve ingest, the worker, the CLI and fuzzers.
//!
//! Ingest calls [`verify`] on the raw request bytes; the worker calls
//! [`parse`] on the same bytes (carried unchanged through the broker) to get a
//! [`NormalizedEvent`]. `oncehookctl send` and the tests use [`sample`] to
//! build realistic signed deliveries.

#![warn(missing_docs)]

mod amount;
mod event;
mod gateway;
mod headers;
pub mod sample;
mod schemes;

pub use amount::{AmountError, currency_exponent, format_decimal_minor, parse_decimal_minor};
pub use event::{EventKind, NormalizedEvent};
pub use gateway::{Gateway, UnknownGateway};
pub use headers::Headers;
pub use schemes::{
    Credentials, ParseError, Verification, VerifyError, parse, secret_problem, verify,
};

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a
/// space, `%XY` a byte; a stray `%` stays) exactly as PayU verification
/// does; `None` when the result is not UTF-8. Shared so that `oncehookctl`
/// shows a form the way it was verified.
pub fn percent_decode(component: &str) -> Option<String> {
    schemes::form::decode_component(component).ok()
}
