//! Stripe's API answers, read into the same [`NormalizedEvent`]s a webhook
//! becomes, for reconciliation. No I/O: the caller fetches, this reads.
//! Every object goes through the webhook parser itself (wrapped as the
//! event that would have carried it), so an answer and a webhook can never
//! read one payment two ways:
//! - `GET /v1/events?delivery_success=false`: the events Stripe failed to
//!   deliver, under their own `evt_…` ids, so one that arrives late as a
//!   webhook is a plain duplicate;
//! - `GET /v1/payment_intents/{id}`: the intent's state, named
//!   `reconciliation:{pi}:{fact}`;
//! - `GET /v1/refunds?payment_intent={id}`: succeeded refunds, named
//!   `reconciliation:{re}:processed`, under the refund id the `refund.*`
//!   webhooks carry.
//!
//! [`GatewayApi`] for Stripe: `https://api.stripe.com`, `Authorization:
//! Bearer` with `[source.api]` `api_key` (a secret or restricted key, never
//! a publishable one); each `pi_…` the order names (its references and
//! known payments) asked for its state and refunds, and once per pass the
//! undelivered events of the window, every list followed page by page.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::Stripe;
use crate::event::{EventKind, NormalizedEvent};
use crate::json::{parse_body, str_at};
use crate::reconcile::{
    Answer, ApiCredentials, ApiRequest, Ask, CredentialKey, GatewayApi,
    OrderNames, RequestError, segment,
};
use crate::scheme::ParseError;
use crate::Headers;

/// `GET /v1/payment_intents/{id}`.
const INTENT: &str = "payment_intent";
/// `GET /v1/refunds?payment_intent={id}`, page by page.
const REFUNDS: &str = "refunds";
/// `GET /v1/events?delivery_success=false&created[gte]={since}`, page by page.
const UNDELIVERED: &str = "undelivered_events";
/// Stripe's largest page.
const PAGE: u32 = 100;

const KEYS: &[CredentialKey] = &[CredentialKey::secret("api_key").refusing(
    |key| key.starts_with("pk_"),
    "is a publishable key (pk_…): the API needs a secret key (sk_…) or a restricted one (rk_…)",
)];

impl GatewayApi for Stripe {
    fn default_base_url(&self) -> &'static str {
        "https://api.stripe.com"
    }

    fn credential_keys(&self) -> &'static [CredentialKey] {
        KEYS
    }

    /// Each PaymentIntent's state and refunds (a Checkout session
    /// reference is not an intent).
    fn asks(&self, order: &OrderNames) -> Vec<Ask> {
        let intents: BTreeSet<&String> = order
            .refs
            .iter()
            .chain(&order.payments)
            .filter(|id| id.starts_with("pi_"))
            .collect();
        intents
            .into_iter()
            .flat_map(|id| [Ask::of(INTENT, id), Ask::of(REFUNDS, id)])
            .collect()
    }

    fn sweep(&self, since_unix: i64) -> Vec<Ask> {
        vec![Ask::of(UNDELIVERED, since_unix.to_string())]
    }

    fn request(&self, ask: &Ask, credentials: &ApiCredentials) -> Result<ApiRequest, RequestError> {
        let after = ask
            .after
            .as_ref()
            .map(|a| format!("&starting_after={}", segment(a)))
            .unwrap_or_default();
        let path = match ask.call {
            INTENT => format!("/v1/payment_intents/{}", segment(ask.id())),
            REFUNDS => format!(
                "/v1/refunds?payment_intent={}&limit={PAGE}{after}",
                segment(ask.id())
            ),
            UNDELIVERED => format!(
                "/v1/events?delivery_success=false&created%5Bgte%5D={}&limit={PAGE}{after}",
                segment(ask.id())
            ),
            other => return Err(RequestError::UnknownCall(other)),
        };
        Ok(ApiRequest::get(path).bearer(credentials.require("api_key")?))
    }

    /// Stripe's 404 with the error code `resource_missing` ("No such
    /// payment_intent"); a 404 without it (a wrong `base_url`) is a failure.
    fn unknown_id(&self, _ask: &Ask, status: u16, body: &[u8]) -> bool {
        status == 404
            && parse_body(body)
                .is_ok_and(|v| str_at(&v, &["error", "code"]) == Some("resource_missing"))
    }

    /// A list with more leads to its next page.
    fn read(&self, ask: &Ask, body: &[u8]) -> Result<Answer, ParseError> {
        let page = match ask.call {
            INTENT => Page {
                events: payment_intent(body)?.into_iter().collect(),
                next: None,
            },
            REFUNDS => refunds(body)?,
            _ => events(body)?,
        };
        Ok(Answer {
            facts: page.events,
            follow_ups: page.next.map(|n| ask.page_after(n)).into_iter().collect(),
            refs: Vec::new(),
        })
    }

    fn describe(&self, ask: &Ask) -> String {
        let page = ask
            .after
            .as_ref()
            .map(|a| format!("&starting_after={a}"))
            .unwrap_or_default();
        match ask.call {
            INTENT => format!("GET /v1/payment_intents/{}", ask.id()),
            REFUNDS => format!("GET /v1/refunds?payment_intent={}{page}", ask.id()),
            _ => format!(
                "GET /v1/events?delivery_success=false&created[gte]={}{page}",
                ask.id()
            ),
        }
    }
}

