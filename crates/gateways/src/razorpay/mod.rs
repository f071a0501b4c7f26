//! Razorpay, all in one place: the constants and [`GatewayScheme`]
//! implementation here, the HMAC-SHA256 signature and the payload parser in
//! `scheme.rs`, realistic signed samples in `sample.rs`, its API's answers
//! (for reconciliation) in `api.rs`, its refund API (for the refunder) in
//! `refund.rs`.

pub(crate) mod api;
mod refund;
mod sample;
mod scheme;

use crate::reconcile::GatewayApi;
use crate::refund::GatewayRefunds;
use crate::sample::SampleSpec;
use crate::scheme::{ContentType, GatewayScheme, folder_items};

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

    folder_items!();
    const API: Option<&'static dyn GatewayApi> = Some(&Razorpay);
    const REFUNDS: Option<&'static dyn GatewayRefunds> = Some(&Razorpay);
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String = |spec| format!("rfnd_{}", spec.event_id);
}
