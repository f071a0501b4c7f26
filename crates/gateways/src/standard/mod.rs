//! Standard Webhooks, all in one place: the constants and
//! [`GatewayScheme`] implementation here, the `webhook-signature` check
//! (`whsec_` secrets) and the payload parser in `scheme.rs`, realistic signed
//! samples in `sample.rs`.

mod sample;
mod scheme;

pub use scheme::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, key_of, signature};

use crate::sample::SampleSpec;
use crate::scheme::{ContentType, GatewayScheme, folder_items};

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

    folder_items!();
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String = |spec| format!("rf_{}", spec.event_id);
    const SECRET_PROBLEM: fn(&str) -> Option<&'static str> = |secret| {
        scheme::key_of(secret)
            .is_none_or(|k| k.is_empty())
            .then_some("is not a Standard Webhooks secret (`whsec_` followed by base64)")
    };
}
