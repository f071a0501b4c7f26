//! Cashfree's PG API answers (version 2023-08-01), read into the same
//! [`NormalizedEvent`]s a webhook becomes, for reconciliation. No I/O: the
//! caller fetches, this reads. Both answers are bare JSON arrays; amounts
//! are decimal rupees, read from the JSON text as the webhook parser reads
//! them. Each payment is one fact named `reconciliation:{cf_payment_id}:
//! {fact}`, each successful refund `reconciliation:{refund id}:processed`
//! with the refund id a webhook would carry, so a webhook for the same fact
//! changes nothing in the ledger.
//!
//! [`GatewayApi`] for Cashfree: `https://api.cashfree.com`, the
//! `x-client-id`, `x-client-secret` and `x-api-version` headers from
//! `[source.api]` `client_id`, `client_secret` and `api_version` (default
//! [`API_VERSION`]); each order id's payments and refunds — the order's
//! Cashfree reference, else the shop's own reference (Cashfree's `order_id`
//! is the merchant's).

use serde_json::Value;
use serde_json::value::RawValue;

use super::Cashfree;
use crate::Gateway;
use crate::event::{EventKind, NormalizedEvent};
use crate::json::{parse_body, currency_at, decimal_amount_at, id_at, str_at};
use crate::reconcile::{
    Answer, ApiCredentials, ApiRequest, Ask, CredentialKey, GatewayApi, OrderNames, RequestError,
    segment,
};
use crate::scheme::ParseError;

/// The `x-api-version` the answers are read in, when none is configured.
pub const API_VERSION: &str = "2023-08-01";

/// `GET /pg/orders/{order_id}/payments`.
const ORDER_PAYMENTS: &str = "order_payments";
/// `GET /pg/orders/{order_id}/refunds`.
const ORDER_REFUNDS: &str = "order_refunds";

const KEYS: &[CredentialKey] = &[
    CredentialKey::secret("client_id"),
    CredentialKey::secret("client_secret"),
    CredentialKey::setting("api_version", API_VERSION),
];

impl GatewayApi for Cashfree {
    fn default_base_url(&self) -> &'static str {
        "https://api.cashfree.com"
    }

    fn credential_keys(&self) -> &'static [CredentialKey] {
        KEYS
    }

    fn asks_by_shop_reference(&self) -> bool {
        true
    }

    /// The payments and refunds of each Cashfree order id (the shop's own
    /// reference when the order has no Cashfree reference).
    fn asks(&self, order: &OrderNames) -> Vec<Ask> {
        let ids = if order.refs.is_empty() {
            std::slice::from_ref(&order.order_ref)
        } else {
            order.refs.as_slice()
        };
        ids.iter()
            .flat_map(|id| [Ask::of(ORDER_PAYMENTS, id), Ask::of(ORDER_REFUNDS, id)])
            .collect()
    }

    fn request(&self, ask: &Ask, credentials: &ApiCredentials) -> Result<ApiRequest, RequestError> {
        let path = match ask.call {
            ORDER_PAYMENTS => format!("/pg/orders/{}/payments", segment(ask.id())),
            ORDER_REFUNDS => format!("/pg/orders/{}/refunds", segment(ask.id())),
            other => return Err(RequestError::UnknownCall(other)),
        };
        Ok(ApiRequest::get(path)
            .secret_header("x-client-id", credentials.require("client_id")?)
            .secret_header("x-client-secret", credentials.require("client_secret")?)
            .header("x-api-version", credentials.require("api_version")?))
    }

    /// Cashfree's documented 404 (`"type": "invalid_request_error"`, its
    /// code `order_not_found` for an order it does not know); a 404 that is
    /// not Cashfree's error (a wrong `base_url`) is a failure.
    fn unknown_id(&self, _ask: &Ask, status: u16, body: &[u8]) -> bool {
        status == 404
            && parse_body(body)
                .is_ok_and(|v| str_at(&v, &["type"]) == Some("invalid_request_error"))
    }

    fn read(&self, ask: &Ask, body: &[u8]) -> Result<Answer, ParseError> {
        let facts = match ask.call {
            ORDER_PAYMENTS => order_payments(body)?,
            _ => order_refunds(body)?,
        };
        Ok(Answer {
            facts,
            ..Answer::default()
        })
    }

    fn describe(&self, ask: &Ask) -> String {
        match ask.call {
            ORDER_PAYMENTS => format!("GET /pg/orders/{}/payments", ask.id()),
            _ => format!("GET /pg/orders/{}/refunds", ask.id()),
        }
    }
}

/// The most entries one answer may list (an order has a handful).
const MAX_ITEMS: usize = 1_000;

