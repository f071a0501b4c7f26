//! Login throttling: after [`MAX_FAILURES`] failed logins within
//! [`WINDOW`] for one account, or from one address, further attempts for it
//! are refused (429 with `Retry-After`) until the oldest failure leaves the
//! window — before the password is even checked.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures allowed within [`WINDOW`].
pub const MAX_FAILURES: usize = 5;
/// How long a failure counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Never track more keys than this (the stalest are forgotten first).
const MAX_KEYS: usize = 100_000;

/// Failed logins per key (`user:NAME`, `addr:IP`).
#[derive(Default)]
pub struct Throttle {
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Throttle {
    /// How long `key` must wait, if it is locked out now.
    pub fn retry_after(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let times = map.get_mut(key)?;
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= WINDOW)
        {
            times.pop_front();
        }
        if times.len() < MAX_FAILURES {
            return None;
        }
        let oldest = times.front().copied()?;
        Some(WINDOW.saturating_sub(now.duration_since(oldest)))
    }

    /// Counts a failed login for `key`.
    pub fn fail(&self, key: &str) {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_KEYS && !map.contains_key(key) {
            map.retain(|_, t| t.back().is_some_and(|t| now.duration_since(*t) < WINDOW));
        }
        let times = map.entry(key.to_owned()).or_default();
        times.push_back(now);
        while times.len() > MAX_FAILURES {
            times.pop_front();
        }
    }

    /// Forgets `key`'s failures (a successful login of that account).
    pub fn clear(&self, key: &str) {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fifth_failure_locks_the_key_out() {
        let t = Throttle::default();
        for _ in 0..MAX_FAILURES - 1 {
            t.fail("user:ana");
        }
        assert_eq!(t.retry_after("user:ana"), None);
        t.fail("user:ana");
        let wait = t.retry_after("user:ana").expect("locked out");
        assert!(wait > Duration::from_secs(14 * 60) && wait <= WINDOW);
        assert_eq!(t.retry_after("user:bob"), None);
        t.clear("user:ana");
        assert_eq!(t.retry_after("user:ana"), None);
    }
}
