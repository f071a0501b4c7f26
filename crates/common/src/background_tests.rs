//! The supervisor on paused time: a panicking task is logged with its name
//! and message, counted and started again after the restart policy's
//! pauses; a task that returns, or panics once shutdown fired, is not; a
//! supervisor that fails is logged when joined.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::time::Instant;

use super::*;

/// What the tests see: the log lines and the metrics of this thread (the
/// tests run on a current-thread runtime, so every task they spawn too).
struct Seen {
    logs: Arc<Mutex<Vec<u8>>>,
    metrics: PrometheusHandle,
    _logging: tracing::subscriber::DefaultGuard,
    _recording: metrics::LocalRecorderGuard<'static>,
}

#[derive(Clone)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn watch() -> Seen {
    let logs = Arc::new(Mutex::new(Vec::new()));
    let buffer = Buffer(logs.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || buffer.clone())
        .finish();
    let recorder: &'static _ = Box::leak(Box::new(PrometheusBuilder::new().build_recorder()));
    Seen {
        logs,
        metrics: recorder.handle(),
        _logging: tracing::subscriber::set_default(subscriber),
        _recording: metrics::set_default_local_recorder(recorder),
    }
}

impl Seen {
    fn logs(&self) -> String {
        String::from_utf8_lossy(&self.logs.lock().expect("logs")).into_owned()
    }

    /// The failures counted for `task` (`None`: no series).
    fn failures(&self, task: &str) -> Option<u64> {
        let series = format!("{FAILURES}{{task=\"{task}\"}} ");
        self.metrics
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(&series).map(|v| v.parse().expect("a count")))
    }
}

/// A task whose runs are counted and timed; run `n` (from 1) panics when
/// `panics(n)`, else waits for `shutdown` (or returns at once when
/// `returns`).
fn counted(
    name: &'static str,
    shutdown: &Shutdown,
    panics: impl Fn(u32) -> bool + Send + Sync + 'static,
    returns: bool,
) -> (Supervised, Arc<AtomicU32>, Arc<Mutex<Vec<Duration>>>) {
    let runs = Arc::new(AtomicU32::new(0));
    let starts = Arc::new(Mutex::new(Vec::new()));
    let (r, s, stop, began) = (
        runs.clone(),
        starts.clone(),
        shutdown.clone(),
        Instant::now(),
    );
    let panics = Arc::new(panics);
    let task = supervise(name, shutdown, move || {
        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
        s.lock().expect("starts").push(began.elapsed());
        let (stop, panics) = (stop.clone(), panics.clone());
        async move {
            if panics(n) {
                panic!("run {n} of {name} broke");
            }
            if !returns {
                stop.wait().await;
            }
        }
    });
    (task, runs, starts)
}

#[tokio::test(start_paused = true)]
async fn a_panicking_task_is_logged_counted_and_started_again() {
    let seen = watch();
    let shutdown = Shutdown::new();
    let (task, runs, _) = counted("flaky", &shutdown, |n| n <= 2, false);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "two panics, then a run that lasts"
    );
    assert_eq!(seen.failures("flaky"), Some(2));
    let logs = seen.logs();
    for run in [1, 2] {
        let line = logs
            .lines()
            .find(|l| l.contains(&format!("run {run} of flaky broke")))
            .unwrap_or_else(|| panic!("no line for run {run}:\n{logs}"));
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains("task=\"flaky\""), "{line}");
        assert!(line.contains("restarting it"), "{line}");
    }
    assert_eq!(
        logs.matches("background task restarted after a panic")
            .count(),
        2,
        "{logs}"
    );
    shutdown.trigger();
    task.join().await;
    assert_eq!(runs.load(Ordering::SeqCst), 3, "no run after shutdown");
}

