//! One API call to a gateway: the request the gateway's folder describes
//! for an [`Ask`] (method, path, headers with the credentials, body) made
//! over HTTP, and its answer handed back to the folder to be read into the
//! facts a webhook would carry. An answer the gateway's folder reads as
//! its documented "no such id" (Razorpay's 400 "does not exist", a 404
//! elsewhere) is an answer with nothing to record, not a failure; every other failure is a [`CallError`] that says whether trying
//! again may help.

use std::time::Duration;

use oncehook_common::config::SourceConfig;
use oncehook_common::retry_after;
use oncehook_gateways::reconcile::{ApiCredentials, ApiRequest, Ask, GatewayApi, Method};
use oncehook_gateways::{Gateway, NormalizedEvent};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{RequestBuilder, StatusCode};

/// The longest `Retry-After` honoured; a longer one waits this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How much of a refusing answer's body an error quotes.
const QUOTE: usize = 200;
/// The largest answer read (an order's payments are a handful; a page of
/// 100 Stripe events is well under this).
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// A source oncehook may ask: its name, its gateway's API, where the API
/// is and the credentials to ask it with (`Debug` never shows a secret).
#[derive(Clone)]
pub struct ApiSource {
    pub name: String,
    pub gateway: Gateway,
    pub api: &'static dyn GatewayApi,
    /// Without a trailing `/`.
    pub base_url: String,
    pub credentials: ApiCredentials,
    /// The tenant whose orders the source's facts belong to.
    pub tenant: oncehook_common::tenant::TenantId,
}

impl ApiSource {
    /// Every source of `config` oncehook may ask (the reconciler's and the
    /// refunder's).
    pub fn all(config: &oncehook_common::Config) -> Vec<ApiSource> {
        config
            .ingest
            .sources
            .iter()
            .filter_map(ApiSource::of)
            .collect()
    }

    /// The source's API, if it has a `[source.api]` (and its gateway an API).
    pub fn of(source: &SourceConfig) -> Option<ApiSource> {
        let table = source.api.as_ref()?;
        Some(ApiSource {
            name: source.name.clone(),
            gateway: source.gateway,
            api: source.gateway.api()?,
            base_url: table.base_url.clone(),
            credentials: table.credentials.clone(),
            tenant: source.tenant.clone(),
        })
    }
}

impl std::fmt::Debug for ApiSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSource")
            .field("name", &self.name)
            .field("gateway", &self.gateway)
            .field("base_url", &self.base_url)
            .field("credentials", &self.credentials)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// What one call found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    pub facts: Vec<NormalizedEvent>,
    /// The calls the answer leads to (a list's next page, the refunds of a
    /// payment found).
    pub follow_ups: Vec<Ask>,
    /// The gateway's references for the order asked about (Razorpay's
    /// orders found by receipt).
    pub refs: Vec<String>,
    /// The HTTP status (a "no such id" answer: the gateway knows nothing
    /// of it).
    pub status: u16,
}

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("the gateway refused the credentials (HTTP {status}): check [source.api]")]
    Credentials { status: u16 },
    #[error("rate limited (HTTP 429), retry after {retry_after:?}")]
    RateLimited { retry_after: Duration },
    #[error("the gateway failed (HTTP {status})")]
    Server { status: u16 },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("could not reach the API: {0}")]
    Connect(String),
    #[error("the gateway refused the request (HTTP {status}): {quote}")]
    Refused { status: u16, quote: String },
    #[error("the answer could not be read: {0}")]
    Unreadable(String),
    #[error("the request could not be made: {0}")]
    Request(String),
    #[error("the run's budget of API calls is spent")]
    Budget,
}

impl CallError {
    /// The `status` label of `oncehook_reconcile_api_errors_total`.
    pub fn status_label(&self) -> String {
        match self {
            CallError::Credentials { status }
            | CallError::Server { status }
            | CallError::Refused { status, .. } => status.to_string(),
            CallError::RateLimited { .. } => "429".into(),
            CallError::Timeout(_) => "timeout".into(),
            CallError::Connect(_) => "connect".into(),
            CallError::Unreadable(_) => "unreadable".into(),
            CallError::Request(_) => "request".into(),
            CallError::Budget => "budget".into(),
        }
    }

    /// Whether backing off and trying again may help (5xx, timeouts,
    /// connections); 429 waits for its own `Retry-After`.
    pub fn transient(&self) -> bool {
        matches!(
            self,
            CallError::Server { .. } | CallError::Timeout(_) | CallError::Connect(_)
        )
    }
}

