//! Cashfree's refund API (PG, the `x-api-version` reconciliation uses),
//! for the refunder: the request that refunds an order for an intent, the
//! lookup of the refund made under the attempt's key, and how the answers
//! read. No I/O: the refunder sends, this builds and reads.
//!
//! Cashfree refunds an order, not a payment: `POST
//! /pg/orders/{order_id}/refunds` (JSON: `refund_amount` in decimal major
//! units, written exactly, `refund_id`, `refund_note`), the order id picked
//! as reconciliation picks it (the order's one Cashfree reference, else the
//! shop's own reference: Cashfree's `order_id` is the merchant's). The
//! `refund_id` is the merchant's unique id of the refund
//! (<https://www.cashfree.com/docs/api-reference/payments/latest/refunds/create>,
//! 3 to 40 characters): the attempt's key (`RefundAsk::key`: the intent's
//! id, then `-2`, `-3` for a re-approval), or one derived from it when it
//! does not fit. A second create with the same `refund_id` makes no second
//! refund: Cashfree answers 409 ("Resource already present"). That answer
//! says nothing of the refund, so it reads as "try again", and every retry
//! starts with the lookup, `GET /pg/orders/{order_id}/refunds/{refund_id}`
//! (<https://www.cashfree.com/docs/api-reference/payments/latest/refunds/get>):
//! the refund entity, or Cashfree's 404 when there is none. The create
//! also carries Cashfree's documented `x-idempotency-key` header ("If the
//! request fails or times out, you can safely retry it using the same key
//! to avoid duplicate actions", on the same reference page), keyed by the
//! same `refund_id` ([`idempotency_key`]): a retry sends the same key, so
//! a second create while the first is still in flight (between its send
//! and the lookup's 404) rests on Cashfree's documented key, not only on
//! the 409 its SDK models show. The key replays a first answer, a 500
//! included; that replay reads as "try again", and the lookup before the
//! next attempt still finds a refund the first create made.
//!
//! Answers: a refund entity is accepted; `SUCCESS` is its fact (the one
//! reconciliation and the `REFUND_STATUS_WEBHOOK` give), `PENDING` and
//! `ONHOLD` have none yet, `CANCELLED` and `FAILED` are refusals. 400, 404
//! (to the create: no such order) and 422 are refusals in Cashfree's
//! words; 401, 403, 409, 429, 5xx and a body that is not Cashfree's are
//! "try again".

use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::Cashfree;
use crate::amount::{currency_exponent, format_decimal_minor};
use crate::json::{id_at, str_at};
use crate::reconcile::{ApiBody, ApiCredentials, ApiRequest, Method, RequestError, segment};
use crate::refund::{GatewayRefunds, RefundAsk, RefundCall, RefundOutcome, answer};

/// Cashfree's `refund_id` length.
const REFUND_ID_LEN: std::ops::RangeInclusive<usize> = 3..=40;
/// Cashfree's `refund_note` length.
const NOTE_LEN: std::ops::RangeInclusive<usize> = 3..=100;

impl GatewayRefunds for Cashfree {
    fn create(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        let order = order_id(ask)?;
        ask.check_amount()?;
        let amount = format_decimal_minor(ask.amount_minor, currency_exponent(&ask.currency));
        let mut body = format!(
            "{{\"refund_amount\":{amount},\"refund_id\":{}",
            Value::from(refund_id(&ask.key()))
        );
        let note: String = ask.reason.trim().chars().take(*NOTE_LEN.end()).collect();
        if NOTE_LEN.contains(&note.chars().count()) {
            body.push_str(&format!(",\"refund_note\":{}", Value::from(note)));
        }
        body.push('}');
        let request = ApiRequest {
            method: Method::Post,
            path: format!("/pg/orders/{}/refunds", segment(order)),
            headers: Vec::new(),
            body: Some(ApiBody {
                content_type: "application/json",
                bytes: body.into_bytes(),
            }),
        };
        Ok(authenticated(request, credentials)?
            .header("x-idempotency-key", idempotency_key(&ask.key())))
    }

    /// The refund made under the attempt's `refund_id`, if any.
    fn lookup(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        order_id(ask).and_then(|order| {
            let path = format!(
                "/pg/orders/{}/refunds/{}",
                segment(order),
                segment(&refund_id(&ask.key()))
            );
            authenticated(ApiRequest::get(path), credentials)
        })
    }

