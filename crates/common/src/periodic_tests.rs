//! The periodic helper on paused time: when passes run, what wakes them,
//! how shutdown and `Next` end them, and the log-once spell of failures.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::*;

/// Runs `cadence` in a task whose passes record when they ran (relative
/// to the start) and answer `answer(pass number)`.
fn spawn(
    cadence: Periodic,
    shutdown: &Shutdown,
    answer: impl Fn(u32) -> Result<Next, &'static str> + Send + Sync + 'static,
) -> (
    Arc<std::sync::Mutex<Vec<Duration>>>,
    tokio::task::JoinHandle<()>,
) {
    let times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Instant::now();
    let (seen, shutdown) = (times.clone(), shutdown.clone());
    let count = Arc::new(AtomicU32::new(0));
    let task = tokio::spawn(async move {
        cadence
            .run(&shutdown, || {
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                seen.lock().expect("times").push(start.elapsed());
                let answer = answer(n);
                async move { answer }
            })
            .await;
    });
    (times, task)
}

fn secs(times: &std::sync::Mutex<Vec<Duration>>) -> Vec<u64> {
    times
        .lock()
        .expect("times")
        .iter()
        .map(|d| d.as_secs())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn passes_run_at_start_and_then_every_interval_until_shutdown() {
    let shutdown = Shutdown::new();
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(10)),
        &shutdown,
        |_| Ok(Next::Pause),
    );
    tokio::time::sleep(Duration::from_secs(35)).await;
    shutdown.trigger();
    task.await.expect("task");
    assert_eq!(secs(&times), [0, 10, 20, 30]);
}

#[tokio::test(start_paused = true)]
async fn the_first_pass_may_wait_one_interval() {
    let shutdown = Shutdown::new();
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(10)).first_after_a_pause(),
        &shutdown,
        |_| Ok(Next::Pause),
    );
    tokio::time::sleep(Duration::from_secs(25)).await;
    shutdown.trigger();
    task.await.expect("task");
    assert_eq!(secs(&times), [10, 20]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_a_pause_at_once() {
    let shutdown = Shutdown::new();
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(3_600)),
        &shutdown,
        |_| Ok(Next::Pause),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopping = Instant::now();
    shutdown.trigger();
    task.await.expect("task");
    assert_eq!(
        stopping.elapsed(),
        Duration::ZERO,
        "no pause after shutdown"
    );
    assert_eq!(secs(&times), [0]);
}

#[tokio::test(start_paused = true)]
async fn no_pass_starts_once_shutdown_fired() {
    let shutdown = Shutdown::new();
    shutdown.trigger();
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(1)),
        &shutdown,
        |_| Ok(Next::Pause),
    );
    task.await.expect("task");
    assert!(secs(&times).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_again_at_once_and_stop_ends_the_task() {
    let shutdown = Shutdown::new();
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(5)),
        &shutdown,
        |n| match n {
            1 | 2 => Ok(Next::Again),
            3 => Ok(Next::Pause),
            _ => Ok(Next::Stop),
        },
    );
    task.await.expect("the task ends by itself");
    assert_eq!(secs(&times), [0, 0, 0, 5]);
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_cuts_the_pause_short() {
    let shutdown = Shutdown::new();
    let wake = Arc::new(Notify::new());
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(10)).woken_by(wake.clone()),
        &shutdown,
        |_| Ok(Next::Pause),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    wake.notify_one();
    tokio::time::sleep(Duration::from_secs(15)).await;
    shutdown.trigger();
    task.await.expect("task");
    assert_eq!(secs(&times), [0, 3, 13]);
}

#[tokio::test(start_paused = true)]
async fn a_gathering_wake_up_lets_more_work_land_before_its_pass() {
    let shutdown = Shutdown::new();
    let wake = Arc::new(Notify::new());
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(10))
            .woken_by(wake.clone())
            .gathering(Duration::from_secs(2)),
        &shutdown,
        |_| Ok(Next::Pause),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    wake.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A second wake-up inside the window rides in the same pass.
    wake.notify_one();
    tokio::time::sleep(Duration::from_secs(14)).await;
    shutdown.trigger();
    task.await.expect("task");
    // Woken at 3, run at 5; the second wake-up (stored by the Notify while
    // the pass waited) runs one more pass 2 s after it ran; then the interval.
    assert_eq!(secs(&times), [0, 5, 7, 17]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_pass_is_retried_after_the_regular_pause() {
    let shutdown = Shutdown::new();
    let (times, task) = spawn(
        Periodic::every("test", Duration::from_secs(10)),
        &shutdown,
        |n| if n <= 2 { Err("down") } else { Ok(Next::Pause) },
    );
    tokio::time::sleep(Duration::from_secs(25)).await;
    shutdown.trigger();
    task.await.expect("task");
    assert_eq!(secs(&times), [0, 10, 20]);
}

#[tokio::test(start_paused = true)]
async fn jitter_adds_at_most_its_bound_to_each_pause() {
    let cadence = Periodic::every("test", Duration::from_secs(10)).jitter(Duration::from_secs(2));
    let pauses: Vec<Duration> = (0..200).map(|_| cadence.pause()).collect();
    assert!(
        pauses
            .iter()
            .all(|p| *p >= Duration::from_secs(10) && *p <= Duration::from_secs(12)),
        "{pauses:?}"
    );
    assert!(pauses.iter().any(|p| *p != pauses[0]), "jittered");
    let plain = Periodic::every("test", Duration::from_secs(10));
    assert_eq!(plain.pause(), Duration::from_secs(10));

    let shutdown = Shutdown::new();
    let (times, task) = spawn(cadence, &shutdown, |_| Ok(Next::Pause));
    tokio::time::sleep(Duration::from_secs(100)).await;
    shutdown.trigger();
    task.await.expect("task");
    let times = times.lock().expect("times").clone();
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_secs(10) && gap <= Duration::from_secs(12),
            "{gap:?}"
        );
    }
    assert!(times.len() >= 8, "{times:?}");
}

#[test]
fn a_spell_of_failures_is_reported_once_with_its_length() {
    let mut spell = Spell::default();
    assert_eq!(spell.ended(), None, "nothing failed");
    assert!(spell.failed(), "the first failure is the one logged");
    assert!(!spell.failed());
    assert!(!spell.failed());
    assert_eq!(spell.ended(), Some(3));
    assert_eq!(spell.ended(), None, "reported once");
    assert!(spell.failed(), "a new spell is logged again");
}
