//! The HTTP request a gateway's folder describes for one call: method,
//! path and query, headers (the credentials among them, marked sensitive
//! and never shown), body. The reconciler sends it; nothing here does I/O.

use std::fmt;

use base64::Engine as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// An HTTP method the gateways' APIs are called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
}

impl Method {
    /// `GET` or `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// One request header; a `sensitive` one (credentials) is never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiHeader {
    /// The header's name.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// Whether it carries a credential.
    pub sensitive: bool,
}

/// A request body and its media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiBody {
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// The HTTP request an [`Ask`] is. `Debug` never shows a sensitive header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiRequest {
    /// The method.
    pub method: Method,
    /// Path and query, percent-encoded, appended to the base URL.
    pub path: String,
    /// Headers, the credentials among them.
    pub headers: Vec<ApiHeader>,
    /// The body, if any.
    pub body: Option<ApiBody>,
}

impl ApiRequest {
    /// `GET path`.
    pub fn get(path: String) -> ApiRequest {
        ApiRequest {
            method: Method::Get,
            path,
            headers: Vec::new(),
            body: None,
        }
    }

    /// `POST path` with a URL-encoded form.
    pub fn post_form(path: String, form: String) -> ApiRequest {
        ApiRequest {
            method: Method::Post,
            path,
            headers: Vec::new(),
            body: Some(ApiBody {
                content_type: "application/x-www-form-urlencoded",
                bytes: form.into_bytes(),
            }),
        }
    }

    /// With a header that carries no credential.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> ApiRequest {
        self.headers.push(ApiHeader {
            name,
            value: value.into(),
            sensitive: false,
        });
        self
    }

    /// With a header that carries a credential.
    pub fn secret_header(mut self, name: &'static str, value: impl Into<String>) -> ApiRequest {
        self.headers.push(ApiHeader {
            name,
            value: value.into(),
            sensitive: true,
        });
        self
    }

    /// With `Authorization: Basic` for `user` and `password`.
    pub fn basic_auth(self, user: &str, password: &str) -> ApiRequest {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.secret_header("authorization", format!("Basic {token}"))
    }

    /// With `Authorization: Bearer token`.
    pub fn bearer(self, token: &str) -> ApiRequest {
        self.secret_header("authorization", format!("Bearer {token}"))
    }
}

impl fmt::Debug for ApiRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|h| {
                (
                    h.name,
                    if h.sensitive {
                        "[redacted]"
                    } else {
                        h.value.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("ApiRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("headers", &headers)
            .field("body", &self.body.as_ref().map(|b| b.bytes.len()))
            .finish()
    }
}

/// Path-segment characters sent as they are; everything else is
/// percent-encoded (an order reference is the shop's text).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `s` percent-encoded for a path segment or a query value.
pub(crate) fn segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// Why a request could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A credential the call needs is not in the source's credentials.
    #[error("the credential {0} is not configured")]
    MissingCredential(&'static str),
    /// A call this gateway does not make (an ask of another gateway).
    #[error("{0:?} is not a call this gateway makes")]
    UnknownCall(&'static str),
    /// The call's ids cannot be sent.
    #[error("{0}")]
    Invalid(String),
}
