//! Razorpay's refund API, for the refunder: the request that refunds a
//! payment for an intent, the lookup that finds what Razorpay already
//! holds for it, and how the answers read. No I/O: the refunder sends,
//! this builds and reads.
//!
//! `POST /v1/payments/{payment_id}/refund` (JSON: `amount` in minor units,
//! `receipt` = the attempt's key, `notes.oncehook_intent` = the intent id
//! and, from the second attempt, `notes.oncehook_attempt`), HTTP Basic as
//! reconciliation, and the header `X-Refund-Idempotency` with a key derived
//! from the attempt's (Razorpay's idempotent refund,
//! <https://razorpay.com/docs/api/refunds/normal-refunds-idempotent/>: at
//! least 10 letters, digits, `-` or `_`; the same key and body answer the
//! refund already made, another body is a `BAD_REQUEST`, a request while
//! the first is processed a 409). Razorpay documents no retention for
//! those keys, and the `receipt` is only "for your internal reference" (a
//! second refund with the same receipt is a second refund), so the key is
//! not the whole guarantee: before every retry the refunder looks up the
//! payment's refunds (`GET /v1/payments/{payment_id}/refunds?count=100`,
//! <https://razorpay.com/docs/api/refunds/fetch-multiple-refund-payment/>,
//! then `&skip=100`, `&skip=200`, … while a page is full and holds none of
//! the attempt's) and a refund whose `receipt` is the attempt's key (or
//! whose notes name the intent and the attempt) is the one made before.
//!
//! Answers: a refund entity is accepted; `processed` is its fact (the one
//! reconciliation and the `refund.processed` webhook give), `pending` has
//! none yet, `failed` is a refusal. `400 BAD_REQUEST_ERROR` ("The amount
//! must be at least INR 1.00", "Refund is not supported by the bank…",
//! "The id provided does not exist", …) is a refusal with Razorpay's
//! description; 401, 403, 409, 429, 5xx and a body that is not Razorpay's
//! are "try again".

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::Razorpay;
use crate::json::{id_at, parse_body, str_at};
use crate::reconcile::{ApiBody, ApiCredentials, ApiRequest, Method, RequestError, segment};
use crate::refund::lookup::attempts_refund;
use crate::refund::{GatewayRefunds, LookupPage, RefundAsk, RefundCall, RefundOutcome, answer};

/// Refunds one lookup lists (Razorpay lists 10 unless asked; 100 is the
/// most its list endpoints give).
pub const LOOKUP_COUNT: usize = 100;
/// The longest value of a Razorpay note.
const MAX_NOTE: usize = 256;

impl GatewayRefunds for Razorpay {
    fn create(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        ask.check_sendable("a Razorpay refund")?;
        let reason: String = ask.reason.chars().take(MAX_NOTE).collect();
        let key = ask.key();
        let mut notes = json!({"oncehook_intent": ask.intent_id, "reason": reason});
        // The first attempt's body is the one every release sent.
        if ask.attempt > 1 {
            notes["oncehook_attempt"] = json!(ask.attempt.to_string());
        }
        let body = json!({"amount": ask.amount_minor, "receipt": key, "notes": notes});
        let request = ApiRequest {
            method: Method::Post,
            path: format!("/v1/payments/{}/refund", segment(&ask.payment_id)),
            headers: Vec::new(),
            body: Some(ApiBody {
                content_type: "application/json",
                bytes: body.to_string().into_bytes(),
            }),
        };
        Ok(authenticated(request, credentials)?
            .header("x-refund-idempotency", idempotency_key(&key)))
    }

    /// The payment's refunds: Razorpay does not promise that a repeated
    /// request refunds once.
    fn lookup(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        page(ask, credentials, 0)
    }

    /// A page of the payment's refunds, `skip` in (Razorpay's `count` and
    /// `skip`).
    fn lookup_page(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
        at: &LookupPage,
    ) -> Option<Result<ApiRequest, RequestError>> {
        Some(page(ask, credentials, at.skip))
    }

    fn read(&self, ask: &RefundAsk, call: RefundCall, status: u16, body: &[u8]) -> RefundOutcome {
        match (status, call) {
            (200..=299, RefundCall::Create) => match parse_body(body) {
                Ok(entity) if id_at(&entity, &["id"]).is_some() => refund(ask, &entity),
                _ => unreadable(status, body),
            },
            (200..=299, RefundCall::Lookup) => lookup(ask, body),
            (400 | 404, _) => error(status, body),
            _ => unreadable(status, body),
        }
    }
}

