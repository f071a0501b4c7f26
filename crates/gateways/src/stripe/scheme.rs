//! Stripe webhooks: `Stripe-Signature: t=<unix secs>,v1=<hex>[,v1=<hex>…]`,
//! each `v1` an HMAC-SHA256 of `{t}.{raw body}` keyed with the whole
//! `whsec_…` string (not decoded). During secret rotation Stripe sends one
//! `v1` per active secret; other schemes (`v0`) are ignored. The delivery
//! identity is the event's `id`; amounts are integer minor units.
//!
//! Refunds come two ways, both understood: `charge.refunded` carries the
//! charge's *cumulative* `amount_refunded` (a refund total, identity
//! `{charge}:refunded:{total}`), and `refund.created` / `refund.updated` /
//! `charge.refund.updated` carry one refund object (`re_…`), which counts
//! only once its status is `succeeded`.

use serde_json::Value;

use crate::crypto::{
    check_window, first_match, hmac_sha256, hmac_sha256_matches_any, parse_unix_digits,
};
use crate::json::{currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::scheme::{ParseError, Request, Verification, VerifyError, header};
use crate::{EventKind, Gateway, Headers, NormalizedEvent};

/// Header carrying timestamp and signatures.
pub(crate) const SIGNATURE_HEADER: &str = "Stripe-Signature";

/// The `v1` signature Stripe would send for `body` at `timestamp`.
pub(crate) fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    hex::encode(hmac_sha256(secret.as_bytes(), &[t.as_bytes(), b".", body]))
}

/// The parsed `Stripe-Signature` header.
struct SignatureHeader<'a> {
    timestamp_text: &'a str,
    timestamp: i64,
    v1: Vec<Vec<u8>>,
}

fn malformed(reason: &str) -> VerifyError {
    VerifyError::Malformed {
        what: SIGNATURE_HEADER,
        reason: reason.into(),
    }
}

fn parse_header(value: &str) -> Result<SignatureHeader<'_>, VerifyError> {
    let mut timestamp_text = None;
    let mut saw_v1 = false;
    let mut v1 = Vec::new();
    for item in value.split(',') {
        let Some((key, val)) = item.split_once('=') else {
            continue;
        };
        match key.trim() {
            "t" if timestamp_text.is_some() => return Err(malformed("more than one t")),
            "t" => timestamp_text = Some(val.trim()),
            "v1" => {
                saw_v1 = true;
                if let Ok(sig) = hex::decode(val.trim())
                    && sig.len() == 32
                {
                    v1.push(sig);
                }
            }
            _ => {}
        }
    }
    let timestamp_text = timestamp_text.ok_or_else(|| malformed("no t= timestamp"))?;
    let timestamp = parse_unix_digits(timestamp_text, SIGNATURE_HEADER)?;
    if !saw_v1 {
        return Err(malformed("no v1 signature"));
    }
    if v1.is_empty() {
        return Err(malformed("no well-formed v1 signature"));
    }
    Ok(SignatureHeader {
        timestamp_text,
        timestamp,
        v1,
    })
}

pub(crate) fn verify(request: &Request<'_>) -> Result<Verification, VerifyError> {
    let (headers, body) = (request.headers, request.body);
    let value = header(headers, SIGNATURE_HEADER).ok_or(VerifyError::Missing(SIGNATURE_HEADER))?;
    let parsed = parse_header(value)?;
    check_window(parsed.timestamp, request.now_unix, request.tolerance_secs)?;
    let signed = [parsed.timestamp_text.as_bytes(), b".", body];
    let secret_index = first_match(request.credentials.secrets, |s| {
        hmac_sha256_matches_any(s.as_bytes(), &signed, &parsed.v1)
    })?;
    Ok(Verification {
        secret_index,
        signed_at: Some(parsed.timestamp),
    })
}

const OBJECT: [&str; 2] = ["data", "object"];

fn object_id(v: &Value, name: &str) -> Option<String> {
    let path = [OBJECT[0], OBJECT[1], name];
    // Expandable fields arrive either as an id string or as the expanded object.
    id_at(v, &path).or_else(|| id_at(v, &[OBJECT[0], OBJECT[1], name, "id"]))
}

fn object_amount(v: &Value, name: &'static str) -> Result<Option<i64>, ParseError> {
    int_amount_at(v, &[OBJECT[0], OBJECT[1], name], name)
}

fn object_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let full: Vec<&str> = OBJECT.iter().chain(path).copied().collect();
    str_at(v, &full)
}

/// What the event type says, before the common fields.
struct Facts {
    kind: EventKind,
    payment_id: Option<String>,
    amount_minor: Option<i64>,
    refund_id: Option<String>,
    cumulative_refund: bool,
}

