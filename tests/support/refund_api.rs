//! The refund endpoints of the gateway API stand-in (a part of
//! [`super::GatewayApi`]): each gateway's refund request, checked the way
//! the gateway checks a repeated one, and the lookups the refunder makes.
//! Every answer is built from the gateway's documented refund samples
//! (`oncehook_gateways::documented`); a refund made is stored as done
//! (`processed`, `succeeded`, `SUCCESS`, `success`) and listed where
//! reconciliation reads refunds, so the stand-in stays one account.
//!
//! Repeats, as each gateway documents them:
//! - Stripe (`POST /v1/refunds`): the `Idempotency-Key` saves the first
//!   answer, a refusal included (its endpoint began executing); the same
//!   key with the same parameters replays it, with other parameters is
//!   `400 idempotency_error`. `GET /v1/refunds?payment_intent=` lists the
//!   refunds with their metadata.
//! - Razorpay (`POST /v1/payments/{id}/refund`): the `receipt` dedupes
//!   nothing (a repeated POST is a second refund); the
//!   `X-Refund-Idempotency` key answers the refund already made for the
//!   same body and `400 BAD_REQUEST_ERROR` for another.
//! - Cashfree (`POST /pg/orders/{order_id}/refunds`): a `refund_id` the
//!   order already has is `409`; `GET …/refunds/{refund_id}` finds it.
//! - PayU (`cancel_refund_transaction`): a token the transaction already
//!   has is error 106 "Token already exists"; `check_action_status` lists
//!   the refunds with their tokens.
//! - The toy gateway (`POST /v1/refunds`, in `refund_api_toy.rs`): its
//!   `toy-idempotency-key` saves the first answer, as Stripe's;
//!   `GET /v1/payments/{payment}/refunds` lists the refunds with their keys.
//!
//! [`GatewayApi::forget_refund_keys`] drops Stripe's, Razorpay's and the
//! toy's saved keys, as their expiry would, and
//! [`GatewayApi::refund_key_window`] keeps each for that long only: only a
//! lookup then stands between a retry and a second refund.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use oncehook_gateways::Gateway;
use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use super::{Fault, GatewayApi, Request, State};

#[path = "refund_api_toy.rs"]
pub(super) mod toy;

/// What the refund endpoints hold.
#[derive(Default)]
pub(super) struct Refunds {
    /// Saved answers by idempotency key (Stripe's, Razorpay's, the
    /// toy's): the request's parameters and the answer, and when it was
    /// saved.
    keys: HashMap<String, (String, u16, Value, Instant)>,
    /// How long a saved key is kept (`None`: for the test's life).
    key_window: Option<Duration>,
    /// The body of every refund request, faulted ones included.
    pub(super) bodies: Vec<String>,
    /// The ids of the refunds made, by payment.
    made: HashMap<String, Vec<String>>,
    /// Every refund request: its path and its key.
    posts: Vec<(String, String)>,
    /// Refusals by payment: code and message.
    refusals: HashMap<String, (String, String)>,
    /// PayU's refund actions by mihpayid.
    payu_actions: HashMap<String, Vec<Value>>,
    /// The last refund number given.
    last: u64,
}

impl GatewayApi {
    /// Refunds actually made for `payment_id` (Stripe's `pi_…`, Razorpay's
    /// `pay_…`, Cashfree's `cf_payment_id`, PayU's mihpayid or txnid), not
    /// counting answers replayed for a repeated key.
    pub fn refunds_made(&self, payment_id: &str) -> usize {
        self.with(|s| s.refunds.made.get(payment_id).map_or(0, Vec::len))
    }

    /// The gateway's ids of the refunds made for `payment_id`, oldest
    /// first: Stripe's `re_…`, Razorpay's `rfnd_…`, Cashfree's `refund_id`
    /// (the merchant's, as its facts name the refund), PayU's `request_id`.
    pub fn refund_ids(&self, payment_id: &str) -> Vec<String> {
        self.with(|s| s.refunds.made.get(payment_id).cloned().unwrap_or_default())
    }

    /// Every refund request so far, in order: its path and its key
    /// (Stripe's `Idempotency-Key`, Razorpay's `X-Refund-Idempotency` or
    /// else its `receipt`, Cashfree's `refund_id`, PayU's token).
    pub fn refund_posts(&self) -> Vec<(String, String)> {
        self.with(|s| s.refunds.posts.clone())
    }

    /// Refunds of `payment_id` are refused with the gateway's own refusal,
    /// carrying `code` and `message`: Stripe `400 invalid_request_error`
    /// with that `code` (`charge_already_refunded`, `amount_too_large`);
    /// Razorpay `400` with that `error.code` (`BAD_REQUEST_ERROR`) and
    /// `description`; Cashfree `400` with that `code` and `message`; PayU
    /// `status: 0` with that `error_code` (`105`) and `msg`.
    pub fn refuse_refunds(&self, payment_id: &str, code: &str, message: &str) {
        self.with(|s| {
            s.refunds
                .refusals
                .insert(payment_id.to_owned(), (code.to_owned(), message.to_owned()))
        });
    }

