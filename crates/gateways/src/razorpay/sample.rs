//! Razorpay sample deliveries: `payment.*`, `order.paid` and
//! `refund.processed` events shaped like Razorpay's published samples, signed
//! over the raw body, with `x-razorpay-event-id` set to the spec's event id.

use crate::sample::text::js;
use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use super::scheme::{EVENT_ID_HEADER, SIGNATURE_HEADER, sign};
use crate::{Gateway, Headers};

pub(super) const TABLE: &[(&str, &str)] = &[
    ("payment.captured", "payment.captured"),
    ("payment.failed", "payment.failed"),
    ("payment.authorized", "payment.authorized"),
    ("order.paid", "order.paid"),
    ("refund.processed", "refund.processed"),
    ("captured", "payment.captured"),
    ("failed", "payment.failed"),
    ("authorized", "payment.authorized"),
    ("refunded", "refund.processed"),
];

pub(super) const EVENT_NAMES: &[&str] = &[
    "payment.captured",
    "payment.failed",
    "payment.authorized",
    "order.paid",
    "refund.processed",
    "captured",
    "failed",
    "authorized",
    "refunded",
];

/// The state a payment entity is in when the event is raised.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PaymentState {
    Authorized,
    Captured,
    Failed,
    Refunded,
}

fn payment_entity(spec: &SampleSpec, state: PaymentState) -> String {
    let amount = spec.amount_minor;
    let captured = matches!(state, PaymentState::Captured | PaymentState::Refunded);
    let status = match state {
        PaymentState::Authorized => "authorized",
        PaymentState::Captured | PaymentState::Refunded => "captured",
        PaymentState::Failed => "failed",
    };
    let (fee, tax) = if captured {
        let fee = amount / 50;
        let tax = fee * 18 / 100;
        ((fee + tax).to_string(), tax.to_string())
    } else {
        ("null".to_owned(), "null".to_owned())
    };
    let (refunded, refund_status) = if state == PaymentState::Refunded {
        (amount, "\"full\"")
    } else {
        (0, "null")
    };
    let error = if state == PaymentState::Failed {
        r#""error_code":"BAD_REQUEST_ERROR","error_description":"Payment was cancelled by the customer.","error_source":"customer","error_step":"payment_authentication","error_reason":"payment_cancelled""#
    } else {
        r#""error_code":null,"error_description":null,"error_source":null,"error_step":null,"error_reason":null"#
    };
    format!(
        concat!(
            r#"{{"id":{id},"entity":"payment","amount":{amount},"currency":{currency},"base_amount":{amount},"#,
            r#""status":"{status}","order_id":{order},"invoice_id":null,"international":false,"method":"upi","#,
            r#""amount_refunded":{refunded},"amount_transferred":0,"refund_status":{refund_status},"captured":{captured},"#,
            r#""description":{description},"card_id":null,"bank":null,"wallet":null,"vpa":"customer@exampleupi","#,
            r#""email":{email},"contact":"+919876543210","notes":{{"order_ref":{order}}},"fee":{fee},"tax":{tax},"#,
            r#"{error},"acquirer_data":{{"rrn":"412345678901"}},"created_at":{created}}}"#,
        ),
        id = js(&spec.payment_id),
        amount = amount,
        currency = js(&spec.currency.to_ascii_uppercase()),
        status = status,
        order = js(&spec.order_ref),
        refunded = refunded,
        refund_status = refund_status,
        captured = captured,
        description = js(&format!("Order {}", spec.order_ref)),
        email = js(&spec.email),
        fee = fee,
        tax = tax,
        error = error,
        created = spec.timestamp.saturating_sub(3),
    )
}

fn order_entity(spec: &SampleSpec) -> String {
    format!(
        concat!(
            r#"{{"id":{order},"entity":"order","amount":{amount},"amount_paid":{amount},"amount_due":0,"#,
            r#""currency":{currency},"receipt":{order},"offer_id":null,"status":"paid","attempts":1,"notes":[],"#,
            r#""created_at":{created}}}"#,
        ),
        order = js(&spec.order_ref),
        amount = spec.amount_minor,
        currency = js(&spec.currency.to_ascii_uppercase()),
        created = spec.timestamp.saturating_sub(40),
    )
}

fn refund_entity(spec: &SampleSpec) -> String {
    format!(
        concat!(
            r#"{{"id":{id},"entity":"refund","amount":{amount},"currency":{currency},"payment_id":{payment},"#,
            r#""notes":[],"receipt":null,"acquirer_data":{{"arn":null}},"created_at":{created},"batch_id":null,"#,
            r#""status":"processed","speed_processed":"normal","speed_requested":"optimum"}}"#,
        ),
        id = js(&spec.refund_id(Gateway::Razorpay)),
        amount = spec.amount_minor,
        currency = js(&spec.currency.to_ascii_uppercase()),
        payment = js(&spec.payment_id),
        created = spec.timestamp,
    )
}

pub(super) fn build(
    event: &str,
    spec: &SampleSpec,
    secret: &str,
) -> Result<SignedDelivery, SampleError> {
    let (contains, payload) = match event {
        "order.paid" => (
            r#"["payment","order"]"#,
            format!(
                r#"{{"payment":{{"entity":{}}},"order":{{"entity":{}}}}}"#,
                payment_entity(spec, PaymentState::Captured),
                order_entity(spec)
            ),
        ),
        "refund.processed" => (
            r#"["refund","payment"]"#,
            format!(
                r#"{{"refund":{{"entity":{}}},"payment":{{"entity":{}}}}}"#,
                refund_entity(spec),
                payment_entity(spec, PaymentState::Refunded)
            ),
        ),
        other => {
            let state = match other {
                "payment.failed" => PaymentState::Failed,
                "payment.authorized" => PaymentState::Authorized,
                _ => PaymentState::Captured,
            };
            (
                r#"["payment"]"#,
                format!(
                    r#"{{"payment":{{"entity":{}}}}}"#,
                    payment_entity(spec, state)
                ),
            )
        }
    };
    let body = format!(
        r#"{{"entity":"event","account_id":"acc_OncehookSample1","event":{event},"contains":{contains},"payload":{payload},"created_at":{created}}}"#,
        event = js(event),
        created = spec.timestamp,
    )
    .into_bytes();
    let headers = Headers::new()
        .with("Content-Type", "application/json")
        .with(SIGNATURE_HEADER, sign(secret, &body))
        .with(EVENT_ID_HEADER, spec.event_id.clone());
    Ok(SignedDelivery { headers, body })
}
