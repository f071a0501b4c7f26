//! Cashfree Payments (PG webhooks, version 2023-08-01): HMAC-SHA256 of
//! `x-webhook-timestamp` followed directly by the raw body, standard base64
//! in `x-webhook-signature`. The timestamp is in milliseconds. Amounts are
//! decimal rupees (`500.00`), read from the raw JSON text so they never pass
//! through a float.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::crypto::{
    check_window, first_match, hmac_sha256, hmac_sha256_matches, parse_unix_digits,
};
use serde_json::Value;

use crate::json::{currency_at, decimal_amount_at, id_at, parse_body, str_at};
use crate::scheme::{ParseError, Request, Verification, VerifyError, body_digest_id, header};
use crate::{EventKind, Gateway, Headers, NormalizedEvent};

/// Header carrying the base64 signature.
pub(crate) const SIGNATURE_HEADER: &str = "x-webhook-signature";
/// Header carrying the signed timestamp, unix milliseconds.
pub(crate) const TIMESTAMP_HEADER: &str = "x-webhook-timestamp";
/// Header carrying the delivery identity (newer webhook versions).
pub(crate) const IDEMPOTENCY_HEADER: &str = "x-idempotency-key";

/// The type of refund notifications.
pub(crate) const REFUND_TYPE: &str = "REFUND_STATUS_WEBHOOK";

/// The signature Cashfree would send for `body` at `timestamp_ms` (the
/// header's exact text).
pub(crate) fn sign(secret: &str, timestamp_ms: &str, body: &[u8]) -> String {
    BASE64.encode(hmac_sha256(
        secret.as_bytes(),
        &[timestamp_ms.as_bytes(), body],
    ))
}

pub(crate) fn verify(request: &Request<'_>) -> Result<Verification, VerifyError> {
    let (headers, body) = (request.headers, request.body);
    let sig_text =
        header(headers, SIGNATURE_HEADER).ok_or(VerifyError::Missing(SIGNATURE_HEADER))?;
    let ts_text =
        header(headers, TIMESTAMP_HEADER).ok_or(VerifyError::Missing(TIMESTAMP_HEADER))?;
    let millis = parse_unix_digits(ts_text, TIMESTAMP_HEADER)?;
    let signature = BASE64
        .decode(sig_text)
        .map_err(|_| VerifyError::Malformed {
            what: SIGNATURE_HEADER,
            reason: "not standard base64".into(),
        })?;
    if signature.len() != 32 {
        return Err(VerifyError::Malformed {
            what: SIGNATURE_HEADER,
            reason: format!("expected 32 bytes, got {}", signature.len()),
        });
    }
    let signed_at = millis / 1000;
    check_window(signed_at, request.now_unix, request.tolerance_secs)?;
    let secret_index = first_match(request.credentials.secrets, |s| {
        hmac_sha256_matches(s.as_bytes(), &[ts_text.as_bytes(), body], &signature)
    })?;
    Ok(Verification {
        secret_index,
        signed_at: Some(signed_at),
    })
}

pub(crate) fn parse(headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let v = parse_body(body)?;
    let ty = str_at(&v, &["type"]).ok_or(ParseError::MissingField("type"))?;
    let (mut event, identity_field) = if ty == REFUND_TYPE {
        (refund_event(&v, ty, body)?, "data.refund.refund_id")
    } else {
        (payment_event(&v, ty, body)?, "data.payment.cf_payment_id")
    };
    if let Some(key) = header(headers, IDEMPOTENCY_HEADER) {
        event.event_id = key.to_owned();
    } else if event.event_id.is_empty() {
        if event.kind != EventKind::Other {
            return Err(ParseError::MissingField(identity_field));
        }
        event.event_id = body_digest_id(ty, body);
    }
    Ok(event)
}

fn customer_email(v: &Value) -> Option<String> {
    str_at(v, &["data", "customer_details", "customer_email"]).map(str::to_owned)
}

/// A payment event; `event_id` is `{type}:{cf_payment_id}:{payment_status}`,
/// or empty without a payment id.
fn payment_event(v: &Value, ty: &str, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let p = |name| ["data", "payment", name];
    let o = |name| ["data", "order", name];
    let payment_id = id_at(v, &p("cf_payment_id"));
    let status = str_at(v, &p("payment_status")).unwrap_or("");
    let currency =
        currency_at(v, &p("payment_currency")).or_else(|| currency_at(v, &o("order_currency")));
    let cur = currency.as_deref();
    let amount_minor = match decimal_amount_at(
        body,
        &p("payment_amount"),
        cur,
        "data.payment.payment_amount",
    )? {
        Some(a) => Some(a),
        None => decimal_amount_at(body, &o("order_amount"), cur, "data.order.order_amount")?,
    };
    Ok(NormalizedEvent {
        provider: Gateway::Cashfree,
        event_id: payment_id
            .as_ref()
            .map(|id| format!("{ty}:{id}:{status}"))
            .unwrap_or_default(),
        event_type: ty.to_owned(),
        kind: match ty {
            "PAYMENT_SUCCESS_WEBHOOK" => EventKind::Captured,
            "PAYMENT_FAILED_WEBHOOK" | "PAYMENT_USER_DROPPED_WEBHOOK" => EventKind::Failed,
            _ => EventKind::Other,
        },
        payment_id,
        order_ref: id_at(v, &o("order_id")),
        amount_minor,
        currency,
        email: customer_email(v),
        refund_id: None,
        cumulative_refund: false,
    })
}

/// A refund status event; `event_id` is `{type}:{refund_id}:{refund_status}`
/// (one payment can have several refunds), or empty without a refund id.
fn refund_event(v: &Value, ty: &str, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let r = |name| ["data", "refund", name];
    let status = str_at(v, &r("refund_status")).unwrap_or("");
    let currency = currency_at(v, &r("refund_currency"));
    let refund_id = id_at(v, &r("refund_id")).or_else(|| id_at(v, &r("cf_refund_id")));
    Ok(NormalizedEvent {
        provider: Gateway::Cashfree,
        event_id: refund_id
            .as_ref()
            .map(|id| format!("{ty}:{id}:{status}"))
            .unwrap_or_default(),
        event_type: ty.to_owned(),
        kind: if status.eq_ignore_ascii_case("SUCCESS") {
            EventKind::Refunded
        } else {
            EventKind::Other
        },
        payment_id: id_at(v, &r("cf_payment_id")),
        order_ref: id_at(v, &r("order_id")),
        amount_minor: decimal_amount_at(
            body,
            &r("refund_amount"),
            currency.as_deref(),
            "data.refund.refund_amount",
        )?,
        currency,
        email: customer_email(v),
        refund_id,
        cumulative_refund: false,
    })
}
