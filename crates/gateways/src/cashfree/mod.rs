//! Cashfree Payments, all in one place: the constants and
//! [`GatewayScheme`] implementation here, the timestamped HMAC-SHA256
//! signature and the payload parser (decimal rupees read from the JSON text)
//! in `scheme.rs`, realistic signed samples in `sample.rs`, its API's
//! answers (for reconciliation) in `api.rs`, its refund API (for the
//! refunder) in `refund.rs`.

pub(crate) mod api;
mod refund;
mod sample;
mod scheme;

use crate::reconcile::GatewayApi;
use crate::refund::GatewayRefunds;
use crate::sample::SampleSpec;
use crate::scheme::{ContentType, GatewayScheme, folder_items};

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

    folder_items!();
    const API: Option<&'static dyn GatewayApi> = Some(&Cashfree);
    const REFUNDS: Option<&'static dyn GatewayRefunds> = Some(&Cashfree);
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String = |spec| format!("refund_{}", spec.event_id);
}