/// An answer as it came: status, `Retry-After` (capped), body.
#[derive(Debug, Clone)]
pub struct Exchanged {
    pub status: StatusCode,
    pub retry_after: Option<Duration>,
    pub body: Vec<u8>,
}

/// The HTTP client every source's calls share.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    timeout: Duration,
}

impl Client {
    /// A client whose calls each give up after `timeout`.
    pub fn new(timeout: Duration) -> Result<Client, CallError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("oncehook-reconciler/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CallError::Request(e.to_string()))?;
        Ok(Client { http, timeout })
    }

    /// How long one call may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Makes one call and reads its answer.
    pub async fn call(&self, source: &ApiSource, ask: &Ask) -> Result<Answer, CallError> {
        let request = source
            .api
            .request(ask, &source.credentials)
            .map_err(|e| CallError::Request(e.to_string()))?;
        let Exchanged {
            status,
            retry_after,
            body,
        } = self.exchange(&source.base_url, request).await?;
        match status {
            s if s.is_success() => match source.api.read(ask, &body) {
                Ok(answer) => Ok(Answer {
                    facts: answer.facts,
                    follow_ups: answer.follow_ups,
                    refs: answer.refs,
                    status: s.as_u16(),
                }),
                Err(e) => Err(CallError::Unreadable(e.to_string())),
            },
            s if source.api.unknown_id(ask, s.as_u16(), &body) => Ok(Answer {
                status: s.as_u16(),
                ..Answer::default()
            }),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(CallError::Credentials {
                status: status.as_u16(),
            }),
            StatusCode::TOO_MANY_REQUESTS => Err(CallError::RateLimited {
                retry_after: retry_after.unwrap_or(Duration::from_secs(1)),
            }),
            s if s.is_server_error() => Err(CallError::Server { status: s.as_u16() }),
            s => Err(CallError::Refused {
                status: s.as_u16(),
                quote: quote(&body),
            }),
        }
    }

    /// Sends a request a gateway's folder described to `base_url` and
    /// reads the whole answer, whatever its status (the refunder hands
    /// every answer to the gateway's folder to be read).
    pub async fn exchange(
        &self,
        base_url: &str,
        request: ApiRequest,
    ) -> Result<Exchanged, CallError> {
        let request = self.build(base_url, request)?;
        let response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let retry_after = retry_after(&response);
        let body = response.bytes().await.map_err(|e| self.transport(e))?;
        if body.len() > MAX_ANSWER {
            return Err(CallError::Unreadable(format!(
                "{} bytes, more than {MAX_ANSWER}",
                body.len()
            )));
        }
        Ok(Exchanged {
            status,
            retry_after,
            body: body.to_vec(),
        })
    }

    /// The HTTP request the gateway described, against `base_url`; a
    /// credential header is marked sensitive.
    fn build(&self, base_url: &str, request: ApiRequest) -> Result<RequestBuilder, CallError> {
        let method = match request.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
        };
        let mut headers = HeaderMap::new();
        for h in request.headers {
            let bad = || CallError::Request(format!("the {} header cannot be sent", h.name));
            let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| bad())?;
            let mut value = HeaderValue::from_str(&h.value).map_err(|_| bad())?;
            value.set_sensitive(h.sensitive);
            headers.insert(name, value);
        }
        let mut builder = self
            .http
            .request(method, format!("{base_url}{}", request.path))
            .headers(headers);
        if let Some(body) = request.body {
            builder = builder
                .header(CONTENT_TYPE, body.content_type)
                .body(body.bytes);
        }
        Ok(builder)
    }

    fn transport(&self, e: reqwest::Error) -> CallError {
        if e.is_timeout() {
            CallError::Timeout(self.timeout)
        } else if e.is_connect() {
            CallError::Connect(e.to_string())
        } else {
            CallError::Connect(format!("{e}"))
        }
    }
}

/// The wait a `Retry-After` asks for (`oncehook_common::retry_after`'s
/// rule), capped at [`MAX_RETRY_AFTER`].
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    retry_after::from_headers(response.headers(), time::OffsetDateTime::now_utc())
        .map(|wait| wait.min(MAX_RETRY_AFTER))
}

/// The start of a body, as text, for an error message.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(QUOTE)]);
    text.chars().filter(|c| !c.is_control()).collect()
}
