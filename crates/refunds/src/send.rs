//! Sending one claimed intent through its source's gateway, once: where
//! the intent may have been sent before (a retry, a killed refunder's
//! intent taken over, a re-approval), the gateway is asked first what it
//! holds for the attempt, whatever its key's retention; then the refund
//! request, under the attempt's key and built only from what the attempt
//! fixed at its first send (amount, reason). The answer, read by the
//! gateway's folder, is recorded: `sent` (the refund facts it proves
//! published like a reconciliation's, so the books settle the intent
//! whichever of them and the webhook comes first), `failed` with the
//! gateway's words, or tried again later with the same key.

use std::time::Duration;

use tokio::time::Instant;

use oncehook_common::config::BrokerConfig;
use oncehook_common::store::Pooled;
use oncehook_common::{Envelope, RetryPolicy};
use oncehook_gateway_api::{ApiSource, CallError, Client, Publisher};
use oncehook_gateways::reconcile::{ApiRequest, OrderNames, RequestError};
use oncehook_gateways::refund::{GatewayRefunds, LookupPage, RefundAsk, RefundCall, RefundOutcome};
use oncehook_ledger::store::refund_intents::{self as store, Failure, Intent};

use crate::RefundError;

/// What became of one attempt (the `outcome` label of
/// `oncehook_refund_attempts_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    Sent,
    Refused,
    Retry,
}

impl Attempt {
    pub fn as_str(self) -> &'static str {
        match self {
            Attempt::Sent => "sent",
            Attempt::Refused => "refused",
            Attempt::Retry => "retry",
        }
    }
}

/// The refund `intent`'s attempt is, as its gateway needs it: the amount
/// and reason its first send fixed (the claim fixes both), so every try
/// sends the same request under the same key.
pub fn ask(intent: &Intent, order: OrderNames) -> RefundAsk {
    RefundAsk {
        intent_id: intent.id.clone(),
        attempt: intent.attempt(),
        payment_id: intent.payment_id.clone(),
        amount_minor: intent.sent_minor.unwrap_or_else(|| intent.outstanding()),
        currency: intent.currency.clone(),
        order,
        reason: intent
            .sent_reason
            .clone()
            .unwrap_or_else(|| intent.reason.clone()),
        payment_order: intent.payment_order_ref.clone(),
        gateway_payment_id: None,
    }
}

/// Sends `intent` (claimed) through `source` and records what the gateway
/// answered; for an intent already `sent` whose refund was pending at the
/// gateway, only asks what became of it (`check_every` apart).
#[allow(clippy::too_many_arguments)]
pub async fn send(
    db: &Pooled,
    client: &Client,
    facts: &mut FactPublisher<'_>,
    source: &ApiSource,
    api: &'static dyn GatewayRefunds,
    intent: &Intent,
    order: OrderNames,
    check_every: Duration,
) -> Result<Attempt, RefundError> {
    let mut ask = ask(intent, order);
    let checking = intent.state == "sent";
    // The lease outlasts REFUND_CALLS_PER_SEND calls (checked at start-up);
    // a lookup's further pages keep room in it for one more call.
    let deadline = Instant::now() + check_every.saturating_sub(client.timeout());
    let mut outcome = match resolve(client, source, api, &ask).await {
        Ok(id) => {
            ask.gateway_payment_id = id;
            if checking {
                check(client, source, api, &ask, intent, deadline).await
            } else {
                answer(client, source, api, &ask, intent.attempts > 1, deadline).await
            }
        }
        Err(outcome) => outcome,
    };
    // An accepted refund the answer does not prove done (pending) is asked
    // about again; the facts it proves are published before it is recorded.
    let mut recheck = None;
    if let RefundOutcome::Accepted {
        refund_id,
        facts: proved,
    } = &mut outcome
    {
        recheck = proved.is_empty().then_some(check_every);
        if let Err(err) = facts.publish(source, std::mem::take(proved)).await {
            // The gateway refunded; the books have not heard. The intent
            // stays `sending` under its lease, and the next attempt finds
            // the refund (its key, or the lookup before a retry) and
            // publishes again.
            tracing::warn!(intent = %intent.id, order_ref = %intent.order_ref, %refund_id, %err, "the gateway accepted the refund but its fact could not be published; the refund is looked up and published again once the lease runs out");
            return Err(err);
        }
    }
    let mut conn = db.single().await?;
    let attempt = record(&mut conn, intent, source, &ask, outcome, recheck).await?;
    conn.finish().await?;
    Ok(attempt)
}

