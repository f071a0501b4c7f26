//! Razorpay, all in one place: the constants and [`GatewayScheme`]
//! implementation here, the HMAC-SHA256 signature and the payload parser in
//! `scheme.rs`, realistic signed samples in `sample.rs`.

mod sample;
mod scheme;

use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::scheme::{ContentType, Credentials, GatewayScheme, ParseError, Verification, VerifyError};
use crate::{Headers, NormalizedEvent};

/// Razorpay (`X-Razorpay-Signature`, no signed timestamp).
pub(crate) struct Razorpay;

impl GatewayScheme for Razorpay {
    const NAME: &'static str = "razorpay";
    const CONTENT_TYPE: ContentType = ContentType::Json;
    const SIGNS_TIMESTAMP: bool = false;
    const RELEVANT_HEADERS: &'static [&'static str] = &[
        "x-razorpay-signature",
        "x-razorpay-event-id",
        "content-type",
    ];
    const SIGNATURE_HEADER: Option<&'static str> = Some(scheme::SIGNATURE_HEADER);
    const SAMPLE_EVENTS: &'static [(&'static str, &'static str)] = sample::TABLE;
    const SAMPLE_EVENT_NAMES: &'static [&'static str] = sample::EVENT_NAMES;

    fn verify(
        credentials: Credentials<'_>,
        headers: &Headers,
        body: &[u8],
        _now_unix: i64,
        _tolerance_secs: u64,
    ) -> Result<Verification, VerifyError> {
        scheme::verify(credentials.secrets, headers, body)
    }

    fn parse(headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
        scheme::parse(headers, body)
    }

    fn sample(event: &str, spec: &SampleSpec, secret: &str) -> Result<SignedDelivery, SampleError> {
        Ok(sample::build(event, spec, secret))
    }

    fn sample_refund_id(spec: &SampleSpec) -> String {
        format!("rfnd_{}", spec.event_id)
    }
}
