//! Standard Webhooks, all in one place: the constants and
//! [`GatewayScheme`] implementation here, the `webhook-signature` check
//! (`whsec_` secrets) and the payload parser in `scheme.rs`, realistic signed
//! samples in `sample.rs`.

mod sample;
mod scheme;

use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::scheme::{ContentType, Credentials, GatewayScheme, ParseError, Verification, VerifyError};
use crate::{Gateway, Headers, NormalizedEvent};

/// The Standard Webhooks specification (`webhook-id` / `webhook-timestamp` / `webhook-signature`).
pub(crate) struct Standard;

impl GatewayScheme for Standard {
    const NAME: &'static str = "standard";
    const CONTENT_TYPE: ContentType = ContentType::Json;
    const SIGNS_TIMESTAMP: bool = true;
    const RELEVANT_HEADERS: &'static [&'static str] = &[
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
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
        sample::build(event, spec, secret).ok_or(SampleError::InvalidSecret {
            gateway: Gateway::Standard,
            reason: "not base64 after the whsec_ prefix",
        })
    }

    fn sample_refund_id(spec: &SampleSpec) -> String {
        format!("rf_{}", spec.event_id)
    }
}