impl Facts {
    fn payment(kind: EventKind, payment_id: Option<String>, amount_minor: Option<i64>) -> Self {
        Facts {
            kind,
            payment_id,
            amount_minor,
            refund_id: None,
            cumulative_refund: false,
        }
    }
}

/// `charge.refunded`: the charge's cumulative refunded total.
fn charge_refunded(v: &Value, payment_id: Option<String>) -> Result<Facts, ParseError> {
    let charge = object_id(v, "id").ok_or(ParseError::MissingField("data.object.id"))?;
    let total = object_amount(v, "amount_refunded")?
        .ok_or(ParseError::MissingField("data.object.amount_refunded"))?;
    Ok(Facts {
        kind: EventKind::Refunded,
        payment_id,
        amount_minor: Some(total),
        refund_id: Some(format!("{charge}:refunded:{total}")),
        cumulative_refund: true,
    })
}

/// `refund.created` / `refund.updated` / `charge.refund.updated`: one refund
/// object, which counts once it has succeeded.
fn single_refund(v: &Value) -> Result<Facts, ParseError> {
    let payment_id = object_id(v, "payment_intent").or_else(|| object_id(v, "charge"));
    let amount_minor = object_amount(v, "amount")?;
    if object_str(v, &["status"]) != Some("succeeded") {
        return Ok(Facts::payment(EventKind::Other, payment_id, amount_minor));
    }
    let refund_id = object_id(v, "id").ok_or(ParseError::MissingField("data.object.id"))?;
    Ok(Facts {
        kind: EventKind::Refunded,
        payment_id,
        amount_minor,
        refund_id: Some(refund_id),
        cumulative_refund: false,
    })
}

pub(crate) fn parse(_headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let v = parse_body(body)?;
    let event_id = str_at(&v, &["id"]).ok_or(ParseError::MissingField("id"))?;
    let ty = str_at(&v, &["type"]).ok_or(ParseError::MissingField("type"))?;
    let id = object_id(&v, "id");
    let intent_or_id = || object_id(&v, "payment_intent").or_else(|| id.clone());

    let facts = match ty {
        "payment_intent.succeeded" => {
            let amount = match object_amount(&v, "amount_received")? {
                Some(a) => Some(a),
                None => object_amount(&v, "amount")?,
            };
            Facts::payment(EventKind::Captured, id.clone(), amount)
        }
        "payment_intent.payment_failed" => {
            Facts::payment(EventKind::Failed, id.clone(), object_amount(&v, "amount")?)
        }
        "payment_intent.amount_capturable_updated" => Facts::payment(
            EventKind::Authorized,
            id.clone(),
            object_amount(&v, "amount_capturable")?,
        ),
        "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
            // `completed` with `payment_status: unpaid` is a delayed payment
            // method still in flight: its outcome is an `async_payment_*` event.
            let paid = ty == "checkout.session.async_payment_succeeded"
                || object_str(&v, &["payment_status"]) == Some("paid");
            let kind = if paid {
                EventKind::Captured
            } else {
                EventKind::Other
            };
            Facts::payment(kind, intent_or_id(), object_amount(&v, "amount_total")?)
        }
        "checkout.session.async_payment_failed" => Facts::payment(
            EventKind::Failed,
            intent_or_id(),
            object_amount(&v, "amount_total")?,
        ),
        "charge.refunded" => charge_refunded(&v, intent_or_id())?,
        "refund.created" | "refund.updated" | "charge.refund.updated" => single_refund(&v)?,
        _ => {
            let amount = match object_amount(&v, "amount")? {
                Some(a) => Some(a),
                None => object_amount(&v, "amount_total")?,
            };
            Facts::payment(EventKind::Other, intent_or_id(), amount)
        }
    };

    let order_ref = object_str(&v, &["metadata", "order_ref"])
        .or_else(|| object_str(&v, &["client_reference_id"]))
        .map(str::to_owned);
    let email = object_str(&v, &["receipt_email"])
        .or_else(|| object_str(&v, &["customer_details", "email"]))
        .or_else(|| object_str(&v, &["customer_email"]))
        .or_else(|| object_str(&v, &["billing_details", "email"]))
        .or_else(|| object_str(&v, &["metadata", "email"]))
        .map(str::to_owned);

    Ok(NormalizedEvent {
        provider: Gateway::Stripe,
        event_id: event_id.to_owned(),
        event_type: ty.to_owned(),
        kind: facts.kind,
        payment_id: facts.payment_id,
        order_ref,
        amount_minor: facts.amount_minor,
        currency: currency_at(&v, &[OBJECT[0], OBJECT[1], "currency"]),
        email,
        refund_id: facts.refund_id,
        cumulative_refund: facts.cumulative_refund,
    })
}