/// `GET /pg/orders/{order_id}/payments`: one event per payment whose
/// status oncehook acts on — `SUCCESS` a capture, `FAILED` and
/// `USER_DROPPED` a failed attempt (as their webhooks are); `PENDING`,
/// `NOT_ATTEMPTED`, `CANCELLED` and `VOID` record nothing.
pub fn order_payments(body: &[u8]) -> Result<Vec<NormalizedEvent>, ParseError> {
    let mut events = Vec::new();
    for (raw, item) in entries(body)? {
        let id = id_at(&item, &["cf_payment_id"]).ok_or(ParseError::MissingField("[].cf_payment_id"))?;
        let status = str_at(&item, &["payment_status"])
            .ok_or(ParseError::MissingField("[].payment_status"))?;
        let (kind, event_type) = match status {
            "SUCCESS" => (EventKind::Captured, "PAYMENT_SUCCESS_WEBHOOK"),
            "FAILED" => (EventKind::Failed, "PAYMENT_FAILED_WEBHOOK"),
            "USER_DROPPED" => (EventKind::Failed, "PAYMENT_USER_DROPPED_WEBHOOK"),
            _ => continue,
        };
        let fact = match kind {
            EventKind::Captured => "captured",
            other => other.as_str(),
        };
        let currency = currency_at(&item, &["payment_currency"]);
        events.push(NormalizedEvent {
            provider: Gateway::Cashfree,
            event_id: format!("reconciliation:{id}:{fact}"),
            event_type: event_type.into(),
            kind,
            order_ref: id_at(&item, &["order_id"]),
            amount_minor: decimal_amount_at(
                raw.get().as_bytes(),
                &["payment_amount"],
                currency.as_deref(),
                "[].payment_amount",
            )?,
            currency,
            email: None,
            refund_id: None,
            cumulative_refund: false,
            payment_id: Some(id),
        });
    }
    Ok(events)
}

/// `GET /pg/orders/{order_id}/refunds`: one event per refund whose
/// `refund_status` is `SUCCESS`; `PENDING`, `ONHOLD` and `CANCELLED`
/// record nothing yet.
pub fn order_refunds(body: &[u8]) -> Result<Vec<NormalizedEvent>, ParseError> {
    let mut events = Vec::new();
    for (raw, item) in entries(body)? {
        events.extend(refund_fact(raw.get(), &item)?);
    }
    Ok(events)
}

/// One refund entity's fact (`raw` its JSON text, for the exact amount),
/// once its `refund_status` is `SUCCESS`: named
/// `reconciliation:{refund id}:processed` under the refund id the webhook
/// carries, so the refunder's answer, a reconciliation pass and the
/// webhook are one fact; `None` while it is pending or on hold (or if it
/// was cancelled or failed).
pub(crate) fn refund_fact(raw: &str, item: &Value) -> Result<Option<NormalizedEvent>, ParseError> {
    let refund_id = id_at(item, &["refund_id"])
        .or_else(|| id_at(item, &["cf_refund_id"]))
        .ok_or(ParseError::MissingField("[].refund_id"))?;
    let status = str_at(item, &["refund_status"])
        .ok_or(ParseError::MissingField("[].refund_status"))?;
    if !status.eq_ignore_ascii_case("SUCCESS") {
        return Ok(None);
    }
    let payment_id = id_at(item, &["cf_payment_id"])
        .ok_or(ParseError::MissingField("[].cf_payment_id"))?;
    let currency = currency_at(item, &["refund_currency"]);
    Ok(Some(NormalizedEvent {
        provider: Gateway::Cashfree,
        event_id: format!("reconciliation:{refund_id}:processed"),
        event_type: super::scheme::REFUND_TYPE.into(),
        kind: EventKind::Refunded,
        order_ref: id_at(item, &["order_id"]),
        amount_minor: decimal_amount_at(
            raw.as_bytes(),
            &["refund_amount"],
            currency.as_deref(),
            "[].refund_amount",
        )?,
        currency,
        email: None,
        refund_id: Some(refund_id),
        cumulative_refund: false,
        payment_id: Some(payment_id),
    }))
}

/// The entries of a bare-array answer, each as its raw text (for exact
/// amounts) and its value; at most [`MAX_ITEMS`].
fn entries(body: &[u8]) -> Result<Vec<(&RawValue, Value)>, ParseError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ParseError::Syntax("JSON", format!("not UTF-8: {e}")))?;
    let raws: Vec<&RawValue> = serde_json::from_str(text)
        .map_err(|e| ParseError::Syntax("JSON array", e.to_string()))?;
    if raws.len() > MAX_ITEMS {
        return Err(ParseError::InvalidField {
            field: "body",
            reason: format!("{} entries, more than {MAX_ITEMS}", raws.len()),
        });
    }
    raws.into_iter()
        .map(|raw| {
            let value: Value = serde_json::from_str(raw.get()).map_err(|e| ParseError::InvalidField {
                field: "[]",
                reason: e.to_string(),
            })?;
            if value.is_object() {
                Ok((raw, value))
            } else {
                Err(ParseError::InvalidField {
                    field: "[]",
                    reason: "an entry is not an object".into(),
                })
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
