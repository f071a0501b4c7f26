//! Razorpay webhooks: HMAC-SHA256 of the raw JSON body under the webhook
//! secret, lowercase hex in `X-Razorpay-Signature`; no signed timestamp. The
//! delivery identity is the `x-razorpay-event-id` header (the body has none),
//! else `{event}:{entity id}`. Amounts are integer paise.

use serde_json::Value;

use crate::crypto::{decode_hex, first_match, hmac_sha256, hmac_sha256_matches};
use crate::json::{at, currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::scheme::{ParseError, Request, Verification, VerifyError, body_digest_id, header};
use crate::{EventKind, Gateway, Headers, NormalizedEvent};

/// Header carrying the signature.
pub(crate) const SIGNATURE_HEADER: &str = "X-Razorpay-Signature";
/// Header carrying the delivery identity.
pub(crate) const EVENT_ID_HEADER: &str = "x-razorpay-event-id";

const PAYMENT: [&str; 3] = ["payload", "payment", "entity"];
const REFUND: [&str; 3] = ["payload", "refund", "entity"];
const ORDER: [&str; 3] = ["payload", "order", "entity"];

/// The signature Razorpay would send for `body`.
pub(crate) fn sign(secret: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(secret.as_bytes(), &[body]))
}

pub(crate) fn verify(request: &Request<'_>) -> Result<Verification, VerifyError> {
    let (headers, body) = (request.headers, request.body);
    let value = header(headers, SIGNATURE_HEADER).ok_or(VerifyError::Missing(SIGNATURE_HEADER))?;
    let signature = decode_hex(value, 32, SIGNATURE_HEADER)?;
    let secret_index = first_match(request.credentials.secrets, |s| {
        hmac_sha256_matches(s.as_bytes(), &[body], &signature)
    })?;
    Ok(Verification {
        secret_index,
        signed_at: None,
    })
}

/// The path of field `name` of an entity.
fn field(entity: [&'static str; 3], name: &'static str) -> [&'static str; 4] {
    [entity[0], entity[1], entity[2], name]
}

fn kind_of(event: &str) -> EventKind {
    match event {
        "payment.captured" | "order.paid" => EventKind::Captured,
        "payment.failed" => EventKind::Failed,
        "payment.authorized" => EventKind::Authorized,
        "refund.processed" => EventKind::Refunded,
        _ => EventKind::Other,
    }
}

pub(crate) fn parse(headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let v = parse_body(body)?;
    let event = str_at(&v, &["event"]).ok_or(ParseError::MissingField("event"))?;
    let kind = kind_of(event);
    let is_refund = event.starts_with("refund.");

    let (payment_id, amount_minor, currency, refund_id) = if is_refund {
        (
            id_at(&v, &field(REFUND, "payment_id")).or_else(|| id_at(&v, &field(PAYMENT, "id"))),
            int_amount_at(&v, &field(REFUND, "amount"), "payload.refund.entity.amount")?,
            currency_at(&v, &field(REFUND, "currency")),
            id_at(&v, &field(REFUND, "id")),
        )
    } else {
        let amount = match int_amount_at(
            &v,
            &field(PAYMENT, "amount"),
            "payload.payment.entity.amount",
        )? {
            Some(a) => Some(a),
            None => int_amount_at(&v, &field(ORDER, "amount"), "payload.order.entity.amount")?,
        };
        (
            id_at(&v, &field(PAYMENT, "id")),
            amount,
            currency_at(&v, &field(PAYMENT, "currency"))
                .or_else(|| currency_at(&v, &field(ORDER, "currency"))),
            None,
        )
    };
    let order_ref = id_at(&v, &field(PAYMENT, "order_id"))
        .or_else(|| id_at(&v, &field(ORDER, "id")))
        .or_else(|| id_at(&v, &field(REFUND, "order_id")));
    let email = str_at(&v, &field(PAYMENT, "email")).map(str::to_owned);

    let event_id = match header(headers, EVENT_ID_HEADER) {
        Some(id) => id.to_owned(),
        None => match fallback_entity_id(&v, is_refund) {
            Some(entity_id) => format!("{event}:{entity_id}"),
            None if kind == EventKind::Other => body_digest_id(event, body),
            None => return Err(ParseError::MissingField(EVENT_ID_HEADER)),
        },
    };

    Ok(NormalizedEvent {
        provider: Gateway::Razorpay,
        event_id,
        event_type: event.to_owned(),
        kind,
        payment_id,
        order_ref,
        amount_minor,
        currency,
        email,
        refund_id,
        cumulative_refund: false,
    })
}

/// The entity the fallback identity names: the refund for refund events,
/// else the payment, else the order, else the first entity the event lists in
/// `contains`.
fn fallback_entity_id(v: &Value, is_refund: bool) -> Option<String> {
    let refund = is_refund.then(|| id_at(v, &["payload", "refund", "entity", "id"]));
    refund
        .flatten()
        .or_else(|| id_at(v, &["payload", "payment", "entity", "id"]))
        .or_else(|| id_at(v, &["payload", "order", "entity", "id"]))
        .or_else(|| {
            at(v, &["contains"])?
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .find_map(|name| id_at(v, &["payload", name, "entity", "id"]))
        })
}
