//! Stripe sample deliveries: event envelopes around payment intents, a paid
//! Checkout session and a refunded charge, with the body `id` set to the
//! spec's event id and a `Stripe-Signature: t=…,v1=…` header.

use super::text::js;
use super::{SampleSpec, SignedDelivery, resolve_in};
use crate::schemes::stripe::{SIGNATURE_HEADER, sign};
use crate::{Gateway, Headers};

const TABLE: &[(&str, &str)] = &[
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
    ("charge.refunded", "charge.refunded"),
    ("captured", "payment_intent.succeeded"),
    ("failed", "payment_intent.payment_failed"),
    ("authorized", "payment_intent.amount_capturable_updated"),
    ("refunded", "charge.refunded"),
];

pub(super) const EVENT_NAMES: &[&str] = &[
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.amount_capturable_updated",
    "checkout.session.completed",
    "charge.refunded",
    "captured",
    "failed",
    "authorized",
    "refunded",
];

pub(super) fn resolve(event: &str) -> Option<&'static str> {
    resolve_in(TABLE, event)
}

/// The charge id that goes with a payment intent id (`pi_X` → `ch_X`).
fn charge_id(payment_id: &str) -> String {
    format!(
        "ch_{}",
        payment_id.strip_prefix("pi_").unwrap_or(payment_id)
    )
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
            r#""metadata":{{"order_ref":{order}}},"payment_method":"pm_1PPaY1LkdIwHu7ixa1b2c3d4","#,
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
        order = js(&spec.order_ref),
        email = js(&spec.email),
        status = status,
    )
}

fn checkout_session(spec: &SampleSpec, currency: &str) -> String {
    format!(
        concat!(
            r#"{{"id":{id},"object":"checkout.session","amount_subtotal":{a},"amount_total":{a},"#,
            r#""client_reference_id":{order},"currency":{currency},"#,
            r#""customer_details":{{"email":{email},"name":null}},"customer_email":{email},"#,
            r#""livemode":false,"metadata":{{}},"mode":"payment","payment_intent":{pi},"#,
            r#""payment_status":"paid","status":"complete"}}"#,
        ),
        id = js(&format!("cs_test_{}", spec.event_id)),
        a = spec.amount_minor,
        order = js(&spec.order_ref),
        currency = js(currency),
        email = js(&spec.email),
        pi = js(&spec.payment_id),
    )
}

fn refunded_charge(spec: &SampleSpec, currency: &str) -> String {
    let charge = js(&charge_id(&spec.payment_id));
    format!(
        concat!(
            r#"{{"id":{charge},"object":"charge","amount":{a},"amount_captured":{a},"amount_refunded":{a},"#,
            r#""billing_details":{{"email":{email}}},"captured":true,"currency":{currency},"#,
            r#""metadata":{{"order_ref":{order}}},"paid":true,"payment_intent":{pi},"receipt_email":{email},"#,
            r#""refunded":true,"refunds":{{"object":"list","data":[{{"id":{refund},"object":"refund","#,
            r#""amount":{a},"charge":{charge},"currency":{currency},"payment_intent":{pi},"status":"succeeded"}}],"#,
            r#""has_more":false,"total_count":1,"url":{url}}},"status":"succeeded"}}"#,
        ),
        charge = charge,
        a = spec.amount_minor,
        email = js(&spec.email),
        currency = js(currency),
        order = js(&spec.order_ref),
        pi = js(&spec.payment_id),
        refund = js(&spec.refund_id(Gateway::Stripe)),
        url = js(&format!(
            "/v1/charges/{}/refunds",
            charge_id(&spec.payment_id)
        )),
    )
}

pub(super) fn build(event: &str, spec: &SampleSpec, secret: &str) -> SignedDelivery {
    let currency = spec.currency.to_ascii_lowercase();
    let object = match event {
        "checkout.session.completed" => checkout_session(spec, &currency),
        "charge.refunded" => refunded_charge(spec, &currency),
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
    SignedDelivery { headers, body }
}