#[tokio::test(start_paused = true)]
async fn pauses_grow_by_the_restart_policy_and_start_over_after_a_long_run() {
    let _seen = watch();
    let shutdown = Shutdown::new();
    // Runs 1–5 panic at once, run 6 lasts 90 s (longer than the longest
    // pause) and panics, run 7 panics at once; then it lasts.
    let (long_run, done) = (Arc::new(AtomicU32::new(0)), Shutdown::new());
    let (runs, starts) = (
        Arc::new(AtomicU32::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let (r, s, began, stop) = (runs.clone(), starts.clone(), Instant::now(), done.clone());
    let task = supervise("spell", &shutdown, move || {
        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
        s.lock().expect("starts").push(began.elapsed());
        let (long_run, stop) = (long_run.clone(), stop.clone());
        async move {
            if n == 6 {
                long_run.store(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(90)).await;
            }
            if n <= 7 {
                panic!("run {n}");
            }
            stop.wait().await;
        }
    });
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 8);
    let starts = starts.lock().expect("starts").clone();
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    // Jittered: each pause is the policy's delay, up to twice it.
    let policy = RetryPolicy::TASK_RESTART;
    for (i, gap) in gaps.iter().take(5).enumerate() {
        let least = policy.delay_after(i as u32);
        assert!(
            *gap >= least && *gap <= least * 2,
            "pause {i}: {gap:?}, policy {least:?} (all: {gaps:?})"
        );
    }
    // After run 6's 90 s, the pauses start over: the shortest, then the
    // second (without the reset they would go on at 32 s and 60 s).
    let after_long = gaps[5] - Duration::from_secs(90);
    assert!(
        after_long >= policy.min_delay && after_long <= policy.min_delay * 2,
        "{gaps:?}"
    );
    let next = policy.delay_after(1);
    assert!(gaps[6] >= next && gaps[6] <= next * 2, "{gaps:?}");
    shutdown.trigger();
    done.trigger();
    task.join().await;
}

#[tokio::test(start_paused = true)]
async fn a_task_that_returns_is_not_started_again_and_its_series_is_at_zero() {
    let seen = watch();
    let shutdown = Shutdown::new();
    let (task, runs, _) = counted("done", &shutdown, |_| false, true);
    task.join().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(seen.failures("done"), Some(0), "{}", seen.metrics.render());
    assert!(
        seen.logs()
            .contains("background task ended; it is not restarted"),
        "{}",
        seen.logs()
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_panicking_after_shutdown_is_counted_logged_and_not_started_again() {
    let seen = watch();
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let task = supervise("closing", &shutdown, move || {
        r.fetch_add(1, Ordering::SeqCst);
        let stop = stop.clone();
        async move {
            stop.wait().await;
            panic!("broke while closing");
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(1), task.join())
        .await
        .expect("the supervisor ends with the task");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(seen.failures("closing"), Some(1));
    let logs = seen.logs();
    assert!(
        logs.contains("broke while closing") && logs.contains("during shutdown; not restarted"),
        "{logs}"
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_the_pause_ends_the_supervisor_at_once() {
    let _seen = watch();
    let shutdown = Shutdown::new();
    let (task, runs, _) = counted("paused", &shutdown, |_| true, false);
    // The first run panics at once; the pause is at least a second.
    tokio::time::sleep(Duration::from_millis(500)).await;
    shutdown.trigger();
    let start = Instant::now();
    task.join().await;
    assert!(start.elapsed() < Duration::from_millis(100));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn joining_logs_a_supervisor_that_failed() {
    let seen = watch();
    let shutdown = Shutdown::new();
    // `start` itself panics: it runs on the supervisor's task.
    let task = supervise("broken start", &shutdown, || -> std::future::Ready<()> {
        panic!("could not even start")
    });
    assert_eq!(task.name(), "broken start");
    join_all([task]).await;
    let logs = seen.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("could not even start"))
        .unwrap_or_else(|| panic!("the JoinError was not logged:\n{logs}"));
    assert!(
        line.contains("ERROR") && line.contains("task=\"broken start\""),
        "{line}"
    );
}

#[test]
fn panic_messages_are_read_from_str_and_string_payloads() {
    assert_eq!(panic_message(&"static"), "static");
    assert_eq!(panic_message(&String::from("formatted 7")), "formatted 7");
    assert_eq!(panic_message(&42_u8), "a panic without a message");
}