    /// Refunds of `payment_id` are made again.
    pub fn accept_refunds(&self, payment_id: &str) {
        self.with(|s| s.refunds.refusals.remove(payment_id));
    }

    /// The next refund requests (creates only, not lookups) get these
    /// faults, one each, before any of [`GatewayApi::faults`]. A refund
    /// made while its answer is lost: [`Fault::Lost`], [`Fault::Dropped`],
    /// or [`Fault::Slow`] longer than the client waits.
    pub fn refund_faults(&self, faults: &[Fault]) {
        self.with(|s| s.refund_faults.extend(faults.iter().cloned()));
    }

    /// The next refund request is made at once and answered only after
    /// `held` (longer than the refunder waits: it never hears).
    pub fn hold_refund_answer(&self, held: Duration) {
        self.refund_faults(&[Fault::Slow(held)]);
    }

    /// The next refund request is made at once and answered only when
    /// the returned gate is opened.
    pub fn gate_refund_answer(&self) -> super::Gate {
        let gate = super::Gate::default();
        self.refund_faults(&[Fault::Gated(gate.clone())]);
        gate
    }

    /// Stripe, Razorpay and the toy forget the idempotency keys seen so
    /// far (as when their keys expire): a repeated request refunds again.
    pub fn forget_refund_keys(&self) {
        self.with(|s| s.refunds.keys.clear());
    }

    /// Stripe, Razorpay and the toy keep each idempotency key for
    /// `window` after its first request only (as their retention would,
    /// shortened).
    pub fn refund_key_window(&self, window: Duration) {
        self.with(|s| s.refunds.key_window = Some(window));
    }

    /// The body of every refund request so far (not lookups), in order,
    /// those a fault answered included: what the refunder sent.
    pub fn refund_bodies(&self) -> Vec<String> {
        self.with(|s| s.refunds.bodies.clone())
    }
}

/// Whether `r` asks `gateway` for a refund (not a lookup).
pub(super) fn is_create(gateway: Gateway, r: &Request) -> bool {
    let path = r.target.split('?').next().unwrap_or("");
    r.method == "POST"
        && match gateway {
            Gateway::Stripe => path == "/v1/refunds",
            Gateway::Razorpay => path.starts_with("/v1/payments/") && path.ends_with("/refund"),
            Gateway::Cashfree => path.starts_with("/pg/orders/") && path.ends_with("/refunds"),
            Gateway::Payu => form(r).get("command").map(String::as_str) == Some(PAYU_REFUND),
            _ if toy::is_toy(gateway) => toy::is_create(r),
            _ => false,
        }
}

/// The answer to a refund request or a refund lookup the reconciliation
/// endpoints do not serve; `None` for anything else.
pub(super) fn answer(gateway: Gateway, r: &Request, s: &mut State) -> Option<(u16, Value)> {
    let path = r.target.split('?').next().unwrap_or("");
    match gateway {
        _ if toy::is_toy(gateway) => toy::answer(r, s),
        _ if is_create(gateway, r) => Some(create(gateway, r, s)),
        Gateway::Cashfree if r.method == "GET" => cashfree_lookup(path, s),
        Gateway::Payu if form(r).get("command").map(String::as_str) == Some(PAYU_STATUS) => {
            Some(payu_signed(r).unwrap_or_else(|| payu_lookup(r, s)))
        }
        _ => None,
    }
}

const PAYU_REFUND: &str = "cancel_refund_transaction";
const PAYU_STATUS: &str = "check_action_status";

fn create(gateway: Gateway, r: &Request, s: &mut State) -> (u16, Value) {
    match gateway {
        Gateway::Stripe => stripe(r, s),
        Gateway::Razorpay => razorpay(r, s),
        Gateway::Cashfree => cashfree(r, s),
        _ => payu_signed(r).unwrap_or_else(|| payu(r, s)),
    }
}

fn form(r: &Request) -> HashMap<String, String> {
    url::form_urlencoded::parse(&r.body).into_owned().collect()
}

impl Refunds {
    fn number(&mut self) -> u64 {
        self.last += 1;
        self.last
    }

    /// Records refund `refund_id` made for the payment (known by each of
    /// `payment_ids`).
    fn count(&mut self, payment_ids: &[&str], refund_id: &str) {
        for id in payment_ids {
            self.made
                .entry((*id).to_owned())
                .or_default()
                .push(refund_id.to_owned());
        }
    }

