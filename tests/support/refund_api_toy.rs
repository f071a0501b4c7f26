//! The toy gateway's refund endpoints in the stand-in (a part of
//! [`super::refund_api`]), as `oncehook_gateways`' toy folder (`toy/refund.rs`)
//! describes them: `POST /v1/refunds` (JSON `{"payment", "amount",
//! "currency", "key"}`, the header `toy-idempotency-key`) makes a refund,
//! `done` at once, and lists it at `GET /v1/payments/{payment}/refunds`
//! with its key. The key saves the first answer: the same key with the same
//! body replays it, with another body is `400 idempotency_error`; the
//! stand-in's key window and [`GatewayApi::forget_refund_keys`] apply as
//! to Stripe's and Razorpay's. A refusal is `400 {"error": {"code",
//! "message"}}`.
//!
//! The toy exists only where `oncehook-gateways` is built with its `toy`
//! feature (a test crate's dev-dependency turns it on): it is named here
//! by its name, never by its variant, so this crate builds either way.
//!
//! [`GatewayApi::forget_refund_keys`]: super::GatewayApi::forget_refund_keys

use std::time::Instant;

use oncehook_gateways::Gateway;
use serde_json::{Value, json};

use super::{Request, State};

/// The header that carries a toy refund's key.
const KEY_HEADER: &str = "toy-idempotency-key";

/// Whether `gateway` is the toy (which exists only with the `toy` feature).
pub(crate) fn is_toy(gateway: Gateway) -> bool {
    gateway.as_str() == "toy"
}

/// Whether `r` asks the toy for a refund (not a lookup).
pub(super) fn is_create(r: &Request) -> bool {
    r.method == "POST" && r.target.split('?').next() == Some("/v1/refunds")
}

/// The toy's answer to a refund request or a refund lookup; `None` for
/// anything else.
pub(super) fn answer(r: &Request, s: &mut State) -> Option<(u16, Value)> {
    if is_create(r) {
        return Some(create(r, s));
    }
    let path = r.target.split('?').next().unwrap_or("");
    let payment = path
        .strip_prefix("/v1/payments/")?
        .strip_suffix("/refunds")?;
    (r.method == "GET").then(|| {
        let refunds = s.lists.get(&refunds_path(payment)).cloned();
        (200, json!({ "refunds": refunds.unwrap_or_default() }))
    })
}

/// Where the payment's refunds are listed.
fn refunds_path(payment: &str) -> String {
    format!("/v1/payments/{payment}/refunds")
}

fn error(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

/// `POST /v1/refunds`: the key's saved answer, else a refund made (or
/// refused) and saved under the key.
fn create(r: &Request, s: &mut State) -> (u16, Value) {
    let sent: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let fingerprint = sent.to_string();
    let key = r.headers.get(KEY_HEADER).cloned().unwrap_or_default();
    s.refunds.posts.push(("/v1/refunds".into(), key.clone()));
    match s.refunds.replay(&key, &fingerprint) {
        Some(Ok(saved)) => return saved,
        Some(Err(())) => {
            let words = format!("the key {key} was first used with another body");
            return (400, error("idempotency_error", &words));
        }
        None => {}
    }
    let (Some(payment), Some(amount), false) = (
        sent["payment"].as_str().map(str::to_owned),
        sent["amount"].as_i64(),
        key.is_empty(),
    ) else {
        let words = "payment, amount and the toy-idempotency-key header are required";
        return (400, error("invalid_request", words));
    };
    if let Some((code, message)) = s.refunds.refusals.get(&payment) {
        return (400, error(code, message));
    }
    let id = format!("toyrf_standin{:06}", s.refunds.number());
    let refund = json!({"id": id, "payment": payment, "amount": amount,
                        "currency": sent["currency"], "key": sent["key"], "status": "done"});
    s.lists
        .entry(refunds_path(&payment))
        .or_default()
        .push(refund.clone());
    s.refunds.count(&[&payment], &id);
    s.refunds
        .keys
        .insert(key, (fingerprint, 200, refund.clone(), Instant::now()));
    (200, refund)
}