    fn read(&self, ask: &RefundAsk, call: RefundCall, status: u16, body: &[u8]) -> RefundOutcome {
        match (status, call) {
            (200..=299, _) => refund(ask, body),
            (404, RefundCall::Lookup) if cashfree_error(body).is_some() => RefundOutcome::NotFound,
            (409, RefundCall::Create) => RefundOutcome::Retry {
                reason: format!(
                    "Cashfree already holds refund_id {}: the lookup before the next \
                     try finds it",
                    refund_id(&ask.key())
                ),
            },
            (400 | 404 | 422, _) => match cashfree_error(body) {
                Some((code, message)) => RefundOutcome::Refused { code, message },
                None => unreadable(status, body),
            },
            _ => unreadable(status, body),
        }
    }
}

/// The Cashfree order the refund is of: the one the payment's delivery
/// named, else the order's Cashfree reference, else the shop's own
/// reference.
fn order_id(ask: &RefundAsk) -> Result<&str, RequestError> {
    if let Some(named) = ask.payment_order.as_deref().filter(|o| !o.is_empty()) {
        return Ok(named);
    }
    match ask.order.refs.as_slice() {
        [one] => Ok(one),
        [] if !ask.order.order_ref.is_empty() => Ok(&ask.order.order_ref),
        [] => Err(RequestError::Invalid(
            "a Cashfree refund needs the order's id (its reference)".into(),
        )),
        several => Err(RequestError::Invalid(format!(
            "the order has {} Cashfree orders: which one the payment {} is of is not known",
            several.len(),
            ask.payment_id
        ))),
    }
}

/// The `refund_id` of an attempt's key (`RefundAsk::key`): the key when
/// Cashfree takes it (3 to 40 letters, digits, `-`, `_`), else `ri_` and
/// 32 hex digits of its SHA-256 (the same on every try).
pub fn refund_id(key: &str) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if REFUND_ID_LEN.contains(&key.len()) && key.chars().all(allowed) {
        key.to_owned()
    } else {
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        format!("ri_{}", &digest[..32])
    }
}

/// The `x-idempotency-key` of an attempt's create: its `refund_id` (the
/// refund's idempotency identity at Cashfree), so every try of the
/// attempt sends the same key.
pub fn idempotency_key(key: &str) -> String {
    refund_id(key)
}

fn authenticated(
    request: ApiRequest,
    credentials: &ApiCredentials,
) -> Result<ApiRequest, RequestError> {
    Ok(request
        .secret_header("x-client-id", credentials.require("client_id")?)
        .secret_header("x-client-secret", credentials.require("client_secret")?)
        .header("x-api-version", credentials.require("api_version")?))
}

/// A 2xx answer: the refund entity.
fn refund(ask: &RefundAsk, body: &[u8]) -> RefundOutcome {
    let Some((raw, entity)) = object(body) else {
        return unreadable(200, body);
    };
    let Some(id) = id_at(&entity, &["refund_id"]).or_else(|| id_at(&entity, &["cf_refund_id"]))
    else {
        return unreadable(200, body);
    };
    let ours = refund_id(&ask.key());
    if id_at(&entity, &["refund_id"]).is_some_and(|r| r != ours) {
        return RefundOutcome::Refused {
            code: "refund_mismatch".into(),
            message: format!("Cashfree answered with refund {id}, not {ours}"),
        };
    }
    let status = str_at(&entity, &["refund_status"])
        .unwrap_or("")
        .to_ascii_uppercase();
    if status == "CANCELLED" || status == "FAILED" {
        return RefundOutcome::Failed {
            code: format!("refund_{}", status.to_ascii_lowercase()),
            message: str_at(&entity, &["status_description"]).map_or_else(
                || format!("Cashfree reports refund {id} {status}"),
                str::to_owned,
            ),
            refund_id: id,
        };
    }
    RefundOutcome::Accepted {
        facts: super::api::refund_fact(raw.get(), &entity)
            .ok()
            .flatten()
            .into_iter()
            .collect(),
        refund_id: id,
    }
}

/// A body that is one JSON object: its text and its value.
fn object(body: &[u8]) -> Option<(&RawValue, Value)> {
    let text = std::str::from_utf8(body).ok()?;
    let raw: &RawValue = serde_json::from_str(text).ok()?;
    let value: Value = serde_json::from_str(raw.get()).ok()?;
    value.is_object().then_some((raw, value))
}

/// Cashfree's error (`{"message", "code", "type"}`): its code and message.
fn cashfree_error(body: &[u8]) -> Option<(String, String)> {
    let (_, v) = object(body)?;
    let code = str_at(&v, &["code"]).or_else(|| str_at(&v, &["type"]))?;
    Some((
        code.to_owned(),
        str_at(&v, &["message"]).unwrap_or("").to_owned(),
    ))
}

fn unreadable(status: u16, body: &[u8]) -> RefundOutcome {
    answer::unreadable("Cashfree", status, body)
}

#[cfg(test)]
#[path = "refund_tests.rs"]
mod tests;
