//! Stripe sample deliveries: event envelopes around payment intents,
//! Checkout sessions (paid, asynchronously paid or failed), a refunded charge
//! (its cumulative `amount_refunded` is the spec's amount) and a single
//! refund, with the body `id` set to the spec's event id and a
//! `Stripe-Signature: t=…,v1=…` header. An empty `spec.order_ref` leaves
//! `metadata` empty (a Checkout payment intent carries no order reference).

use crate::sample::text::js;
use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use super::scheme::{SIGNATURE_HEADER, sign};
use crate::{Gateway, Headers};

pub(super) const TABLE: &[(&str, &str)] = &[
    ("payment_intent.succeeded", "payment_intent.succeeded"),
    (
        "payment_intent.payment_failed",
        "payment_intent.payment_failed",
    ),
    (
        "payment_intent.amount_capturable_updated",
        "payment_intent.amount_capturable_updated",
    ),
    ("checkout.session.completed", "checkout.session.completed"),
    (
        "checkout.session.async_payment_succeeded",
        "checkout.session.async_payment_succeeded",
    ),
    (
        "checkout.session.async_payment_failed",
        "checkout.session.async_payment_failed",
    ),
    ("charge.refunded", "charge.refunded"),
    ("refund.created", "refund.created"),
    ("captured", "payment_intent.succeeded"),
    ("failed", "payment_intent.payment_failed"),
    ("authorized", "payment_intent.amount_capturable_updated"),
    ("refunded", "refund.created"),
];

pub(super) const EVENT_NAMES: &[&str] = &[
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.amount_capturable_updated",
    "checkout.session.completed",
    "checkout.session.async_payment_succeeded",
    "checkout.session.async_payment_failed",
    "charge.refunded",
    "refund.created",
    "captured",
    "failed",
    "authorized",
    "refunded",
];

/// The charge id that goes with a payment intent id (`pi_X` → `ch_X`).
fn charge_id(payment_id: &str) -> String {
    format!(
        "ch_{}",
        payment_id.strip_prefix("pi_").unwrap_or(payment_id)
    )
}

