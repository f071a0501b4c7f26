//! PayU's refund commands, for the refunder: the signed
//! `cancel_refund_transaction` that refunds a transaction for an intent,
//! the `check_action_status` lookup of what PayU already holds for it, and
//! how their answers read. No I/O: the refunder posts, this signs and
//! reads.
//!
//! Both are forms posted to `/merchant/postservice.php?form=2`, signed as
//! `verify_payment` is, `sha512(key|command|var1|salt)` with the source's
//! merchant key and salt. `cancel_refund_transaction`
//! (<https://docs.payu.in/reference/refund_transaction_api>): `var1` the
//! PayU id (`mihpayid`) of the transaction, `var2` the merchant's token for
//! the refund, `var3` the amount in rupees. The token must be unique for
//! every refund and at most 23 characters
//! (<https://docs.payu.in/docs/refund-transaction-api>): the attempt's key
//! (`RefundAsk::key`) when it fits, else `ri` and 21 hex digits of its
//! SHA-256. PayU's answer
//! to a token it already holds is a refusal code — 106 "Token already
//! exists", 109 "The request is already logged", 227 "Transactions with the
//! same amount and same token are not allowed"
//! (<https://docs.payu.in/docs/error-codes-for-refund-initiation>) — that
//! says nothing of the refund, so it reads as "try again", and every retry
//! starts with the lookup: `check_action_status` by PayU id (`var2 =
//! payuid`, <https://docs.payu.in/reference/check_action_status_api_with_payu_id>)
//! lists every action on the transaction with its token; the refund whose
//! token is the attempt's is the one made before.
//!
//! Answers: `status: 1` with a `request_id` is accepted (the refund is
//! queued: no fact yet); in the lookup, a refund `success` is its fact,
//! `failure` a refusal, anything else (queued, requested, in progress,
//! pending) accepted without a fact. `status: 0` is a refusal with PayU's
//! code and message, except the "already holds it" codes above, 120
//! ("Transaction lock could not be obtained") and "Invalid Hash" (the
//! source's key and salt), which are "try again"; so is any answer that is
//! not PayU's JSON. PayU has no refund webhook oncehook trusts and
//! reconciliation does not read refunds, so the fact is built here: named
//! `reconciliation:{request_id}:processed`, of the payment the refunder
//! asked about.
//!
//! PayU refunds by `mihpayid`; the payment id a PayU notification gives
//! oncehook is the `txnid`. The refunder first resolves it with
//! `verify_payment` (`resolve`, `resolved`: PayU's hash covers that
//! answer, not a notification's `mihpayid`) and hands it as
//! [`RefundAsk::gateway_payment_id`]; anything but digits is refused here.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256, Sha512};
use url::form_urlencoded::Serializer;

use super::Payu;
use super::scheme::CURRENCY;
use crate::amount::{currency_exponent, format_decimal_minor, parse_decimal_minor};
use crate::json::{id_at, parse_body, str_at};
use crate::reconcile::{ApiCredentials, ApiRequest, RequestError};
use crate::refund::{GatewayRefunds, RefundAsk, RefundCall, RefundOutcome, answer};
use crate::{EventKind, Gateway, NormalizedEvent};

/// The refund command.
pub const REFUND_COMMAND: &str = "cancel_refund_transaction";
/// The lookup command.
pub const STATUS_COMMAND: &str = "check_action_status";
/// PayU's longest token.
const MAX_TOKEN: usize = 23;
/// Codes of a token PayU already holds.
const ALREADY_HELD: &[&str] = &["106", "109", "227"];
/// Codes of a refund PayU took (queued, pending, in progress, requested).
const TAKEN: &[&str] = &["100", "101", "102", "126", "127", "225", "226"];
/// "Transaction lock could not be obtained".
const LOCKED: &str = "120";

impl GatewayRefunds for Payu {
    fn create(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        let mihpayid = mihpayid(ask)?;
        if !ask.currency.eq_ignore_ascii_case(CURRENCY) {
            return Err(RequestError::Invalid(format!(
                "PayU refunds rupees only, not {}",
                ask.currency
            )));
        }
        ask.check_amount()?;
        let amount = format_decimal_minor(ask.amount_minor, currency_exponent(CURRENCY));
        let (key, hash) = signed(credentials, REFUND_COMMAND, mihpayid)?;
        let form = Serializer::new(String::new())
            .append_pair("key", key)
            .append_pair("command", REFUND_COMMAND)
            .append_pair("var1", mihpayid)
            .append_pair("var2", &token(&ask.key()))
            .append_pair("var3", &amount)
            .append_pair("hash", &hash)
            .finish();
        Ok(post(form))
    }

