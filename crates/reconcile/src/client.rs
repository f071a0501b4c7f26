//! One API call to a gateway: the request each [`Ask`] is (URL, method,
//! credentials, as each gateway documents them), and its answer read by
//! the gateways crate's readers into the facts a webhook would carry. A 404
//! is an answer (the gateway knows no such order or payment: nothing to
//! record); every other failure is a [`CallError`] that says whether trying
//! again may help.

use std::time::Duration;

use oncehook_common::config::{ApiAuth, SourceApi, SourceConfig};
use oncehook_common::retry_after;
use oncehook_gateways::reconcile as read;
use oncehook_gateways::{Gateway, NormalizedEvent, ParseError};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, RequestBuilder, StatusCode};

use crate::ask::Ask;

/// The longest `Retry-After` honoured; a longer one waits this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How much of a refusing answer's body an error quotes.
const QUOTE: usize = 200;
/// The largest answer read (an order's payments are a handful; a page of
/// 100 Stripe events is well under this).
const MAX_ANSWER: usize = 4 * 1024 * 1024;
/// Stripe's largest page.
const STRIPE_PAGE: u32 = 100;

/// Path characters sent as they are; everything else is percent-encoded
/// (an order reference is the shop's text).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A source oncehook may ask: its name, gateway and API, and for PayU the
/// merchant key and salt that sign `verify_payment`.
#[derive(Debug, Clone)]
pub struct ApiSource {
    pub name: String,
    pub gateway: Gateway,
    pub api: SourceApi,
    pub merchant_key: Option<String>,
    /// PayU: the current salt (the first of the source's secrets).
    pub salt: Option<String>,
}

impl ApiSource {
    /// The source's API, if it has a `[source.api]`.
    pub fn of(source: &SourceConfig) -> Option<ApiSource> {
        Some(ApiSource {
            name: source.name.clone(),
            gateway: source.gateway,
            api: source.api.clone()?,
            merchant_key: source.merchant_key.clone(),
            salt: source.secrets.first().cloned(),
        })
    }
}

/// What one call found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    pub facts: Vec<NormalizedEvent>,
    /// A list's next page (`starting_after`).
    pub next: Option<String>,
    /// The HTTP status (404: the gateway knows nothing of it).
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

    /// Makes one call and reads its answer.
    pub async fn call(&self, source: &ApiSource, ask: &Ask) -> Result<Answer, CallError> {
        let request = self.request(source, ask)?;
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
        match status {
            s if s.is_success() => read_answer(ask, &body).map(|(facts, next)| Answer {
                facts,
                next,
                status: s.as_u16(),
            }),
            StatusCode::NOT_FOUND => Ok(Answer {
                status: 404,
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

    fn transport(&self, e: reqwest::Error) -> CallError {
        if e.is_timeout() {
            CallError::Timeout(self.timeout)
        } else if e.is_connect() {
            CallError::Connect(e.to_string())
        } else {
            CallError::Connect(format!("{e}"))
        }
    }

    /// The request `ask` is, for `source`'s API and credentials.
    fn request(&self, source: &ApiSource, ask: &Ask) -> Result<RequestBuilder, CallError> {
        let base = &source.api.base_url;
        let seg = |s: &str| utf8_percent_encode(s, SEGMENT).to_string();
        let get = |path: String| self.http.request(Method::GET, format!("{base}{path}"));
        let request = match ask {
            Ask::RazorpayOrderPayments { order_id } => {
                get(format!("/v1/orders/{}/payments", seg(order_id)))
            }
            Ask::RazorpayRefunds { payment_id } => {
                get(format!("/v1/payments/{}/refunds", seg(payment_id)))
            }
            Ask::CashfreePayments { order_id } => {
                get(format!("/pg/orders/{}/payments", seg(order_id)))
            }
            Ask::CashfreeRefunds { order_id } => {
                get(format!("/pg/orders/{}/refunds", seg(order_id)))
            }
            Ask::PayuVerify { txnids } => {
                let (Some(key), Some(salt)) = (&source.merchant_key, &source.salt) else {
                    return Err(CallError::Request(
                        "a PayU source needs its merchant_key and salt".into(),
                    ));
                };
                let ids: Vec<&str> = txnids.iter().map(String::as_str).collect();
                let form = read::payu_verify_payment_request(key, salt, &ids)
                    .map_err(|e| CallError::Request(e.to_string()))?;
                self.http
                    .request(
                        Method::POST,
                        format!("{base}/merchant/postservice.php?form=2"),
                    )
                    .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(form)
            }
            Ask::StripeIntent { id } => get(format!("/v1/payment_intents/{}", seg(id))),
            Ask::StripeRefunds {
                intent,
                starting_after,
            } => get(format!(
                "/v1/refunds?payment_intent={}&limit={STRIPE_PAGE}{}",
                seg(intent),
                after(starting_after)
            )),
            Ask::StripeUndelivered {
                since,
                starting_after,
            } => get(format!(
                "/v1/events?delivery_success=false&created%5Bgte%5D={since}&limit={STRIPE_PAGE}{}",
                after(starting_after)
            )),
        };
        Ok(authenticate(request, &source.api))
    }
}

/// `&starting_after=…` for a page after the first.
fn after(starting_after: &Option<String>) -> String {
    starting_after
        .as_ref()
        .map(|a| format!("&starting_after={}", utf8_percent_encode(a, SEGMENT)))
        .unwrap_or_default()
}

/// The credentials each gateway takes.
fn authenticate(request: RequestBuilder, api: &SourceApi) -> RequestBuilder {
    match &api.auth {
        ApiAuth::Razorpay { key_id, key_secret } => {
            request.basic_auth(key_id.expose(), Some(key_secret.expose()))
        }
        ApiAuth::Cashfree {
            client_id,
            client_secret,
            api_version,
        } => request
            .header("x-client-id", client_id.expose())
            .header("x-client-secret", client_secret.expose())
            .header("x-api-version", api_version.as_str()),
        ApiAuth::Stripe { api_key } => request.bearer_auth(api_key.expose()),
        // verify_payment is signed in its form.
        ApiAuth::Payu => request,
    }
}

/// Reads a successful answer with the reader for its call.
fn read_answer(
    ask: &Ask,
    body: &[u8],
) -> Result<(Vec<NormalizedEvent>, Option<String>), CallError> {
    let unreadable = |e: ParseError| CallError::Unreadable(e.to_string());
    Ok(match ask {
        Ask::RazorpayOrderPayments { .. } => (
            read::razorpay_order_payments(body).map_err(unreadable)?,
            None,
        ),
        Ask::RazorpayRefunds { .. } => (
            read::razorpay_payment_refunds(body).map_err(unreadable)?,
            None,
        ),
        Ask::CashfreePayments { .. } => (
            read::cashfree_order_payments(body).map_err(unreadable)?,
            None,
        ),
        Ask::CashfreeRefunds { .. } => (
            read::cashfree_order_refunds(body).map_err(unreadable)?,
            None,
        ),
        Ask::PayuVerify { .. } => (read::payu_verify_payment(body).map_err(unreadable)?, None),
        Ask::StripeIntent { .. } => (
            read::stripe_payment_intent(body)
                .map_err(unreadable)?
                .into_iter()
                .collect(),
            None,
        ),
        Ask::StripeRefunds { .. } => {
            let page = read::stripe_refunds(body).map_err(unreadable)?;
            (page.events, page.next)
        }
        Ask::StripeUndelivered { .. } => {
            let page = read::stripe_events(body).map_err(unreadable)?;
            (page.events, page.next)
        }
    })
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
