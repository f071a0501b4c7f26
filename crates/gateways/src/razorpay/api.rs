//! Razorpay's API answers, read into the same [`NormalizedEvent`]s a webhook
//! becomes, for reconciliation (asking the gateway what the webhooks may
//! have missed). No I/O: the caller fetches, this reads. Each payment the
//! API lists is one fact — `(razorpay, payment id, status)` — named
//! `reconciliation:{payment id}:{status}`, each processed refund
//! `reconciliation:{refund id}:processed`, so asking twice, or a webhook
//! for the same fact arriving later, changes nothing in the ledger.
//!
//! [`GatewayApi`] for Razorpay: `https://api.razorpay.com`, HTTP Basic with
//! `[source.api]` `key_id` and `key_secret`; each `order_…` reference's
//! payments, and the refunds of each payment known or found captured.

use serde_json::Value;

use super::Razorpay;
use crate::event::{EventKind, NormalizedEvent};
use crate::json::{currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::reconcile::{
    Answer, ApiCredentials, ApiRequest, Ask, CredentialKey, GatewayApi,
    OrderNames, RequestError, segment,
};
use crate::scheme::ParseError;
use crate::Gateway;

/// `GET /v1/orders/{order_id}/payments`.
const ORDER_PAYMENTS: &str = "order_payments";
/// `GET /v1/payments/{payment_id}/refunds`.
const PAYMENT_REFUNDS: &str = "payment_refunds";

/// HTTP Basic: the key id is the user, the key secret the password.
const KEYS: &[CredentialKey] = &[
    CredentialKey::secret("key_id").refusing(
        |id| id.contains(':'),
        "holds a `:` (it is the user name of HTTP Basic)",
    ),
    CredentialKey::secret("key_secret"),
];

impl GatewayApi for Razorpay {
    fn default_base_url(&self) -> &'static str {
        "https://api.razorpay.com"
    }

    fn credential_keys(&self) -> &'static [CredentialKey] {
        KEYS
    }

    /// Each Razorpay order's payments, and the refunds of each known payment.
    fn asks(&self, order: &OrderNames) -> Vec<Ask> {
        let orders = order.refs.iter().map(|id| Ask::of(ORDER_PAYMENTS, id));
        let refunds = order.payments.iter().map(|id| Ask::of(PAYMENT_REFUNDS, id));
        orders.chain(refunds).collect()
    }

    fn request(&self, ask: &Ask, credentials: &ApiCredentials) -> Result<ApiRequest, RequestError> {
        let path = match ask.call {
            ORDER_PAYMENTS => format!("/v1/orders/{}/payments", segment(ask.id())),
            PAYMENT_REFUNDS => format!("/v1/payments/{}/refunds", segment(ask.id())),
            other => return Err(RequestError::UnknownCall(other)),
        };
        Ok(ApiRequest::get(path).basic_auth(
            credentials.require("key_id")?,
            credentials.require("key_secret")?,
        ))
    }

    /// A payment found captured leads to its refunds.
    fn read(&self, ask: &Ask, body: &[u8]) -> Result<Answer, ParseError> {
        if ask.call != ORDER_PAYMENTS {
            return Ok(Answer {
                facts: payment_refunds(body)?,
                follow_ups: Vec::new(),
            });
        }
        let facts = order_payments(body)?;
        let follow_ups = facts
            .iter()
            .filter(|f| f.kind == EventKind::Captured)
            .filter_map(|f| f.payment_id.as_ref())
            .map(|id| Ask::of(PAYMENT_REFUNDS, id))
            .collect();
        Ok(Answer { facts, follow_ups })
    }

    fn describe(&self, ask: &Ask) -> String {
        match ask.call {
            ORDER_PAYMENTS => format!("GET /v1/orders/{}/payments", ask.id()),
            _ => format!("GET /v1/payments/{}/refunds", ask.id()),
        }
    }
}

