//! What every gateway's refund tests share (test code only): the
//! [`RefundAsk`] they refund, the source's API credentials they sign
//! with, and the bodies of the properties that reading a refund answer
//! never panics, each called with the gateway's own [`GatewayRefunds`].

use proptest::prelude::*;
use serde_json::Value;

use super::{GatewayRefunds, RefundAsk, RefundCall};
use crate::reconcile::{ApiCredentials, OrderNames, credentials, table};
use crate::{Credentials, Gateway};

/// The first attempt of intent `intent_id`, refunding `amount_minor` of
/// `currency` of payment `payment_id` for a duplicate capture; a test
/// changes the rest with `..ask(…)`.
pub(crate) fn ask(
    intent_id: &str,
    payment_id: &str,
    amount_minor: i64,
    currency: &str,
) -> RefundAsk {
    RefundAsk {
        intent_id: intent_id.into(),
        attempt: 1,
        payment_id: payment_id.into(),
        amount_minor,
        currency: currency.into(),
        order: OrderNames::default(),
        reason: "duplicate_capture".into(),
        payment_order: None,
        gateway_payment_id: None,
    }
}

/// `gateway`'s API credentials from a `[source.api]` table of `fields`,
/// for a source whose one webhook secret is `secret`.
pub(crate) fn api_credentials(
    gateway: Gateway,
    fields: &[(&str, &str)],
    secret: &str,
) -> ApiCredentials {
    let secrets = vec![secret.to_owned()];
    credentials(gateway, &table(fields), Credentials::new(&secrets)).expect("credentials")
}

/// Reads `body`, answered `status`, as the answer to the lookup (`lookup`)
/// or to the create: the body of every gateway's
/// `read_never_panics_on_any_answer` and of its properties over answers
/// shaped like its own.
pub(crate) fn read_any(
    refunds: &dyn GatewayRefunds,
    ask: &RefundAsk,
    status: u16,
    body: &[u8],
    lookup: bool,
) {
    let call = if lookup {
        RefundCall::Lookup
    } else {
        RefundCall::Create
    };
    let _ = refunds.read(ask, call, status, body);
}

/// Reads `page`, answered `status`, as the lookup's answer, then the first
/// of the refunds it lists (`items`) alone as the create's: the body of
/// `read_never_panics_on_refund_shaped_answers` where the lookup lists
/// the payment's refunds.
pub(crate) fn read_page_and_first(
    refunds: &dyn GatewayRefunds,
    ask: &RefundAsk,
    status: u16,
    page: &[u8],
    items: &[Value],
) {
    let _ = refunds.read(ask, RefundCall::Lookup, status, page);
    if let Some(first) = items.first() {
        let _ = refunds.read(
            ask,
            RefundCall::Create,
            status,
            first.to_string().as_bytes(),
        );
    }
}

/// Any answer: a status, up to 512 bytes of body, and which call it
/// answers (the lookup, or the create) — what [`read_any`] reads in
/// `read_never_panics_on_any_answer`.
pub(crate) fn any_answer() -> impl Strategy<Value = (u16, Vec<u8>, bool)> {
    (
        0u16..1000,
        proptest::collection::vec(any::<u8>(), 0..512),
        any::<bool>(),
    )
}
