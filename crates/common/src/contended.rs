//! A transaction that lost to another — a deadlock, a serialization
//! failure (`db::is_contention`): Postgres rolled it back whole — runs
//! again from its start, by `RetryPolicy::TRANSACTION`, inside its owner,
//! instead of surfacing a conflict its caller did not cause (the shop's
//! request a 503, the reconciler's pass a failure, the contract step an
//! error). Every road into the ledger takes its locks in one order
//! (docs/ledger.md, "One lock order"), so this is rare; it is what is left
//! of issue 42's deadlocks. The API's create and cancel, the reconciler's
//! registration of references it found and every page of a catch-up run
//! through it. (The worker's groups do not: a failed group is redelivered
//! by `RetryPolicy::DELIVERY`.)

use std::future::Future;

use crate::retry::RetryPolicy;

/// An error that says whether it is a lost race between transactions.
pub trait Contention {
    /// The database's words when the transaction lost to another, else
    /// `None`.
    fn contention(&self) -> Option<String>;
}

impl Contention for sqlx::Error {
    fn contention(&self) -> Option<String> {
        crate::db::is_contention(self).then(|| self.to_string())
    }
}

/// Runs `attempt` — one whole transaction, begun and committed inside it —
/// until it ends other than by losing to another transaction, at most
/// `RetryPolicy::TRANSACTION`'s attempts; `action` names it in the log.
pub async fn transaction<T, E, F, Fut>(action: &'static str, mut attempt: F) -> Result<T, E>
where
    E: Contention,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut delays = RetryPolicy::TRANSACTION.backoff();
    let mut attempts: u32 = 1;
    loop {
        let (err, error) = match attempt().await {
            Err(err) => match err.contention() {
                Some(words) => (err, words),
                None => return Err(err),
            },
            done => return done,
        };
        let Some(delay) = delays.next() else {
            tracing::error!(
                action,
                attempts,
                error,
                "the transaction lost to another at every attempt; giving up"
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Debug, PartialEq)]
    enum Lost {
        Deadlock,
        Other,
    }

    impl Contention for Lost {
        fn contention(&self) -> Option<String> {
            (*self == Lost::Deadlock).then(|| "deadlock detected".to_owned())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_race_runs_again_and_any_other_error_does_not() {
        let tries = Cell::new(0);
        let won = transaction("test", || {
            tries.set(tries.get() + 1);
            let n = tries.get();
            async move { if n < 3 { Err(Lost::Deadlock) } else { Ok(n) } }
        })
        .await;
        assert_eq!(won, Ok(3));
        tries.set(0);
        let other: Result<(), Lost> = transaction("test", || {
            tries.set(tries.get() + 1);
            async { Err(Lost::Other) }
        })
        .await;
        assert_eq!((other, tries.get()), (Err(Lost::Other), 1));
        tries.set(0);
        let lost: Result<(), Lost> = transaction("test", || {
            tries.set(tries.get() + 1);
            async { Err(Lost::Deadlock) }
        })
        .await;
        assert_eq!(lost, Err(Lost::Deadlock));
        assert_eq!(
            Some(tries.get()),
            RetryPolicy::TRANSACTION.max_attempts,
            "as many attempts as the policy allows"
        );
    }
}