    /// `verify_payment` for the ledger's `txnid`: its answer carries the
    /// `mihpayid` PayU refunds by.
    fn resolve(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Option<Result<ApiRequest, RequestError>> {
        if ask.gateway_payment_id.is_some() {
            return None;
        }
        Some(
            signed(credentials, super::api::VERIFY_COMMAND, &ask.payment_id).map(|(key, hash)| {
                post(
                    Serializer::new(String::new())
                        .append_pair("key", key)
                        .append_pair("command", super::api::VERIFY_COMMAND)
                        .append_pair("var1", &ask.payment_id)
                        .append_pair("hash", &hash)
                        .finish(),
                )
            }),
        )
    }

    /// The `mihpayid` of the `txnid` asked about, if PayU took it; PayU's
    /// documented "Not Found" is a refusal (nothing to refund there).
    fn resolved(&self, ask: &RefundAsk, status: u16, body: &[u8]) -> Result<String, RefundOutcome> {
        let answer = match parse_body(body) {
            Ok(v) if (200..=299).contains(&status) => v,
            _ => return Err(unreadable(status, body)),
        };
        let t = answer
            .get("transaction_details")
            .and_then(|d| d.get(ask.payment_id.as_str()));
        let found = t.and_then(|t| id_at(t, &["mihpayid"]));
        match found {
            Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => Ok(id),
            _ if t.and_then(|t| str_at(t, &["status"])) == Some("Not Found") => {
                Err(RefundOutcome::Refused {
                    code: "not_found".to_owned(),
                    message: format!("PayU knows no transaction {}", ask.payment_id),
                })
            }
            _ => Err(unreadable(status, body)),
        }
    }

    /// Every action on the transaction, the attempt's refund among them if
    /// it was made.
    fn lookup(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError> {
        mihpayid(ask).and_then(|mihpayid| {
            let (key, hash) = signed(credentials, STATUS_COMMAND, mihpayid)?;
            let form = Serializer::new(String::new())
                .append_pair("key", key)
                .append_pair("command", STATUS_COMMAND)
                .append_pair("var1", mihpayid)
                .append_pair("var2", "payuid")
                .append_pair("hash", &hash)
                .finish();
            Ok(post(form))
        })
    }

    fn read(&self, ask: &RefundAsk, call: RefundCall, status: u16, body: &[u8]) -> RefundOutcome {
        let answer = match parse_body(body) {
            Ok(v) if (200..=299).contains(&status) && v.is_object() => v,
            _ => return unreadable(status, body),
        };
        match call {
            RefundCall::Create => created(ask, &answer),
            RefundCall::Lookup => looked_up(ask, &answer),
        }
    }
}

/// The PayU id the refund is of: the `mihpayid` resolved by
/// `verify_payment`, else the ledger's id if it is one.
fn mihpayid(ask: &RefundAsk) -> Result<&str, RequestError> {
    let id = ask.gateway_payment_id.as_deref().unwrap_or(&ask.payment_id);
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RequestError::Invalid(format!(
            "{id:?} is not a PayU id (mihpayid, digits): PayU refunds by it, not by the txnid"
        )));
    }
    Ok(id)
}

/// The merchant key and `sha512(key|command|var1|salt)`.
fn signed<'a>(
    credentials: &'a ApiCredentials,
    command: &str,
    var1: &str,
) -> Result<(&'a str, String), RequestError> {
    let key = credentials.require("merchant_key")?;
    let salt = credentials.require("salt")?;
    let hash = hex::encode(Sha512::digest(
        format!("{key}|{command}|{var1}|{salt}").as_bytes(),
    ));
    Ok((key, hash))
}

fn post(form: String) -> ApiRequest {
    ApiRequest::post_form("/merchant/postservice.php?form=2".to_owned(), form)
}

/// The token of an attempt's key: the key when PayU takes it (at most 23
/// letters, digits or `_`), else `ri` and 21 hex digits of its SHA-256
/// (the same on every try).
pub fn token(key: &str) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if !key.is_empty() && key.len() <= MAX_TOKEN && key.chars().all(allowed) {
        key.to_owned()
    } else {
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        format!("ri{}", &digest[..MAX_TOKEN - 2])
    }
}

/// `status` as PayU writes it (`1`, `"1"`).
fn flag(v: &Value) -> Option<String> {
    id_at(v, &["status"])
}

