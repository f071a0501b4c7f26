//! Realistic, correctly signed sample deliveries for every gateway — what
//! `oncehookctl send` posts and what the tests use. Like `stripe trigger`.
//!
//! Each gateway accepts its own event names and the generic aliases
//! `captured`, `failed`, `authorized` (Razorpay, Stripe, Standard only) and
//! `refunded` (all but PayU, whose refunds are not webhooks; Stripe's is
//! `refund.created`); [`event_names`] lists them. A sample signed with
//! `secret` at `spec.timestamp` verifies with that secret (PayU: and the
//! spec's merchant key) at `now = spec.timestamp`, and [`crate::parse`]
//! yields the spec's values, with these exceptions:
//! - PayU posts carry no event id: their identity is always
//!   `{txnid}:{status}` with `txnid = spec.payment_id` (`spec.event_id` is
//!   not used); they are in INR only, and no value may contain `|` (either
//!   is [`SampleError::InvalidSpec`]).
//! - Stripe `charge.refunded` reports the refund total's identity
//!   `{charge}:refunded:{amount}` as its refund id (see
//!   [`SampleSpec::refund_id`] for the others). Stripe refund objects
//!   (`refund.created`) and Cashfree refund notifications carry no email.
//! - An empty `spec.order_ref` is omitted where the gateway may omit it
//!   (Stripe payment intents and refunds): the event then has no order
//!   reference.

pub(crate) mod text;

use crate::{Gateway, Headers};

pub use crate::payu::{PAYU_HASHED_FIELDS, SAMPLE_PAYU_KEY, payu_hash};

/// Parameters of a sample event.
#[derive(Debug, Clone)]
pub struct SampleSpec {
    /// The merchant order reference (PayU: `udf1`). Empty: none, where the
    /// gateway allows it (Stripe payment intents and refunds).
    pub order_ref: String,
    /// The gateway payment id the sample carries (PayU: the `txnid`, one per
    /// attempt; Stripe: the PaymentIntent id).
    pub payment_id: String,
    /// Delivery identity; gateways that carry one in a header/body use it.
    pub event_id: String,
    /// Non-negative integer minor units. For a refund, the refunded amount;
    /// for Stripe `charge.refunded`, the charge's cumulative refunded total.
    pub amount_minor: i64,
    /// ISO 4217 code; samples write it the way the gateway does (Stripe: lower case).
    pub currency: String,
    /// The customer's email address.
    pub email: String,
    /// Unix seconds put into signed timestamps.
    pub timestamp: i64,
    /// PayU: the merchant key written into the form's `key` field (it must
    /// equal the source's configured `merchant_key`); `None` is
    /// [`SAMPLE_PAYU_KEY`]. Ignored by other gateways.
    pub merchant_key: Option<String>,
}

impl SampleSpec {
    /// The refund id a single-refund sample of `gateway` carries (and
    /// [`crate::parse`] reports): derived from `event_id`, e.g.
    /// `rfnd_{event_id}` for Razorpay or `re_{event_id}` for Stripe
    /// (`refund.created`). PayU has no refund samples (its refunds are not
    /// webhooks); its value, `{payment_id}:refund`, is not used.
    pub fn refund_id(&self, gateway: Gateway) -> String {
        (gateway.scheme().sample_refund_id)(self)
    }

    /// The PayU merchant key the sample carries.
    pub fn payu_merchant_key(&self) -> &str {
        self.merchant_key.as_deref().unwrap_or(SAMPLE_PAYU_KEY)
    }
}

/// A ready-to-post delivery.
#[derive(Debug, Clone)]
pub struct SignedDelivery {
    /// Request headers, including `Content-Type` and the signature.
    pub headers: Headers,
    /// The exact body bytes that were signed.
    pub body: Vec<u8>,
}

