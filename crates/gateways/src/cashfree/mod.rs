//! Cashfree Payments, all in one place: the constants and
//! [`GatewayScheme`] implementation here, the timestamped HMAC-SHA256
//! signature and the payload parser (decimal rupees read from the JSON text)
//! in `scheme.rs`, realistic signed samples in `sample.rs`.

mod sample;
mod scheme;

use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::scheme::{ContentType, Credentials, GatewayScheme, ParseError, Verification, VerifyError};
use crate::{Headers, NormalizedEvent};

/// Cashfree Payments PG (`x-webhook-signature` over timestamp ‖ body).
pub(crate) struct Cashfree;

impl GatewayScheme for Cashfree {
    const NAME: &'static str = "cashfree";
    const CONTENT_TYPE: ContentType = ContentType::Json;
    const SIGNS_TIMESTAMP: bool = true;
    const RELEVANT_HEADERS: &'static [&'static str] = &[
        "x-webhook-signature",
        "x-webhook-timestamp",
        "x-webhook-version",
        "x-webhook-attempt",
        "x-idempotency-key",
        "content-type",
    ];
    const SIGNATURE_HEADER: Option<&'static str> = Some(scheme::SIGNATURE_HEADER);
    const SAMPLE_EVENTS: &'static [(&'static str, &'static str)] = sample::TABLE;
    const SAMPLE_EVENT_NAMES: &'static [&'static str] = sample::EVENT_NAMES;

    fn verify(
        credentials: Credentials<'_>,
        headers: &Headers,
        body: &[u8],
        now_unix: i64,
        tolerance_secs: u64,
    ) -> Result<Verification, VerifyError> {
        scheme::verify(credentials.secrets, headers, body, now_unix, tolerance_secs)
    }

    fn parse(headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
        scheme::parse(headers, body)
    }

    fn sample(event: &str, spec: &SampleSpec, secret: &str) -> Result<SignedDelivery, SampleError> {
        Ok(sample::build(event, spec, secret))
    }

    fn sample_refund_id(spec: &SampleSpec) -> String {
        format!("refund_{}", spec.event_id)
    }
}
