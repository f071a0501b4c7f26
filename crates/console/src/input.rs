//! What a request may name, checked at the edge before anything reaches the
//! database or the broker: the filter values of the lists, a search term,
//! the refund intent an action names, and the page to go to after logging
//! in.
//!
//! A filter value outside its rule is refused with `400` and one sentence
//! saying what is allowed (the value itself is not repeated back). A `next`
//! page that is not a plain path of this console is not refused but
//! replaced by the Overview.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use maud::html;

use crate::auth::Who;
use crate::form::Pairs;
use crate::html::{self, Page};

/// Why a request was refused: one sentence for its page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

/// The longest name (gateway, source, error kind) a filter takes.
const MAX_NAME: usize = 64;
/// The longest `next` page followed after a login.
const MAX_NEXT: usize = 2_048;

/// `key` as a name — a gateway, a source, an error kind: 1 to
/// [`MAX_NAME`] ASCII letters, digits, `-`, `_` or `.`.
pub fn name(q: &Pairs, key: &str) -> Result<Option<String>, Invalid> {
    let Some(v) = q.get(key) else {
        return Ok(None);
    };
    let ok = v.len() <= MAX_NAME
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(Some(v))
    } else {
        Err(Invalid(format!(
            "\"{key}\" is a name of letters, digits, '-', '_' and '.' (at most {MAX_NAME})."
        )))
    }
}

/// `key` as one of `options`.
pub fn one_of(
    q: &Pairs,
    key: &str,
    options: &[&'static str],
) -> Result<Option<&'static str>, Invalid> {
    let Some(v) = q.get(key) else {
        return Ok(None);
    };
    match options.iter().copied().find(|o| *o == v) {
        Some(o) => Ok(Some(o)),
        None => Err(Invalid(format!(
            "\"{key}\" is one of {}.",
            options.join(", ")
        ))),
    }
}

/// `key` as free text (a search term, an event ID): at most `max`
/// characters and no control characters.
pub fn text(q: &Pairs, key: &str, max: usize) -> Result<Option<String>, Invalid> {
    let Some(v) = q.get(key) else {
        return Ok(None);
    };
    if v.chars().count() <= max && !v.chars().any(char::is_control) {
        Ok(Some(v))
    } else {
        Err(Invalid(format!(
            "\"{key}\" is at most {max} characters, without control characters."
        )))
    }
}

/// The hex digits of a refund intent's id after its `ri_`.
const INTENT_HEX: usize = 24;

/// `key` as a refund intent's id: `ri_` and [`INTENT_HEX`] lowercase hex
/// digits, as the ledger derives it.
pub fn refund_intent(q: &Pairs, key: &str) -> Result<Option<String>, Invalid> {
    let Some(v) = q.get(key) else {
        return Ok(None);
    };
    let ok = v.strip_prefix("ri_").is_some_and(|hex| {
        hex.len() == INTENT_HEX && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    });
    if ok {
        Ok(Some(v))
    } else {
        Err(Invalid(format!(
            "\"{key}\" is a refund intent's id: ri_ and {INTENT_HEX} lowercase hex digits."
        )))
    }
}

/// A `400` page saying what was wrong with the request, with a link to
/// `back` (the page without its filters).
pub fn bad_request(who: &Who, title: &str, back: &str, why: &Invalid) -> HttpResponse {
    html::respond(
        StatusCode::BAD_REQUEST,
        Page::new(title, Some(who)).body(html! {
            h1 { (title) }
            p.error role="alert" { (why.0) }
            p { a href=(back) { "Start again without the filter" } }
        }),
    )
}

/// Where to go after logging in: `next` if it is a plain path of this
/// console, else the Overview (`/`).
///
/// A plain path starts with a single `/` and has only ASCII letters,
/// digits and `-._~/` (never `//`); it may go on with `?` and a query of
/// letters, digits, `-._~*&=+,;:@/?` and `%` escapes (`%` and two hex
/// digits); at most [`MAX_NEXT`] characters. Nothing else — no control
/// character, whitespace, backslash, fragment or non-ASCII character — so a
/// browser can only resolve it to this console, and it is always a valid
/// `Location` header.
pub fn next_page(next: Option<&str>) -> &str {
    match next {
        Some(n) if is_plain_path(n) => n,
        _ => "/",
    }
}

fn is_plain_path(n: &str) -> bool {
    if n.len() > MAX_NEXT {
        return false;
    }
    let (path, query) = match n.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (n, None),
    };
    let path_ok = path.starts_with('/')
        && !path.contains("//")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b));
    path_ok && query.is_none_or(|q| is_plain_query(q.as_bytes()))
}

fn is_plain_query(q: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&c) = q.get(i) {
        if c == b'%' {
            let hex = |j: usize| q.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return false;
            }
            i += 3;
        } else if c.is_ascii_alphanumeric() || b"-._~*&=+,;:@/?".contains(&c) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_of_the_console_are_followed_after_login() {
        for kept in [
            "/",
            "/letters?gateway=payu",
            "/events?outcome=applied&within=1h",
            "/trace?q=evt%2F1",
            "/letters/0123456789ab",
        ] {
            assert_eq!(next_page(Some(kept)), kept);
        }
        for hostile in [
            "//evil.example/",
            "///evil.example/",
            "https://evil.example/",
            "/\\evil",
            "/\t/evil.example/",
            "/\n/evil",
            "/\r/evil",
            "/\u{b}/evil",
            "/\0",
            "/%2F%2Fevil",
            "/%5Cevil",
            "/events?q=a b",
            "/events?q=%zz",
            "/events?q=%2",
            "/events#//evil",
            "/\u{200b}/evil",
            "evil.example",
            "",
        ] {
            assert_eq!(next_page(Some(hostile)), "/", "{hostile:?}");
        }
        assert_eq!(next_page(Some(&format!("/{}", "a".repeat(MAX_NEXT)))), "/");
        assert_eq!(next_page(None), "/");
    }

    #[test]
    fn filter_values_keep_to_their_rules() {
        let q = Pairs::parse(b"gateway=payu&source=a%20b&outcome=%00&q=evt%0A1&t=evt_1");
        assert_eq!(name(&q, "gateway"), Ok(Some("payu".to_owned())));
        assert!(name(&q, "source").is_err());
        assert_eq!(name(&q, "absent"), Ok(None));
        assert!(one_of(&q, "outcome", &["applied"]).is_err());
        assert_eq!(one_of(&q, "gateway", &["payu"]), Ok(Some("payu")));
        assert!(text(&q, "q", 64).is_err());
        assert_eq!(text(&q, "t", 64), Ok(Some("evt_1".to_owned())));
        assert!(text(&q, "t", 3).is_err());
    }

    #[test]
    fn refund_intents_are_ri_and_24_lowercase_hex_digits() {
        let q = Pairs::parse(
            b"ok=ri_0123456789abcdef01234567&short=ri_0123&upper=ri_0123456789ABCDEF01234567&other=xx_0123456789abcdef01234567",
        );
        assert_eq!(
            refund_intent(&q, "ok"),
            Ok(Some("ri_0123456789abcdef01234567".to_owned()))
        );
        for bad in ["short", "upper", "other"] {
            assert!(refund_intent(&q, bad).is_err(), "{bad}");
        }
        assert_eq!(refund_intent(&q, "absent"), Ok(None));
    }
}
