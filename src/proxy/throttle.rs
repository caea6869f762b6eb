//! Rate limits on what runs send to the API server (kubernetes.core#36: "stop a rogue playbook
//! bringing down the API server"). Each request through the proxy takes a token from its run's
//! bucket (`--proxy-qps-per-run`, `--proxy-burst-per-run`), then from the operator's
//! (`--proxy-qps`, `--proxy-burst`). A request without a token waits for one, as client-go's own
//! limiter makes its callers wait; one that would wait longer than `--proxy-max-wait` is answered
//! `429 Too Many Requests` with `Retry-After`, which the Kubernetes Python client retries for the
//! methods it may repeat.

use std::num::NonZeroU32;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use governor::Quota;
use http::{HeaderValue, Response, StatusCode, header};
use tokio::time::Instant;

use super::wire::{Body, status};
use crate::metrics::Metrics;
use crate::rate::Bucket;

/// A rate from the flags: requests per second and the burst above it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests per second; 0: no limit.
    pub per_second: f64,
    /// Requests that may go at once after a quiet spell; 0: the rate, rounded up.
    pub burst: u32,
}

impl Rate {
    /// No limit.
    pub const UNLIMITED: Rate = Rate { per_second: 0.0, burst: 0 };

    fn quota(self) -> Option<Quota> {
        if !(self.per_second.is_finite() && self.per_second > 0.0) {
            return None;
        }
        let burst = match self.burst {
            // The rate is finite and positive; a rate above u32::MAX saturates.
            0 => self.per_second.ceil().min(f64::from(u32::MAX)) as u32,
            burst => burst,
        };
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        Quota::with_period(Duration::from_secs_f64(1.0 / self.per_second))
            .map(|quota| quota.allow_burst(burst))
    }
}

/// A run's own bucket, made on its first request.
pub type RunBucket = OnceLock<Bucket>;

/// Which limit held a request back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The run's own rate.
    Run,
    /// The operator's rate, shared by every run.
    Operator,
}

impl Limit {
    /// The metric's label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Run => "run",
            Limit::Operator => "operator",
        }
    }
}

/// A request refused: its token would come later than `--proxy-max-wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The limit that refused it.
    pub limit: Limit,
    /// When a token will be there.
    pub retry_after: Duration,
}

impl Refused {
    /// `429 Too Many Requests` as the API server sends it: a `Status` with reason `TooManyRequests`,
    /// and `Retry-After` in whole seconds (at least 1).
    pub fn response(&self) -> Response<Body> {
        let seconds =
            self.retry_after.as_secs().saturating_add(u64::from(self.retry_after.subsec_nanos() > 0));
        let seconds = seconds.max(1);
        let message = format!(
            "too many requests: the {} rate limit of the operator's proxy is reached, retry after {seconds}s",
            self.limit.as_str()
        );
        let mut response = status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", &message);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        response
    }
}

/// The proxy's rate limits.
#[derive(Debug)]
pub struct Throttle {
    per_run: Option<Quota>,
    operator: Option<Bucket>,
    /// Requests waiting for the operator's bucket take turns (tokio's mutex is fair), so none is
    /// overtaken until its wait runs out.
    turn: tokio::sync::Mutex<()>,
    max_wait: Duration,
    metrics: Option<Arc<Metrics>>,
}

impl Throttle {
    /// The limits; `metrics` counts the requests held back.
    pub fn new(per_run: Rate, operator: Rate, max_wait: Duration, metrics: Option<Arc<Metrics>>) -> Self {
        Throttle {
            per_run: per_run.quota(),
            operator: operator.quota().map(Bucket::new),
            turn: tokio::sync::Mutex::new(()),
            max_wait,
            metrics,
        }
    }

    /// No limits.
    pub fn unlimited() -> Self {
        Throttle::new(Rate::UNLIMITED, Rate::UNLIMITED, Duration::ZERO, None)
    }

