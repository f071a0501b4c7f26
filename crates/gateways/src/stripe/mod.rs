//! Stripe, all in one place: the constants and [`GatewayScheme`]
//! implementation here, the `Stripe-Signature` check and the event parser
//! (payment intents, Checkout sessions, cumulative and single refunds) in
//! `scheme.rs`, realistic signed samples in `sample.rs`.

mod sample;
mod scheme;

use crate::sample::SampleSpec;
use crate::scheme::{ContentType, GatewayScheme, ParseFn, SampleFn, VerifyFn};

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

    const VERIFY: VerifyFn = scheme::verify;
    const PARSE: ParseFn = scheme::parse;
    const SAMPLE: SampleFn = sample::build;
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String = |spec| format!("re_{}", spec.event_id);
}
