//! Standard Webhooks (the open specification): `webhook-id`,
//! `webhook-timestamp` (unix seconds) and `webhook-signature`, a
//! space-separated list of `v1,<base64>` entries, each an HMAC-SHA256 of
//! `{id}.{timestamp}.{raw body}` keyed with the base64-decoded bytes after the
//! secret's `whsec_` prefix. oncehook reads payloads shaped
//! `{"type", "timestamp", "data": {"payment_id", "order_id", "amount", "currency", "email"}}`.

use base64::Engine;
use base64::alphabet::STANDARD as STANDARD_ALPHABET;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD as BASE64};

use crate::crypto::{
    check_window, first_match, hmac_sha256, hmac_sha256_matches_any, parse_unix_digits,
};
use crate::json::{currency_at, id_at, int_amount_at, parse_body, str_at};
use crate::scheme::{ParseError, Request, Verification, VerifyError, header};
use crate::{EventKind, Gateway, Headers, NormalizedEvent};

/// Header carrying the delivery identity.
pub const ID_HEADER: &str = "webhook-id";
/// Header carrying the signed timestamp, unix seconds.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Header carrying the signatures.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// Secrets are accepted with or without base64 padding.
const SECRET_BASE64: GeneralPurpose = GeneralPurpose::new(
    &STANDARD_ALPHABET,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The HMAC key of a `whsec_…` secret (the prefix is optional), or `None` if
/// the rest is not base64.
pub fn key_of(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    SECRET_BASE64.decode(encoded.trim()).ok()
}

/// The whole `webhook-signature` value for `body` sent as `id` at
/// `timestamp` (unix seconds): one `v1,<base64>` entry per secret whose key
/// is usable ([`key_of`]), space-separated (a rotation signs with each).
pub fn signature(secrets: &[&str], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .filter_map(|s| key_of(s))
        .map(|key| sign(&key, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `webhook-signature` entry (`v1,<base64>`) for a delivery.
pub(crate) fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let mac = hmac_sha256(key, &[id.as_bytes(), b".", t.as_bytes(), b".", body]);
    format!("v1,{}", BASE64.encode(mac))
}

fn parse_signatures(value: &str) -> Result<Vec<Vec<u8>>, VerifyError> {
    let malformed = |reason: &str| VerifyError::Malformed {
        what: SIGNATURE_HEADER,
        reason: reason.into(),
    };
    let mut saw_v1 = false;
    let mut signatures = Vec::new();
    for entry in value.split_ascii_whitespace() {
        if let Some(("v1", encoded)) = entry.split_once(',') {
            saw_v1 = true;
            if let Ok(sig) = BASE64.decode(encoded)
                && sig.len() == 32
            {
                signatures.push(sig);
            }
        }
    }
    if !saw_v1 {
        return Err(malformed("no v1 signature"));
    }
    if signatures.is_empty() {
        return Err(malformed("no well-formed v1 signature"));
    }
    Ok(signatures)
}

pub(crate) fn verify(request: &Request<'_>) -> Result<Verification, VerifyError> {
    let (headers, body) = (request.headers, request.body);
    let id = header(headers, ID_HEADER).ok_or(VerifyError::Missing(ID_HEADER))?;
    let ts_text =
        header(headers, TIMESTAMP_HEADER).ok_or(VerifyError::Missing(TIMESTAMP_HEADER))?;
    let sig_text =
        header(headers, SIGNATURE_HEADER).ok_or(VerifyError::Missing(SIGNATURE_HEADER))?;
    let signed_at = parse_unix_digits(ts_text, TIMESTAMP_HEADER)?;
    let signatures = parse_signatures(sig_text)?;
    check_window(signed_at, request.now_unix, request.tolerance_secs)?;
    let signed = [id.as_bytes(), b".", ts_text.as_bytes(), b".", body];
    // A secret that is not base64 cannot have signed anything: it never matches.
    let secret_index = first_match(request.credentials.secrets, |s| {
        key_of(s).is_some_and(|key| hmac_sha256_matches_any(&key, &signed, &signatures))
    })?;
    Ok(Verification {
        secret_index,
        signed_at: Some(signed_at),
    })
}

pub(crate) fn parse(headers: &Headers, body: &[u8]) -> Result<NormalizedEvent, ParseError> {
    let event_id = header(headers, ID_HEADER).ok_or(ParseError::MissingField(ID_HEADER))?;
    let v = parse_body(body)?;
    let ty = str_at(&v, &["type"]).ok_or(ParseError::MissingField("type"))?;
    let kind = match ty {
        "payment.succeeded" => EventKind::Captured,
        "payment.failed" => EventKind::Failed,
        "payment.authorized" => EventKind::Authorized,
        "payment.refunded" => EventKind::Refunded,
        _ => EventKind::Other,
    };
    let refund_id = (kind == EventKind::Refunded)
        .then(|| id_at(&v, &["data", "refund_id"]).unwrap_or_else(|| event_id.to_owned()));
    Ok(NormalizedEvent {
        provider: Gateway::Standard,
        event_id: event_id.to_owned(),
        event_type: ty.to_owned(),
        kind,
        payment_id: id_at(&v, &["data", "payment_id"]),
        order_ref: id_at(&v, &["data", "order_id"]),
        amount_minor: int_amount_at(&v, &["data", "amount"], "data.amount")?,
        currency: currency_at(&v, &["data", "currency"]),
        email: str_at(&v, &["data", "email"]).map(str::to_owned),
        refund_id,
        cumulative_refund: false,
    })
}

#[cfg(test)]
mod signing_tests {
    use super::*;

    /// The example of the Standard Webhooks specification.
    #[test]
    fn the_specification_example_signs_as_published() {
        for secret in [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ] {
            let sig = signature(
                &[secret],
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#,
            );
            assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "{secret}");
        }
    }

    #[test]
    fn a_rotation_signs_with_every_secret_and_skips_an_unusable_one() {
        let (a, b) = (
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY",
        );
        let both = signature(&[a, "!!not base64", b], "evt_1", 1, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2, "{both}");
        assert_eq!(parts[0], signature(&[a], "evt_1", 1, b"{}"));
        assert_eq!(parts[1], signature(&[b], "evt_1", 1, b"{}"));
        assert_ne!(parts[0], parts[1]);
    }

    #[test]
    fn what_is_signed_here_verifies_here() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"type":"order.paid"}"#;
        let now = 1_700_000_000;
        let mut headers = Headers::default();
        headers.insert(ID_HEADER, "evt_x");
        headers.insert(TIMESTAMP_HEADER, now.to_string());
        headers.insert(SIGNATURE_HEADER, signature(&[secret], "evt_x", now, body));
        let secrets = [secret.to_owned()];
        let request = Request {
            headers: &headers,
            body,
            now_unix: now,
            tolerance_secs: 300,
            credentials: crate::Credentials::new(&secrets),
        };
        assert_eq!(verify(&request).expect("verified").secret_index, 0);
    }
}
