//! PayU India, all in one place: the constants and [`GatewayScheme`]
//! implementation here, the salted SHA-512 form hash, the merchant-key and
//! separator checks and the form parser in `scheme.rs`, realistic signed
//! form posts in `sample.rs`.

mod sample;
mod scheme;

pub use sample::SAMPLE_PAYU_KEY;

use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::scheme::{ContentType, Credentials, GatewayScheme, ParseError, Verification, VerifyError};
use crate::{Headers, NormalizedEvent};

/// PayU India (form post with a salted SHA-512 `hash`).
pub(crate) struct Payu;

impl GatewayScheme for Payu {
    const NAME: &'static str = "payu";
    const CONTENT_TYPE: ContentType = ContentType::Form;
    const SIGNS_TIMESTAMP: bool = false;
    const RELEVANT_HEADERS: &'static [&'static str] = &["content-type"];
    /// The hash travels in the form body.
    const SIGNATURE_HEADER: Option<&'static str> = None;
    const SAMPLE_EVENTS: &'static [(&'static str, &'static str)] = sample::TABLE;
    const SAMPLE_EVENT_NAMES: &'static [&'static str] = sample::EVENT_NAMES;

    fn verify(
        credentials: Credentials<'_>,
        _headers: &Headers,
        body: &[u8],
        _now_unix: i64,
        _tolerance_secs: u64,
    ) -> Result<Verification, VerifyError> {
        scheme::verify(credentials.secrets, credentials.merchant_key, body)
    }

    fn parse(_headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
        scheme::parse(body)
    }

    fn sample(event: &str, spec: &SampleSpec, secret: &str) -> Result<SignedDelivery, SampleError> {
        sample::build(event, spec, secret)
    }

    /// PayU has no refund samples (its refunds are not webhooks); the value
    /// is not used.
    fn sample_refund_id(spec: &SampleSpec) -> String {
        format!("{}:refund", spec.payment_id)
    }
}