/// Records what the gateway's answer (`outcome`) means for `intent`.
async fn record(
    conn: &mut sqlx::PgConnection,
    intent: &Intent,
    source: &ApiSource,
    ask: &RefundAsk,
    outcome: RefundOutcome,
    recheck: Option<Duration>,
) -> Result<Attempt, RefundError> {
    let (code, message, why) = match outcome {
        RefundOutcome::Accepted { refund_id, .. } => {
            store::mark_sent(conn, &intent.id, &refund_id, recheck).await?;
            if intent.state != "sent" {
                tracing::info!(intent = %intent.id, order_ref = %intent.order_ref, %refund_id, amount_minor = ask.amount_minor, attempt = ask.attempt, source = %source.name, pending = recheck.is_some(), "refund sent");
            }
            return Ok(Attempt::Sent);
        }
        // A vanished refund says nothing of what became of it.
        RefundOutcome::Refused { code, message } if code == VANISHED => {
            (code, message, Failure::Unanswered)
        }
        RefundOutcome::Refused { code, message } => (code, message, Failure::Answered),
        RefundOutcome::Failed {
            refund_id,
            code,
            message,
        } => (
            code,
            format!("{message} (refund {refund_id})"),
            Failure::Answered,
        ),
        RefundOutcome::Retry { reason } => {
            let wait = backoff(intent.attempts);
            store::retry_later(conn, &intent.id, wait, &reason).await?;
            tracing::warn!(intent = %intent.id, order_ref = %intent.order_ref, %reason, retry_in_s = wait.as_secs(), "refund not confirmed; will try again under the same key, looked up first");
            return Ok(Attempt::Retry);
        }
        RefundOutcome::NotFound | RefundOutcome::FullPage { .. } => {
            let wait = backoff(intent.attempts);
            let reason = "the gateway answered the refund with 'not found'";
            store::retry_later(conn, &intent.id, wait, reason).await?;
            return Ok(Attempt::Retry);
        }
    };
    store::mark_failed(conn, &intent.id, &code, &message, why).await?;
    tracing::warn!(intent = %intent.id, order_ref = %intent.order_ref, attempt = intent.attempt_no, %code, %message, source = %source.name, "the gateway refused the refund; it waits for an operator (a re-approval is a new attempt under a new key)");
    metrics::counter!("oncehook_refund_refusals_total", "gateway" => intent.provider.clone(), "code" => code)
        .increment(1);
    Ok(Attempt::Refused)
}

/// The code of a refund the gateway accepted and no longer lists.
const VANISHED: &str = "vanished";

/// Where a pass publishes the refund facts the gateways' answers prove,
/// like the reconciler's: one broker connection for the pass, opened at
/// its first fact and opened again after a failed publish.
pub struct FactPublisher<'a> {
    broker: &'a BrokerConfig,
    publisher: Option<Publisher>,
}

impl<'a> FactPublisher<'a> {
    pub fn new(broker: &'a BrokerConfig) -> Self {
        FactPublisher {
            broker,
            publisher: None,
        }
    }

