//! One HTTP attempt at delivering an order event to an endpoint: render
//! the event with the order's snapshot as it is now, sign it (Standard Webhooks, with the gateways crate's signer), POST
//! it to the endpoint's URL within the timeout, and say how it ended —
//! what the row becomes (`AttemptEnd`) and what the endpoint answered. The
//! decision is pure ([`judge`]); 410 Gone disables the endpoint.

use std::time::{Duration, Instant};

use oncehook_common::config::{NotifyConfig, NotifyEndpoint};
use oncehook_common::retry_after;
use oncehook_common::store::notify::{Answer, AttemptEnd};
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;

use oncehook_gateways::standard_webhooks;

/// The most of an answer's body kept on the row.
pub const ANSWER_LIMIT: usize = 1024;
/// The longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3_600);

/// How the endpoint took one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// It answered with this status (and perhaps a `Retry-After`).
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No answer within the timeout.
    Timeout,
    /// No answer at all (refused, reset, DNS, TLS).
    Unreachable,
}

impl Reply {
    /// The `result` label of `oncehook_notify_attempts_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Reply::Status { status: 410, .. } => "410",
            Reply::Status { status, .. } if (200..300).contains(status) => "2xx",
            Reply::Status { status, .. } if (400..500).contains(status) => "4xx",
            Reply::Status { status, .. } if (500..600).contains(status) => "5xx",
            Reply::Status { .. } => "error",
            Reply::Timeout => "timeout",
            Reply::Unreachable => "error",
        }
    }
}

/// What becomes of the row after the `attempts`-th attempt (counting this
/// one) got `reply`; `true` with it when the endpoint must be disabled.
pub fn judge(config: &NotifyConfig, attempts: u32, reply: &Reply) -> (AttemptEnd, bool) {
    let retry_after = match reply {
        Reply::Status { status, .. } if (200..300).contains(status) => {
            return (AttemptEnd::Delivered, false);
        }
        Reply::Status { status: 410, .. } => return (AttemptEnd::Failed, true),
        Reply::Status { retry_after, .. } => *retry_after,
        Reply::Timeout | Reply::Unreachable => None,
    };
    match config.retry_after(attempts) {
        None => (AttemptEnd::Failed, false),
        Some(step) => {
            let asked = retry_after.unwrap_or_default().min(MAX_RETRY_AFTER);
            (
                AttemptEnd::Retry {
                    after: step.max(asked),
                },
                false,
            )
        }
    }
}

/// One attempt's outcome, as sent.
#[derive(Debug)]
pub struct Sent {
    pub reply: Reply,
    pub answer: Answer,
    pub took: Duration,
}

/// POSTs `body` as event `id` to `endpoint`.
pub async fn post(
    http: &reqwest::Client,
    endpoint: &NotifyEndpoint,
    id: &str,
    body: Vec<u8>,
    traceparent: Option<String>,
) -> Sent {
    let timestamp = time::OffsetDateTime::now_utc().unix_timestamp();
    let secrets: Vec<&str> = endpoint.secrets.iter().map(|s| s.expose()).collect();
    let signature = standard_webhooks::signature(&secrets, id, timestamp, &body);
    let mut request = http
        .post(&endpoint.url)
        .header(CONTENT_TYPE, "application/json")
        .header(standard_webhooks::HEADER_ID, id)
        .header(standard_webhooks::HEADER_TIMESTAMP, timestamp.to_string())
        .header(standard_webhooks::HEADER_SIGNATURE, signature)
        .body(body);
    if let Some(tp) = traceparent {
        request = request.header("traceparent", tp);
    }
    let started = Instant::now();
    match request.send().await {
        Ok(mut response) => {
            let status = response.status();
            let retry_after =
                retry_after::from_headers(response.headers(), time::OffsetDateTime::now_utc());
            let text = read_start(&mut response).await;
            let error = (!status.is_success()).then(|| describe(status));
            Sent {
                reply: Reply::Status {
                    status: status.as_u16(),
                    retry_after,
                },
                answer: Answer {
                    status: Some(i32::from(status.as_u16())),
                    error,
                    body: Some(text).filter(|t| !t.is_empty()),
                },
                took: started.elapsed(),
            }
        }
        Err(err) => {
            let reply = if err.is_timeout() {
                Reply::Timeout
            } else {
                Reply::Unreachable
            };
            Sent {
                answer: Answer {
                    status: None,
                    error: Some(error_text(&err)),
                    body: None,
                },
                reply,
                took: started.elapsed(),
            }
        }
    }
}

