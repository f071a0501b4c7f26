//! Refunding's side of a gateway: the [`GatewayRefunds`] trait a gateway's
//! folder implements when oncehook may refund through its API, and the
//! plain values it speaks in. What a refund request is (method, path, body,
//! the gateway's own idempotency mechanism keyed by the intent's id), how
//! the payment's existing refunds are looked up before a retry where the
//! key alone does not guarantee "once", and how each answer reads
//! (accepted, a refusal in the gateway's words, or "try again") are the
//! gateway's folder's knowledge. No I/O here: the refunder
//! (`oncehook-refunds`) sends the request and hands the answer back.
//!
//! What the folders share is beside it: the checks of an ask before it is
//! sent ([`RefundAsk`]'s), which of the attempt's refunds a lookup's page
//! found (`lookup`), the words of "try again" and of a refund of another
//! payment (`answer`), and, for the tests, the ask, the credentials and
//! the never-panics properties (`test_support`).

pub(crate) mod answer;
pub(crate) mod lookup;
#[cfg(test)]
pub(crate) mod test_support;

use crate::NormalizedEvent;
use crate::reconcile::{ApiCredentials, ApiRequest, OrderNames, RequestError};

/// One refund to make: a refund intent of the ledger, as a gateway needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundAsk {
    /// The intent's deterministic id (`ri_…`), which every attempt's
    /// request names (Stripe's `metadata[oncehook_intent]`, Razorpay's
    /// `notes.oncehook_intent`).
    pub intent_id: String,
    /// The attempt (1, then one more for each re-approval after the
    /// gateway refused): with the id it names the attempt's idempotency
    /// key, [`RefundAsk::key`].
    pub attempt: u32,
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

impl RefundAsk {
    /// The attempt's idempotency key (Stripe's `Idempotency-Key`,
    /// Cashfree's `refund_id`, PayU's token, Razorpay's `receipt`, each
    /// fitted to the gateway's rules in its folder): [`attempt_key`].
    pub fn key(&self) -> String {
        attempt_key(&self.intent_id, self.attempt)
    }

    /// Refused before anything is sent unless the amount is positive.
    pub(crate) fn check_amount(&self) -> Result<(), RequestError> {
        if self.amount_minor <= 0 {
            return Err(RequestError::Invalid(format!(
                "refund amount {} is not positive",
                self.amount_minor
            )));
        }
        Ok(())
    }

    /// Refused before anything is sent unless the ask names its payment
    /// and its intent (`what`: `a Razorpay refund`, …, for the message)
    /// and its amount is positive.
    pub(crate) fn check_sendable(&self, what: &str) -> Result<(), RequestError> {
        if self.payment_id.is_empty() || self.intent_id.is_empty() {
            return Err(RequestError::Invalid(format!(
                "{what} needs the payment id and the intent id"
            )));
        }
        self.check_amount()
    }
}

/// The idempotency key of attempt `attempt` of intent `intent_id`: the id
/// itself for the first (as every release before attempts sent it), then
/// the id and `-2`, `-3`, …: deterministic, so every try of an attempt,
/// by any worker, sends the same key, and a new attempt never meets the
/// answer the gateway saved for an earlier one.
pub fn attempt_key(intent_id: &str, attempt: u32) -> String {
    if attempt <= 1 {
        intent_id.to_owned()
    } else {
        format!("{intent_id}-{attempt}")
    }
}

/// Where a lookup's page starts: `skip` refunds in (Razorpay's `skip`),
/// after the refund `after` (Stripe's `starting_after`); the first page
/// is the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LookupPage {
    /// How many refunds the pages before listed.
    pub skip: usize,
    /// The id of the last refund the page before listed.
    pub after: Option<String>,
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
    /// A lookup found no refund for the attempt: it may be sent.
    NotFound,
    /// The gateway holds the attempt's refund and reports it failed or
    /// cancelled: nothing was refunded under the attempt's key, and this
    /// is as final as a refusal (an operator decides; a re-approval is a
    /// new attempt under a new key).
    Failed {
        /// The gateway's refund id.
        refund_id: String,
        /// `refund_failed`, `refund_canceled`, … with the gateway's word.
        code: String,
        /// The gateway's words.
        message: String,
    },
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
    /// A lookup's page was full and none of it is the attempt's: the
    /// refunder asks for the next page ([`GatewayRefunds::lookup_page`],
    /// `listed` further on, after `last`) before it concludes anything.
    FullPage {
        /// How many refunds the page listed.
        listed: usize,
        /// The id of the last refund listed (Stripe pages after it).
        last: Option<String>,
    },
}

/// A gateway's refund API as the refunder uses it. Implemented once, on the
/// gateway's unit struct, in its folder (`src/<gateway>/refund.rs`), and
/// registered through [`crate::GatewayScheme::REFUNDS`].
pub trait GatewayRefunds: Sync {
    /// The request that refunds `ask` at most once, whatever the number of
    /// times it is sent: it carries the gateway's idempotency mechanism
    /// keyed by the attempt's key ([`RefundAsk::key`]), and is built only
    /// from what the attempt fixed (amount, reason, key).
    fn create(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError>;

    /// The request that finds what the gateway already holds for the
    /// attempt (the payment's refunds, matched by the attempt's key or
    /// the intent and attempt it names), made before every retry: no
    /// gateway's key retention is the guarantee on its own.
    fn lookup(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
    ) -> Result<ApiRequest, RequestError>;

    /// The lookup's page that starts at `page`, for a lookup whose answer
    /// was [`RefundOutcome::FullPage`]; the first page is
    /// [`GatewayRefunds::lookup`]. `None` where the lookup does not page.
    fn lookup_page(
        &self,
        ask: &RefundAsk,
        credentials: &ApiCredentials,
        page: &LookupPage,
    ) -> Option<Result<ApiRequest, RequestError>> {
        (*page == LookupPage::default()).then(|| self.lookup(ask, credentials))
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
