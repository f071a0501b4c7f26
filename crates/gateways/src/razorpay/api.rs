//! Razorpay's API answers, read into the same [`NormalizedEvent`]s a webhook
//! becomes, for reconciliation (asking the gateway what the webhooks may
//! have missed). No I/O: the caller fetches, this reads. Each payment the
//! API lists is one fact — `(razorpay, payment id, status)` — named
//! `reconciliation:{payment id}:{status}`, so asking twice, or a webhook
//! for the same fact arriving later, changes nothing in the ledger.

use serde_json::Value;

use crate::event::{EventKind, NormalizedEvent};
use crate::json::{currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::Gateway;
use crate::scheme::ParseError;

/// The most payments one answer may list (an order has a handful).
const MAX_ITEMS: usize = 1_000;

/// `GET /v1/orders/{order_id}/payments` (`{"entity": "collection",
/// "items": [payment, …]}`): one event per payment whose status oncehook
/// acts on. A refunded payment was captured first, so it is a capture
/// (its refunds come from the refunds endpoint); `created` is skipped.
pub fn order_payments(body: &[u8]) -> Result<Vec<NormalizedEvent>, ParseError> {
    let v = parse_body(body)?;
    if str_at(&v, &["entity"]) != Some("collection") {
        return Err(ParseError::InvalidField {
            field: "entity",
            reason: "expected a collection".into(),
        });
    }
    let items = v
        .get("items")
        .and_then(Value::as_array)
        .ok_or(ParseError::MissingField("items"))?;
    if items.len() > MAX_ITEMS {
        return Err(ParseError::InvalidField {
            field: "items",
            reason: format!("{} payments, more than {MAX_ITEMS}", items.len()),
        });
    }
    let mut events = Vec::with_capacity(items.len());
    for item in items {
        if let Some(event) = payment(item)? {
            events.push(event);
        }
    }
    Ok(events)
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
