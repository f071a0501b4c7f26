//! The toy gateway's refund API, for the refunder: the whole
//! [`GatewayRefunds`] recipe of `docs/adding-a-gateway.md` in one file —
//! the request that refunds a payment under the attempt's key, the lookup
//! that finds what the toy already holds for the attempt, and how each
//! answer reads. No I/O: the refunder sends, this builds and reads.
//!
//! `POST /v1/refunds` (JSON `{"payment", "amount", "currency", "key"}`,
//! `key` the attempt's [`RefundAsk::key`], sent again as the header
//! `toy-idempotency-key`), with the credential reconciliation uses
//! (`toy-api-key`). The lookup, made before every retry, is `GET
//! /v1/payments/{payment}/refunds`: `{"refunds": [...]}`, each refund with
//! the `key` it was made under; the one whose key is the attempt's is the
//! refund made before. It does not page.
//!
//! Answers: a refund `{"id", "payment", "amount", "currency", "key",
//! "status"}` is accepted — `done` with its fact, `pending` with none
//! yet — and `failed` is a failed refund; `400 {"error": {"code",
//! "message"}}` is a refusal in the toy's words; anything else (a 5xx, a
//! 429, a body that is not the toy's) is "try again".

use serde_json::{Value, json};

use super::Toy;
use crate::json::{currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::reconcile::{ApiBody, ApiCredentials, ApiRequest, Method, RequestError, segment};
use crate::refund::lookup::attempts_refund;
use crate::refund::{GatewayRefunds, RefundAsk, RefundCall, RefundOutcome, answer};
use crate::scheme::ParseError;
use crate::{EventKind, Gateway, NormalizedEvent};

/// The header that carries the attempt's key.
pub(crate) const KEY_HEADER: &str = "toy-idempotency-key";
/// The most refunds one lookup may list.
const MAX_REFUNDS: usize = 1_000;

impl GatewayRefunds for Toy {
    fn create(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        ask.check_sendable("a toy refund")?;
        let key = ask.key();
        let body = json!({"payment": ask.payment_id, "amount": ask.amount_minor,
                          "currency": ask.currency, "key": key});
        let request = ApiRequest {
            method: Method::Post,
            path: "/v1/refunds".to_owned(),
            headers: Vec::new(),
            body: Some(ApiBody {
                content_type: "application/json",
                bytes: body.to_string().into_bytes(),
            }),
        };
        Ok(authenticated(request, credentials)?.header(KEY_HEADER, key))
    }

    fn lookup(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        ask.check_sendable("a toy refund")?;
        let path = format!("/v1/payments/{}/refunds", segment(&ask.payment_id));
        authenticated(ApiRequest::get(path), credentials)
    }

    fn read(&self, ask: &RefundAsk, call: RefundCall, status: u16, body: &[u8]) -> RefundOutcome {
        match (status, call) {
            (200..=299, RefundCall::Create) => match parse_body(body) {
                Ok(refund) => read_refund(ask, &refund),
                Err(_) => unreadable(status, body),
            },
            (200..=299, RefundCall::Lookup) => listed(ask, body),
            (400, _) => refusal(body),
            _ => unreadable(status, body),
        }
    }
}

fn authenticated(
    request: ApiRequest,
    credentials: &ApiCredentials,
) -> Result<ApiRequest, RequestError> {
    Ok(request.secret_header("toy-api-key", credentials.require("api_key")?))
}

/// The lookup's answer: the attempt's refund (the one made under its
/// key), if listed ([`attempts_refund`]: several, made before oncehook
/// looked, are all facts), else "not found": the lookup does not page.
fn listed(ask: &RefundAsk, body: &[u8]) -> RefundOutcome {
    let refunds = match parse_body(body).map(|mut v| v.get_mut("refunds").map(Value::take)) {
        Ok(Some(Value::Array(refunds))) if refunds.len() <= MAX_REFUNDS => refunds,
        _ => return unreadable(200, body),
    };
    let key = ask.key();
    let mine = refunds
        .iter()
        .filter(|r| str_at(r, &["key"]) == Some(key.as_str()));
    attempts_refund(mine, RefundOutcome::NotFound, |r| read_refund(ask, r))
}

/// A refund the toy holds for the attempt.
fn read_refund(ask: &RefundAsk, refund: &Value) -> RefundOutcome {
    let Some(id) = id_at(refund, &["id"]) else {
        return unreadable(200, refund.to_string().as_bytes());
    };
    if let Some(payment) = id_at(refund, &["payment"])
        && payment != ask.payment_id
    {
        return answer::payment_mismatch("the toy", &id, &payment, &ask.payment_id);
    }
    match str_at(refund, &["status"]) {
        Some("done") => match refund_fact(&id, refund) {
            Ok(fact) => RefundOutcome::Accepted {
                refund_id: id,
                facts: vec![fact],
            },
            Err(e) => unreadable(200, format!("refund {id}: {e}").as_bytes()),
        },
        Some("pending") => RefundOutcome::Accepted {
            refund_id: id,
            facts: Vec::new(),
        },
        Some("failed") => RefundOutcome::Failed {
            message: format!("the toy reports refund {id} failed"),
            refund_id: id,
            code: "refund_failed".into(),
        },
        _ => unreadable(200, refund.to_string().as_bytes()),
    }
}

/// A done refund's fact, as the toy's `refunded` webhook carries it (one
/// fact per refund id), named `reconciliation:{refund id}:refunded` like
/// every fact the toy's API proves.
pub(crate) fn refund_fact(id: &str, refund: &Value) -> Result<NormalizedEvent, ParseError> {
    let payment = id_at(refund, &["payment"]).ok_or(ParseError::MissingField("payment"))?;
    let amount = int_amount_at(refund, &["amount"], "amount")?;
    Ok(NormalizedEvent {
        provider: Gateway::Toy,
        event_id: format!("reconciliation:{id}:{}", EventKind::Refunded.as_str()),
        event_type: "refunded".into(),
        kind: EventKind::Refunded,
        payment_id: Some(payment),
        order_ref: None,
        amount_minor: Some(amount.ok_or(ParseError::MissingField("amount"))?),
        currency: currency_at(refund, &["currency"]),
        email: None,
        refund_id: Some(id.to_owned()),
        cumulative_refund: false,
    })
}

/// A 400: the toy's refusal in its words, or "try again" for a body that
/// is not the toy's error.
fn refusal(body: &[u8]) -> RefundOutcome {
    let Ok(v) = parse_body(body) else {
        return unreadable(400, body);
    };
    match str_at(&v, &["error", "code"]) {
        Some(code) => RefundOutcome::Refused {
            code: code.to_owned(),
            message: str_at(&v, &["error", "message"]).unwrap_or("").to_owned(),
        },
        None => unreadable(400, body),
    }
}

fn unreadable(status: u16, body: &[u8]) -> RefundOutcome {
    answer::unreadable("the toy", status, body)
}

#[cfg(test)]
#[path = "refund_tests.rs"]
mod tests;