/// Why a sample could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    /// `event` is neither one of the gateway's event names nor an alias.
    #[error("unknown {gateway} sample event {event:?} (expected one of: {expected})", expected = .accepted.join(", "))]
    UnknownSampleEvent {
        /// The gateway asked for.
        gateway: Gateway,
        /// The name that was not recognised.
        event: String,
        /// What [`event_names`] returns for the gateway.
        accepted: &'static [&'static str],
    },
    /// The secret cannot sign for this gateway (a Standard Webhooks secret
    /// must be base64 after the optional `whsec_` prefix).
    #[error("invalid {gateway} secret: {reason}")]
    InvalidSecret {
        /// The gateway asked for.
        gateway: Gateway,
        /// What is wrong with the secret (never the secret itself).
        reason: &'static str,
    },
    /// The spec cannot be expressed (a negative amount, or a PayU sample in
    /// a currency other than INR, without a payment id, or with a `|` in a
    /// value).
    #[error("invalid sample spec: {0}")]
    InvalidSpec(String),
}

/// The event names [`build`] accepts for `gateway`: the gateway's own names
/// followed by the generic aliases it supports.
pub fn event_names(gateway: Gateway) -> &'static [&'static str] {
    gateway.scheme().sample_event_names
}

/// Builds and signs `event` (a gateway event name such as
/// `payment.captured`, `PAYMENT_SUCCESS_WEBHOOK`, `success`,
/// `payment_intent.succeeded`, `payment.succeeded`, or a generic alias such
/// as `captured`; see [`event_names`]) with `secret` (for PayU: the salt).
/// Names are matched case-insensitively.
pub fn build(
    gateway: Gateway,
    event: &str,
    spec: &SampleSpec,
    secret: &str,
) -> Result<SignedDelivery, SampleError> {
    if spec.amount_minor < 0 {
        return Err(SampleError::InvalidSpec(format!(
            "amount_minor {} is negative",
            spec.amount_minor
        )));
    }
    let scheme = gateway.scheme();
    let native =
        resolve_in(scheme.sample_events, event).ok_or_else(|| SampleError::UnknownSampleEvent {
            gateway,
            event: event.to_owned(),
            accepted: event_names(gateway),
        })?;
    (scheme.sample)(native, spec, secret)
}

