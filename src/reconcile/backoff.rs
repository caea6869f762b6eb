//! Requeue delays after failures: per-CR exponential backoff as controller-runtime's default
//! (5 ms doubling up to 1000 s), reset by a success.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

const BASE: Duration = Duration::from_millis(5);
const MAX: Duration = Duration::from_secs(1000);

/// The delay before retry number `failures` (1 for the first failure).
pub fn delay(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    BASE.saturating_mul(1u32 << exponent).min(MAX)
}

/// Failure counts per CR key.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Records a failure and returns how long to wait before the retry.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = failures.entry(key.to_string()).or_default();
        *count = count.saturating_add(1);
        delay(*count)
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
}
