//! Long-lived background tasks, supervised: every task a binary spawns for
//! as long as it runs (retention, the reconciler, the refunder, the relays,
//! the gauges, the sweepers, the committers, the notifier's dispatchers,
//! the API's readiness watch and pruning, ingest's broker session) is
//! started by [`supervise`], so none of them can die unseen.
//!
//! A task that **panics** is logged at `ERROR` with its name and the panic's
//! message, counted in `oncehook_background_task_failures_total{task}` (the
//! names are static, so the label is bounded; every supervised task's
//! series exists at zero from its start), and started again after a pause
//! of the one restart policy, [`RetryPolicy::TASK_RESTART`] (1 s doubling to
//! 60 s, jittered; back to 1 s once a run lasted longer than that). Every
//! task here keeps its state in the database or the broker and each pass
//! starts afresh, so a new run is the same as the next pass: restarting is
//! always possible, and a red `/readyz` would only take a process that
//! still does its main work (consuming, answering) out of service for a
//! side task. A task that panics again and again is restarted again and
//! again, and the alert on the counter says so.
//!
//! A task that **returns** has ended by its own decision — shutdown, the
//! end of its broker session, nothing to do (reconciliation or refunds
//! off), its queue closed — and is not restarted (logged at `INFO` when it
//! ends before shutdown). No task is started again once shutdown fired.
//!
//! At shutdown each [`Supervised`] is [`Supervised::join`]ed: the task's end
//! is waited for and a `JoinError` (the supervisor itself panicked or was
//! cancelled) is logged with the task's name, never dropped.

use std::any::Any;
use std::future::Future;

use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;

use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;

/// The counter of background tasks that panicked, by `task` (the macros
/// spell the name out: `tests/tests/observability.rs` reads them).
pub const FAILURES: &str = "oncehook_background_task_failures_total";

/// A supervised background task: its name and the supervisor's handle.
#[derive(Debug)]
pub struct Supervised {
    task: &'static str,
    handle: JoinHandle<()>,
}

impl Supervised {
    /// The task's name (the `task` label and the log lines' field).
    pub fn name(&self) -> &'static str {
        self.task
    }

    /// Waits for the task to end (it ends on the shutdown it was given);
    /// a `JoinError` is logged, never dropped.
    pub async fn join(self) {
        if let Err(error) = self.handle.await {
            log_join_error(self.task, error);
        }
    }
}

/// Joins every task, in order, logging each one's `JoinError`.
pub async fn join_all(tasks: impl IntoIterator<Item = Supervised>) {
    for task in tasks {
        task.join().await;
    }
}

/// Runs the future `start` makes as the background task `task`, and
/// starts a new one after a panic (see the module documentation) until it
/// returns or `shutdown` fires. `start` runs on the supervisor's task, once
/// per run, and should only clone what the run takes.
pub fn supervise<F, Fut>(task: &'static str, shutdown: &Shutdown, mut start: F) -> Supervised
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    // The series exists from the start (an alert sees its first step).
    metrics::counter!("oncehook_background_task_failures_total", "task" => task).increment(0);
    let shutdown = shutdown.clone();
    let handle = tokio::spawn(async move {
        let policy = RetryPolicy::TASK_RESTART;
        let mut pauses = policy.backoff();
        loop {
            let started = Instant::now();
            let error = match tokio::spawn(start()).await {
                Ok(()) => {
                    if !shutdown.is_triggered() {
                        tracing::info!(task, "background task ended; it is not restarted");
                    }
                    return;
                }
                Err(error) => error,
            };
            if !error.is_panic() {
                // Only a runtime shutting down cancels a task.
                log_join_error(task, error);
                return;
            }
            let message = panic_message(error.into_panic().as_ref());
            metrics::counter!("oncehook_background_task_failures_total", "task" => task)
                .increment(1);
            if shutdown.is_triggered() {
                tracing::error!(
                    task,
                    panic = %message,
                    "background task panicked during shutdown; not restarted"
                );
                return;
            }
            // A run that lasted longer than the longest pause starts a new
            // spell: back to the shortest pause.
            if started.elapsed() > policy.max_delay {
                pauses = policy.backoff();
            }
            let pause = pauses.next().unwrap_or(policy.max_delay);
            tracing::error!(
                task,
                panic = %message,
                restart_in = ?pause,
                "background task panicked; restarting it"
            );
            if !shutdown.sleep(pause).await {
                return;
            }
            tracing::info!(task, "background task restarted after a panic");
        }
    });
    Supervised { task, handle }
}

fn log_join_error(task: &'static str, error: JoinError) {
    if error.is_panic() {
        let message = panic_message(error.into_panic().as_ref());
        tracing::error!(task, panic = %message, "background task panicked");
    } else {
        tracing::error!(task, %error, "background task did not finish");
    }
}

/// A panic's message (`panic!("…")` carries a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
#[path = "background_tests.rs"]
mod tests;