/// The most payments one answer may list (an order has a handful).
const MAX_ITEMS: usize = 1_000;

/// `GET /v1/orders/{order_id}/payments` (`{"entity": "collection",
/// "items": [payment, …]}`): one event per payment whose status oncehook
/// acts on. A refunded payment was captured first, so it is a capture
/// (its refunds come from the refunds endpoint); `created` is skipped.
pub fn order_payments(body: &[u8]) -> Result<Vec<NormalizedEvent>, ParseError> {
    let mut events = Vec::new();
    for item in &collection(body)? {
        if let Some(event) = payment(item)? {
            events.push(event);
        }
    }
    Ok(events)
}

/// `GET /v1/payments/{payment_id}/refunds` (`{"entity": "collection",
/// "items": [refund, …]}`): one event per processed refund, named
/// `reconciliation:{refund id}:processed`; pending and failed refunds
/// record nothing yet.
pub fn payment_refunds(body: &[u8]) -> Result<Vec<NormalizedEvent>, ParseError> {
    let mut events = Vec::new();
    for item in &collection(body)? {
        let id = id_at(item, &["id"]).ok_or(ParseError::MissingField("items[].id"))?;
        let status =
            str_at(item, &["status"]).ok_or(ParseError::MissingField("items[].status"))?;
        if status != "processed" {
            continue;
        }
        let payment_id =
            id_at(item, &["payment_id"]).ok_or(ParseError::MissingField("items[].payment_id"))?;
        events.push(NormalizedEvent {
            provider: Gateway::Razorpay,
            event_id: format!("reconciliation:{id}:processed"),
            event_type: "refund.processed".into(),
            kind: EventKind::Refunded,
            order_ref: None,
            amount_minor: int_amount_at(item, &["amount"], "items[].amount")?,
            currency: currency_at(item, &["currency"]),
            email: None,
            refund_id: Some(id),
            cumulative_refund: false,
            payment_id: Some(payment_id),
        });
    }
    Ok(events)
}

/// The items of a collection answer, at most [`MAX_ITEMS`].
fn collection(body: &[u8]) -> Result<Vec<Value>, ParseError> {
    let mut v = parse_body(body)?;
    if str_at(&v, &["entity"]) != Some("collection") {
        return Err(ParseError::InvalidField {
            field: "entity",
            reason: "expected a collection".into(),
        });
    }
    let Some(Value::Array(items)) = v.get_mut("items").map(Value::take) else {
        return Err(ParseError::MissingField("items"));
    };
    if items.len() > MAX_ITEMS {
        return Err(ParseError::InvalidField {
            field: "items",
            reason: format!("{} items, more than {MAX_ITEMS}", items.len()),
        });
    }
    Ok(items)
}

/// One payment entity; `None` for a status that records nothing.
fn payment(item: &Value) -> Result<Option<NormalizedEvent>, ParseError> {
    let id = id_at(item, &["id"]).ok_or(ParseError::MissingField("items[].id"))?;
    let status = str_at(item, &["status"]).ok_or(ParseError::MissingField("items[].status"))?;
    let kind = match status {
        "captured" | "refunded" => EventKind::Captured,
        "authorized" => EventKind::Authorized,
        "failed" => EventKind::Failed,
        _ => return Ok(None),
    };
    let fact = match kind {
        EventKind::Captured => "captured",
        other => other.as_str(),
    };
    Ok(Some(NormalizedEvent {
        provider: Gateway::Razorpay,
        event_id: format!("reconciliation:{id}:{fact}"),
        event_type: format!("payment.{fact}"),
        kind,
        order_ref: id_at(item, &["order_id"]),
        amount_minor: int_amount_at(item, &["amount"], "items[].amount")?,
        currency: currency_at(item, &["currency"]),
        email: str_at(item, &["email"]).map(str::to_owned),
        refund_id: None,
        cumulative_refund: false,
        payment_id: Some(id),
    }))
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