/// The lookup's page `skip` refunds in.
fn page(
    ask: &RefundAsk,
    credentials: &ApiCredentials,
    skip: usize,
) -> Result<ApiRequest, RequestError> {
    ask.check_sendable("a Razorpay refund")?;
    let mut path = format!(
        "/v1/payments/{}/refunds?count={LOOKUP_COUNT}",
        segment(&ask.payment_id)
    );
    if skip > 0 {
        path.push_str(&format!("&skip={skip}"));
    }
    authenticated(ApiRequest::get(path), credentials)
}

fn authenticated(
    request: ApiRequest,
    credentials: &ApiCredentials,
) -> Result<ApiRequest, RequestError> {
    Ok(request.basic_auth(
        credentials.require("key_id")?,
        credentials.require("key_secret")?,
    ))
}

/// The `X-Refund-Idempotency` key of an intent: its id when Razorpay takes
/// it (10 or more letters, digits, `-`, `_`), else `ri-` and 32 hex digits
/// of its SHA-256 (the same on every attempt).
pub fn idempotency_key(intent_id: &str) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if intent_id.len() >= 10 && intent_id.chars().all(allowed) {
        intent_id.to_owned()
    } else {
        let digest = hex::encode(Sha256::digest(intent_id.as_bytes()));
        format!("ri-{}", &digest[..32])
    }
}

/// Whether a refund entity is the attempt's: its `receipt` is the
/// attempt's key, or its notes name the intent and the attempt (the first
/// attempt's notes name none).
fn is_attempts(entity: &Value, ask: &RefundAsk) -> bool {
    let attempt = ask.attempt.to_string();
    str_at(entity, &["receipt"]) == Some(ask.key().as_str())
        || (str_at(entity, &["notes", "oncehook_intent"]) == Some(ask.intent_id.as_str())
            && str_at(entity, &["notes", "oncehook_attempt"]).unwrap_or("1") == attempt)
}

/// A refund entity the gateway holds for the intent.
fn refund(ask: &RefundAsk, entity: &Value) -> RefundOutcome {
    let id = id_at(entity, &["id"]).unwrap_or_default();
    if let Some(payment) = id_at(entity, &["payment_id"])
        && payment != ask.payment_id
    {
        return answer::payment_mismatch("Razorpay", &id, &payment, &ask.payment_id);
    }
    if str_at(entity, &["status"]) == Some("failed") {
        return RefundOutcome::Failed {
            message: format!("Razorpay reports refund {id} failed"),
            refund_id: id,
            code: "refund_failed".into(),
        };
    }
    RefundOutcome::Accepted {
        refund_id: id,
        facts: super::api::refund_fact(entity)
            .ok()
            .flatten()
            .into_iter()
            .collect(),
    }
}

/// A page of the payment's refunds: the attempt's, if one is there
/// ([`attempts_refund`]: several, a refund made twice before oncehook
/// looked, are all facts); a full page without it asks for the next one.
/// An earlier attempt's refund (failed: a new attempt follows only a
/// refusal) is not this attempt's.
fn lookup(ask: &RefundAsk, body: &[u8]) -> RefundOutcome {
    let Some(items) = collection(body) else {
        return unreadable(200, body);
    };
    let absent = if items.len() >= LOOKUP_COUNT {
        RefundOutcome::FullPage {
            listed: items.len(),
            last: items.last().and_then(|i| id_at(i, &["id"])),
        }
    } else {
        RefundOutcome::NotFound
    };
    let mine = items.iter().filter(|i| is_attempts(i, ask));
    attempts_refund(mine, absent, |e| refund(ask, e))
}

/// The items of a collection answer, if it is one.
fn collection(body: &[u8]) -> Option<Vec<Value>> {
    let mut v = parse_body(body).ok()?;
    if str_at(&v, &["entity"]) != Some("collection") {
        return None;
    }
    match v.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => Some(items),
        _ => None,
    }
}

/// A 400 or 404: Razorpay's refusal in its words, or "try again" for a
/// body that is not Razorpay's error.
fn error(status: u16, body: &[u8]) -> RefundOutcome {
    let Ok(v) = parse_body(body) else {
        return unreadable(status, body);
    };
    match (
        str_at(&v, &["error", "code"]),
        str_at(&v, &["error", "description"]),
    ) {
        (Some(code), description) => RefundOutcome::Refused {
            code: code.to_owned(),
            message: description.unwrap_or("").to_owned(),
        },
        (None, _) => unreadable(status, body),
    }
}

fn unreadable(status: u16, body: &[u8]) -> RefundOutcome {
    answer::unreadable("Razorpay", status, body)
}

#[cfg(test)]
#[path = "refund_tests.rs"]
mod tests;