/// The most objects one list answer may hold (Stripe's page limit is 100).
const MAX_ITEMS: usize = 1_000;

/// One page of a list answer: the events it holds (those oncehook acts
/// on) and, when Stripe says there is more, the id to ask `starting_after`.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// The facts on this page.
    pub events: Vec<NormalizedEvent>,
    /// `starting_after` for the next page; `None` on the last.
    pub next: Option<String>,
}

/// `GET /v1/events` (a list of event objects, each exactly a webhook's
/// body): the events whose kind oncehook acts on.
pub fn events(body: &[u8]) -> Result<Page, ParseError> {
    let (items, next) = list(body)?;
    let mut events = Vec::new();
    for item in &items {
        let event = super::scheme::parse(&Headers::new(), item.to_string().as_bytes())?;
        if event.kind != EventKind::Other {
            events.push(event);
        }
    }
    Ok(Page { events, next })
}

/// `GET /v1/payment_intents/{id}`: the intent's fact, if its status is
/// one oncehook acts on — `succeeded` a capture, `requires_capture` an
/// authorization, `requires_payment_method` after a failed attempt
/// (`last_payment_error` set) a failure; anything else is still in flight.
pub fn payment_intent(body: &[u8]) -> Result<Option<NormalizedEvent>, ParseError> {
    let intent = parse_body(body)?;
    if str_at(&intent, &["object"]) != Some("payment_intent") {
        return Err(ParseError::InvalidField {
            field: "object",
            reason: "expected a payment_intent".into(),
        });
    }
    let id = str_at(&intent, &["id"]).ok_or(ParseError::MissingField("id"))?;
    let status = str_at(&intent, &["status"]).ok_or(ParseError::MissingField("status"))?;
    let failed = intent.get("last_payment_error").is_some_and(|e| !e.is_null());
    let (event_type, fact) = match status {
        "succeeded" => ("payment_intent.succeeded", "captured"),
        "requires_capture" => ("payment_intent.amount_capturable_updated", "authorized"),
        "requires_payment_method" if failed => ("payment_intent.payment_failed", "failed"),
        _ => return Ok(None),
    };
    let event_id = format!("reconciliation:{id}:{fact}");
    as_webhook(&event_id, event_type, &intent).map(Some)
}

/// `GET /v1/refunds?payment_intent={id}` (a list of refund objects): one
/// event per succeeded refund.
pub fn refunds(body: &[u8]) -> Result<Page, ParseError> {
    let (items, next) = list(body)?;
    let mut events = Vec::new();
    for refund in &items {
        events.extend(refund_fact(refund)?);
    }
    Ok(Page { events, next })
}

/// One refund object's fact, once it succeeded: named
/// `reconciliation:{re}:processed` and read by the webhook parser as a
/// `refund.updated` event, so the refunder's answer, a reconciliation pass
/// and the webhook are one fact; `None` while it is pending, failed or
/// canceled.
pub(crate) fn refund_fact(refund: &Value) -> Result<Option<NormalizedEvent>, ParseError> {
    let id = str_at(refund, &["id"]).ok_or(ParseError::MissingField("data[].id"))?;
    if str_at(refund, &["status"]) != Some("succeeded") {
        return Ok(None);
    }
    let event = as_webhook(&format!("reconciliation:{id}:processed"), "refund.updated", refund)?;
    if event.payment_id.is_none() {
        return Err(ParseError::MissingField("data[].payment_intent"));
    }
    Ok(Some(event))
}

/// `object` read by the webhook parser as the `event_type` event `event_id`.
fn as_webhook(event_id: &str, event_type: &str, object: &Value) -> Result<NormalizedEvent, ParseError> {
    let event = json!({
        "id": event_id,
        "object": "event",
        "type": event_type,
        "data": {"object": object},
    });
    super::scheme::parse(&Headers::new(), event.to_string().as_bytes())
}

/// The objects of a list answer and the cursor to the next page.
fn list(body: &[u8]) -> Result<(Vec<Value>, Option<String>), ParseError> {
    let mut v = parse_body(body)?;
    if str_at(&v, &["object"]) != Some("list") {
        return Err(ParseError::InvalidField {
            field: "object",
            reason: "expected a list".into(),
        });
    }
    let Some(Value::Array(items)) = v.get_mut("data").map(Value::take) else {
        return Err(ParseError::MissingField("data"));
    };
    if items.len() > MAX_ITEMS {
        return Err(ParseError::InvalidField {
            field: "data",
            reason: format!("{} objects, more than {MAX_ITEMS}", items.len()),
        });
    }
    let has_more = v.get("has_more").and_then(Value::as_bool).unwrap_or(false);
    let next = match (has_more, items.last()) {
        (false, _) | (true, None) => None,
        (true, Some(last)) => Some(
            str_at(last, &["id"])
                .ok_or(ParseError::MissingField("data[].id"))?
                .to_owned(),
        ),
    };
    Ok((items, next))
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