    /// The saved answer for `key`, if the same parameters were sent with
    /// it; `Err` with the first parameters if others were.
    fn replay(&self, key: &str, params: &str) -> Option<Result<(u16, Value), ()>> {
        let (first, status, body, at) = self.keys.get(key)?;
        if self.key_window.is_some_and(|w| at.elapsed() >= w) {
            return None;
        }
        Some(if first == params {
            Ok((*status, body.clone()))
        } else {
            Err(())
        })
    }
}

/// Stripe: `POST /v1/refunds`, the form's parameters under the key.
fn stripe(r: &Request, s: &mut State) -> (u16, Value) {
    let mut params: Vec<(String, String)> =
        url::form_urlencoded::parse(&r.body).into_owned().collect();
    params.sort();
    let fingerprint = format!("{params:?}");
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let key = r.headers.get("idempotency-key").cloned();
    s.refunds
        .posts
        .push(("/v1/refunds".into(), key.clone().unwrap_or_default()));
    match key
        .as_deref()
        .and_then(|k| s.refunds.replay(k, &fingerprint))
    {
        Some(Ok(saved)) => return saved,
        Some(Err(())) => {
            return (
                400,
                shapes::stripe_error(
                    "idempotency_error",
                    None,
                    &format!(
                        "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{}' if you meant to execute a different request.",
                        key.as_deref().unwrap_or("")
                    ),
                ),
            );
        }
        None => {}
    }
    let (Some(intent), Some(amount)) = (
        get("payment_intent"),
        get("amount").and_then(|a| a.parse::<i64>().ok()),
    ) else {
        return (
            400,
            shapes::stripe_error(
                "invalid_request_error",
                Some("parameter_missing"),
                "this stand-in refunds a payment_intent by amount",
            ),
        );
    };
    if let Some((code, message)) = s.refunds.refusals.get(&intent) {
        // The refund endpoint ran and refused: Stripe saves that answer
        // under the key and replays it to every request with the key.
        let refused = shapes::stripe_error("invalid_request_error", Some(code), message);
        if let Some(key) = key {
            s.refunds
                .keys
                .insert(key, (fingerprint, 400, refused.clone(), Instant::now()));
        }
        return (400, refused);
    }
    let currency = s
        .objects
        .get(&format!("/v1/payment_intents/{intent}"))
        .and_then(|i| i["currency"].as_str().map(str::to_owned))
        // Unknown intent: the currency of the signed samples' captures.
        .unwrap_or_else(|| "inr".into());
    let metadata: serde_json::Map<String, Value> = params
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.strip_prefix("metadata[")?.strip_suffix(']')?.to_owned(),
                json!(v),
            ))
        })
        .collect();
    let id = format!("re_3Qstandin{:010}", s.refunds.number());
    let refund = shapes::stripe_refund_made(&id, &intent, amount, &currency, metadata);
    s.lists
        .entry(format!("/v1/refunds?payment_intent={intent}"))
        .or_default()
        .push(refund.clone());
    s.refunds.count(&[&intent], &id);
    if let Some(key) = key {
        s.refunds
            .keys
            .insert(key, (fingerprint, 200, refund.clone(), Instant::now()));
    }
    (200, refund)
}

/// Razorpay: `POST /v1/payments/{id}/refund`, a JSON body.
fn razorpay(r: &Request, s: &mut State) -> (u16, Value) {
    let path = r.target.split('?').next().unwrap_or("");
    let payment = path
        .trim_start_matches("/v1/payments/")
        .trim_end_matches("/refund")
        .to_owned();
    let sent: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let fingerprint = sent.to_string();
    let key = r.headers.get("x-refund-idempotency").cloned();
    let receipt = sent["receipt"].as_str().map(str::to_owned);
    let shown = key.clone().or_else(|| receipt.clone()).unwrap_or_default();
    s.refunds.posts.push((path.to_owned(), shown));
    match key
        .as_deref()
        .and_then(|k| s.refunds.replay(k, &fingerprint))
    {
        Some(Ok(saved)) => return saved,
        Some(Err(())) => {
            return (
                400,
                shapes::razorpay_error(
                    "BAD_REQUEST_ERROR",
                    "the idempotency key was used with another request body",
                ),
            );
        }
        None => {}
    }
    let Some(amount) = sent["amount"].as_i64() else {
        return (
            400,
            shapes::razorpay_error("BAD_REQUEST_ERROR", "The amount must be an integer."),
        );
    };
    if let Some((code, message)) = s.refunds.refusals.get(&payment) {
        return (400, shapes::razorpay_error(code, message));
    }
    let id = format!("rfnd_Standin{:08}", s.refunds.number());
    let refund = shapes::razorpay_refund_made(
        &id,
        &payment,
        amount,
        receipt.as_deref(),
        sent["notes"].clone(),
    );
    s.lists
        .entry(format!("/v1/payments/{payment}/refunds"))
        .or_default()
        .push(refund.clone());
    s.refunds.count(&[&payment], &id);
    if let Some(key) = key {
        s.refunds
            .keys
            .insert(key, (fingerprint, 200, refund.clone(), Instant::now()));
    }
    (200, refund)
}