    /// Publishes `facts` from `source` (for its tenant), each confirmed by
    /// the broker.
    async fn publish(
        &mut self,
        source: &ApiSource,
        facts: Vec<oncehook_gateways::NormalizedEvent>,
    ) -> Result<(), RefundError> {
        if facts.is_empty() {
            return Ok(());
        }
        let publisher = match self.publisher.as_ref() {
            Some(p) => p,
            None => self
                .publisher
                .insert(Publisher::connect(self.broker).await?),
        };
        let mut result = Ok(());
        for fact in facts {
            result = publisher
                .publish(&Envelope::reconciled(&source.name, fact).for_tenant(&source.tenant))
                .await;
            if result.is_err() {
                break;
            }
        }
        if result.is_err()
            && let Some(broken) = self.publisher.take()
        {
            broken.close().await;
        }
        Ok(result?)
    }

    /// Closes the pass's connection, if it opened one.
    pub async fn close(self) {
        if let Some(p) = self.publisher {
            p.close().await;
        }
    }
}

/// What became of a refund the gateway accepted as pending: its lookup
/// (none: nothing to ask, the refund's webhook or reconciliation settles
/// it). A refund the gateway no longer lists is a refusal an operator
/// looks at; a failed lookup is tried again.
async fn check(
    client: &Client,
    source: &ApiSource,
    api: &'static dyn GatewayRefunds,
    ask: &RefundAsk,
    intent: &Intent,
    deadline: Instant,
) -> RefundOutcome {
    let refund_id = intent.gateway_refund_id.clone().unwrap_or_default();
    match look_up(client, source, api, ask, deadline).await {
        RefundOutcome::NotFound => RefundOutcome::Refused {
            code: VANISHED.into(),
            message: format!("the gateway no longer lists the refund {refund_id} it accepted"),
        },
        RefundOutcome::Refused { code, message } => RefundOutcome::Retry {
            reason: format!("asking about the refund failed ({code}): {message}"),
        },
        other => other,
    }
}

/// The id the gateway's refund API takes for the payment, where it is not
/// the ledger's (PayU's `mihpayid` for the `txnid`): asked of the gateway
/// itself; `Ok(None)` where the ledger's id is the one.
async fn resolve(
    client: &Client,
    source: &ApiSource,
    api: &'static dyn GatewayRefunds,
    ask: &RefundAsk,
) -> Result<Option<String>, RefundOutcome> {
    let Some(request) = api.resolve(ask, &source.credentials) else {
        return Ok(None);
    };
    let request = request.map_err(|e| RefundOutcome::Refused {
        code: "request".into(),
        message: format!("the payment's id cannot be asked for: {e}"),
    })?;
    match client.exchange(&source.base_url, request).await {
        Ok(answer) => api
            .resolved(ask, answer.status.as_u16(), &answer.body)
            .map(Some),
        Err(e) => Err(RefundOutcome::Retry {
            reason: format!("resolving the payment's id: {e}"),
        }),
    }
}

/// What the gateway holds for `ask`: looked up first when the intent may
/// have been sent before (every gateway has a lookup: no key's retention
/// is the guarantee), then the refund request itself unless the lookup
/// found it.
async fn answer(
    client: &Client,
    source: &ApiSource,
    api: &'static dyn GatewayRefunds,
    ask: &RefundAsk,
    maybe_sent: bool,
    deadline: Instant,
) -> RefundOutcome {
    if maybe_sent {
        match look_up(client, source, api, ask, deadline).await {
            RefundOutcome::NotFound => {}
            // A lookup that fails or is refused says nothing: never send
            // blind, try again later. (A refund it finds failed is
            // `Failed`, as final as a refusal.)
            RefundOutcome::Refused { code, message } => {
                return RefundOutcome::Retry {
                    reason: format!("looking up the refund failed ({code}): {message}"),
                };
            }
            found => return found,
        }
    }
    let create = api.create(ask, &source.credentials);
    exchange(client, source, api, ask, RefundCall::Create, create).await
}

/// The most pages one lookup reads (Razorpay's: 100 refunds a page).
/// A payment with more refunds than that is tried again later, never sent
/// blind.
const MAX_LOOKUP_PAGES: usize = 100;

