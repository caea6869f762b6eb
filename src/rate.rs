//! Token buckets on tokio's clock: governor's GCRA limiter, timed by tokio so that waits follow
//! tokio's time (and tests' paused time). Used by the resync pacer and the proxy's throttle.

use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// One token bucket.
#[derive(Debug)]
pub struct Bucket {
    limiter: RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>,
    clock: TokioClock,
}

impl Bucket {
    /// A full bucket for `quota`.
    pub fn new(quota: Quota) -> Self {
        let clock = TokioClock(tokio::time::Instant::now());
        Bucket { limiter: RateLimiter::direct_with_clock(quota, clock.clone()), clock }
    }

    /// Takes a token if there is one (zero); else how long until there is one, taking nothing.
    pub fn take(&self) -> Duration {
        match self.limiter.check() {
            Ok(()) => Duration::ZERO,
            Err(not_until) => not_until.wait_time_from(self.clock.now()),
        }
    }
}

/// Tokio's clock, as time since the bucket was made.
#[derive(Debug, Clone)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}
