//! Stripe's refund API, for the refunder: the request that refunds an
//! attempt at most once, the lookup that finds what Stripe already holds
//! for it, and how Stripe's answers read. No I/O: the refunder sends, this
//! builds and reads.
//!
//! `POST /v1/refunds` (a form: `payment_intent`, `amount` in minor units,
//! `metadata[oncehook_intent]` and, from the second attempt,
//! `metadata[oncehook_attempt]`) with `Idempotency-Key: <attempt's key>`
//! and the same Bearer key reconciliation uses. Stripe saves the status
//! and body of the first request made with a key and answers every retry
//! with the same key with them (a 500 or a refusal included,
//! <https://docs.stripe.com/api/idempotent_requests>); the same key with
//! other parameters is refused (`idempotency_error`), so the request is
//! built only from what the attempt fixed at its first send. Keys are
//! pruned after at least 24 hours, so the key is not the guarantee: before
//! every retry the refunder looks up the payment's refunds (`GET
//! /v1/refunds?payment_intent=…&limit=100`, then `&starting_after=` the
//! last one while `has_more`, <https://docs.stripe.com/api/refunds/list>)
//! and a refund whose metadata names the intent and the attempt is the one
//! made before. A re-approval after a refusal is a new attempt under a new
//! key, which never meets the refusal Stripe saved for the first.
//!
//! Answers: the Refund object (200) is accepted, its fact (the same one a
//! reconciliation pass or the `refund.updated` webhook gives) once its
//! status is `succeeded`; `failed` and `canceled` are failed refunds.
//! Errors (<https://docs.stripe.com/api/errors>) of type
//! `invalid_request_error` or `card_error` (`charge_already_refunded`,
//! `amount_too_large`, …) and `idempotency_error` are refusals in Stripe's
//! words; 409 (a request with the same key in flight), `lock_timeout`, 424,
//! 429, 5xx and `api_error` are "try again"; so are 401 and 403 (the
//! source's `api_key`, which an operator fixes) and any body that is not
//! Stripe's.

use serde_json::Value;
use url::form_urlencoded::Serializer;

use super::Stripe;
use crate::json::{parse_body, str_at};
use crate::reconcile::{ApiCredentials, ApiRequest, RequestError};
use crate::refund::answer::{self, words};
use crate::refund::lookup::attempts_refund;
use crate::refund::{GatewayRefunds, LookupPage, RefundAsk, RefundCall, RefundOutcome};

