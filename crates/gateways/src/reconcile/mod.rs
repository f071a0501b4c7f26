//! Reconciliation's side of a gateway: the [`GatewayApi`] trait a gateway's
//! folder implements when oncehook may ask its API what the webhooks
//! missed, and the plain values it speaks in. Everything that is knowledge
//! of one gateway — its default base URL, the `[source.api]` keys it takes
//! and their shape, the calls it asks about an order, each call's method,
//! path and authentication, which answer means "no such id", and how an
//! answer becomes facts — lives in the gateway's folder behind the trait.
//! No I/O here: the reconciler (`oncehook-reconcile`) makes the HTTP calls,
//! retries and paces them, and hands the answers back to be read.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::{Credentials, Gateway, NormalizedEvent, ParseError};

#[cfg(test)]
mod tests;

/// A gateway's API as the reconciler uses it. Implemented once, on the
/// gateway's unit struct, in its folder (`src/<gateway>/api.rs`), and
/// registered through [`crate::GatewayScheme::API`]; the reconciler reaches
/// it through [`Gateway::api`].
pub trait GatewayApi: Sync {
    /// The production API's base URL, without a trailing `/`
    /// (`https://api.razorpay.com`); `[source.api] base_url` overrides it.
    fn default_base_url(&self) -> &'static str;

    /// The keys a `[source.api]` table of this gateway takes besides
    /// `base_url`.
    fn credential_keys(&self) -> &'static [CredentialKey];

    /// What the table takes, in words, for the message that refuses a key
    /// it does not (default: the keys' names).
    fn takes(&self) -> String {
        let names: Vec<&str> = self.credential_keys().iter().map(|k| k.name).collect();
        if names.is_empty() {
            "only base_url".to_owned()
        } else {
            names.join(", ")
        }
    }

    /// Checks the credentials as a whole once every key is present (a shape
    /// the gateway would refuse) and adds what the source's webhook
    /// credentials give (PayU signs its API calls with the merchant key
    /// and salt). Default: nothing more.
    fn complete_credentials(
        &self,
        credentials: &mut ApiCredentials,
        source: Credentials<'_>,
    ) -> Result<(), CredentialError> {
        let _ = (credentials, source);
        Ok(())
    }

    /// Whether an order that names no gateway (no reference, no payment
    /// of any gateway yet) is asked of this gateway by the shop's own
    /// order reference (a gateway whose order id is the merchant's).
    fn asks_by_shop_reference(&self) -> bool {
        false
    }

    /// The calls that ask about one order (none when the order gives
    /// nothing to ask by).
    fn asks(&self, order: &OrderNames) -> Vec<Ask>;

    /// Calls made once per pass rather than per order, about everything
    /// since `since_unix` (Stripe's undelivered events). Default: none.
    fn sweep(&self, since_unix: i64) -> Vec<Ask> {
        let _ = since_unix;
        Vec::new()
    }

    /// The HTTP request `ask` is: method, path and query (appended to the
    /// base URL), headers with the credentials, body.
    fn request(&self, ask: &Ask, credentials: &ApiCredentials) -> Result<ApiRequest, RequestError>;

    /// Whether an answer with this (non-2xx) status means the gateway knows
    /// no such order or payment: nothing to record, not a failure.
    fn unknown_id(&self, ask: &Ask, status: u16) -> bool {
        let _ = ask;
        status == 404
    }

    /// Reads a successful (2xx) answer: the facts it holds, as the events
    /// a webhook would have carried, and the calls it leads to.
    fn read(&self, ask: &Ask, body: &[u8]) -> Result<Answer, ParseError>;

    /// The call in an operator's words (`GET /v1/orders/order_1/payments`).
    fn describe(&self, ask: &Ask) -> String;
}

impl Gateway {
    /// The gateway's API for reconciliation, or `None` when it has none.
    pub fn api(self) -> Option<&'static dyn GatewayApi> {
        self.scheme().api
    }
}

/// One API call to make: which of the gateway's calls (a name its folder
/// gives), what it asks about, and from which page. Built and read only by
/// the gateway's folder; the reconciler keeps, compares and hands them back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// The call, as the gateway's folder names it (`order_payments`).
    pub call: &'static str,
    /// What it asks about: an order id, a payment id, a batch of ids, a
    /// time.
    pub ids: Vec<String>,
    /// The page after this cursor; `None` for the first.
    pub after: Option<String>,
}

impl Ask {
    /// `call` about one id.
    pub fn of(call: &'static str, id: impl Into<String>) -> Ask {
        Ask {
            call,
            ids: vec![id.into()],
            after: None,
        }
    }

    /// `call` about several ids at once.
    pub fn batch(call: &'static str, ids: Vec<String>) -> Ask {
        Ask {
            call,
            ids,
            after: None,
        }
    }

    /// The same call, for the page after `cursor`.
    pub fn page_after(&self, cursor: String) -> Ask {
        Ask {
            after: Some(cursor),
            ..self.clone()
        }
    }

    /// The first id (every call has one).
    pub fn id(&self) -> &str {
        self.ids.first().map(String::as_str).unwrap_or_default()
    }
}

/// What one order gives a gateway to ask by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderNames {
    /// The shop's order reference.
    pub order_ref: String,
    /// The order's references at this gateway (Razorpay's `order_…`, a
    /// Stripe `pi_…` or Checkout session).
    pub refs: Vec<String>,
    /// The payments of this gateway the ledger knows for the order.
    pub payments: Vec<String>,
}

