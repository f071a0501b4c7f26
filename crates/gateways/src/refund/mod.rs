//! Refunding's side of a gateway: the [`GatewayRefunds`] trait a gateway's
//! folder implements when oncehook may refund through its API, and the
//! plain values it speaks in. What a refund request is (method, path, body,
//! the gateway's own idempotency mechanism keyed by the intent's id), how
//! the payment's existing refunds are looked up before a retry where the
//! key alone does not guarantee "once", and how each answer reads
//! (accepted, a refusal in the gateway's words, or "try again") are the
//! gateway's folder's knowledge. No I/O here: the refunder
//! (`oncehook-refunds`) sends the request and hands the answer back.

use crate::NormalizedEvent;
use crate::reconcile::{ApiCredentials, ApiRequest, OrderNames, RequestError};

/// One refund to make: a refund intent of the ledger, as a gateway needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundAsk {
    /// The intent's deterministic id (`ri_…`): the idempotency key sent to
    /// the gateway (Stripe's `Idempotency-Key`, Cashfree's `refund_id`,
    /// PayU's token, Razorpay's `receipt`), the same on every attempt.
    pub intent_id: String,
    /// The gateway's payment to refund (`pi_…`, `pay_…`, `cf_payment_id`,
    /// PayU's `mihpayid`), as the ledger records it.
    pub payment_id: String,
    /// How much, in minor units.
    pub amount_minor: i64,
    /// ISO 4217, upper case.
    pub currency: String,
    /// What the order is known as at the gateway (Cashfree refunds by the
    /// order's id, which is the shop's reference).
    pub order: OrderNames,
    /// The reason, in words, for the gateway's note field.
    pub reason: String,
    /// The gateway's order the capture's delivery named, if it named one
    /// (Cashfree refunds by order, and an order paid twice may be two
    /// orders at Cashfree).
    pub payment_order: Option<String>,
    /// The id the gateway's refund API takes for the payment, where it is
    /// not the ledger's (PayU records the `txnid` and refunds by the
    /// `mihpayid`): what [`GatewayRefunds::resolved`] read, else `None`.
    pub gateway_payment_id: Option<String>,
}

/// Which of a gateway's refund calls an answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundCall {
    /// The request that creates the refund.
    Create,
    /// The lookup of what the gateway already holds for the intent.
    Lookup,
}

/// What an answer to a refund call means.
#[derive(Debug, Clone, PartialEq)]
pub enum RefundOutcome {
    /// The gateway holds the refund (made now, or found made before): its
    /// id, and the refund facts the answer proves, as the events a refund
    /// webhook would carry (none while the refund is still pending at the
    /// gateway: its webhook or a reconciliation pass brings the fact).
    Accepted {
        /// The gateway's refund id (`re_…`, `rfnd_…`, its request id).
        refund_id: String,
        /// The refund facts the answer proves.
        facts: Vec<NormalizedEvent>,
    },
    /// A lookup found no refund for the intent: it may be sent.
    NotFound,
    /// The gateway refuses, and trying again will not change it
    /// (insufficient balance, refund window passed, not captured, already
    /// fully refunded): its code and words, for the operator.
    Refused {
        /// The gateway's error code (`insufficient_balance`, …).
        code: String,
        /// The gateway's words.
        message: String,
    },
    /// Nothing is known yet (a 5xx, a 429, an idempotent request still in
    /// flight at the gateway): try again later with the same key.
    Retry {
        /// What happened, for the log and the intent.
        reason: String,
    },
    /// A lookup's page was full and none of it is the intent's: the
    /// refunder asks for the next page ([`GatewayRefunds::lookup_page`],
    /// `listed` further on) before it concludes anything.
    FullPage {
        /// How many refunds the page listed.
        listed: usize,
    },
}

/// A gateway's refund API as the refunder uses it. Implemented once, on the
/// gateway's unit struct, in its folder (`src/<gateway>/refund.rs`), and
/// registered through [`crate::GatewayScheme::REFUNDS`].
pub trait GatewayRefunds: Sync {
    /// The request that refunds `ask` at most once, whatever the number of
    /// times it is sent: it carries the gateway's idempotency mechanism
    /// keyed by `ask.intent_id`.
    fn create(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError>;

    /// The request that finds what the gateway already holds for the intent
    /// (the payment's refunds, matched by the key), made before every
    /// retry where the gateway does not guarantee that a repeated key
    /// refunds once; `None` where the key is the guarantee.
    fn lookup(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Option<Result<ApiRequest, RequestError>>;

    /// The lookup's page that starts `skip` refunds in, for a lookup whose
    /// answer was [`RefundOutcome::FullPage`]; `skip` 0 is
    /// [`GatewayRefunds::lookup`]. `None` where the lookup does not page.
    fn lookup_page(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
        skip: usize,
    ) -> Option<Result<ApiRequest, RequestError>> {
        if skip == 0 {
            self.lookup(ask, credentials)
        } else {
            None
        }
    }

    /// The request that finds the id the refund API takes for the ledger's
    /// payment, where the two differ (PayU: `verify_payment` by `txnid`
    /// gives the `mihpayid`, which PayU's hash covers, unlike the one a
    /// notification carries); `None` where the ledger's id is the one.
    fn resolve(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Option<Result<ApiRequest, RequestError>> {
        let _ = (ask, credentials);
        None
    }

    /// Reads [`GatewayRefunds::resolve`]'s answer: the id to refund by, or
    /// what the answer means instead (a refusal: the gateway knows no such
    /// payment; a retry: it did not answer). Never panics.
    fn resolved(&self, ask: &RefundAsk, status: u16, body: &[u8]) -> Result<String, RefundOutcome> {
        let _ = (ask, body);
        Err(RefundOutcome::Retry {
            reason: format!("resolving the payment's id answered HTTP {status}"),
        })
    }

    /// Reads any answer (HTTP status and body) to `call` for `ask`. Never
    /// panics, whatever the bytes.
    fn read(&self, ask: &RefundAsk, call: RefundCall, status: u16, body: &[u8]) -> RefundOutcome;
}

impl crate::Gateway {
    /// The gateway's refund API, or `None` when oncehook cannot refund
    /// through it (its intents wait for a person).
    pub fn refunds(self) -> Option<&'static dyn GatewayRefunds> {
        self.scheme().refunds
    }
}
