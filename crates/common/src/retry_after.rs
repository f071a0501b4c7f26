//! Reading a `Retry-After` header: the one parser, for the notifier (a
//! shop's endpoint asking it to wait) and the reconciler (a gateway's API
//! rate-limiting it). Pure; no I/O.
//!
//! The rule (RFC 9110 §10.2.3), after trimming white space:
//!
//! - **delta-seconds**, one or more ASCII digits: that many seconds. A
//!   number too large for 64 bits is read as the longest wait there is
//!   (`u64::MAX` seconds), never as garbage: each caller caps what it
//!   honours (the notifier a day, the reconciler a minute).
//! - **HTTP-date** in its preferred form (IMF-fixdate,
//!   `Sun, 06 Nov 1994 08:49:37 GMT`): the time from `now` until then; a
//!   date that has passed means "now" (zero).
//! - **anything else** — empty, negative (`-5`), fractional (`1.5`), a
//!   date in the obsolete RFC 850 or asctime forms, garbage — is no wish
//!   (`None`): the caller waits by its own schedule.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::FormatItem;
use time::macros::format_description;

/// `Sun, 06 Nov 1994 08:49:37 GMT`.
const IMF_FIXDATE: &[FormatItem<'static>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);

/// The wait a `Retry-After` value asks for, read at `now`; `None` when it
/// asks for nothing readable (see the module's rule).
pub fn parse(value: &str, now: OffsetDateTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(
            value.parse::<u64>().unwrap_or(u64::MAX),
        ));
    }
    let at = time::PrimitiveDateTime::parse(value, IMF_FIXDATE)
        .ok()?
        .assume_utc();
    let wait = at - now;
    Some(if wait.is_positive() {
        Duration::try_from(wait).unwrap_or(Duration::MAX)
    } else {
        Duration::ZERO
    })
}

/// The wait the `Retry-After` header of `headers` asks for, read at `now`;
/// `None` without the header or with one that is not readable text.
pub fn from_headers(headers: &http::HeaderMap, now: OffsetDateTime) -> Option<Duration> {
    parse(headers.get(http::header::RETRY_AFTER)?.to_str().ok()?, now)
}

#[cfg(test)]
#[path = "retry_after_tests.rs"]
mod tests;
