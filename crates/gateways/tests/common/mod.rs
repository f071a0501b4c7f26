//! Shared helpers for the integration tests: the vendored gateway vectors
//! (`tests/fixtures/`) and sample specs.
#![allow(dead_code)]

use oncehook_gateways::sample::{SAMPLE_PAYU_KEY, SampleSpec, payu_hash};
use oncehook_gateways::{Credentials, Gateway, Headers};
use serde_json::Value;

/// The merchant key of the PayU vector (`vectors.json` → `payu.key`).
pub const VECTOR_PAYU_KEY: &str = "TESTKEY1";

/// Credentials for samples: `secrets` and the sample PayU merchant key.
pub fn creds(secrets: &[String]) -> Credentials<'_> {
    Credentials::new(secrets).with_merchant_key(Some(SAMPLE_PAYU_KEY))
}

/// Credentials for the vectors: `secrets` and the PayU vector's merchant key.
pub fn vector_creds(secrets: &[String]) -> Credentials<'_> {
    Credentials::new(secrets).with_merchant_key(Some(VECTOR_PAYU_KEY))
}

/// A form body of `fields` with `hash` set to `hash`.
pub fn payu_form_with_hash(fields: &[(&str, &str)], hash: &str) -> Vec<u8> {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        s.append_pair(k, v);
    }
    s.append_pair("hash", hash);
    s.finish().into_bytes()
}

/// A PayU form body of `fields`, hashed under `salt`.
pub fn payu_form(fields: &[(&str, &str)], salt: &str) -> Vec<u8> {
    payu_form_with_hash(fields, &payu_hash(fields, salt))
}

/// `tests/fixtures/vectors.json`.
pub fn vectors() -> Value {
    serde_json::from_str(include_str!("../fixtures/vectors.json")).unwrap_or(Value::Null)
}

/// The key of a gateway in `vectors.json`.
pub fn vector_key(gateway: Gateway) -> &'static str {
    match gateway {
        Gateway::Standard => "standard_webhooks",
        other => other.as_str(),
    }
}

/// The exact body bytes of a gateway's vector.
pub fn vector_body(gateway: Gateway) -> &'static [u8] {
    match gateway {
        Gateway::Razorpay => include_bytes!("../fixtures/razorpay_payment_captured.json"),
        Gateway::Cashfree => include_bytes!("../fixtures/cashfree_payment_success.json"),
        Gateway::Payu => include_bytes!("../fixtures/payu_success.form"),
        Gateway::Stripe => include_bytes!("../fixtures/stripe_payment_intent_succeeded.json"),
        Gateway::Standard => include_bytes!("../fixtures/standard_webhooks_payment_succeeded.json"),
        other => panic!("no vector for gateway {other}: add one to tests/fixtures"),
    }
}

/// A string field of a gateway's vector entry.
pub fn vector_str(gateway: Gateway, field: &str) -> String {
    vectors()[vector_key(gateway)][field]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("vector {gateway} has no string {field}"))
}

/// The secret (PayU: salt) of a gateway's vector.
pub fn vector_secret(gateway: Gateway) -> String {
    match gateway {
        Gateway::Payu => vector_str(gateway, "salt"),
        g => vector_str(g, "secret"),
    }
}

/// The vector's signed timestamp in unix seconds, or 0 where none is signed.
pub fn vector_now(gateway: Gateway) -> i64 {
    let v = &vectors()[vector_key(gateway)]["timestamp"];
    match gateway {
        Gateway::Cashfree => v.as_str().and_then(|s| s.parse::<i64>().ok()).unwrap_or(0) / 1000,
        Gateway::Stripe => v.as_i64().unwrap_or(0),
        Gateway::Standard => vectors()["standard_webhooks"]["headers"]["webhook-timestamp"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// The vector's request headers (without the documentation-only rotation entry).
pub fn vector_headers(gateway: Gateway) -> Headers {
    let mut headers = Headers::new();
    if let Some(map) = vectors()[vector_key(gateway)]["headers"].as_object() {
        for (name, value) in map {
            if !name.contains(' ') {
                headers.insert(name, value.as_str().unwrap_or_default());
            }
        }
    }
    headers
}

/// A copy of `headers` with `name` set to `value` (replacing any existing value).
pub fn replace_header(headers: &Headers, name: &str, value: &str) -> Headers {
    let mut out: Headers = headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(name))
        .collect();
    out.insert(name, value);
    out
}

/// A copy of `headers` without `name`.
pub fn remove_header(headers: &Headers, name: &str) -> Headers {
    headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(name))
        .collect()
}

/// Changes the character at `index` of `s` to a different one of the same class
/// (digit to digit, hex letter to hex letter, base64 to base64).
pub fn change_char(s: &str, index: usize) -> String {
    let mut bytes = s.as_bytes().to_vec();
    let b = bytes[index];
    bytes[index] = match b {
        b'0'..=b'8' => b + 1,
        b'9' => b'0',
        b'a'..=b'e' | b'A'..=b'Y' | b'g'..=b'y' => b + 1,
        b'f' => b'a',
        b'z' => b'a',
        b'Z' => b'A',
        b'+' => b'/',
        b'/' => b'+',
        other => other ^ 1,
    };
    String::from_utf8(bytes).unwrap_or_default()
}

/// A secret that fits every gateway (a valid Standard Webhooks secret).
pub const SAMPLE_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A typical sample spec.
pub fn spec() -> SampleSpec {
    SampleSpec {
        order_ref: "order_1042".into(),
        payment_id: "pay_S4mple1042".into(),
        event_id: "evt_s4mple_0001".into(),
        amount_minor: 50_000,
        currency: "INR".into(),
        email: "gaurav.kumar@example.com".into(),
        timestamp: 1_746_427_225,
        merchant_key: None,
    }
}
