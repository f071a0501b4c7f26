//! A request's transaction that lost to another — a deadlock, a
//! serialization failure (`db::is_contention`): Postgres rolled it back
//! whole — runs again from its start here, by `RetryPolicy::TRANSACTION`,
//! instead of answering the shop a 503 for a conflict it did not cause.
//! Every road into the ledger takes its locks in one order
//! (docs/ledger.md, "One lock order"), so this is rare; it is what is left
//! of issue 42's deadlocks. The order's create and cancel run through it.

use std::future::Future;

use oncehook_common::retry::RetryPolicy;

use crate::error::ApiError;

/// Runs `attempt` — one whole transaction, begun and committed inside it —
/// until it ends other than by losing to another transaction, at most
/// `RetryPolicy::TRANSACTION`'s attempts; `action` names it in the log.
pub async fn transaction<T, F, Fut>(action: &'static str, mut attempt: F) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ApiError>>,
{
    let mut delays = RetryPolicy::TRANSACTION.backoff();
    let mut attempts: u32 = 1;
    loop {
        let err = match attempt().await {
            Err(err) if err.contention.is_some() => err,
            done => return done,
        };
        let error = err.contention.as_deref().unwrap_or_default();
        let Some(delay) = delays.next() else {
            tracing::error!(
                action,
                attempts,
                error,
                "the transaction lost to another at every attempt; answering 503"
            );
            return Err(err);
        };
        tracing::info!(
            action,
            attempt = attempts,
            error,
            "the transaction lost to another; tried again"
        );
        tokio::time::sleep(delay).await;
        attempts = attempts.saturating_add(1);
    }
}
