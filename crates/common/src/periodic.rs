//! Background work that comes back again and again — the outbox relays,
//! gauges, retention, pruning old idempotency keys, reconciliation, the
//! notifier's dispatchers, readiness watches: [`Periodic`] runs every such
//! task of every binary, so none of them writes its own `loop { work;
//! sleep }`.
//!
//! It owns the cadence (an interval, an optional random jitter added to
//! each pause, an optional wake-up that cuts a pause short, whether the
//! first pass waits an interval), shutdown (no pass starts once it fired,
//! and a pause ends at once) and how failures are logged: the first failed
//! pass of a spell is a warning with the task's own line, the passes that
//! fail after it are logged at debug only, and the first pass that works
//! again says so once, at info, with how many passes failed. A failed pass
//! is followed by the task's regular pause: the next pass is the retry.
//!
//! Work that must not give up while the database is in trouble (a
//! delivery, a mark that matters) is held by `db::Hold` instead, which
//! waits by the one database policy ([`RetryPolicy::DATABASE_WAIT`]).
//!
//! [`RetryPolicy::DATABASE_WAIT`]: crate::retry::RetryPolicy::DATABASE_WAIT

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng as _;
use tokio::sync::Notify;

use crate::shutdown::Shutdown;

/// What a pass asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The regular pause, then the next pass.
    Pause,
    /// The next pass at once: more work is waiting (a full batch).
    Again,
    /// The task is over (the channel it publishes on closed, say).
    Stop,
}

/// How one periodic task runs: build it with [`Periodic::every`], then
/// [`Periodic::run`] its passes until shutdown.
#[derive(Debug, Clone)]
pub struct Periodic {
    /// The task's name, a field of its log lines (`task = "outbox relay"`).
    task: &'static str,
    every: Duration,
    /// Up to this much, at random, is added to each pause.
    jitter: Duration,
    /// Whether the first pass runs at start (else after one pause).
    at_start: bool,
    wake: Option<Arc<Notify>>,
    /// After a wake-up, how long the pass waits for more work to gather.
    gather: Duration,
    /// The warning of a spell's first failed pass.
    failing: &'static str,
    /// The line of the first pass that worked after a spell of failures.
    recovered: &'static str,
}

impl Periodic {
    /// A task named `task` whose passes run `every` apart, the first at
    /// start, without jitter or wake-up; a failed pass is logged as
    /// "`task` pass failed; will try again".
    pub fn every(task: &'static str, every: Duration) -> Self {
        Periodic {
            task,
            every,
            jitter: Duration::ZERO,
            at_start: true,
            wake: None,
            gather: Duration::ZERO,
            failing: "periodic task failed; will try again",
            recovered: "periodic task works again",
        }
    }

    /// Adds up to `up_to`, at random, to each pause (so the copies of a
    /// service do not all run at the same moment).
    #[must_use]
    pub fn jitter(self, up_to: Duration) -> Self {
        Periodic {
            jitter: up_to,
            ..self
        }
    }

    /// The first pass runs after one pause instead of at start.
    #[must_use]
    pub fn first_after_a_pause(self) -> Self {
        Periodic {
            at_start: false,
            ..self
        }
    }

    /// `wake` cuts a pause short (a commit that wrote a row to relay).
    #[must_use]
    pub fn woken_by(self, wake: Arc<Notify>) -> Self {
        Periodic {
            wake: Some(wake),
            ..self
        }
    }

    /// After a wake-up the pass waits `window` before it runs, so that
    /// the commits landing meanwhile ride in the same pass (one pass per
    /// commit costs the relay its statements per row; a few milliseconds
    /// let one pass take a handful).
    #[must_use]
    pub fn gathering(self, window: Duration) -> Self {
        Periodic {
            gather: window,
            ..self
        }
    }

    /// The lines of a spell of failures: `failing` for its first failed
    /// pass (a warning, with the error), `recovered` for the first pass
    /// that works after it (info, with the count of failed passes).
    #[must_use]
    pub fn logs(self, failing: &'static str, recovered: &'static str) -> Self {
        Periodic {
            failing,
            recovered,
            ..self
        }
    }

    /// The pause between two passes (the interval, plus the jitter drawn).
    pub fn pause(&self) -> Duration {
        if self.jitter.is_zero() {
            return self.every;
        }
        let extra = rand::rng().random_range(0..=self.jitter.as_nanos().min(u128::from(u64::MAX)));
        self.every.saturating_add(Duration::from_nanos(
            u64::try_from(extra).unwrap_or(u64::MAX),
        ))
    }

    /// Runs `pass` until shutdown (or until a pass answers [`Next::Stop`]).
    /// A pass in progress when shutdown fires is finished (the task stops
    /// taking new work, it does not drop what it holds).
    pub async fn run<E, F, Fut>(&self, shutdown: &Shutdown, mut pass: F)
    where
        E: Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Next, E>>,
    {
        let mut spell = Spell::default();
        if !self.at_start && !self.wait(shutdown).await {
            return;
        }
        while !shutdown.is_triggered() {
            let next = match pass().await {
                Ok(next) => {
                    if let Some(failed) = spell.ended() {
                        tracing::info!(
                            task = self.task,
                            failed_passes = failed,
                            "{}",
                            self.recovered
                        );
                    }
                    next
                }
                Err(error) => {
                    if spell.failed() {
                        tracing::warn!(task = self.task, %error, "{}", self.failing);
                    } else {
                        tracing::debug!(task = self.task, %error, "{}", self.failing);
                    }
                    Next::Pause
                }
            };
            match next {
                Next::Again => {}
                Next::Stop => return,
                Next::Pause => {
                    if !self.wait(shutdown).await {
                        return;
                    }
                }
            }
        }
    }

    /// One pause; `false` once shutdown fired.
    async fn wait(&self, shutdown: &Shutdown) -> bool {
        let pause = self.pause();
        match &self.wake {
            Some(wake) => {
                let woken = tokio::select! {
                    () = wake.notified() => true,
                    () = tokio::time::sleep(pause) => false,
                    () = shutdown.wait() => return false,
                };
                if woken && !self.gather.is_zero() {
                    return shutdown.sleep(self.gather).await;
                }
                !shutdown.is_triggered()
            }
            None => shutdown.sleep(pause).await,
        }
    }
}

/// A spell of failed passes: how many so far.
#[derive(Debug, Default)]
struct Spell {
    failed: u64,
}

impl Spell {
    /// Counts a failed pass; `true` when it is the first of the spell.
    fn failed(&mut self) -> bool {
        self.failed += 1;
        self.failed == 1
    }

    /// A pass worked: the number of failed passes if a spell just ended.
    fn ended(&mut self) -> Option<u64> {
        let failed = std::mem::take(&mut self.failed);
        (failed > 0).then_some(failed)
    }
}

#[cfg(test)]
#[path = "periodic_tests.rs"]
mod tests;
