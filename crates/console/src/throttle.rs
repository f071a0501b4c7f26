//! What a login may cost the console: the throttle on failed logins per
//! account and per address, and the console-wide bound on password checks
//! running at once.
//!
//! - **Throttle**: at most [`MAX_FAILURES`] attempts within [`WINDOW`] for
//!   one account, or from one address, that did not log in. An attempt is
//!   counted the moment it is let through — before its password is checked,
//!   in the same step as the check of the count — so concurrent attempts
//!   cannot all slip past; a successful login takes its own attempt back
//!   (and clears its account's failures). Further attempts are refused
//!   (429 with `Retry-After`) until the oldest counted one leaves the window,
//!   whatever the password.
//! - **Concurrency**: a password check is an argon2 hash (about 19 MiB and
//!   tens of milliseconds); at most [`MAX_CHECKS`] run at once across the
//!   console. A login that finds them all taken is refused at once (503
//!   with `Retry-After: `[`BUSY_RETRY`]) rather than queued; its attempt
//!   still counts toward the throttle.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Attempts allowed within [`WINDOW`] per account and per address.
pub const MAX_FAILURES: usize = 5;
/// How long an attempt counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Password checks running at once, console-wide, at most.
pub const MAX_CHECKS: usize = 4;
/// How long a login refused because every check was taken is asked to wait.
pub const BUSY_RETRY: Duration = Duration::from_secs(2);
/// Never track more keys than this (the stalest are forgotten first).
const MAX_KEYS: usize = 100_000;

/// Counted attempts per key (`user:NAME`, `addr:IP`).
#[derive(Default)]
pub struct Throttle {
    attempts: Mutex<HashMap<String, VecDeque<Instant>>>,
}

/// One attempt let through by [`Throttle::attempt`]: counted for each of
/// its keys until [`Throttle::forgive`] takes it back.
#[derive(Debug)]
pub struct Attempt {
    keys: Vec<String>,
    at: Instant,
}

impl Throttle {
    /// Lets one login attempt for `keys` through and counts it for each of
    /// them now; or, if any of them is locked out, counts nothing and says
    /// how long to wait. The check and the count are one step, so of many
    /// concurrent attempts only the allowance gets through.
    pub fn attempt(&self, keys: &[String]) -> Result<Attempt, Duration> {
        let now = Instant::now();
        let mut map = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let wait = keys
            .iter()
            .filter_map(|k| {
                let times = map.get_mut(k)?;
                expire(times, now);
                if times.len() < MAX_FAILURES {
                    return None;
                }
                let oldest = times.front().copied()?;
                Some(WINDOW.saturating_sub(now.duration_since(oldest)))
            })
            .max();
        if let Some(wait) = wait {
            return Err(wait);
        }
        for key in keys {
            if map.len() >= MAX_KEYS && !map.contains_key(key) {
                map.retain(|_, t| t.back().is_some_and(|t| now.duration_since(*t) < WINDOW));
            }
            let times = map.entry(key.clone()).or_default();
            times.push_back(now);
            while times.len() > MAX_FAILURES {
                times.pop_front();
            }
        }
        Ok(Attempt {
            keys: keys.to_vec(),
            at: now,
        })
    }

    /// Takes `attempt` back from each of its keys (it logged in).
    pub fn forgive(&self, attempt: Attempt) {
        let mut map = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        for key in &attempt.keys {
            let Some(times) = map.get_mut(key) else {
                continue;
            };
            if let Some(i) = times.iter().position(|t| *t == attempt.at) {
                times.remove(i);
            }
            if times.is_empty() {
                map.remove(key);
            }
        }
    }

    /// Forgets every attempt counted for `key` (its account logged in).
    pub fn clear(&self, key: &str) {
        let mut map = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(key);
    }
}

/// Drops the attempts that left the window.
fn expire(times: &mut VecDeque<Instant>, now: Instant) {
    while times
        .front()
        .is_some_and(|t| now.duration_since(*t) >= WINDOW)
    {
        times.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_sixth_attempt_within_the_window_is_refused() {
        let t = Throttle::default();
        let ana = keys(&["user:ana"]);
        for _ in 0..MAX_FAILURES {
            assert!(t.attempt(&ana).is_ok());
        }
        let wait = t.attempt(&ana).expect_err("locked out");
        assert!(wait > Duration::from_secs(14 * 60) && wait <= WINDOW);
        assert!(t.attempt(&keys(&["user:bob"])).is_ok());
        t.clear("user:ana");
        assert!(t.attempt(&ana).is_ok());
    }

    #[test]
    fn a_refused_attempt_counts_for_none_of_its_keys() {
        let t = Throttle::default();
        for _ in 0..MAX_FAILURES {
            assert!(t.attempt(&keys(&["user:ana"])).is_ok());
        }
        // Locked by the account: the address is not charged for it.
        assert!(t.attempt(&keys(&["user:ana", "addr:10.0.0.1"])).is_err());
        for _ in 0..MAX_FAILURES {
            assert!(t.attempt(&keys(&["addr:10.0.0.1"])).is_ok());
        }
    }

    #[test]
    fn a_successful_login_takes_its_attempt_back() {
        let t = Throttle::default();
        let both = keys(&["user:ana", "addr:10.0.0.1"]);
        for _ in 0..MAX_FAILURES - 1 {
            assert!(t.attempt(&both).is_ok());
        }
        let ok = t.attempt(&both).expect("the fifth attempt");
        t.forgive(ok);
        // The address has one attempt left; the account too.
        let last = t.attempt(&both).expect("room for one more");
        assert!(t.attempt(&both).is_err());
        t.forgive(last);
        assert!(t.attempt(&keys(&["addr:10.0.0.1"])).is_ok());
    }

    #[test]
    fn concurrent_attempts_get_through_only_the_allowance() {
        let t = std::sync::Arc::new(Throttle::default());
        let threads: Vec<_> = (0..24)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || t.attempt(&keys(&["user:ana", "addr:10.0.0.1"])).is_ok())
            })
            .collect();
        let through = threads
            .into_iter()
            .map(|h| h.join().unwrap_or(false))
            .filter(|through| *through)
            .count();
        assert_eq!(through, MAX_FAILURES);
    }
}
