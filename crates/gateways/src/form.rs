//! Strict `application/x-www-form-urlencoded` decoding for PayU's posts.
//!
//! Unlike a browser-style lenient decoder, this refuses bodies that are not
//! UTF-8 (before or after percent-decoding) and bodies that repeat a field
//! name: the hash covers one value per field, so a repeated field would let
//! verification and parsing disagree about which value counts.

use std::collections::HashSet;

/// Decoded form fields, in body order, with unique names.
#[derive(Debug, Clone, Default)]
pub(crate) struct Form(Vec<(String, String)>);

/// Why a body is not an acceptable form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FormError(pub String);

impl Form {
    /// Decodes `body`. Empty segments (`a=1&&b=2`) are skipped, a segment
    /// without `=` is a field with an empty value.
    pub(crate) fn decode(body: &[u8]) -> Result<Form, FormError> {
        let text = std::str::from_utf8(body).map_err(|_| FormError("body is not UTF-8".into()))?;
        let mut fields: Vec<(String, String)> = Vec::new();
        let mut seen = HashSet::new();
        for segment in text.split('&').filter(|s| !s.is_empty()) {
            let (name, value) = segment.split_once('=').unwrap_or((segment, ""));
            let name = decode_component(name)?;
            let value = decode_component(value)?;
            if !seen.insert(name.clone()) {
                let shown: String = name.chars().take(40).collect();
                return Err(FormError(format!("field {shown:?} appears more than once")));
            }
            fields.push((name, value));
        }
        Ok(Form(fields))
    }

    /// A form from already-decoded pairs (for building samples); later
    /// duplicates are dropped.
    pub(crate) fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Form {
        let mut seen = HashSet::new();
        Form(
            pairs
                .into_iter()
                .filter(|(n, _)| seen.insert(n.clone()))
                .collect(),
        )
    }

    /// The decoded value of `name`, if the field is present.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name`, or `""` when absent.
    pub(crate) fn get_or_empty(&self, name: &str) -> &str {
        self.get(name).unwrap_or("")
    }

    /// A non-empty value of `name`.
    pub(crate) fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }
}

/// `+` is a space; `%XY` is the byte 0xXY; a `%` not followed by two hex
/// digits stays literal. The decoded bytes must be UTF-8.
pub(crate) fn decode_component(s: &str) -> Result<String, FormError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => match (hex_val(bytes.get(i + 1)), hex_val(bytes.get(i + 2))) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| FormError("a percent-encoded value is not UTF-8".into()))
}

fn hex_val(b: Option<&u8>) -> Option<u8> {
    match *b? {
        b @ b'0'..=b'9' => Some(b - b'0'),
        b @ b'a'..=b'f' => Some(b - b'a' + 10),
        b @ b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_a_browser() {
        let f = Form::decode(b"a=Premium+Plan&email=g%40x.com&empty=&bare&pct=100%&&u=%E2%82%B9")
            .unwrap_or_default();
        assert_eq!(f.get("a"), Some("Premium Plan"));
        assert_eq!(f.get("email"), Some("g@x.com"));
        assert_eq!(f.get("empty"), Some(""));
        assert_eq!(f.non_empty("empty"), None);
        assert_eq!(f.get("bare"), Some(""));
        assert_eq!(f.get("pct"), Some("100%"));
        assert_eq!(f.get("u"), Some("\u{20b9}"));
        assert_eq!(f.get_or_empty("missing"), "");
    }

    #[test]
    fn refuses_ambiguous_or_non_utf8() {
        assert!(Form::decode(b"a=1&a=2").is_err());
        assert!(Form::decode(b"a=%FF").is_err());
        assert!(Form::decode(&[b'a', b'=', 0xff]).is_err());
    }
}
