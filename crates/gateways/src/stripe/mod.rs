//! Stripe, all in one place: the constants and [`GatewayScheme`]
//! implementation here, the `Stripe-Signature` check and the event parser
//! (payment intents, Checkout sessions, cumulative and single refunds) in
//! `scheme.rs`, realistic signed samples in `sample.rs`.

mod sample;
mod scheme;

use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::scheme::{ContentType, Credentials, GatewayScheme, ParseError, Verification, VerifyError};
use crate::{Headers, NormalizedEvent};

/// Stripe (`Stripe-Signature: t=…,v1=…`).
pub(crate) struct Stripe;

impl GatewayScheme for Stripe {
    const NAME: &'static str = "stripe";
    const CONTENT_TYPE: ContentType = ContentType::Json;
    const SIGNS_TIMESTAMP: bool = true;
    const RELEVANT_HEADERS: &'static [&'static str] = &["stripe-signature", "content-type"];
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

    fn parse(_headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
        scheme::parse(body)
    }

    fn sample(event: &str, spec: &SampleSpec, secret: &str) -> Result<SignedDelivery, SampleError> {
        Ok(sample::build(event, spec, secret))
    }

    fn sample_refund_id(spec: &SampleSpec) -> String {
        format!("re_{}", spec.event_id)
    }
}