/// What a successful answer holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The facts found, as the events a webhook would carry.
    pub facts: Vec<NormalizedEvent>,
    /// The calls the answer leads to (the next page, the refunds of a
    /// payment found captured).
    pub follow_ups: Vec<Ask>,
}

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

/// One key of a gateway's `[source.api]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CredentialKey {
    /// The key's name (`key_id`).
    pub name: &'static str,
    /// Whether its value is a secret (never shown).
    pub secret: bool,
    /// The value when the table leaves the key out; `None`: required.
    pub default: Option<&'static str>,
}

impl CredentialKey {
    /// A required secret.
    pub const fn secret(name: &'static str) -> CredentialKey {
        CredentialKey {
            name,
            secret: true,
            default: None,
        }
    }

    /// A setting that is no secret, with a default.
    pub const fn setting(name: &'static str, default: &'static str) -> CredentialKey {
        CredentialKey {
            name,
            secret: false,
            default: Some(default),
        }
    }
}

/// A source's API credentials, by name. `Debug` never shows a secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiCredentials(Vec<(&'static str, String, bool)>);

impl ApiCredentials {
    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|(_, v, _)| v.as_str())
    }

    /// The value of `name`, which a request needs.
    pub fn require(&self, name: &'static str) -> Result<&str, RequestError> {
        self.get(name).ok_or(RequestError::MissingCredential(name))
    }

    /// Sets `name` (a `secret` one is never shown).
    pub fn set(&mut self, name: &'static str, value: impl Into<String>, secret: bool) {
        self.0.retain(|(n, ..)| *n != name);
        self.0.push((name, value.into(), secret));
    }
}

impl fmt::Debug for ApiCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.0
                    .iter()
                    .map(|(n, v, secret)| (n, if *secret { "[redacted]" } else { v.as_str() })),
            )
            .finish()
    }
}

/// Why a `[source.api]` table's credentials are refused (the messages name
/// the key, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The gateway has no API oncehook can ask.
    #[error("[source.api] is not available for gateway {0:?}: it has no API to reconcile with")]
    NoApi(&'static str),
    /// A key this gateway does not take.
    #[error("{key} is not used by gateway {gateway:?} (it takes {takes})")]
    NotUsed {
        /// The key written.
        key: String,
        /// The gateway's name.
        gateway: &'static str,
        /// What it takes ([`GatewayApi::takes`]).
        takes: String,
    },
    /// A required key is missing.
    #[error("{0} is required")]
    Required(&'static str),
    /// A key is empty (or its variable is not set).
    #[error("{0} is empty (or its variable is not set)")]
    Empty(&'static str),
    /// A value that cannot be what the key names.
    #[error("{key} {problem}")]
    Shape {
        /// The key.
        key: &'static str,
        /// What is wrong with its value.
        problem: &'static str,
    },
    /// What the source itself must give is missing.
    #[error("{0}")]
    Source(&'static str),
}

/// Checks a `[source.api]` table's keys for `gateway` (`table`: every key
/// written besides `base_url`, its value already expanded, blank when its
/// variable is unset) and returns the credentials, with the defaults of
/// keys left out and what the source's webhook credentials give.
pub fn credentials(
    gateway: Gateway,
    table: &BTreeMap<String, String>,
    source: Credentials<'_>,
) -> Result<ApiCredentials, CredentialError> {
    let api = gateway
        .api()
        .ok_or(CredentialError::NoApi(gateway.as_str()))?;
    let keys = api.credential_keys();
    if let Some(extra) = table.keys().find(|k| !keys.iter().any(|c| c.name == *k)) {
        return Err(CredentialError::NotUsed {
            key: extra.clone(),
            gateway: gateway.as_str(),
            takes: api.takes(),
        });
    }
    let mut credentials = ApiCredentials::default();
    for key in keys {
        let value = match (table.get(key.name), key.default) {
            (Some(v), _) if v.trim().is_empty() => return Err(CredentialError::Empty(key.name)),
            (Some(v), _) => v.trim().to_owned(),
            (None, Some(default)) => default.to_owned(),
            (None, None) => return Err(CredentialError::Required(key.name)),
        };
        if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(CredentialError::Shape {
                key: key.name,
                problem: "holds a space or a control character (it travels in an HTTP header)",
            });
        }
        credentials.set(key.name, value, key.secret);
    }
    api.complete_credentials(&mut credentials, source)?;
    Ok(credentials)
}

/// Every key any registered gateway's `[source.api]` table takes, once each
/// (for the configuration's documentation check).
pub fn all_credential_keys() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = crate::registered()
        .iter()
        .filter_map(|g| g.api())
        .flat_map(|api| api.credential_keys().iter().map(|k| k.name))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The ids of `order` at `gateway`: what [`GatewayApi::asks`] is given,
/// from the order's `(gateway, reference)` and `(gateway, payment)` pairs.
pub fn order_names(
    gateway: Gateway,
    order_ref: &str,
    refs: &[(String, String)],
    payments: &[(String, String)],
) -> OrderNames {
    let of = |pairs: &[(String, String)]| {
        pairs
            .iter()
            .filter(|(g, _)| g == gateway.as_str())
            .map(|(_, id)| id.clone())
            .collect()
    };
    OrderNames {
        order_ref: order_ref.to_owned(),
        refs: of(refs),
        payments: of(payments),
    }
}

/// `map` with every key's value as given (a test helper's shape, used by
/// the folders' tests too).
#[cfg(test)]
pub(crate) fn table(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
