//! What a dead letter may show on a screen: secrets and signatures masked.
//! Header values that sign or authorise a request, and payload fields that
//! carry a signature, hash, token, password, salt, card number or CVV are
//! replaced by a marker naming how long they were, so an operator sees that
//! they were there without reading them. The console and `oncehookctl dlq
//! show` (unless `--reveal`) show dead letters only through this.

use serde_json::{Map, Value};

/// The marker a masked value is replaced by.
pub fn marker(len: usize) -> String {
    format!("•••• masked ({len} chars)")
}

/// Whether a header with this name carries a signature or credential.
pub fn is_secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "signature",
        "authorization",
        "cookie",
        "token",
        "secret",
        "verify",
        "hmac",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// Whether a payload field with this name carries a secret.
pub fn is_secret_field(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let exact = ["key", "salt", "hash", "cvv", "cvc", "pin", "otp"];
    let within = [
        "signature",
        "secret",
        "password",
        "token",
        "hash",
        "card_number",
        "cardnum",
        "account_number",
    ];
    exact.contains(&n.as_str()) || within.iter().any(|w| n.contains(w))
}

/// One header's value as it may be shown: masked if the header is secret.
pub fn header_value(name: &str, value: &str) -> String {
    if is_secret_header(name) {
        marker(value.chars().count())
    } else {
        value.to_owned()
    }
}

/// `headers` with secret values masked.
pub fn headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .map(|(k, v)| (k.to_owned(), header_value(k, v)))
        .collect()
}

/// A header map (a letter's AMQP headers, an envelope's request headers)
/// with secret text values masked; values that are not text are kept.
pub fn header_map(headers: &Map<String, Value>) -> Map<String, Value> {
    headers
        .iter()
        .map(|(k, v)| {
            let shown = match v {
                Value::String(s) => Value::String(header_value(k, s)),
                other => other.clone(),
            };
            (k.clone(), shown)
        })
        .collect()
}

/// One form field's value as it may be shown: masked if the field is secret.
pub fn field_value(name: &str, value: &str) -> String {
    if is_secret_field(name) {
        marker(value.chars().count())
    } else {
        value.to_owned()
    }
}

/// A JSON payload with secret fields masked, at any depth.
pub fn json(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let shown = if is_secret_field(k) && !v.is_object() && !v.is_array() {
                        Value::String(marker(scalar_len(v)))
                    } else {
                        json(v)
                    };
                    (k.clone(), shown)
                })
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(json).collect()),
        other => other.clone(),
    }
}

/// Decoded form pairs with secret fields masked.
pub fn form(pairs: &[(String, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.clone(), field_value(k, v)))
        .collect()
}

fn scalar_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Null => 0,
        other => other.to_string().chars().count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn signatures_and_secret_fields_are_masked_at_any_depth() {
        let shown = headers([
            ("X-Razorpay-Signature", "abcdef"),
            ("content-type", "application/json"),
        ]);
        assert_eq!(shown[0].1, marker(6));
        assert_eq!(shown[1].1, "application/json");
        let payload = json!({"payload": {"payment": {"entity": {"id": "pay_1", "card": {"cvv": "123"}, "token_id": "tok"}}}, "hash": "h"});
        let masked = super::json(&payload);
        assert_eq!(masked["payload"]["payment"]["entity"]["id"], "pay_1");
        assert_eq!(
            masked["payload"]["payment"]["entity"]["card"]["cvv"],
            marker(3)
        );
        assert_eq!(
            masked["payload"]["payment"]["entity"]["token_id"],
            marker(3)
        );
        assert_eq!(masked["hash"], marker(1));
        let pairs = form(&[("txnid".into(), "t1".into()), ("hash".into(), "abc".into())]);
        assert_eq!(pairs[1].1, marker(3));
    }
}
