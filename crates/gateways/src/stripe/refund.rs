//! Stripe's refund API, for the refunder: the request that refunds an
//! intent at most once, and how Stripe's answers read. No I/O: the
//! refunder sends, this builds and reads.
//!
//! `POST /v1/refunds` (a form: `payment_intent`, `amount` in minor units,
//! `metadata[oncehook_intent]`) with `Idempotency-Key: <intent id>` and the
//! same Bearer key reconciliation uses. The key is the guarantee
//! (<https://docs.stripe.com/api/idempotent_requests>): Stripe saves the
//! status and body of the first request made with a key and answers every
//! retry with the same key with them (a 500 included); the same key with
//! other parameters is refused (`idempotency_error`), so the request is
//! built from the intent alone and is the same on every attempt. Keys are
//! pruned after at least 24 hours: a retry later than that would refund
//! again, which is the refunder's to bound. There is nothing to look up
//! ([`GatewayRefunds::lookup`] is `None`).
//!
//! Answers: the Refund object (200) is accepted, its fact (the same one a
//! reconciliation pass or the `refund.updated` webhook gives) once its
//! status is `succeeded`; `failed` and `canceled` are refusals. Errors
//! (<https://docs.stripe.com/api/errors>) of type `invalid_request_error`
//! or `card_error` (`charge_already_refunded`, `amount_too_large`, …) and
//! `idempotency_error` are refusals in Stripe's words; 409 (a request with
//! the same key in flight), `lock_timeout`, 424, 429, 5xx and `api_error`
//! are "try again"; so are 401 and 403 (the source's `api_key`, which an
//! operator fixes) and any body that is not Stripe's.

use serde_json::Value;
use url::form_urlencoded::Serializer;

use super::Stripe;
use crate::json::{parse_body, str_at};
use crate::reconcile::{ApiCredentials, ApiRequest, RequestError};
use crate::refund::{GatewayRefunds, RefundAsk, RefundCall, RefundOutcome};

/// Stripe's longest idempotency key.
const MAX_KEY: usize = 255;
/// Stripe's longest metadata value.
const MAX_METADATA: usize = 500;
/// Error codes that mean "the same request may succeed later".
const TRANSIENT_CODES: &[&str] = &["lock_timeout", "idempotency_key_in_use", "rate_limit"];

impl GatewayRefunds for Stripe {
    fn create(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        if !ask.payment_id.starts_with("pi_") {
            return Err(RequestError::Invalid(format!(
                "{:?} is not a PaymentIntent (pi_…): Stripe refunds are made by intent",
                ask.payment_id
            )));
        }
        if ask.intent_id.is_empty() || ask.intent_id.len() > MAX_KEY {
            return Err(RequestError::Invalid(format!(
                "the intent id must be 1 to {MAX_KEY} bytes to be Stripe's idempotency key"
            )));
        }
        if ask.amount_minor <= 0 {
            return Err(RequestError::Invalid(format!(
                "refund amount {} is not positive",
                ask.amount_minor
            )));
        }
        let mut form = Serializer::new(String::new());
        form.append_pair("payment_intent", &ask.payment_id)
            .append_pair("amount", &ask.amount_minor.to_string())
            .append_pair("metadata[oncehook_intent]", &ask.intent_id);
        if !ask.reason.is_empty() {
            let reason: String = ask.reason.chars().take(MAX_METADATA).collect();
            form.append_pair("metadata[oncehook_reason]", &reason);
        }
        Ok(
            ApiRequest::post_form("/v1/refunds".to_owned(), form.finish())
                .bearer(credentials.require("api_key")?)
                .header("idempotency-key", ask.intent_id.clone()),
        )
    }

    /// The idempotency key is the guarantee: nothing to look up.
    fn lookup(
        &self,
        _ask: &RefundAsk,
        _credentials: &ApiCredentials,
    ) -> Option<Result<ApiRequest, RequestError>> {
        None
    }

    fn read(&self, ask: &RefundAsk, _call: RefundCall, status: u16, body: &[u8]) -> RefundOutcome {
        match status {
            200..=299 => refund(ask, body),
            401 | 403 => RefundOutcome::Retry {
                reason: format!(
                    "Stripe refused the source's api_key ({status}): {}",
                    words(body)
                ),
            },
            409 | 424 | 429 | 500..=599 => RefundOutcome::Retry {
                reason: format!("Stripe answered {status}: {}", words(body)),
            },
            _ => error(status, body),
        }
    }
}

/// A 2xx answer: the Refund object.
fn refund(ask: &RefundAsk, body: &[u8]) -> RefundOutcome {
    let Ok(object) = parse_body(body) else {
        return retry_unreadable(200, body);
    };
    let Some(id) = str_at(&object, &["id"]).filter(|_| is_refund(&object)) else {
        return retry_unreadable(200, body);
    };
    if let Some(intent) = str_at(&object, &["payment_intent"])
        && intent != ask.payment_id
    {
        return RefundOutcome::Refused {
            code: "payment_mismatch".into(),
            message: format!(
                "Stripe answered with refund {id} of {intent}, not of {}",
                ask.payment_id
            ),
        };
    }
    match str_at(&object, &["status"]) {
        Some(status @ ("failed" | "canceled")) => RefundOutcome::Refused {
            code: format!("refund_{status}"),
            message: str_at(&object, &["failure_reason"]).map_or_else(
                || format!("Stripe reports refund {id} {status}"),
                str::to_owned,
            ),
        },
        _ => RefundOutcome::Accepted {
            refund_id: id.to_owned(),
            // A succeeded refund is its fact; pending ones wait for the
            // webhook or a reconciliation pass (and so does one whose fact
            // cannot be read: Stripe holds it either way).
            facts: super::api::refund_fact(&object)
                .ok()
                .flatten()
                .into_iter()
                .collect(),
        },
    }
}

fn is_refund(object: &Value) -> bool {
    str_at(object, &["object"]).is_none_or(|o| o == "refund")
}

/// A non-2xx answer that is neither transient by its status nor a key
/// problem: Stripe's error object decides.
fn error(status: u16, body: &[u8]) -> RefundOutcome {
    let Ok(v) = parse_body(body) else {
        return retry_unreadable(status, body);
    };
    let (Some(kind), code) = (
        str_at(&v, &["error", "type"]),
        str_at(&v, &["error", "code"]),
    ) else {
        return retry_unreadable(status, body);
    };
    let message = str_at(&v, &["error", "message"]).unwrap_or("").to_owned();
    if kind == "api_error" || code.is_some_and(|c| TRANSIENT_CODES.contains(&c)) {
        return RefundOutcome::Retry {
            reason: format!(
                "Stripe answered {status} {}: {message}",
                code.unwrap_or(kind)
            ),
        };
    }
    RefundOutcome::Refused {
        code: code.unwrap_or(kind).to_owned(),
        message,
    }
}

fn retry_unreadable(status: u16, body: &[u8]) -> RefundOutcome {
    RefundOutcome::Retry {
        reason: format!("an answer ({status}) that is not Stripe's: {}", words(body)),
    }
}

/// The start of a body, for a message.
fn words(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}

#[cfg(test)]
#[path = "refund_tests.rs"]
mod tests;
