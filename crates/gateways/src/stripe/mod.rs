//! Stripe, all in one place: the constants and [`GatewayScheme`]
//! implementation here, the `Stripe-Signature` check and the event parser
//! (payment intents, Checkout sessions, cumulative and single refunds) in
//! `scheme.rs`, realistic signed samples in `sample.rs`, its API's answers
//! (for reconciliation, read by that same parser) in `api.rs`, its refund
//! API (for the refunder) in `refund.rs`.

pub(crate) mod api;
mod refund;
mod sample;
mod scheme;

use crate::reconcile::GatewayApi;
use crate::refund::GatewayRefunds;
use crate::sample::SampleSpec;
use crate::scheme::{ContentType, GatewayScheme, folder_items};

/// Stripe (`Stripe-Signature: t=…,v1=…`).
pub(crate) struct Stripe;

impl GatewayScheme for Stripe {
    const NAME: &'static str = "stripe";
    const CONTENT_TYPE: ContentType = ContentType::Json;
    const SIGNS_TIMESTAMP: bool = true;
    const RELEVANT_HEADERS: &'static [&'static str] = &["stripe-signature", "content-type"];
    const SIGNATURE_HEADER: Option<&'static str> = Some(scheme::SIGNATURE_HEADER);

    folder_items!();
    const API: Option<&'static dyn GatewayApi> = Some(&Stripe);
    const REFUNDS: Option<&'static dyn GatewayRefunds> = Some(&Stripe);
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String = |spec| format!("re_{}", spec.event_id);
}
