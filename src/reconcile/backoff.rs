//! Requeue delays after failures, as controller-runtime's default rate limiter: the longer of a
//! per-CR exponential backoff (5 ms doubling up to 1000 s, reset by a success) and a token bucket
//! shared by every CR of the watch (10 retries a second, bursts of 100), so many failing CRs
//! cannot retry faster than that together.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BASE: Duration = Duration::from_millis(5);
const MAX: Duration = Duration::from_secs(1000);
/// Retries a second the bucket refills with.
const RATE: f64 = 10.0;
/// Retries the bucket holds.
const BURST: f64 = 100.0;

/// The delay before retry number `failures` (1 for the first failure).
pub fn delay(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    BASE.saturating_mul(1u32 << exponent).min(MAX)
}

/// A token bucket that hands out reservations: a retry takes a token, and waits for it when the
/// bucket is empty (tokens go below zero, as golang.org/x/time/rate's reservations do).
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(now: Instant) -> Self {
        Bucket { tokens: BURST, at: now }
    }

    /// Takes a token at `now`; returns how long until it is there.
    fn reserve(&mut self, now: Instant) -> Duration {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * RATE;
        self.tokens = (self.tokens + refill).min(BURST) - 1.0;
        self.at = self.at.max(now);
        if self.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-self.tokens / RATE) }
    }
}

/// Failure counts per CR key, and the retry bucket of the watch.
#[derive(Debug)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
    bucket: Mutex<Bucket>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { failures: Mutex::default(), bucket: Mutex::new(Bucket::full(Instant::now())) }
    }
}

impl Backoff {
    /// Records a failure and returns how long to wait before the retry.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = failures.entry(key.to_string()).or_default();
        *count = count.saturating_add(1);
        let own = delay(*count);
        let shared =
            self.bucket.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).reserve(Instant::now());
        own.max(shared)
    }

    /// Failures of the CR since its last success.
    pub fn count(&self, key: &str) -> u32 {
        self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(key).copied().unwrap_or(0)
    }

    /// Forgets the CR's failures after a success (or its deletion).
    pub fn reset(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_from_five_milliseconds_up_to_a_thousand_seconds() {
        assert_eq!(delay(1), Duration::from_millis(5));
        assert_eq!(delay(2), Duration::from_millis(10));
        assert_eq!(delay(11), Duration::from_millis(5120));
        assert_eq!(delay(30), MAX);
        assert_eq!(delay(u32::MAX), MAX);
    }

    #[test]
    fn success_resets_the_count() {
        let backoff = Backoff::default();
        backoff.failed("ns/a");
        assert_eq!(backoff.failed("ns/a"), Duration::from_millis(10));
        assert_eq!(backoff.failed("ns/b"), Duration::from_millis(5));
        backoff.reset("ns/a");
        assert_eq!(backoff.failed("ns/a"), Duration::from_millis(5));
    }

    #[test]
    fn the_bucket_lets_a_burst_of_100_through_then_10_a_second() {
        let start = Instant::now();
        let mut bucket = Bucket::full(start);
        for _ in 0..100 {
            assert_eq!(bucket.reserve(start), Duration::ZERO);
        }
        assert_eq!(bucket.reserve(start), Duration::from_millis(100), "the 101st waits for a token");
        assert_eq!(bucket.reserve(start), Duration::from_millis(200), "and the next for the one after");
        let later = start + Duration::from_millis(100);
        assert_eq!(bucket.reserve(later), Duration::from_millis(200), "1 token came back, 3 were owed");
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..100 {
            assert_eq!(bucket.reserve(much_later), Duration::ZERO, "refilled to the burst, no more");
        }
        assert!(bucket.reserve(much_later) > Duration::ZERO);
    }

    #[test]
    fn many_failing_crs_wait_for_the_bucket_beyond_their_own_backoff() {
        let backoff = Backoff::default();
        let delays: Vec<Duration> = (0..200).map(|i| backoff.failed(&format!("ns/cr-{i}"))).collect();
        assert!(delays[..100].iter().all(|d| *d < Duration::from_millis(50)), "the burst goes at once");
        assert!(delays[150] > Duration::from_secs(4), "the 151st retry waits ~5 s: {:?}", delays[150]);
        assert!(delays[199] > Duration::from_secs(9), "the 200th waits ~10 s: {:?}", delays[199]);
    }
}
