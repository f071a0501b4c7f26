//! Reconciliation's side of a gateway: the [`GatewayApi`] trait a gateway's
//! folder implements when oncehook may ask its API what the webhooks
//! missed, and the plain values it speaks in. Everything that is knowledge
//! of one gateway — its default base URL, the `[source.api]` keys it takes
//! and their shape, the calls it asks about an order, each call's method,
//! path and authentication, which answer means "no such id", and how an
//! answer becomes facts — lives in the gateway's folder behind the trait.
//! No I/O here: the reconciler (`oncehook-reconcile`) makes the HTTP calls,
//! retries and paces them, and hands the answers back to be read.

mod credentials;
mod request;
#[cfg(test)]
mod tests;

#[cfg(test)]
use std::collections::BTreeMap;

pub use credentials::{
    ApiCredentials, CredentialError, CredentialKey, Refusal, all_credential_keys, credentials,
};
pub(crate) use request::segment;
pub use request::{ApiBody, ApiHeader, ApiRequest, Method, RequestError};

use crate::{Credentials, Gateway, NormalizedEvent, ParseError};

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

    /// Adds what the source's webhook credentials give, once every key is
    /// present and of a shape the gateway takes (PayU signs its API calls
    /// with the merchant key and salt). Default: nothing more.
    fn complete_credentials(
        &self,
        _credentials: &mut ApiCredentials,
        _source: Credentials<'_>,
    ) -> Result<(), CredentialError> {
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

    /// Whether an answer with this (non-2xx) status and body is the
    /// gateway's documented "no such order or payment": it knows nothing
    /// about what was asked, so there is nothing to record and nothing
    /// failed (an account asked about another account's order answers so).
    /// Default: a 404, whatever the body.
    fn unknown_id(&self, ask: &Ask, status: u16, body: &[u8]) -> bool {
        let _ = (ask, body);
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
    /// The gateway's own references for the order asked about that the
    /// answer found (Razorpay's `order_…` ids whose `receipt` is the shop's
    /// reference): the reconciler registers them with the order, so the
    /// facts found under them, later passes and webhooks all reach it.
    pub refs: Vec<String>,
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