/// The gateway's lookup of `ask`, page after page while a page is full
/// and holds none of the attempt's refunds. A page after the first is
/// asked only while one more call fits before `deadline` (the lease, less
/// one call for the refund).
async fn look_up(
    client: &Client,
    source: &ApiSource,
    api: &'static dyn GatewayRefunds,
    ask: &RefundAsk,
    deadline: Instant,
) -> RefundOutcome {
    let mut page = LookupPage::default();
    for _ in 0..MAX_LOOKUP_PAGES {
        let skip = page.skip;
        if skip > 0 && Instant::now() + client.timeout() > deadline {
            return RefundOutcome::Retry {
                reason: format!(
                    "the lookup read {skip} refunds without the attempt's and the lease leaves no room for another page: asked again on the next try"
                ),
            };
        }
        let Some(request) = api.lookup_page(ask, &source.credentials, &page) else {
            return RefundOutcome::Retry {
                reason: format!(
                    "the lookup's page was full at {skip} refunds and it has no next page"
                ),
            };
        };
        match exchange(client, source, api, ask, RefundCall::Lookup, request).await {
            RefundOutcome::FullPage { listed, last } if listed > 0 => {
                page = LookupPage {
                    skip: skip + listed,
                    after: last,
                };
            }
            RefundOutcome::FullPage { .. } => {
                return RefundOutcome::Retry {
                    reason: "the lookup answered an empty page as full".into(),
                };
            }
            other => return other,
        }
    }
    RefundOutcome::Retry {
        reason: format!(
            "the payment has more than {} refunds and none of the {MAX_LOOKUP_PAGES} pages read is the attempt's",
            page.skip
        ),
    }
}

/// One call, its answer read by the gateway's folder; a transport failure
/// is "try again", credentials refused are a refusal an operator must fix.
async fn exchange(
    client: &Client,
    source: &ApiSource,
    api: &'static dyn GatewayRefunds,
    ask: &RefundAsk,
    call: RefundCall,
    request: Result<ApiRequest, RequestError>,
) -> RefundOutcome {
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            return RefundOutcome::Refused {
                code: "request".into(),
                message: format!("the refund request cannot be made: {e}"),
            };
        }
    };
    match client.exchange(&source.base_url, request).await {
        Ok(answer) if matches!(answer.status.as_u16(), 401 | 403) => RefundOutcome::Refused {
            code: "credentials".into(),
            message: format!(
                "the gateway refused source {}'s credentials (HTTP {}): check [source.api]",
                source.name,
                answer.status.as_u16()
            ),
        },
        Ok(answer) => api.read(ask, call, answer.status.as_u16(), &answer.body),
        Err(e @ CallError::Request(_)) => RefundOutcome::Refused {
            code: "request".into(),
            message: e.to_string(),
        },
        Err(e) => RefundOutcome::Retry {
            reason: e.to_string(),
        },
    }
}

/// The wait before attempt `attempts + 1` ([`RetryPolicy::REFUND_SEND`]).
pub fn backoff(attempts: i32) -> Duration {
    RetryPolicy::REFUND_SEND.delay_after(u32::try_from(attempts).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_sends_what_its_first_send_fixed_under_its_own_key() {
        let mut intent = crate::sample_intent(50_000, "cancelled_order");
        intent.sent_minor = Some(40_000);
        intent.sent_reason = Some("duplicate_capture".into());
        intent.attempt_no = 3;
        let ask = ask(&intent, OrderNames::default());
        assert_eq!(
            (ask.amount_minor, ask.reason.as_str(), ask.key()),
            (40_000, "duplicate_capture", "ri_1-3".to_owned()),
            "the reason the ledger rewrote is not the one sent"
        );
        intent.sent_reason = None;
        intent.sent_minor = None;
        intent.attempt_no = 0;
        let first = super::ask(&intent, OrderNames::default());
        assert_eq!(
            (first.amount_minor, first.reason.as_str(), first.key()),
            (50_000, "cancelled_order", "ri_1".to_owned())
        );
    }

    #[test]
    fn backoff_doubles_and_stops_at_five_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(40), Duration::from_secs(300));
        assert_eq!(backoff(-1), Duration::from_secs(1));
    }
}
