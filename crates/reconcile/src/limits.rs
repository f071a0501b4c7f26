//! The limits that keep a run from flooding a gateway: a budget of calls
//! for the whole run (shared by every source), a pace per source (at most
//! `calls_per_second`), and the retries of one call — a 429 waits for its
//! `Retry-After`, a 5xx, timeout or lost connection backs off on
//! [`RetryPolicy::GATEWAY_API`], anything else is given up at once.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use oncehook_common::RetryPolicy;
use tokio::time::Instant;

use oncehook_gateways::reconcile::Ask;

use oncehook_gateway_api::client::{Answer, ApiSource, CallError, Client};

/// How many 429s in a row one call waits out before it is given up.
const MAX_RATE_LIMITED: u32 = 5;

/// The calls a run may still make, over every source.
#[derive(Debug)]
pub struct Budget(AtomicU32);

impl Budget {
    pub fn new(calls: u32) -> Budget {
        Budget(AtomicU32::new(calls))
    }

    /// Takes one call from the budget; `false` when it is spent.
    pub fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// One source's pace: calls at least `1 / calls_per_second` apart.
#[derive(Debug)]
pub struct Pace {
    gap: Duration,
    next: Option<Instant>,
}

impl Pace {
    pub fn new(calls_per_second: u32) -> Pace {
        Pace {
            gap: Duration::from_secs(1) / calls_per_second.max(1),
            next: None,
        }
    }

    /// Waits until the next call may go.
    pub async fn wait(&mut self) {
        if let Some(next) = self.next {
            tokio::time::sleep_until(next).await;
        }
        self.next = Some(Instant::now() + self.gap);
    }
}

/// Makes one call for `source` within the limits, retrying what may
/// succeed later. Every attempt counts in the budget and in
/// `oncehook_reconcile_api_calls_total`, every failed one in
/// `oncehook_reconcile_api_errors_total`.
pub async fn call(
    client: &Client,
    source: &ApiSource,
    ask: &Ask,
    budget: &Budget,
    pace: &mut Pace,
) -> Result<Answer, CallError> {
    let mut backoff = RetryPolicy::GATEWAY_API.backoff();
    let mut rate_limited = 0;
    loop {
        if !budget.take() {
            return Err(CallError::Budget);
        }
        pace.wait().await;
        metrics::counter!("oncehook_reconcile_api_calls_total", "source" => source.name.clone())
            .increment(1);
        let err = match client.call(source, ask).await {
            Ok(answer) => return Ok(answer),
            Err(err) => err,
        };
        metrics::counter!(
            "oncehook_reconcile_api_errors_total",
            "source" => source.name.clone(),
            "status" => err.status_label()
        )
        .increment(1);
        let pause = match &err {
            CallError::RateLimited { retry_after } if rate_limited < MAX_RATE_LIMITED => {
                rate_limited += 1;
                *retry_after
            }
            e if e.transient() => match backoff.next() {
                Some(pause) => pause,
                None => return Err(err),
            },
            _ => return Err(err),
        };
        tracing::warn!(
            source = %source.name,
            call = %source.api.describe(ask),
            error = %err,
            retry_in = ?pause,
            "gateway API call failed; trying again"
        );
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_and_never_goes_below_zero() {
        let budget = Budget::new(2);
        assert!(budget.take());
        assert!(budget.take());
        assert!(!budget.take());
        assert!(!budget.take());
    }

    #[tokio::test(start_paused = true)]
    async fn calls_to_one_source_keep_their_pace() {
        let mut pace = Pace::new(4);
        let start = Instant::now();
        for _ in 0..5 {
            pace.wait().await;
        }
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(1_000),
            "5 calls at 4/s"
        );
    }
}