fn describe(status: StatusCode) -> String {
    format!(
        "answered {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .trim_end()
    .to_owned()
}

/// The error with its causes (reqwest's own text names only the URL).
fn error_text(err: &reqwest::Error) -> String {
    let mut text = if err.is_timeout() {
        "no answer within the timeout".to_owned()
    } else if err.is_connect() {
        "could not connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The first [`ANSWER_LIMIT`] bytes of the answer's body, as text; the rest
/// is never read into memory.
async fn read_start(response: &mut reqwest::Response) -> String {
    let mut kept = Vec::new();
    while kept.len() < ANSWER_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = ANSWER_LIMIT - kept.len();
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NotifyConfig {
        NotifyConfig {
            endpoints: Vec::new(),
            retry_schedule: vec![Duration::from_secs(5), Duration::from_secs(300)],
            timeout: Duration::from_secs(10),
            concurrency: 4,
        }
    }

    fn status(status: u16) -> Reply {
        Reply::Status {
            status,
            retry_after: None,
        }
    }

    #[test]
    fn a_2xx_delivers_and_410_fails_and_disables() {
        for s in [200, 201, 204, 299] {
            assert_eq!(
                judge(&config(), 1, &status(s)),
                (AttemptEnd::Delivered, false)
            );
        }
        assert_eq!(
            judge(&config(), 1, &status(410)),
            (AttemptEnd::Failed, true)
        );
    }

    #[test]
    fn other_answers_follow_the_schedule_then_fail() {
        let retry = |after| {
            (
                AttemptEnd::Retry {
                    after: Duration::from_secs(after),
                },
                false,
            )
        };
        for reply in [
            status(500),
            status(404),
            status(301),
            Reply::Timeout,
            Reply::Unreachable,
        ] {
            assert_eq!(judge(&config(), 1, &reply), retry(5), "{reply:?}");
            assert_eq!(judge(&config(), 2, &reply), retry(300), "{reply:?}");
            assert_eq!(
                judge(&config(), 3, &reply),
                (AttemptEnd::Failed, false),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_never_sooner_than_asked_and_capped() {
        let asked = |secs| Reply::Status {
            status: 429,
            retry_after: Some(Duration::from_secs(secs)),
        };
        let after = |end: (AttemptEnd, bool)| match end.0 {
            AttemptEnd::Retry { after } => after.as_secs(),
            other => panic!("{other:?}"),
        };
        assert_eq!(after(judge(&config(), 1, &asked(60))), 60);
        assert_eq!(after(judge(&config(), 1, &asked(1))), 5);
        assert_eq!(after(judge(&config(), 1, &asked(10_000_000))), 24 * 3_600);
        // Past the schedule, a Retry-After does not keep it alive.
        assert_eq!(judge(&config(), 3, &asked(60)).0, AttemptEnd::Failed);
    }

    #[test]
    fn results_are_labelled_by_class() {
        assert_eq!(status(204).label(), "2xx");
        assert_eq!(status(410).label(), "410");
        assert_eq!(status(429).label(), "4xx");
        assert_eq!(status(503).label(), "5xx");
        assert_eq!(Reply::Timeout.label(), "timeout");
        assert_eq!(Reply::Unreachable.label(), "error");
    }
}