/// Stripe's longest idempotency key.
const MAX_KEY: usize = 255;
/// Stripe's longest metadata value.
const MAX_METADATA: usize = 500;
/// Refunds one lookup lists (the most Stripe's lists give).
pub const LOOKUP_LIMIT: usize = 100;
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
        let key = ask.key();
        if ask.intent_id.is_empty() || key.len() > MAX_KEY {
            return Err(RequestError::Invalid(format!(
                "the attempt's key must be 1 to {MAX_KEY} bytes to be Stripe's idempotency key"
            )));
        }
        ask.check_amount()?;
        let mut form = Serializer::new(String::new());
        form.append_pair("payment_intent", &ask.payment_id)
            .append_pair("amount", &ask.amount_minor.to_string())
            .append_pair("metadata[oncehook_intent]", &ask.intent_id);
        // The first attempt's parameters are the ones every release sent.
        if ask.attempt > 1 {
            form.append_pair("metadata[oncehook_attempt]", &ask.attempt.to_string());
        }
        if !ask.reason.is_empty() {
            let reason: String = ask.reason.chars().take(MAX_METADATA).collect();
            form.append_pair("metadata[oncehook_reason]", &reason);
        }
        Ok(
            ApiRequest::post_form("/v1/refunds".to_owned(), form.finish())
                .bearer(credentials.require("api_key")?)
                .header("idempotency-key", key),
        )
    }

    /// The payment intent's refunds: Stripe's key is kept for 24 hours
    /// only.
    fn lookup(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        page(ask, credentials, None)
    }

    /// The page after the refund `page.after` (Stripe's `starting_after`).
    fn lookup_page(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
        page_at: &LookupPage,
    ) -> Option<Result<ApiRequest, RequestError>> {
        match (&page_at.after, page_at.skip) {
            (None, 0) => Some(page(ask, credentials, None)),
            (None, _) => None,
            (Some(after), _) => Some(page(ask, credentials, Some(after))),
        }
    }

    fn read(&self, ask: &RefundAsk, call: RefundCall, status: u16, body: &[u8]) -> RefundOutcome {
        match status {
            200..=299 if call == RefundCall::Lookup => listed(ask, body),
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

/// A page of the payment intent's refunds, after `after`.
fn page(
    ask: &RefundAsk,
    credentials: &ApiCredentials,
    after: Option<&str>,
) -> Result<ApiRequest, RequestError> {
    if !ask.payment_id.starts_with("pi_") {
        return Err(RequestError::Invalid(format!(
            "{:?} is not a PaymentIntent (pi_…): Stripe refunds are listed by intent",
            ask.payment_id
        )));
    }
    let mut query = Serializer::new(String::new());
    query
        .append_pair("payment_intent", &ask.payment_id)
        .append_pair("limit", &LOOKUP_LIMIT.to_string());
    if let Some(after) = after {
        query.append_pair("starting_after", after);
    }
    Ok(ApiRequest::get(format!("/v1/refunds?{}", query.finish()))
        .bearer(credentials.require("api_key")?))
}

/// Whether a Refund object is the attempt's: its metadata names the
/// intent and the attempt (the first attempt's names none).
fn is_attempts(refund: &Value, ask: &RefundAsk) -> bool {
    str_at(refund, &["metadata", "oncehook_intent"]) == Some(ask.intent_id.as_str())
        && str_at(refund, &["metadata", "oncehook_attempt"]).unwrap_or("1")
            == ask.attempt.to_string()
}

/// A 2xx answer to the lookup: a list of Refund objects. The attempt's
/// refund, if listed ([`attempts_refund`]: several, made before oncehook
/// looked, are all facts); a page with more after it and none of the
/// attempt's asks for the next.
fn listed(ask: &RefundAsk, body: &[u8]) -> RefundOutcome {
    let Ok(list) = parse_body(body) else {
        return retry_unreadable(200, body);
    };
    let (Some("list"), Some(Value::Array(data))) = (str_at(&list, &["object"]), list.get("data"))
    else {
        return retry_unreadable(200, body);
    };
    let absent = match (list.get("has_more").and_then(Value::as_bool), data.last()) {
        (Some(true), Some(last)) => RefundOutcome::FullPage {
            listed: data.len(),
            last: str_at(last, &["id"]).map(str::to_owned),
        },
        _ => RefundOutcome::NotFound,
    };
    let mine = data.iter().filter(|r| is_refund(r) && is_attempts(r, ask));
    attempts_refund(mine, absent, |r| read_refund(ask, r))
}

/// A 2xx answer to the create: the Refund object.
fn refund(ask: &RefundAsk, body: &[u8]) -> RefundOutcome {
    match parse_body(body) {
        Ok(object) => read_refund(ask, &object),
        Err(_) => retry_unreadable(200, body),
    }
}

/// A Refund object Stripe holds for the attempt.
fn read_refund(ask: &RefundAsk, object: &Value) -> RefundOutcome {
    let Some(id) = str_at(object, &["id"]).filter(|_| is_refund(object)) else {
        return retry_unreadable(200, object.to_string().as_bytes());
    };
    if let Some(intent) = str_at(object, &["payment_intent"])
        && intent != ask.payment_id
    {
        return answer::payment_mismatch("Stripe", id, intent, &ask.payment_id);
    }
    match str_at(object, &["status"]) {
        Some(status @ ("failed" | "canceled")) => RefundOutcome::Failed {
            refund_id: id.to_owned(),
            code: format!("refund_{status}"),
            message: str_at(object, &["failure_reason"]).map_or_else(
                || format!("Stripe reports refund {id} {status}"),
                str::to_owned,
            ),
        },
        _ => RefundOutcome::Accepted {
            refund_id: id.to_owned(),
            // A succeeded refund is its fact; pending ones wait for the
            // webhook or a reconciliation pass (and so does one whose fact
            // cannot be read: Stripe holds it either way).
            facts: super::api::refund_fact(object)
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

#[cfg(test)]
#[path = "refund_tests.rs"]
mod tests;
