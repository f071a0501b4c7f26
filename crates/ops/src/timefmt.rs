//! Durations and times as operators type and read them: `--since 30m`,
//! ages like `3h 2m`, table timestamps and RFC 3339 in JSON.
//!
//! Not `humantime`: it refuses a bare number of seconds (`--since 45`),
//! accepts units the tool never did (`3y`, months) and prints every unit
//! (`1h 2m 3s`) where the tables print the two largest.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Parses a duration like `90s`, `30m`, `2h`, `7d` or `1w` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (expected e.g. 30m, 2h, 7d)"))?;
    let unit_secs = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1,
        "m" | "min" | "mins" => 60,
        "h" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use s, m, h, d or w)"
            ));
        }
    };
    n.checked_mul(unit_secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// A compact age or window: `45s`, `12m 5s`, `3h 2m`, `2d 4h`.
pub fn human_duration(secs: u64) -> String {
    let (d, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3_600,
        secs % 3_600 / 60,
        secs % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d {h}h"),
    }
}

/// A UTC time as `2026-11-30 10:42:03Z` for tables.
pub fn short_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// RFC 3339, as in every `--json` document.
pub fn rfc3339(t: OffsetDateTime) -> Option<String> {
    t.format(&Rfc3339).ok()
}

/// Parses RFC 3339 (headers written by the worker and the mailer).
pub fn parse_rfc3339(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

/// Whole seconds from `t` to `now`, never negative.
pub fn age_secs(t: OffsetDateTime, now: OffsetDateTime) -> i64 {
    (now - t).whole_seconds().max(0)
}

/// Seconds as reported by Postgres (`EXTRACT(EPOCH …)`), rounded, never negative.
pub fn whole_secs(secs: f64) -> i64 {
    secs.max(0.0).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3y").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert_eq!(human_duration(59), "59s");
        assert_eq!(human_duration(60), "1m");
        assert_eq!(human_duration(125), "2m 5s");
        assert_eq!(human_duration(3_723), "1h 2m");
        assert_eq!(human_duration(86_400), "1d");
        assert_eq!(human_duration(90_000), "1d 1h");
    }

    #[test]
    fn times_print_in_utc() {
        let t = parse_rfc3339("2026-11-30T12:42:03+02:00").expect("time");
        assert_eq!(short_time(t), "2026-11-30 10:42:03Z");
        assert_eq!(rfc3339(t).as_deref(), Some("2026-11-30T12:42:03+02:00"));
        assert_eq!(age_secs(t, t - time::Duration::seconds(5)), 0);
        assert_eq!(whole_secs(2.6), 3);
    }
}
