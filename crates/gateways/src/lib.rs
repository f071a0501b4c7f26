//! Payment-gateway webhook schemes and APIs: signature verification,
//! payload normalisation, and the requests and answers of reconciliation.
//! Pure code (no I/O, no clock): callers pass in the current time and make
//! the HTTP calls, so the same functions serve ingest, the worker, the
//! reconciler, the CLI and fuzzers.
//!
//! Ingest calls [`verify`] on the raw request bytes and [`parse`] once to
//! get a [`NormalizedEvent`], which travels to the worker in the envelope
//! with the bytes. `oncehookctl send` and the tests use [`sample`] to build
//! realistic signed deliveries.
//!
//! The reconciler asks a gateway's API through [`reconcile::GatewayApi`]
//! (reached with [`Gateway::api`]): the calls about an order, each call's
//! request and how its answer becomes events. The refunder refunds through
//! [`refund::GatewayRefunds`] (reached with [`Gateway::refunds`]): the
//! refund request under the attempt's key, the lookup made before every
//! retry, and how each answer reads. Both the ledger and the reconciler key
//! what an event records by [`NormalizedEvent::fact`].
//!
//! Layout: each gateway lives in its own folder (`src/<gateway>/`: its
//! constants and [`GatewayScheme`] implementation in `mod.rs`, verification
//! and parsing in `scheme.rs`, the sample builder in `sample.rs`, its API
//! for reconciliation in `api.rs`, its refund API in `refund.rs`, their unit
//! tests beside them in `api_tests.rs` and `refund_tests.rs`). The registry
//! below lists them, one line each; `registry.rs` derives [`Gateway`] and
//! the dispatch from that list. Shared helpers (`crypto`, `json`, `form`,
//! `amount`, `headers`) serve every gateway. The end-to-end suite's
//! stand-in for each gateway's API, refunds included, is in
//! `tests/support/gateway_api.rs` and `tests/support/refund_api.rs`; the
//! toy gateway (`src/toy/`, the `toy` feature) follows the whole recipe for
//! tests. Adding a gateway: `docs/adding-a-gateway.md`.

#![warn(missing_docs)]

#[macro_use]
mod registry;

mod amount;
mod crypto;
mod currency;
pub mod documented;
mod event;
mod fact;
mod form;
mod headers;
mod json;
pub mod reconcile;
pub mod refund;
pub mod sample;
mod scheme;

registry! {
    /// Razorpay (`X-Razorpay-Signature`).
    razorpay::Razorpay,
    /// Cashfree Payments PG (`x-webhook-signature` over timestamp ‖ body).
    cashfree::Cashfree,
    /// PayU India (form post with a salted SHA-512 `hash`).
    payu::Payu,
    /// Stripe (`Stripe-Signature: t=…,v1=…`).
    stripe::Stripe,
    /// The Standard Webhooks specification (`webhook-id` / `webhook-timestamp` / `webhook-signature`).
    standard::Standard,
    /// A toy HMAC gateway with a toy API, for tests only: it checks
    /// `docs/adding-a-gateway.md` (a folder and this one line). It exists in
    /// this crate's unit tests and, for other crates' tests, with the `toy`
    /// feature; it is in `Gateway::ALL` only in this crate's unit tests.
    #[cfg(any(test, feature = "toy"))]
    #[listed(test)]
    toy::Toy,
}

pub use amount::{AmountError, currency_exponent, format_decimal_minor, parse_decimal_minor};
pub use currency::is_known_currency;
pub use event::{EventKind, NormalizedEvent};
pub use fact::{Fact, FactError};

pub use headers::Headers;
pub use registry::{UnknownGateway, names, parse, registered, verify};
pub use scheme::{
    ContentType, Credentials, GatewayScheme, ParseError, ParseFn, Request, SampleFn, Scheme,
    Verification, VerifyError, VerifyFn,
};

/// Standard Webhooks (<https://www.standardwebhooks.com>) for oncehook's own
/// signing: the order events the notifier sends the shop are signed by the
/// same code that verifies the `standard` gateway's deliveries, with one
/// rule for reading a `whsec_` secret.
pub mod standard_webhooks {
    pub use crate::standard::{
        ID_HEADER as HEADER_ID, SIGNATURE_HEADER as HEADER_SIGNATURE,
        TIMESTAMP_HEADER as HEADER_TIMESTAMP, key_of as signing_key, signature,
    };
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a
/// space, `%XY` a byte; a stray `%` stays) exactly as PayU verification
/// does; `None` when the result is not UTF-8. Shared so that `oncehookctl`
/// shows a form the way it was verified.
pub fn percent_decode(component: &str) -> Option<String> {
    form::decode_component(component).ok()
}

/// Why `secret` can never verify a delivery of `gateway` (checked when the
/// configuration is loaded, so a bad secret refuses to start instead of
/// refusing every genuine delivery), or `None` if it is usable.
pub fn secret_problem(gateway: Gateway, secret: &str) -> Option<&'static str> {
    if secret.trim().is_empty() {
        return Some("is blank");
    }
    (gateway.scheme().secret_problem)(secret)
}