/// The answer to `cancel_refund_transaction`.
fn created(ask: &RefundAsk, answer: &Value) -> RefundOutcome {
    let code = id_at(answer, &["error_code"]);
    let msg = str_at(answer, &["msg"]).unwrap_or("").to_owned();
    let taken =
        flag(answer).as_deref() == Some("1") || code.as_deref().is_some_and(|c| TAKEN.contains(&c));
    let request_id = id_at(answer, &["request_id"]).or_else(|| id_at(answer, &["txn_update_id"]));
    match (taken, request_id, code) {
        (true, Some(refund_id), _) => RefundOutcome::Accepted {
            refund_id,
            facts: Vec::new(),
        },
        (true, None, _) => RefundOutcome::Retry {
            reason: format!(
                "PayU took the refund without a request id ({msg}): the lookup finds it"
            ),
        },
        (false, _, Some(c)) if ALREADY_HELD.contains(&c.as_str()) => RefundOutcome::Retry {
            reason: format!(
                "PayU already holds token {} ({c} {msg}): the lookup before the next try finds it",
                token(&ask.key())
            ),
        },
        (false, _, code) if code.as_deref() == Some(LOCKED) || is_key_problem(&msg) => {
            RefundOutcome::Retry {
                reason: format!("PayU answered {} {msg}", code.unwrap_or_default()),
            }
        }
        (false, _, code) => RefundOutcome::Refused {
            code: code.unwrap_or_else(|| flag(answer).unwrap_or_else(|| "0".into())),
            message: msg,
        },
    }
}

/// "Invalid Hash." (or key): the source's merchant key or salt.
fn is_key_problem(msg: &str) -> bool {
    let msg = msg.to_ascii_lowercase();
    msg.contains("invalid hash") || msg.contains("invalid key")
}

/// The answer to `check_action_status`: the attempt's refund, if there.
fn looked_up(ask: &RefundAsk, answer: &Value) -> RefundOutcome {
    let Some(Value::Object(details)) = answer.get("transaction_details") else {
        let msg = str_at(answer, &["msg"]).unwrap_or("");
        return RefundOutcome::Retry {
            reason: format!("PayU's action status has no details: {msg}"),
        };
    };
    let token = token(&ask.key());
    match actions(details).find(|(_, a)| str_at(a, &["token"]) == Some(token.as_str())) {
        Some((request_id, action)) => refund(ask, request_id, action),
        None => RefundOutcome::NotFound,
    }
}

/// Every action listed, by request id (`{mihpayid: {request_id: action}}`).
fn actions(details: &Map<String, Value>) -> impl Iterator<Item = (String, &Value)> {
    details
        .values()
        .filter_map(Value::as_object)
        .flat_map(|by_request| by_request.iter())
        .filter(|(_, action)| action.is_object())
        .map(|(key, action)| {
            (
                id_at(action, &["request_id"]).unwrap_or_else(|| key.clone()),
                action,
            )
        })
}

/// The attempt's refund action.
fn refund(ask: &RefundAsk, request_id: String, action: &Value) -> RefundOutcome {
    let status = str_at(action, &["status"])
        .unwrap_or("")
        .to_ascii_lowercase();
    match status.as_str() {
        "failure" | "failed" => RefundOutcome::Failed {
            code: "refund_failed".into(),
            message: format!("PayU reports refund {request_id} {status}"),
            refund_id: request_id,
        },
        "success" => RefundOutcome::Accepted {
            facts: refund_fact(ask, &request_id, action).into_iter().collect(),
            refund_id: request_id,
        },
        _ => RefundOutcome::Accepted {
            refund_id: request_id,
            facts: Vec::new(),
        },
    }
}

/// A successful refund's fact, `reconciliation:{request_id}:processed`;
/// `None` when its amount cannot be read.
fn refund_fact(ask: &RefundAsk, request_id: &str, action: &Value) -> Option<NormalizedEvent> {
    let amount =
        parse_decimal_minor(str_at(action, &["amt"])?, currency_exponent(CURRENCY)).ok()?;
    Some(NormalizedEvent {
        provider: Gateway::Payu,
        event_id: format!("reconciliation:{request_id}:processed"),
        event_type: "refund".into(),
        kind: EventKind::Refunded,
        payment_id: Some(ask.payment_id.clone()),
        order_ref: None,
        amount_minor: Some(amount),
        currency: Some(CURRENCY.to_owned()),
        email: None,
        refund_id: Some(request_id.to_owned()),
        cumulative_refund: false,
    })
}

fn unreadable(status: u16, body: &[u8]) -> RefundOutcome {
    answer::unreadable("PayU", status, body)
}

#[cfg(test)]
#[path = "refund_tests.rs"]
mod tests;
