//! Every failure the API answers, as one JSON shape:
//! `{"error": "<stable_code>", "message": "…", "field": "…"}`. The codes
//! are part of the API (docs/shop-integration.md lists them); the message
//! is for people and may change. A database failure answers 503
//! `unavailable` and is logged here, never its SQL or values; one that lost
//! to another transaction (a deadlock) is tried again first (`retry`).

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use oncehook_common::db;
use oncehook_ledger::EffectError;
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: `validation_failed`, `malformed_json`, `unauthorized`, …
    pub error: String,
    /// What went wrong, for a person.
    pub message: String,
    /// The request field at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// A refused or failed request.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    /// Seconds, for 429.
    pub retry_after: Option<u64>,
    /// The database rolled the transaction back because it lost to another
    /// (`db::is_contention`): its error, for `contended::transaction`,
    /// which runs the transaction again.
    pub contention: Option<String>,
}

impl oncehook_common::contended::Contention for ApiError {
    fn contention(&self) -> Option<String> {
        self.contention.clone()
    }
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
            contention: None,
        }
    }

    pub fn with_field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    /// 400 `validation_failed` naming the field.
    pub fn invalid(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "validation_failed", message).with_field(field)
    }

    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such {what}"),
        )
    }

    pub fn throttled(retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_failed_attempts",
                "too many failed authentications from this address; wait and retry",
            )
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> ApiError {
        let contention = db::is_contention(&e).then(|| e.to_string());
        match &contention {
            Some(_) => {
                tracing::warn!(error = %e, "the transaction lost to another and was rolled back")
            }
            None => tracing::error!(error = %e, "database error"),
        }
        ApiError {
            contention,
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the database is unavailable; retry",
            )
        }
    }
}

impl From<EffectError> for ApiError {
    fn from(e: EffectError) -> ApiError {
        match e {
            EffectError::Database(e) => e.into(),
            // Not expected from the shop's roads (the ledger keeps an
            // unreadable waiting event parked): the ledger's words, logged.
            EffectError::Permanent(rejection) => {
                tracing::error!(error = %rejection, "the ledger refused the change");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "ledger_refused",
                    "the ledger could not apply the change; nothing was written",
                )
            }
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status);
        resp.insert_header((CONTENT_TYPE, "application/json"));
        if let Some(secs) = self.retry_after {
            resp.insert_header((RETRY_AFTER, secs.to_string()));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.insert_header(("WWW-Authenticate", "Bearer"));
        }
        resp.json(ErrorBody {
            error: self.code.to_owned(),
            message: self.message.clone(),
            field: self.field.clone(),
        })
    }
}

/// A serde_json message's field (`missing field `x``, `unknown field `x``).
pub fn field_of(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_is_taken_from_serde_messages() {
        assert_eq!(
            field_of("missing field `sku` at line 1 column 2").as_deref(),
            Some("sku")
        );
        assert_eq!(field_of("expected value at line 1 column 1"), None);
    }
}
