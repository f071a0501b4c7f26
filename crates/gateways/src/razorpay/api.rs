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
//! payments, and the refunds of each payment known or found captured. An
//! order with no Razorpay reference is looked up by the `receipt` the shop
//! gave the Razorpay order (its own order reference, as Razorpay's docs
//! advise: `GET /v1/orders?receipt=`), or asked directly when the shop's
//! reference is itself a Razorpay `order_…` id; the Razorpay orders found
//! are handed back as references for the reconciler to register. Razorpay
//! answers an id it does not know with `400 BAD_REQUEST_ERROR` "The id
//! provided does not exist": that is "nothing known", not a failure.

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
/// `GET /v1/orders?receipt={receipt}`.
const ORDERS_BY_RECEIPT: &str = "orders_by_receipt";

/// What Razorpay's order ids start with.
const ORDER_ID_PREFIX: &str = "order_";

/// The words of Razorpay's answer for an id it does not know (its
/// `error.description`: "The id provided does not exist").
const UNKNOWN_ID_WORDS: &str = "does not exist";

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

    /// An order that names no gateway yet may be Razorpay's: it is looked
    /// up by its receipt.
    fn asks_by_shop_reference(&self) -> bool {
        true
    }

    /// Each Razorpay order's payments, and the refunds of each known
    /// payment; with no Razorpay order known, the shop's reference itself
    /// when it is a Razorpay order id, else the Razorpay orders whose
    /// receipt it is.
    fn asks(&self, order: &OrderNames) -> Vec<Ask> {
        let lookup = if !order.refs.is_empty() || order.order_ref.is_empty() {
            None
        } else if order.order_ref.starts_with(ORDER_ID_PREFIX) {
            Some(Ask::of(ORDER_PAYMENTS, &order.order_ref))
        } else {
            Some(Ask::of(ORDERS_BY_RECEIPT, &order.order_ref))
        };
        let orders = order.refs.iter().map(|id| Ask::of(ORDER_PAYMENTS, id));
        let refunds = order.payments.iter().map(|id| Ask::of(PAYMENT_REFUNDS, id));
        orders.chain(lookup).chain(refunds).collect()
    }

    fn request(&self, ask: &Ask, credentials: &ApiCredentials) -> Result<ApiRequest, RequestError> {
        let path = match ask.call {
            ORDER_PAYMENTS => format!("/v1/orders/{}/payments", segment(ask.id())),
            PAYMENT_REFUNDS => format!("/v1/payments/{}/refunds", segment(ask.id())),
            ORDERS_BY_RECEIPT => format!("/v1/orders?receipt={}", segment(ask.id())),
            other => return Err(RequestError::UnknownCall(other)),
        };
        Ok(ApiRequest::get(path).basic_auth(
            credentials.require("key_id")?,
            credentials.require("key_secret")?,
        ))
    }

    /// `400` whose error says the id does not exist (and a `404`, should
    /// Razorpay ever answer one).
    fn unknown_id(&self, _ask: &Ask, status: u16, body: &[u8]) -> bool {
        match status {
            404 => true,
            400 => unknown_id_error(body),
            _ => false,
        }
    }

    /// A payment found captured leads to its refunds; a Razorpay order
    /// found by receipt, to its payments.
    fn read(&self, ask: &Ask, body: &[u8]) -> Result<Answer, ParseError> {
        match ask.call {
            ORDERS_BY_RECEIPT => {
                let refs = orders_by_receipt(body, ask.id())?;
                Ok(Answer {
                    follow_ups: refs.iter().map(|id| Ask::of(ORDER_PAYMENTS, id)).collect(),
                    refs,
                    facts: Vec::new(),
                })
            }
            ORDER_PAYMENTS => {
                let facts = order_payments(body)?;
                let follow_ups = facts
                    .iter()
                    .filter(|f| f.kind == EventKind::Captured)
                    .filter_map(|f| f.payment_id.as_ref())
                    .map(|id| Ask::of(PAYMENT_REFUNDS, id))
                    .collect();
                Ok(Answer {
                    facts,
                    follow_ups,
                    refs: Vec::new(),
                })
            }
            _ => Ok(Answer {
                facts: payment_refunds(body)?,
                ..Answer::default()
            }),
        }
    }

    fn describe(&self, ask: &Ask) -> String {
        match ask.call {
            ORDER_PAYMENTS => format!("GET /v1/orders/{}/payments", ask.id()),
            ORDERS_BY_RECEIPT => format!("GET /v1/orders?receipt={}", ask.id()),
            _ => format!("GET /v1/payments/{}/refunds", ask.id()),
        }
    }
}

/// Whether a `400` answer is Razorpay's "The id provided does not exist"
/// (`{"error": {"code": "BAD_REQUEST_ERROR", "description": …}}`); any
/// other bad request is a real refusal.
pub fn unknown_id_error(body: &[u8]) -> bool {
    let Ok(v) = parse_body(body) else {
        return false;
    };
    str_at(&v, &["error", "code"]) == Some("BAD_REQUEST_ERROR")
        && str_at(&v, &["error", "description"])
            .is_some_and(|d| d.to_ascii_lowercase().contains(UNKNOWN_ID_WORDS))
}

/// `GET /v1/orders?receipt={receipt}` (`{"entity": "collection", "items":
/// [order, …]}`): the ids of the Razorpay orders whose `receipt` is
/// exactly `receipt` (an item with another receipt is not this order's,
/// whatever the filter did).
pub fn orders_by_receipt(body: &[u8], receipt: &str) -> Result<Vec<String>, ParseError> {
    let mut ids = Vec::new();
    for item in &collection(body)? {
        let id = id_at(item, &["id"]).ok_or(ParseError::MissingField("items[].id"))?;
        if !id.starts_with(ORDER_ID_PREFIX) {
            return Err(ParseError::InvalidField {
                field: "items[].id",
                reason: format!("{id:?} is not a Razorpay order id"),
            });
        }
        if str_at(item, &["receipt"]) == Some(receipt) && !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
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
        events.extend(refund_fact(item)?);
    }
    Ok(events)
}

/// One refund entity's fact, once `processed`: named
/// `reconciliation:{refund id}:processed`, so the refunder's answer, a
/// reconciliation pass and the `refund.processed` webhook are one fact;
/// `None` while it is pending (or if it failed).
pub(crate) fn refund_fact(item: &Value) -> Result<Option<NormalizedEvent>, ParseError> {
    let id = id_at(item, &["id"]).ok_or(ParseError::MissingField("items[].id"))?;
    let status = str_at(item, &["status"]).ok_or(ParseError::MissingField("items[].status"))?;
    if status != "processed" {
        return Ok(None);
    }
    let payment_id =
        id_at(item, &["payment_id"]).ok_or(ParseError::MissingField("items[].payment_id"))?;
    Ok(Some(NormalizedEvent {
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
    }))
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
