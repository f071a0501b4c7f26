//! PayU India, all in one place: the constants and [`GatewayScheme`]
//! implementation here, the salted SHA-512 form hash, the merchant-key and
//! separator checks and the form parser in `scheme.rs`, realistic signed
//! form posts in `sample.rs`, the `verify_payment` request and answer (for
//! reconciliation) in `api.rs`, the refund and its lookup (for the
//! refunder) in `refund.rs`.

pub(crate) mod api;
mod refund;
mod sample;
mod scheme;

pub use sample::{PAYU_HASHED_FIELDS, SAMPLE_PAYU_KEY, payu_hash};

use crate::reconcile::GatewayApi;
use crate::refund::GatewayRefunds;
use crate::sample::SampleSpec;
use crate::scheme::{ContentType, GatewayScheme, folder_items};

/// PayU India (form post with a salted SHA-512 `hash`).
pub(crate) struct Payu;

impl GatewayScheme for Payu {
    const NAME: &'static str = "payu";
    const CONTENT_TYPE: ContentType = ContentType::Form;
    const SIGNS_TIMESTAMP: bool = false;
    const RELEVANT_HEADERS: &'static [&'static str] = &["content-type"];
    /// The hash travels in the form body.
    const SIGNATURE_HEADER: Option<&'static str> = None;

    folder_items!();
    const API: Option<&'static dyn GatewayApi> = Some(&Payu);
    const REFUNDS: Option<&'static dyn GatewayRefunds> = Some(&Payu);
    /// PayU has no refund samples (its refunds are not webhooks); the value
    /// is not used.
    const SAMPLE_REFUND_ID: fn(&SampleSpec) -> String = |spec| format!("{}:refund", spec.payment_id);
    const NEEDS_MERCHANT_KEY: bool = true;
}