/// `metadata` naming the order, or empty without an order reference.
fn metadata(spec: &SampleSpec) -> String {
    if spec.order_ref.is_empty() {
        "{}".to_owned()
    } else {
        format!(r#"{{"order_ref":{}}}"#, js(&spec.order_ref))
    }
}

fn payment_intent(event: &str, spec: &SampleSpec, currency: &str) -> String {
    let a = spec.amount_minor;
    let (capture, capturable, received, status, error) = match event {
        "payment_intent.payment_failed" => (
            "automatic",
            0,
            0,
            "requires_payment_method",
            r#"{"code":"card_declined","decline_code":"generic_decline","message":"Your card was declined.","type":"card_error"}"#,
        ),
        "payment_intent.amount_capturable_updated" => ("manual", a, 0, "requires_capture", "null"),
        _ => ("automatic", 0, a, "succeeded", "null"),
    };
    format!(
        concat!(
            r#"{{"id":{id},"object":"payment_intent","amount":{a},"amount_capturable":{capturable},"#,
            r#""amount_received":{received},"capture_method":"{capture}","currency":{currency},"#,
            r#""customer":null,"last_payment_error":{error},"latest_charge":{charge},"livemode":false,"#,
            r#""metadata":{metadata},"payment_method":"pm_1PPaY1LkdIwHu7ixa1b2c3d4","#,
            r#""receipt_email":{email},"status":"{status}"}}"#,
        ),
        id = js(&spec.payment_id),
        a = a,
        capturable = capturable,
        received = received,
        capture = capture,
        currency = js(currency),
        error = error,
        charge = js(&charge_id(&spec.payment_id)),
        metadata = metadata(spec),
        email = js(&spec.email),
        status = status,
    )
}

fn checkout_session(spec: &SampleSpec, currency: &str, paid: bool) -> String {
    format!(
        concat!(
            r#"{{"id":{id},"object":"checkout.session","amount_subtotal":{a},"amount_total":{a},"#,
            r#""client_reference_id":{order},"currency":{currency},"#,
            r#""customer_details":{{"email":{email},"name":null}},"customer_email":{email},"#,
            r#""livemode":false,"metadata":{{}},"mode":"payment","payment_intent":{pi},"#,
            r#""payment_status":"{payment_status}","status":"complete"}}"#,
        ),
        payment_status = if paid { "paid" } else { "unpaid" },
        id = js(&format!("cs_test_{}", spec.event_id)),
        a = spec.amount_minor,
        order = if spec.order_ref.is_empty() {
            "null".to_owned()
        } else {
            js(&spec.order_ref)
        },
        currency = js(currency),
        email = js(&spec.email),
        pi = js(&spec.payment_id),
    )
}

/// A charge whose refunds so far total `spec.amount_minor` (Stripe's
/// `charge.refunded` carries the cumulative `amount_refunded`).
fn refunded_charge(spec: &SampleSpec, currency: &str) -> String {
    let charge = js(&charge_id(&spec.payment_id));
    format!(
        concat!(
            r#"{{"id":{charge},"object":"charge","amount":{a},"amount_captured":{a},"amount_refunded":{a},"#,
            r#""billing_details":{{"email":{email}}},"captured":true,"currency":{currency},"#,
            r#""metadata":{metadata},"paid":true,"payment_intent":{pi},"receipt_email":{email},"#,
            r#""refunded":true,"refunds":{{"object":"list","data":[{{"id":{refund},"object":"refund","#,
            r#""amount":{a},"charge":{charge},"currency":{currency},"payment_intent":{pi},"status":"succeeded"}}],"#,
            r#""has_more":false,"total_count":1,"url":{url}}},"status":"succeeded"}}"#,
        ),
        charge = charge,
        a = spec.amount_minor,
        email = js(&spec.email),
        currency = js(currency),
        metadata = metadata(spec),
        pi = js(&spec.payment_id),
        refund = js(&spec.refund_id(Gateway::Stripe)),
        url = js(&format!(
            "/v1/charges/{}/refunds",
            charge_id(&spec.payment_id)
        )),
    )
}

/// One succeeded refund of `spec.amount_minor` (`refund.created`).
fn refund(spec: &SampleSpec, currency: &str) -> String {
    format!(
        concat!(
            r#"{{"id":{id},"object":"refund","amount":{a},"balance_transaction":null,"#,
            r#""charge":{charge},"created":{created},"currency":{currency},"destination_details":null,"#,
            r#""metadata":{metadata},"payment_intent":{pi},"reason":"requested_by_customer","#,
            r#""receipt_number":null,"source_transfer_reversal":null,"status":"succeeded","#,
            r#""transfer_reversal":null}}"#,
        ),
        id = js(&spec.refund_id(Gateway::Stripe)),
        a = spec.amount_minor,
        charge = js(&charge_id(&spec.payment_id)),
        created = spec.timestamp.saturating_sub(2),
        currency = js(currency),
        metadata = metadata(spec),
        pi = js(&spec.payment_id),
    )
}

pub(super) fn build(
    event: &str,
    spec: &SampleSpec,
    secret: &str,
) -> Result<SignedDelivery, SampleError> {
    let currency = spec.currency.to_ascii_lowercase();
    let object = match event {
        "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
            checkout_session(spec, &currency, true)
        }
        "checkout.session.async_payment_failed" => checkout_session(spec, &currency, false),
        "charge.refunded" => refunded_charge(spec, &currency),
        "refund.created" => refund(spec, &currency),
        _ => payment_intent(event, spec, &currency),
    };
    let body = format!(
        concat!(
            r#"{{"id":{id},"object":"event","api_version":"2024-06-20","created":{created},"#,
            r#""data":{{"object":{object}}},"livemode":false,"pending_webhooks":1,"#,
            r#""request":{{"id":null,"idempotency_key":null}},"type":{ty}}}"#,
        ),
        id = js(&spec.event_id),
        created = spec.timestamp.saturating_sub(1),
        object = object,
        ty = js(event),
    )
    .into_bytes();
    let signature = format!(
        "t={},v1={}",
        spec.timestamp,
        sign(secret, spec.timestamp, &body)
    );
    let headers = Headers::new()
        .with("Content-Type", "application/json; charset=utf-8")
        .with(SIGNATURE_HEADER, signature);
    Ok(SignedDelivery { headers, body })
}
