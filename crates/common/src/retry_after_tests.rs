//! The `Retry-After` rule, by example and by property: delta-seconds,
//! HTTP-dates before and after now, huge numbers, negative and fractional
//! values, and garbage.

use proptest::prelude::*;
use time::macros::datetime;

use super::*;

const NOW: OffsetDateTime = datetime!(2015-10-21 07:28:00 UTC);

#[test]
fn examples() {
    let secs = |s: u64| Some(Duration::from_secs(s));
    assert_eq!(parse("120", NOW), secs(120));
    assert_eq!(parse(" 0 ", NOW), secs(0));
    assert_eq!(parse("007", NOW), secs(7));
    assert_eq!(parse("Wed, 21 Oct 2015 07:30:00 GMT", NOW), secs(120));
    assert_eq!(parse("Wed, 21 Oct 2015 07:28:00 GMT", NOW), secs(0));
    assert_eq!(parse("Tue, 20 Oct 2015 07:28:00 GMT", NOW), secs(0), "past");
    assert_eq!(
        parse("99999999999999999999999999", NOW),
        Some(Duration::from_secs(u64::MAX)),
        "too large for 64 bits: the longest wait"
    );
    for nothing in [
        "",
        "  ",
        "-5",
        "+5",
        "1.5",
        "1e3",
        "soon",
        "5 s",
        "Wednesday, 21-Oct-15 07:28:00 GMT",
        "Wed Oct 21 07:28:00 2015",
        "Wed, 21 Oct 2015 07:28:00 +0000",
        "Wed, 32 Oct 2015 07:28:00 GMT",
    ] {
        assert_eq!(parse(nothing, NOW), None, "{nothing:?}");
    }
}

#[test]
fn from_headers_reads_the_header_if_any() {
    let mut headers = http::HeaderMap::new();
    assert_eq!(from_headers(&headers, NOW), None);
    headers.insert(http::header::RETRY_AFTER, "30".parse().expect("value"));
    assert_eq!(from_headers(&headers, NOW), Some(Duration::from_secs(30)));
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_bytes(b"\xff").expect("opaque bytes"),
    );
    assert_eq!(from_headers(&headers, NOW), None, "not text");
}

/// `date` in IMF-fixdate.
fn imf(date: OffsetDateTime) -> String {
    let format = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    date.format(format).expect("formats")
}

proptest! {
    #[test]
    fn delta_seconds_are_seconds(secs in any::<u64>(), pad in "[ \t]{0,3}") {
        let value = format!("{pad}{secs}{pad}");
        prop_assert_eq!(parse(&value, NOW), Some(Duration::from_secs(secs)));
    }

    #[test]
    fn huge_numbers_are_the_longest_wait(digits in "[1-9][0-9]{20,60}") {
        prop_assert_eq!(parse(&digits, NOW), Some(Duration::from_secs(u64::MAX)));
    }

    #[test]
    fn negative_and_fractional_numbers_are_no_wish(secs in any::<u64>(), frac in 0u32..1000) {
        let negative = format!("-{secs}");
        let fractional = format!("{secs}.{frac}");
        prop_assert_eq!(parse(&negative, NOW), None);
        prop_assert_eq!(parse(&fractional, NOW), None);
    }

    #[test]
    fn an_http_date_is_the_time_until_it(offset in -4_000_000_000i64..4_000_000_000i64) {
        let at = NOW + time::Duration::seconds(offset);
        let expected = Duration::from_secs(u64::try_from(offset).unwrap_or(0));
        prop_assert_eq!(parse(&imf(at), NOW), Some(expected));
    }

    #[test]
    fn anything_else_is_no_wish_and_never_panics(value in "\\PC{0,40}") {
        let read = parse(&value, NOW);
        let trimmed = value.trim();
        let digits = !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit());
        let date = trimmed.ends_with(" GMT");
        prop_assert!(read.is_none() || digits || date, "{value:?} read as {read:?}");
    }
}