/// Cashfree: `POST /pg/orders/{order_id}/refunds`; a `refund_id` the order
/// already has is a 409.
fn cashfree(r: &Request, s: &mut State) -> (u16, Value) {
    let path = r.target.split('?').next().unwrap_or("").to_owned();
    let order = path
        .trim_start_matches("/pg/orders/")
        .trim_end_matches("/refunds")
        .to_owned();
    let sent: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let refund_id = sent["refund_id"].as_str().unwrap_or("").to_owned();
    s.refunds.posts.push((path.clone(), refund_id.clone()));
    let Some(payments) = s.lists.get(&format!("/pg/orders/{order}/payments")) else {
        return (404, super::shapes::cashfree_not_found());
    };
    let paid = payments.iter().find(|p| p["payment_status"] == "SUCCESS");
    let Some(payment) = paid.map(|p| p["cf_payment_id"].clone()) else {
        return (
            400,
            shapes::cashfree_error(
                "refund_request_invalid",
                "the order has no successful payment to refund",
            ),
        );
    };
    let (Some(amount), false) = (sent["refund_amount"].as_f64(), refund_id.is_empty()) else {
        return (
            400,
            shapes::cashfree_error(
                "refund_request_invalid",
                "refund_amount and refund_id are required",
            ),
        );
    };
    let known = s
        .lists
        .get(&path)
        .is_some_and(|l| l.iter().any(|f| f["refund_id"] == refund_id.as_str()));
    if known {
        return (
            409,
            shapes::cashfree_error(
                "refund_already_exists",
                &format!("refund with refund_id {refund_id} already exists"),
            ),
        );
    }
    let payment_key = payment
        .as_str()
        .map_or_else(|| payment.to_string(), str::to_owned);
    if let Some((code, message)) = s.refunds.refusals.get(&payment_key) {
        return (400, shapes::cashfree_error(code, message));
    }
    let mut refund = super::shapes::cashfree_refund(0, &refund_id, &order, amount);
    refund["cf_payment_id"] = payment;
    refund["cf_refund_id"] = json!(format!("{}", s.refunds.number()));
    refund["refund_note"] = sent["refund_note"].clone();
    s.lists.entry(path).or_default().push(refund.clone());
    s.refunds.count(&[&payment_key], &refund_id);
    (200, refund)
}

/// Cashfree: `GET /pg/orders/{order_id}/refunds/{refund_id}`.
fn cashfree_lookup(path: &str, s: &State) -> Option<(u16, Value)> {
    let rest = path.strip_prefix("/pg/orders/")?;
    let (order, refund_id) = rest.split_once("/refunds/")?;
    let found = s
        .lists
        .get(&format!("/pg/orders/{order}/refunds"))
        .and_then(|list| list.iter().find(|f| f["refund_id"] == refund_id));
    Some(match found {
        Some(refund) => (200, refund.clone()),
        None => (404, super::shapes::cashfree_not_found()),
    })
}

/// PayU's answer to a form whose hash is not `sha512(key|command|var1|salt)`.
fn payu_signed(r: &Request) -> Option<(u16, Value)> {
    let form = form(r);
    let get = |k: &str| form.get(k).map(String::as_str).unwrap_or("");
    let expected = hex::encode(Sha512::digest(
        format!(
            "{}|{}|{}|{}",
            get("key"),
            get("command"),
            get("var1"),
            crate::Secrets::PAYU
        )
        .as_bytes(),
    ));
    (get("hash") != expected).then(|| (200, json!({"status": 0, "msg": "Invalid Hash."})))
}

/// PayU: `cancel_refund_transaction` (var1 mihpayid, var2 token, var3 amount).
fn payu(r: &Request, s: &mut State) -> (u16, Value) {
    let form = form(r);
    let get = |k: &str| form.get(k).cloned().unwrap_or_default();
    let (mihpayid, token, amount) = (get("var1"), get("var2"), get("var3"));
    s.refunds.posts.push((r.target.clone(), token.clone()));
    let txnid = s
        .payu
        .iter()
        .find(|(_, t)| t["mihpayid"] == mihpayid.as_str())
        .map(|(txnid, _)| txnid.clone());
    let Some(txnid) = txnid else {
        return (
            200,
            shapes::payu_refused("116", "Refund FAILURE - Transaction Not Found", &mihpayid),
        );
    };
    let held = s
        .refunds
        .payu_actions
        .get(&mihpayid)
        .is_some_and(|a| a.iter().any(|a| a["token"] == token.as_str()));
    if token.is_empty() || held {
        return (
            200,
            shapes::payu_refused("106", "Refund FAILURE - Token already exists.", &mihpayid),
        );
    }
    let refusal = s
        .refunds
        .refusals
        .get(&mihpayid)
        .or_else(|| s.refunds.refusals.get(&txnid))
        .cloned();
    if let Some((code, message)) = refusal {
        return (200, shapes::payu_refused(&code, &message, &mihpayid));
    }
    let request_id = format!("{}", 131_000_000 + s.refunds.number());
    let action = shapes::payu_refund_action(&mihpayid, &request_id, &token, &amount);
    s.refunds
        .payu_actions
        .entry(mihpayid.clone())
        .or_default()
        .push(action);
    s.refunds.count(&[&mihpayid, &txnid], &request_id);
    (200, shapes::payu_refund_queued(&request_id, &mihpayid))
}

