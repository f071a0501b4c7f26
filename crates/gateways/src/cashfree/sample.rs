//! Cashfree sample deliveries (webhook version 2023-08-01): payment success,
//! failure and user-dropped events and refund status events, with amounts
//! written as JSON numbers with two decimals (`500.00`) exactly as Cashfree
//! sends them, signed over `x-webhook-timestamp` (milliseconds) and the body.

use crate::sample::text::{js, rfc3339_ist};
use crate::sample::{SampleError, SampleSpec, SignedDelivery};
use crate::amount::{currency_exponent, format_decimal_minor};
use super::scheme::{
    IDEMPOTENCY_HEADER, REFUND_TYPE, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign,
};
use crate::{Gateway, Headers};

pub(super) const TABLE: &[(&str, &str)] = &[
    ("PAYMENT_SUCCESS_WEBHOOK", "PAYMENT_SUCCESS_WEBHOOK"),
    ("PAYMENT_FAILED_WEBHOOK", "PAYMENT_FAILED_WEBHOOK"),
    (
        "PAYMENT_USER_DROPPED_WEBHOOK",
        "PAYMENT_USER_DROPPED_WEBHOOK",
    ),
    ("REFUND_STATUS_WEBHOOK", REFUND_TYPE),
    ("captured", "PAYMENT_SUCCESS_WEBHOOK"),
    ("failed", "PAYMENT_FAILED_WEBHOOK"),
    ("refunded", REFUND_TYPE),
];

pub(super) const EVENT_NAMES: &[&str] = &[
    "PAYMENT_SUCCESS_WEBHOOK",
    "PAYMENT_FAILED_WEBHOOK",
    "PAYMENT_USER_DROPPED_WEBHOOK",
    "REFUND_STATUS_WEBHOOK",
    "captured",
    "failed",
    "refunded",
];

/// Milliseconds added to `spec.timestamp * 1000` in the signed timestamp, so
/// samples look like real millisecond clocks.
const SAMPLE_MILLIS: i64 = 612;

fn payment_body(event: &str, spec: &SampleSpec, amount: &str, currency: &str) -> String {
    let (status, message, error) = match event {
        "PAYMENT_FAILED_WEBHOOK" => (
            "FAILED",
            "Transaction declined by the bank",
            r#","error_details":{"error_code":"TRANSACTION_DECLINED","error_description":"issuer bank or payment service provider declined the transaction","error_reason":"auth_declined","error_source":"customer","error_code_raw":"ZM","error_description_raw":"Transaction declined"}"#,
        ),
        "PAYMENT_USER_DROPPED_WEBHOOK" => (
            "USER_DROPPED",
            "Customer dropped out of the payment flow",
            r#","error_details":{"error_code":"USER_DROPPED","error_description":"user dropped and did not complete the two factor authentication","error_reason":"user_dropped","error_source":"customer","error_code_raw":null,"error_description_raw":null}"#,
        ),
        _ => ("SUCCESS", "00::Transaction success", ""),
    };
    let time = rfc3339_ist(spec.timestamp.saturating_sub(4));
    format!(
        concat!(
            r#"{{"data":{{"order":{{"order_id":{order},"order_amount":{amount},"order_currency":{currency},"order_tags":null}},"#,
            r#""payment":{{"cf_payment_id":{payment},"payment_status":"{status}","payment_amount":{amount},"#,
            r#""payment_currency":{currency},"payment_message":{message},"payment_time":{time},"#,
            r#""bank_reference":"512512345678","auth_id":null,"#,
            r#""payment_method":{{"upi":{{"channel":"collect","upi_id":"customer@exampleupi"}}}},"payment_group":"upi"}},"#,
            r#""customer_details":{{"customer_name":null,"customer_id":"cust_oncehook","customer_email":{email},"#,
            r#""customer_phone":"9876543210"}},"#,
            r#""payment_gateway_details":{{"gateway_name":"CASHFREE","gateway_order_id":null,"#,
            r#""gateway_payment_id":{payment},"gateway_status_code":null,"gateway_settlement":"CASHFREE"}},"#,
            r#""payment_offers":null{error}}},"event_time":{event_time},"type":{ty}}}"#,
        ),
        order = js(&spec.order_ref),
        amount = amount,
        currency = js(currency),
        payment = js(&spec.payment_id),
        status = status,
        message = js(message),
        time = js(&time),
        email = js(&spec.email),
        error = error,
        event_time = js(&rfc3339_ist(spec.timestamp)),
        ty = js(event),
    )
}

fn refund_body(spec: &SampleSpec, amount: &str, currency: &str) -> String {
    format!(
        concat!(
            r#"{{"data":{{"refund":{{"cf_refund_id":{cf_refund},"cf_payment_id":{payment},"refund_id":{refund},"#,
            r#""order_id":{order},"refund_amount":{amount},"refund_currency":{currency},"entity":"Refund","#,
            r#""refund_type":"MERCHANT_INITIATED","refund_arn":"205907890","refund_status":"SUCCESS","#,
            r#""status_description":"Refund processed successfully","refund_charge":0,"#,
            r#""refund_note":"Refund requested by the merchant","refund_splits":[],"metadata":null,"#,
            r#""created_at":{created},"processed_at":{processed},"refund_mode":"STANDARD"}}}},"#,
            r#""event_time":{processed},"type":"REFUND_STATUS_WEBHOOK"}}"#,
        ),
        cf_refund = js(&format!("cf_{}", spec.refund_id(Gateway::Cashfree))),
        payment = js(&spec.payment_id),
        refund = js(&spec.refund_id(Gateway::Cashfree)),
        order = js(&spec.order_ref),
        amount = amount,
        currency = js(currency),
        created = js(&rfc3339_ist(spec.timestamp.saturating_sub(3_600))),
        processed = js(&rfc3339_ist(spec.timestamp)),
    )
}

pub(super) fn build(
    event: &str,
    spec: &SampleSpec,
    secret: &str,
) -> Result<SignedDelivery, SampleError> {
    let currency = spec.currency.to_ascii_uppercase();
    let amount = format_decimal_minor(spec.amount_minor, currency_exponent(&currency));
    let body = if event == REFUND_TYPE {
        refund_body(spec, &amount, &currency)
    } else {
        payment_body(event, spec, &amount, &currency)
    }
    .into_bytes();
    let timestamp = spec
        .timestamp
        .saturating_mul(1_000)
        .saturating_add(SAMPLE_MILLIS)
        .to_string();
    let headers = Headers::new()
        .with("Content-Type", "application/json")
        .with(SIGNATURE_HEADER, sign(secret, &timestamp, &body))
        .with(TIMESTAMP_HEADER, timestamp)
        .with("x-webhook-version", "2023-08-01")
        .with("x-webhook-attempt", "1")
        .with(IDEMPOTENCY_HEADER, spec.event_id.clone());
    Ok(SignedDelivery { headers, body })
}
