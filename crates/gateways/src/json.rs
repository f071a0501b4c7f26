//! Lenient navigation of JSON payloads. Gateways change field types between
//! versions (`notes` is `[]` or an object, ids are strings or numbers), so the
//! parsers walk a `serde_json::Value` instead of deserialising strict structs.
//! Decimal amounts are read from the raw text so `500.00` never becomes a float.

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use super::ParseError;
use crate::amount::{currency_exponent, parse_decimal_minor};

/// Parses the body as JSON (`Syntax` error otherwise).
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, ParseError> {
    serde_json::from_slice(body).map_err(|e| ParseError::Syntax("JSON", e.to_string()))
}

/// The value at `path`, if every step is an object with that key.
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |cur, key| cur.as_object()?.get(*key))
}

/// A non-empty string at `path`.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path)?.as_str().filter(|s| !s.is_empty())
}

/// An identifier at `path`: a non-empty string, or an integer written as its
/// decimal text (Cashfree's `cf_payment_id` comes both ways).
pub(crate) fn id_at(v: &Value, path: &[&str]) -> Option<String> {
    match at(v, path)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    }
}

/// A currency code at `path`, upper-cased.
pub(crate) fn currency_at(v: &Value, path: &[&str]) -> Option<String> {
    str_at(v, path).map(str::to_ascii_uppercase)
}

/// An integer amount in minor units at `path`: absent or `null` is `None`;
/// anything but a non-negative JSON integer that fits `i64` is invalid.
pub(crate) fn int_amount_at(
    v: &Value,
    path: &[&str],
    field: &'static str,
) -> Result<Option<i64>, ParseError> {
    let invalid = |reason: &str| ParseError::InvalidField {
        field,
        reason: reason.into(),
    };
    match at(v, path) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                if i < 0 {
                    return Err(invalid("negative amount"));
                }
                Ok(Some(i))
            } else if n.is_u64() {
                Err(invalid("amount out of range"))
            } else {
                Err(invalid("not an integer number of minor units"))
            }
        }
        Some(_) => Err(invalid("not a number")),
    }
}

/// The raw JSON text at `path` in `body`, for reading numbers exactly.
fn raw_at<'a>(body: &'a str, path: &[&str]) -> Option<&'a RawValue> {
    let mut cur: &'a RawValue = serde_json::from_str(body).ok()?;
    for key in path {
        let map: HashMap<String, &'a RawValue> = serde_json::from_str(cur.get()).ok()?;
        cur = map.get(*key).copied()?;
    }
    Some(cur)
}

/// A decimal major-unit amount at `path` (`500.00` as a JSON number, or the
/// string `"500.00"`), converted exactly to minor units of `currency`
/// (INR if unknown). Absent or `null` is `None`.
pub(crate) fn decimal_amount_at(
    body: &[u8],
    path: &[&str],
    currency: Option<&str>,
    field: &'static str,
) -> Result<Option<i64>, ParseError> {
    let invalid = |reason: String| ParseError::InvalidField { field, reason };
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(invalid("body is not UTF-8".into()));
    };
    let Some(raw) = raw_at(text, path) else {
        return Ok(None);
    };
    let literal = raw.get().trim();
    let decimal = if literal == "null" {
        return Ok(None);
    } else if literal.starts_with('"') {
        serde_json::from_str::<String>(literal).map_err(|e| invalid(e.to_string()))?
    } else {
        literal.to_owned()
    };
    let exponent = currency_exponent(currency.unwrap_or("INR"));
    parse_decimal_minor(&decimal, exponent)
        .map(Some)
        .map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn navigates_leniently() {
        let v = json!({"a": {"b": "x", "n": 5131, "e": "", "arr": []}});
        assert_eq!(str_at(&v, &["a", "b"]), Some("x"));
        assert_eq!(str_at(&v, &["a", "e"]), None);
        assert_eq!(str_at(&v, &["a", "arr", "x"]), None);
        assert_eq!(id_at(&v, &["a", "n"]).as_deref(), Some("5131"));
        assert_eq!(id_at(&v, &["a", "b"]).as_deref(), Some("x"));
        assert_eq!(id_at(&v, &["missing"]), None);
    }

    #[test]
    fn integer_amounts_are_strict() {
        let v = json!({"ok": 50000, "null": null, "float": 500.5, "neg": -1, "str": "5", "big": u64::MAX});
        assert_eq!(int_amount_at(&v, &["ok"], "amount"), Ok(Some(50000)));
        assert_eq!(int_amount_at(&v, &["null"], "amount"), Ok(None));
        assert_eq!(int_amount_at(&v, &["absent"], "amount"), Ok(None));
        for bad in ["float", "neg", "str", "big"] {
            assert!(int_amount_at(&v, &[bad], "amount").is_err(), "{bad}");
        }
    }

    #[test]
    fn decimal_amounts_read_raw_text() {
        let body = br#"{"d":{"a":500.00,"s":"12.5","n":null,"f":1e3,"p":0.001,"k":{"x":1}}}"#;
        let get = |k| decimal_amount_at(body, &["d", k], Some("INR"), "amount");
        assert_eq!(get("a"), Ok(Some(50000)));
        assert_eq!(get("s"), Ok(Some(1250)));
        assert_eq!(get("n"), Ok(None));
        assert_eq!(get("absent"), Ok(None));
        assert!(get("f").is_err());
        assert!(get("p").is_err());
        assert!(get("k").is_err());
        assert_eq!(
            decimal_amount_at(br#"{"a": 7}"#, &["a"], Some("jpy"), "amount"),
            Ok(Some(7))
        );
    }
}