/// PayU: `check_action_status` by PayU id (var1).
fn payu_lookup(r: &Request, s: &State) -> (u16, Value) {
    let mihpayid = form(r).get("var1").cloned().unwrap_or_default();
    match s.refunds.payu_actions.get(&mihpayid) {
        Some(actions) => (200, shapes::payu_action_status(&mihpayid, actions)),
        None => (200, shapes::payu_no_action(&mihpayid)),
    }
}

/// The gateways' documented refund answers with a test's values in them.
pub mod shapes {
    use oncehook_gateways::documented::{cashfree, payu, razorpay, stripe};
    use serde_json::{Map, Value, json};

    use crate::gateway_api::shapes::{documented, filled};

    /// A Stripe refund made, succeeded, with its metadata.
    pub fn stripe_refund_made(
        id: &str,
        intent: &str,
        amount: i64,
        currency: &str,
        metadata: Map<String, Value>,
    ) -> Value {
        filled(
            documented(stripe::REFUND),
            &[
                ("id", json!(id)),
                ("amount", json!(amount)),
                ("currency", json!(currency)),
                ("payment_intent", json!(intent)),
                ("status", json!("succeeded")),
                ("metadata", Value::Object(metadata)),
            ],
        )
    }

    /// Stripe's error object (https://docs.stripe.com/api/errors; Stripe
    /// publishes its fields, not a sample body).
    pub fn stripe_error(kind: &str, code: Option<&str>, message: &str) -> Value {
        json!({"error": {"type": kind, "code": code, "message": message, "param": "amount",
                         "doc_url": code.map(|c| format!("https://stripe.com/docs/error-codes/{}", c.replace('_', "-")))}})
    }

    /// A Razorpay refund made, processed (the documented refund made).
    pub fn razorpay_refund_made(
        id: &str,
        payment_id: &str,
        amount: i64,
        receipt: Option<&str>,
        notes: Value,
    ) -> Value {
        filled(
            documented(razorpay::REFUND_CREATE),
            &[
                ("id", json!(id)),
                ("payment_id", json!(payment_id)),
                ("amount", json!(amount)),
                ("receipt", json!(receipt)),
                ("notes", if notes.is_object() { notes } else { json!([]) }),
                ("status", json!("processed")),
            ],
        )
    }

    /// Razorpay's error (the documented refusal of a refund), with `code`
    /// and `description`.
    pub fn razorpay_error(code: &str, description: &str) -> Value {
        let mut v = documented(razorpay::REFUND_NOT_SUPPORTED);
        v["error"]["code"] = json!(code);
        v["error"]["description"] = json!(description);
        v
    }

    /// Cashfree's error (the documented 404's fields), with `code` and
    /// `message`.
    pub fn cashfree_error(code: &str, message: &str) -> Value {
        filled(
            documented(cashfree::NOT_FOUND),
            &[
                ("code", json!(code)),
                ("message", json!(message)),
                ("type", json!("invalid_request_error")),
            ],
        )
    }

    /// PayU's refund queued (the documented answer).
    pub fn payu_refund_queued(request_id: &str, mihpayid: &str) -> Value {
        filled(
            documented(payu::REFUND_QUEUED),
            &[
                ("request_id", json!(request_id)),
                ("mihpayid", json!(mihpayid)),
            ],
        )
    }

    /// PayU's refusal (the documented "Invalid amount"), with `code` and
    /// `msg`.
    pub fn payu_refused(code: &str, msg: &str, mihpayid: &str) -> Value {
        let code = code
            .parse::<i64>()
            .map_or_else(|_| json!(code), |n| json!(n));
        filled(
            documented(payu::REFUND_INVALID_AMOUNT),
            &[
                ("error_code", code),
                ("msg", json!(msg)),
                ("mihpayid", json!(mihpayid)),
            ],
        )
    }