    /// Takes a token of the run's bucket (`run`, made on first use), then of the operator's, waiting
    /// for them at most `--proxy-max-wait` in all.
    pub async fn admit(&self, run: &RunBucket) -> Result<(), Refused> {
        let deadline = Instant::now() + self.max_wait;
        let mut delayed = None;
        if let Some(quota) = self.per_run {
            let bucket = run.get_or_init(|| Bucket::new(quota));
            self.take(bucket, Limit::Run, deadline, &mut delayed).await?;
        }
        if let Some(bucket) = &self.operator {
            let Ok(_turn) = tokio::time::timeout_at(deadline, self.turn.lock()).await else {
                self.count(Limit::Operator, "refused");
                return Err(Refused { limit: Limit::Operator, retry_after: Duration::from_secs(1) });
            };
            self.take(bucket, Limit::Operator, deadline, &mut delayed).await?;
        }
        if let Some(limit) = delayed {
            self.count(limit, "delayed");
        }
        Ok(())
    }

    async fn take(
        &self,
        bucket: &Bucket,
        limit: Limit,
        deadline: Instant,
        delayed: &mut Option<Limit>,
    ) -> Result<(), Refused> {
        loop {
            let wait = bucket.take();
            if wait.is_zero() {
                return Ok(());
            }
            if Instant::now() + wait > deadline {
                self.count(limit, "refused");
                return Err(Refused { limit, retry_after: wait });
            }
            delayed.get_or_insert(limit);
            tokio::time::sleep(wait).await;
        }
    }

    fn count(&self, limit: Limit, outcome: &'static str) {
        if let Some(metrics) = &self.metrics {
            metrics.proxy_throttled(limit.as_str(), outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle(per_run: Rate, operator: Rate, max_wait: Duration) -> Throttle {
        Throttle::new(per_run, operator, max_wait, None)
    }

    const TWO_PER_SECOND: Rate = Rate { per_second: 2.0, burst: 0 };

    #[tokio::test(start_paused = true)]
    async fn a_run_gets_its_burst_at_once_then_waits_at_its_rate() {
        let throttle = throttle(TWO_PER_SECOND, Rate::UNLIMITED, Duration::from_secs(10));
        let run = RunBucket::new();
        let start = Instant::now();
        let mut passed = Vec::new();
        for _ in 0..6 {
            throttle.admit(&run).await.unwrap();
            passed.push(start.elapsed().as_millis());
        }
        assert_eq!(passed, [0, 0, 500, 1000, 1500, 2000], "a burst of 2, then one every 500ms");
    }

    #[tokio::test(start_paused = true)]
    async fn each_run_has_its_own_bucket_and_all_share_the_operators() {
        let throttle =
            throttle(Rate { per_second: 1.0, burst: 1 }, Rate { per_second: 1.0, burst: 3 }, Duration::ZERO);
        let (a, b) = (RunBucket::new(), RunBucket::new());
        assert_eq!(throttle.admit(&a).await, Ok(()));
        assert_eq!(throttle.admit(&a).await.map_err(|r| r.limit), Err(Limit::Run), "a's own limit");
        assert_eq!(throttle.admit(&b).await, Ok(()), "b is not held back by a's bucket");
        let c = RunBucket::new();
        assert_eq!(throttle.admit(&c).await, Ok(()));
        assert_eq!(throttle.admit(&RunBucket::new()).await.map_err(|r| r.limit), Err(Limit::Operator));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_beyond_the_max_is_refused_with_when_to_retry() {
        let throttle = throttle(Rate { per_second: 0.5, burst: 1 }, Rate::UNLIMITED, Duration::from_secs(1));
        let run = RunBucket::new();
        throttle.admit(&run).await.unwrap();
        let refused = throttle.admit(&run).await.expect_err("the next token is 2s away");
        assert_eq!(refused, Refused { limit: Limit::Run, retry_after: Duration::from_secs(2) });
        let response = refused.response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        tokio::time::advance(Duration::from_millis(1500)).await;
        let start = Instant::now();
        throttle.admit(&run).await.expect("within the max wait now");
        assert_eq!(start.elapsed(), Duration::from_millis(500), "it waited for the token");
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let refused = |millis| Refused { limit: Limit::Operator, retry_after: Duration::from_millis(millis) };
        for (millis, seconds) in [(1, "1"), (999, "1"), (1000, "1"), (1001, "2"), (0, "1")] {
            assert_eq!(refused(millis).response().headers()[header::RETRY_AFTER], seconds, "{millis}ms");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn no_limits_never_wait() {
        let throttle = Throttle::unlimited();
        let run = RunBucket::new();
        for _ in 0..1000 {
            throttle.admit(&run).await.unwrap();
        }
        assert!(run.get().is_none(), "no bucket is made without a limit");
    }
}
