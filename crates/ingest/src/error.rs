//! What can go wrong with a webhook request, and the HTTP answer for each:
//! a short JSON body `{"error": code, "message": text}`, never a secret.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use oncehook_gateways::VerifyError;

/// A refused or failed webhook request.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("no source named {0:?} is configured")]
    UnknownSource(String),
    #[error(
        "source {0:?} is disabled: its webhooks are refused until it is enabled again; retry later"
    )]
    SourceDisabled(String),
    #[error(
        "the sources made at runtime are not known yet (the sources feed was not read since start); retry later"
    )]
    SourcesNotYet,
    #[error("body exceeds the {limit} byte limit")]
    TooLarge { limit: usize },
    #[error("request headers exceed the {limit} byte limit")]
    HeadersTooLarge { limit: usize },
    #[error("content type {got:?} is not accepted here (expected {expected})")]
    UnsupportedMediaType { got: String, expected: &'static str },
    #[error("{0}")]
    Signature(VerifyError),
    #[error("could not read the request body: {0}")]
    BadBody(String),
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(std::time::Duration),
    #[error("the event could not be handed to the broker; retry later")]
    BrokerUnavailable,
    #[error(
        "source {source_name:?} is over its rate of {rate}: retry after {retry_after_secs} s (nothing of this delivery was kept)"
    )]
    RateLimited {
        source_name: String,
        rate: oncehook_common::rate::Rate,
        retry_after_secs: u64,
    },
}

impl IngestError {
    /// Every code [`IngestError::code`] returns, for counters that must
    /// exist (at zero) before the first refusal of their kind.
    pub const CODES: [&'static str; 13] = [
        "unknown_source",
        "source_disabled",
        "sources_not_yet",
        "payload_too_large",
        "headers_too_large",
        "unsupported_media_type",
        "malformed_signature",
        "stale_timestamp",
        "invalid_signature",
        "bad_body",
        "request_timeout",
        "broker_unavailable",
        "rate_limited",
    ];

    /// Whether the sender caused it (a bad request, logged at WARN within
    /// a limit) rather than the operator's side (ERROR). A delivery over
    /// its source's rate is neither: it is counted, and logged by the
    /// limiter once per source and second (`crate::admission`).
    pub fn is_senders_fault(&self) -> bool {
        !matches!(
            self,
            IngestError::BrokerUnavailable
                | IngestError::SourcesNotYet
                | IngestError::RateLimited { .. }
        )
    }

    /// Stable machine-readable code (also the `outcome` metric label).
    pub fn code(&self) -> &'static str {
        match self {
            IngestError::UnknownSource(_) => "unknown_source",
            IngestError::SourceDisabled(_) => "source_disabled",
            IngestError::SourcesNotYet => "sources_not_yet",
            IngestError::TooLarge { .. } => "payload_too_large",
            IngestError::HeadersTooLarge { .. } => "headers_too_large",
            IngestError::UnsupportedMediaType { .. } => "unsupported_media_type",
            IngestError::Signature(VerifyError::Malformed { .. }) => "malformed_signature",
            IngestError::Signature(VerifyError::OutsideTolerance { .. }) => "stale_timestamp",
            IngestError::Signature(_) => "invalid_signature",
            IngestError::BadBody(_) => "bad_body",
            IngestError::BodyTimeout(_) => "request_timeout",
            IngestError::BrokerUnavailable => "broker_unavailable",
            IngestError::RateLimited { .. } => "rate_limited",
        }
    }
}

impl ResponseError for IngestError {
    fn status_code(&self) -> StatusCode {
        match self {
            IngestError::UnknownSource(_) => StatusCode::NOT_FOUND,
            IngestError::SourceDisabled(_) | IngestError::SourcesNotYet => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            IngestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            IngestError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            IngestError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            IngestError::Signature(VerifyError::Malformed { .. }) => StatusCode::BAD_REQUEST,
            IngestError::Signature(_) => StatusCode::UNAUTHORIZED,
            IngestError::BadBody(_) => StatusCode::BAD_REQUEST,
            IngestError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            IngestError::BrokerUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            IngestError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status_code());
        match self {
            IngestError::BrokerUnavailable | IngestError::SourcesNotYet => {
                resp.insert_header(("Retry-After", "5"));
            }
            // A disabled source stays so until an operator acts: the gateway
            // keeps retrying on its own schedule, not every few seconds.
            IngestError::SourceDisabled(_) => {
                resp.insert_header(("Retry-After", "600"));
            }
            // When the source's bucket has a token again (whole seconds,
            // at least one).
            IngestError::RateLimited {
                retry_after_secs, ..
            } => {
                resp.insert_header(("Retry-After", retry_after_secs.to_string()));
            }
            _ => {}
        }
        resp.json(serde_json::json!({ "error": self.code(), "message": self.to_string() }))
    }
}

/// A JSON error body for responses built outside `IngestError` (405, 404 on unknown paths).
pub fn json_error(status: StatusCode, code: &str, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(serde_json::json!({ "error": code, "message": message }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_code_is_listed() {
        let all = [
            IngestError::UnknownSource("x".into()),
            IngestError::SourceDisabled("x".into()),
            IngestError::SourcesNotYet,
            IngestError::TooLarge { limit: 1 },
            IngestError::HeadersTooLarge { limit: 1 },
            IngestError::UnsupportedMediaType {
                got: "x".into(),
                expected: "y",
            },
            IngestError::Signature(VerifyError::Malformed {
                what: "x",
                reason: "x".into(),
            }),
            IngestError::Signature(VerifyError::OutsideTolerance {
                signed_at: 0,
                now: 1_000,
                tolerance_secs: 300,
            }),
            IngestError::Signature(VerifyError::Mismatch),
            IngestError::BadBody("x".into()),
            IngestError::BodyTimeout(Duration::from_secs(1)),
            IngestError::BrokerUnavailable,
            IngestError::RateLimited {
                source_name: "x".into(),
                rate: oncehook_common::rate::Rate::new(1, 1),
                retry_after_secs: 1,
            },
        ];
        let codes: Vec<&str> = all.iter().map(IngestError::code).collect();
        assert_eq!(codes, IngestError::CODES);
    }
}