    /// A PayU refund action, successful (the documented refund action).
    pub fn payu_refund_action(
        mihpayid: &str,
        request_id: &str,
        token: &str,
        amount: &str,
    ) -> Value {
        let answer = documented(payu::CHECK_ACTION_STATUS);
        let template = answer["transaction_details"]
            .as_object()
            .and_then(|d| d.values().next())
            .and_then(|by_request| by_request.as_object())
            .and_then(|by_request| by_request.values().find(|a| a["action"] == "refund"))
            .cloned()
            .expect("a documented refund action");
        filled(
            template,
            &[
                ("mihpayid", json!(mihpayid)),
                ("request_id", json!(request_id)),
                ("token", json!(token)),
                ("amt", json!(amount)),
                ("status", json!("success")),
            ],
        )
    }

    /// PayU's action status of a transaction: its refund actions.
    pub fn payu_action_status(mihpayid: &str, actions: &[Value]) -> Value {
        let by_request: Map<String, Value> = actions
            .iter()
            .map(|a| {
                (
                    a["request_id"].as_str().unwrap_or_default().to_owned(),
                    a.clone(),
                )
            })
            .collect();
        let mut answer = documented(payu::CHECK_ACTION_STATUS);
        answer["transaction_details"] = json!({ mihpayid: by_request });
        answer
    }

    /// PayU's action status of a transaction with no action.
    pub fn payu_no_action(mihpayid: &str) -> Value {
        let mut answer = documented(payu::CHECK_ACTION_STATUS_NOT_FOUND);
        answer["transaction_details"] = json!({ mihpayid: "No action status found" });
        answer
    }
}

