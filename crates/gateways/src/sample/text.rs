//! Small text helpers for hand-written sample payloads: JSON string literals
//! and calendar timestamps (the crate has no date library and needs none).
//! Payloads are written as text rather than through `serde_json` so that key
//! order matches the real gateways and decimals such as `500.00` keep their
//! exact spelling.

use std::fmt::Write;

/// `s` as a JSON string literal, quotes included.
pub(crate) fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Latest instant the calendar helpers render (9999-12-31T23:59:59Z).
const MAX_RENDERED: i64 = 253_402_300_799;

/// A UTC calendar date and time.
struct DateTime {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
}

/// Splits unix seconds into a proleptic Gregorian date and time of day,
/// clamped to years 1970..=9999.
fn date_time(unix: i64) -> DateTime {
    let unix = unix.clamp(0, MAX_RENDERED);
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Count days from 0000-03-01 so that each year ends with the leap day;
    // then a 400-year cycle has 146 097 days and the month lengths from March
    // on follow the 153-days-per-5-months pattern.
    let shifted = days + 719_468;
    let cycle = shifted / 146_097;
    let day_of_cycle = shifted % 146_097;
    let year_of_cycle = (day_of_cycle - day_of_cycle / 1_460 + day_of_cycle / 36_524
        - day_of_cycle / 146_096)
        / 365;
    let day_of_year =
        day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = cycle * 400 + year_of_cycle + i64::from(month <= 2);
    DateTime {
        year,
        month,
        day,
        hour: secs / 3_600,
        minute: secs % 3_600 / 60,
        second: secs % 60,
    }
}

/// RFC 3339 in UTC with microseconds, as Standard Webhooks senders write it:
/// `2024-06-07T06:00:03.000000Z`.
pub(crate) fn rfc3339_utc(unix: i64) -> String {
    let t = date_time(unix);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.000000Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// India Standard Time offset in seconds.
const IST: i64 = 5 * 3_600 + 30 * 60;

/// RFC 3339 in India time, as Cashfree writes it: `2025-05-05T12:10:25+05:30`.
pub(crate) fn rfc3339_ist(unix: i64) -> String {
    let t = date_time(unix.saturating_add(IST));
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}+05:30",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// India time as PayU's `addedon` field: `2025-05-05 12:10:21`.
pub(crate) fn payu_ist(unix: i64) -> String {
    let t = date_time(unix.saturating_add(IST));
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_literals_escape() {
        assert_eq!(js("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\u0001é\"");
        let back: Result<String, _> = serde_json::from_str(&js("x\"\u{7}\u{1f}y"));
        assert_eq!(back.ok().as_deref(), Some("x\"\u{7}\u{1f}y"));
    }

    #[test]
    fn calendar() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339_utc(1_717_740_003), "2024-06-07T06:00:03.000000Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00.000000Z");
        assert_eq!(rfc3339_utc(1_709_251_199), "2024-02-29T23:59:59.000000Z");
        assert_eq!(rfc3339_utc(4_107_542_400), "2100-03-01T00:00:00.000000Z");
        assert_eq!(rfc3339_utc(MAX_RENDERED), "9999-12-31T23:59:59.000000Z");
        assert_eq!(rfc3339_utc(i64::MAX), "9999-12-31T23:59:59.000000Z");
        assert_eq!(rfc3339_ist(1_746_427_225), "2025-05-05T12:10:25+05:30");
        assert_eq!(payu_ist(1_746_427_221), "2025-05-05 12:10:21");
    }
}
