//! Token buckets: how ingest holds a source to its rate (`[ingest.rate_limit]`,
//! answered 429 beyond it) and a tenant to its share of the main lane
//! (`[ingest.fairness]`), and how a replay is paced per tenant. Pure
//! arithmetic over the instants the caller passes, so it is tested without
//! a clock; [`Buckets`] keeps one bucket per key behind one short lock,
//! and holds only the keys its caller gives it (ingest gives known source
//! and tenant names only, so its memory is bounded by the sources served).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A sustained rate and the burst allowed above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Tokens added per second (at least 1).
    pub per_second: u32,
    /// The most tokens a bucket holds (at least 1): how many may come at
    /// once after a quiet spell.
    pub burst: u32,
}

impl Rate {
    /// `per_second` and `burst`, each at least 1.
    pub fn new(per_second: u32, burst: u32) -> Rate {
        Rate {
            per_second: per_second.max(1),
            burst: burst.max(1),
        }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/s (burst {})", self.per_second, self.burst)
    }
}

/// A rate as an operator sets it: webhooks per second (0: no limit) and
/// the burst (0: twice the rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// No limit.
    Off,
    At(Rate),
}

impl Limit {
    /// `per_second` 0 is no limit; `burst` 0 is twice the rate.
    pub fn from_setting(per_second: u32, burst: u32) -> Limit {
        if per_second == 0 {
            return Limit::Off;
        }
        let burst = if burst == 0 {
            per_second.saturating_mul(2)
        } else {
            burst
        };
        Limit::At(Rate::new(per_second, burst))
    }

    /// The rate, `None` for no limit.
    pub fn rate(self) -> Option<Rate> {
        match self {
            Limit::Off => None,
            Limit::At(rate) => Some(rate),
        }
    }
}

/// One key's tokens.
#[derive(Debug, Clone)]
pub struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(rate.burst),
            at: now,
        }
    }

    /// Takes one token at `now`, or says how long until one is there.
    pub fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        let per_second = f64::from(rate.per_second);
        self.tokens = (self.tokens + elapsed * per_second).min(f64::from(rate.burst));
        self.at = now.max(self.at);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / per_second))
        }
    }
}

/// One bucket per key, made full on the key's first take.
#[derive(Debug)]
pub struct Buckets<K> {
    by_key: Mutex<HashMap<K, Bucket>>,
}

impl<K: Eq + Hash + Clone> Default for Buckets<K> {
    fn default() -> Self {
        Buckets {
            by_key: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone> Buckets<K> {
    /// Takes one token of `key`'s bucket at `rate`.
    pub fn take<Q>(&self, key: &Q, rate: Rate, now: Instant) -> Result<(), Duration>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ToOwned<Owned = K> + ?Sized,
    {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(bucket) = by_key.get_mut(key) {
            return bucket.take(rate, now);
        }
        let mut bucket = Bucket::full(rate, now);
        let taken = bucket.take(rate, now);
        by_key.insert(key.to_owned(), bucket);
        taken
    }

    /// How many keys have a bucket.
    pub fn len(&self) -> usize {
        self.by_key.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no key has a bucket.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