/// Looks `event` up in a table of (accepted name, native name) pairs.
fn resolve_in(table: &[(&str, &'static str)], event: &str) -> Option<&'static str> {
    table
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(event.trim()))
        .map(|(_, native)| *native)
}

/// Changes one byte of `delivery`'s body so its signature no longer matches,
/// keeping the body well-formed: one digit of the amount the gateway's
/// parser reads is changed (`500.00` → `600.00`), so a delivery that slipped
/// through would visibly carry a different amount. Bodies without an amount
/// get their last digit changed, or the case of their first letter flipped.
pub fn tamper(delivery: &mut SignedDelivery) {
    let gateway = sniff_gateway(&delivery.headers);
    let amount_of = |body: &[u8]| {
        gateway
            .and_then(|g| crate::parse(g, &delivery.headers, body).ok())
            .and_then(|e| e.amount_minor)
    };
    let body = &delivery.body;
    let before = amount_of(body);
    let candidates = amount_digit_positions(body);
    let chosen = candidates
        .iter()
        .copied()
        .find(|&pos| {
            let mut changed = body.clone();
            if let Some(b) = changed.get_mut(pos) {
                bump_digit(b);
            }
            amount_of(&changed) != before
        })
        .or_else(|| candidates.first().copied())
        .or_else(|| body.iter().rposition(u8::is_ascii_digit));

    let body = &mut delivery.body;
    if let Some(b) = chosen.and_then(|pos| body.get_mut(pos)) {
        bump_digit(b);
    } else if let Some(b) = body.iter_mut().find(|b| b.is_ascii_alphabetic()) {
        *b ^= 0x20;
    } else if let Some(b) = body.last_mut() {
        *b ^= 0x01;
    } else {
        body.push(b' ');
    }
}

/// Changes an ASCII digit without ever producing a leading zero: 9 becomes 8,
/// every other digit goes up by one.
fn bump_digit(b: &mut u8) {
    *b = if *b == b'9' { b'8' } else { *b + 1 };
}

/// Which gateway a delivery is for: the first whose signature header it
/// carries, else the first that signs in the body and whose content type it
/// has.
fn sniff_gateway(headers: &Headers) -> Option<Gateway> {
    let by_header = Gateway::ALL.into_iter().find(|g| {
        g.scheme()
            .signature_header
            .is_some_and(|name| headers.get(name).is_some())
    });
    by_header.or_else(|| {
        let content_type = headers.get("content-type")?.to_ascii_lowercase();
        Gateway::ALL.into_iter().find(|g| {
            let scheme = g.scheme();
            scheme.signature_header.is_none() && scheme.content_type.accepts(&content_type)
        })
    })
}

/// Positions of the first digit of every value written after a key
/// containing `amount` (`"payment_amount":500.00`, `"amount_total": "7"`,
/// `amount=500.00`).
fn amount_digit_positions(body: &[u8]) -> Vec<usize> {
    const KEY: &[u8] = b"amount";
    let mut positions = Vec::new();
    let mut from = 0;
    while let Some(found) = body
        .get(from..)
        .and_then(|rest| rest.windows(KEY.len()).position(|w| w == KEY))
    {
        // The rest of the key: `amount_received`, `amount_total`, ….
        let after = from + found + KEY.len();
        let after = after
            + body
                .get(after..)
                .unwrap_or_default()
                .iter()
                .take_while(|b| b.is_ascii_lowercase() || **b == b'_')
                .count();
        from = after;
        let rest = body.get(after..).unwrap_or_default();
        let skip = if rest.starts_with(b"=") {
            1
        } else if rest.starts_with(b"\":") {
            2 + rest
                .iter()
                .skip(2)
                .take_while(|b| matches!(b, b' ' | b'"'))
                .count()
        } else {
            continue;
        };
        let pos = after + skip;
        if body.get(pos).is_some_and(u8::is_ascii_digit) {
            positions.push(pos);
        }
    }
    positions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(body: &[u8]) -> SignedDelivery {
        SignedDelivery {
            headers: Headers::new(),
            body: body.to_vec(),
        }
    }

    #[test]
    fn tamper_changes_the_amount() {
        let cases: [(&[u8], &[u8]); 6] = [
            (br#"{"amount":50000}"#, br#"{"amount":60000}"#),
            (br#"{"order_amount":900.00}"#, br#"{"order_amount":800.00}"#),
            (
                b"txnid=T1&amount=500.00&hash=ab",
                b"txnid=T1&amount=600.00&hash=ab",
            ),
            (br#"{"n":1,"x":"7"}"#, br#"{"n":1,"x":"8"}"#),
            (br#"{"x":"y"}"#, br#"{"X":"y"}"#),
            (b"", b" "),
        ];
        for (before, after) in cases {
            let mut d = delivery(before);
            tamper(&mut d);
            assert_eq!(d.body, after, "{}", String::from_utf8_lossy(before));
        }
    }

    #[test]
    fn every_listed_name_builds_and_others_do_not() {
        for gateway in Gateway::ALL {
            for name in event_names(gateway) {
                let built = build(gateway, name, &sample_spec(), "whsec_c2VjcmV0");
                assert!(built.is_ok(), "{gateway} {name}");
            }
            assert!(matches!(
                build(gateway, "nope", &sample_spec(), "whsec_c2VjcmV0"),
                Err(SampleError::UnknownSampleEvent { .. })
            ));
        }
    }

    fn sample_spec() -> SampleSpec {
        SampleSpec {
            order_ref: "o".into(),
            payment_id: "p".into(),
            event_id: "e".into(),
            amount_minor: 1,
            currency: "INR".into(),
            email: "a@b.c".into(),
            timestamp: 1,
            merchant_key: None,
        }
    }

    #[test]
    fn rejects_negative_amounts_and_bad_standard_secrets() {
        let mut spec = sample_spec();
        spec.amount_minor = -1;
        assert!(matches!(
            build(Gateway::Razorpay, "captured", &spec, "s"),
            Err(SampleError::InvalidSpec(_))
        ));
        assert!(matches!(
            build(Gateway::Standard, "captured", &sample_spec(), "whsec_!!"),
            Err(SampleError::InvalidSecret { .. })
        ));
    }
}