/// The stand-in driven by the gateways' own refund requests and read by
/// their own readers (no database, no binaries): what the refunder would
/// see, each gateway's repeat rule, and the lost answers.
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use oncehook_gateways::Credentials;
    use oncehook_gateways::reconcile::{self, ApiCredentials, ApiRequest, Method, OrderNames};
    use oncehook_gateways::refund::{RefundAsk, RefundCall, RefundOutcome};
    use oncehook_gateways::sample::SAMPLE_PAYU_KEY;

    use super::super::{ApiCredentials as Keys, shapes as gw_shapes};
    use super::*;

    fn credentials(gateway: Gateway) -> ApiCredentials {
        let pairs: &[(&str, &str)] = match gateway {
            Gateway::Razorpay => &[
                ("key_id", Keys::RAZORPAY_KEY_ID),
                ("key_secret", Keys::RAZORPAY_KEY_SECRET),
            ],
            Gateway::Cashfree => &[
                ("client_id", Keys::CASHFREE_CLIENT_ID),
                ("client_secret", Keys::CASHFREE_CLIENT_SECRET),
            ],
            Gateway::Stripe => &[("api_key", Keys::STRIPE_API_KEY)],
            _ => &[],
        };
        let table: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let salts = vec![crate::Secrets::PAYU.to_owned()];
        let source = Credentials::new(&salts).with_merchant_key(Some(SAMPLE_PAYU_KEY));
        reconcile::credentials(gateway, &table, source).expect("credentials")
    }

    /// Sends `request` to the stand-in: its status and body, or `None`
    /// when no answer came.
    async fn send(api: &GatewayApi, request: ApiRequest) -> Option<(u16, Vec<u8>)> {
        let url = format!("{}{}", api.base, request.path);
        let client = reqwest::Client::new();
        let mut call = match request.method {
            Method::Get => client.get(url),
            Method::Post => client.post(url),
        };
        for h in &request.headers {
            call = call.header(h.name, h.value.as_str());
        }
        if let Some(body) = request.body {
            call = call
                .header("content-type", body.content_type)
                .body(body.bytes);
        }
        let answer = call.send().await.ok()?;
        let status = answer.status().as_u16();
        Some((status, answer.bytes().await.ok()?.to_vec()))
    }

    /// One call as the refunder makes it, read by the gateway's reader;
    /// `None` when no answer came.
    async fn call(api: &GatewayApi, ask: &RefundAsk, what: RefundCall) -> Option<RefundOutcome> {
        let refunds = api.gateway.refunds().expect("a refund API");
        let creds = credentials(api.gateway);
        let request = match what {
            RefundCall::Create => refunds.create(ask, &creds),
            RefundCall::Lookup => refunds.lookup(ask, &creds),
        };
        let (status, body) = send(api, request.expect("a request")).await?;
        Some(refunds.read(ask, what, status, &body))
    }

    fn ask(payment_id: &str, order_ref: &str) -> RefundAsk {
        RefundAsk {
            intent_id: "ri_0f1e2d3c4b5a69788796a5b4".into(),
            attempt: 1,
            payment_id: payment_id.into(),
            amount_minor: 50_000,
            currency: "INR".into(),
            order: OrderNames {
                order_ref: order_ref.into(),
                ..OrderNames::default()
            },
            reason: "duplicate_capture".into(),
            payment_order: None,
            gateway_payment_id: None,
        }
    }

    fn accepted(outcome: Option<RefundOutcome>) -> (String, usize) {
        match outcome {
            Some(RefundOutcome::Accepted { refund_id, facts }) => (refund_id, facts.len()),
            other => panic!("accepted: {other:?}"),
        }
    }

    #[tokio::test]
    async fn stripe_replays_a_key_refuses_other_parameters_and_forgets_on_expiry() {
        let api = GatewayApi::start(Gateway::Stripe).await;
        let ask = RefundAsk {
            currency: "EUR".into(),
            ..ask("pi_3Qdouble02", "o1")
        };
        api.refund_faults(&[Fault::Lost(500)]);
        let lost = call(&api, &ask, RefundCall::Create).await;
        assert!(
            matches!(lost, Some(RefundOutcome::Retry { .. })),
            "{lost:?}"
        );
        assert_eq!(
            api.refunds_made("pi_3Qdouble02"),
            1,
            "made, the answer lost"
        );
        let (id, facts) = accepted(call(&api, &ask, RefundCall::Create).await);
        assert_eq!(
            (api.refund_ids("pi_3Qdouble02"), facts),
            (vec![id.clone()], 1)
        );
        assert_eq!(api.refunds_made("pi_3Qdouble02"), 1, "the key replays");
        let more = RefundAsk {
            amount_minor: 1,
            ..ask.clone()
        };
        let refused = call(&api, &more, RefundCall::Create).await;
        assert!(
            matches!(&refused, Some(RefundOutcome::Refused { code, .. }) if code == "idempotency_error"),
            "{refused:?}"
        );
        // What reconciliation lists is the refund made.
        let listed = reconcile_refunds(&api, "/v1/refunds?payment_intent=pi_3Qdouble02").await;
        assert_eq!(listed["data"][0]["id"], id.as_str());
        api.forget_refund_keys();
        accepted(call(&api, &ask, RefundCall::Create).await);
        assert_eq!(
            api.refunds_made("pi_3Qdouble02"),
            2,
            "an expired key refunds again"
        );
        assert_eq!(api.refund_posts().len(), 4);
        api.refuse_refunds(
            "pi_3Qdouble02",
            "charge_already_refunded",
            "Charge has already been refunded.",
        );
        api.forget_refund_keys();
        let refused = call(&api, &ask, RefundCall::Create).await;
        assert!(
            matches!(&refused, Some(RefundOutcome::Refused { code, .. }) if code == "charge_already_refunded"),
            "{refused:?}"
        );
        // The refusal is saved under its key: refunds accepted again, the
        // same key still gets it; the next attempt's key is sent.
        api.accept_refunds("pi_3Qdouble02");
        assert_eq!(call(&api, &ask, RefundCall::Create).await, refused);
        let second = RefundAsk {
            attempt: 2,
            ..ask.clone()
        };
        accepted(call(&api, &second, RefundCall::Create).await);
        assert_eq!(api.refunds_made("pi_3Qdouble02"), 3);
        // The lookup finds each attempt's refund by its metadata.
        let (found, _) = accepted(call(&api, &second, RefundCall::Lookup).await);
        assert_eq!(api.refund_ids("pi_3Qdouble02").last(), Some(&found));
        let third = RefundAsk {
            attempt: 3,
            ..ask.clone()
        };
        assert_eq!(
            call(&api, &third, RefundCall::Lookup).await,
            Some(RefundOutcome::NotFound)
        );
    }

    #[tokio::test]
    async fn stripe_keys_are_kept_for_their_window_only() {
        let api = GatewayApi::start(Gateway::Stripe).await;
        api.refund_key_window(Duration::ZERO);
        let ask = ask("pi_3Qwindow01", "o1");
        accepted(call(&api, &ask, RefundCall::Create).await);
        accepted(call(&api, &ask, RefundCall::Create).await);
        assert_eq!(
            api.refunds_made("pi_3Qwindow01"),
            2,
            "a key past its window refunds again"
        );
        assert_eq!(api.refund_bodies().len(), 2);
    }

    async fn reconcile_refunds(api: &GatewayApi, path: &str) -> Value {
        let request = ApiRequest::get(path.to_owned()).bearer(Keys::STRIPE_API_KEY);
        let (_, body) = send(api, request).await.expect("an answer");
        serde_json::from_slice(&body).expect("json")
    }

    #[tokio::test]
    async fn razorpay_refunds_again_for_a_repeated_receipt_and_the_lookup_finds_the_first() {
        let api = GatewayApi::start(Gateway::Razorpay).await;
        let ask = ask("pay_Qdouble02", "o1");
        assert_eq!(
            call(&api, &ask, RefundCall::Lookup).await,
            Some(RefundOutcome::NotFound)
        );
        api.refund_faults(&[Fault::Dropped]);
        assert_eq!(
            call(&api, &ask, RefundCall::Create).await,
            None,
            "no answer"
        );
        assert_eq!(api.refunds_made("pay_Qdouble02"), 1, "made, never answered");
        let (found, facts) = accepted(call(&api, &ask, RefundCall::Lookup).await);
        assert_eq!(
            (vec![found.clone()], facts),
            (api.refund_ids("pay_Qdouble02"), 1)
        );
        let (replayed, _) = accepted(call(&api, &ask, RefundCall::Create).await);
        assert_eq!(
            (replayed, api.refunds_made("pay_Qdouble02")),
            (found, 1),
            "the key answers it"
        );
        api.forget_refund_keys();
        accepted(call(&api, &ask, RefundCall::Create).await);
        assert_eq!(
            api.refunds_made("pay_Qdouble02"),
            2,
            "a receipt dedupes nothing"
        );
        let words =
            "Refund is not supported by the bank because the payment is more than 6 months old";
        api.refuse_refunds("pay_Qdouble02", "BAD_REQUEST_ERROR", words);
        api.forget_refund_keys();
        assert_eq!(
            call(&api, &ask, RefundCall::Create).await,
            Some(RefundOutcome::Refused {
                code: "BAD_REQUEST_ERROR".into(),
                message: words.into()
            })
        );
    }

    #[tokio::test]
    async fn cashfree_answers_a_repeated_refund_id_with_409_and_looks_it_up() {
        let api = GatewayApi::start(Gateway::Cashfree).await;
        api.add(
            "/pg/orders/shop_o1/payments",
            gw_shapes::cashfree_payment(5_114_910_362_148, "shop_o1", "SUCCESS", 500.0),
        );
        let ask = ask("5114910362148", "shop_o1");
        assert_eq!(
            call(&api, &ask, RefundCall::Lookup).await,
            Some(RefundOutcome::NotFound)
        );
        api.hold_refund_answer(Duration::from_millis(10));
        let (id, facts) = accepted(call(&api, &ask, RefundCall::Create).await);
        assert_eq!((id.as_str(), facts), ("ri_0f1e2d3c4b5a69788796a5b4", 1));
        let again = call(&api, &ask, RefundCall::Create).await;
        assert!(
            matches!(again, Some(RefundOutcome::Retry { .. })),
            "{again:?}"
        );
        assert_eq!(
            accepted(call(&api, &ask, RefundCall::Lookup).await),
            (id.clone(), 1)
        );
        assert_eq!(api.refunds_made("5114910362148"), 1);
        assert_eq!(api.refund_ids("5114910362148"), [id]);
        let unknown = ask_for_order("nobody");
        let refused = call(&api, &unknown, RefundCall::Create).await;
        assert!(
            matches!(refused, Some(RefundOutcome::Refused { .. })),
            "{refused:?}"
        );
    }

    fn ask_for_order(order_ref: &str) -> RefundAsk {
        ask("1", order_ref)
    }

    #[tokio::test]
    async fn payu_refuses_a_repeated_token_and_its_action_status_finds_the_refund() {
        let api = GatewayApi::start(Gateway::Payu).await;
        api.payu_transaction(
            "txnQdouble02",
            gw_shapes::payu_transaction("txnQdouble02", "o1", "success", "500.00"),
        );
        let mihpayid = gw_shapes::payu_mihpayid("txnQdouble02");
        let ask = ask(&mihpayid, "o1");
        assert_eq!(
            call(&api, &ask, RefundCall::Lookup).await,
            Some(RefundOutcome::NotFound)
        );
        let (request_id, facts) = accepted(call(&api, &ask, RefundCall::Create).await);
        assert_eq!(facts, 0, "queued");
        let again = call(&api, &ask, RefundCall::Create).await;
        assert!(
            matches!(again, Some(RefundOutcome::Retry { .. })),
            "{again:?}"
        );
        assert_eq!(
            accepted(call(&api, &ask, RefundCall::Lookup).await),
            (request_id.clone(), 1)
        );
        assert_eq!(
            (
                api.refunds_made(&mihpayid),
                api.refunds_made("txnQdouble02")
            ),
            (1, 1)
        );
        assert_eq!(api.refund_ids("txnQdouble02"), [request_id]);
        let tokens: Vec<String> = api.refund_posts().into_iter().map(|(_, t)| t).collect();
        assert_eq!(tokens.len(), 2);
        assert!(
            tokens.iter().all(|t| t.len() <= 23 && *t == tokens[0]),
            "{tokens:?}"
        );
        api.refuse_refunds("txnQdouble02", "105", "Refund FAILURE - Invalid amount");
        let other = RefundAsk {
            intent_id: "ri_ffffffffffffffffffffffff".into(),
            ..ask.clone()
        };
        assert_eq!(
            call(&api, &other, RefundCall::Create).await,
            Some(RefundOutcome::Refused {
                code: "105".into(),
                message: "Refund FAILURE - Invalid amount".into()
            })
        );
    }
}
