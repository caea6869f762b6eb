//! The resync bucket (`--max-resyncs-per-second`): resyncs of converged CRs pass a token
//! bucket before the run budget, one at a time in arrival order, so that CRs that came due together
//! start spread out; urgent work never waits on it.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::Quota;

use crate::rate;
use crate::run::Priority;

/// The resync bucket; `None` inside when resyncs are not limited.
#[derive(Debug)]
pub struct Pacer {
    bucket: Option<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: rate::Bucket,
    /// Waiting resyncs take turns (tokio's mutex is fair), so none is overtaken for ever.
    queue: tokio::sync::Mutex<()>,
}

impl Pacer {
    /// At most `per_second` resyncs start per second (0, or not a positive number: no limit), with
    /// no burst beyond one.
    pub fn new(per_second: f64) -> Self {
        let quota = (per_second.is_finite() && per_second > 0.0)
            .then(|| Quota::with_period(Duration::from_secs_f64(1.0 / per_second)))
            .flatten()
            .map(|quota| quota.allow_burst(NonZeroU32::MIN));
        let bucket = quota
            .map(|quota| Bucket { tokens: rate::Bucket::new(quota), queue: tokio::sync::Mutex::new(()) });
        Pacer { bucket }
    }

    /// Waits for a token when `priority` is a resync (urgent work passes at once). `waiting` is
    /// called only when the resync must wait, and what it returns is held while it does (a gauge
    /// guard).
    pub async fn pass<G>(&self, priority: Priority, waiting: impl FnOnce() -> G) {
        let Some(bucket) = &self.bucket else { return };
        if priority == Priority::Urgent {
            return;
        }
        if let Ok(_turn) = bucket.queue.try_lock()
            && bucket.tokens.take().is_zero()
        {
            return;
        }
        let _waiting = waiting();
        let _turn = bucket.queue.lock().await;
        loop {
            let wait = bucket.tokens.take();
            if wait.is_zero() {
                break;
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::time::Instant;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn resyncs_pass_at_the_rate_while_urgent_work_passes_at_once() {
        let pacer = Arc::new(Pacer::new(1.0));
        let waiting = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let resyncs: Vec<_> = (0..5)
            .map(|_| {
                let (pacer, waiting) = (pacer.clone(), waiting.clone());
                tokio::spawn(async move {
                    pacer.pass(Priority::Resync, || waiting.fetch_add(1, Ordering::SeqCst)).await;
                    start.elapsed()
                })
            })
            .collect();
        tokio::task::yield_now().await;
        pacer.pass(Priority::Urgent, || panic!("urgent work never waits")).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "the urgent pass did not wait behind the resyncs");
        let mut passed = Vec::new();
        for resync in resyncs {
            passed.push(resync.await.unwrap());
        }
        passed.sort();
        let seconds: Vec<u64> = passed.iter().map(|d| d.as_millis().div_ceil(1000) as u64).collect();
        assert_eq!(seconds, [0, 1, 2, 3, 4], "{passed:?}");
        assert_eq!(waiting.load(Ordering::SeqCst), 4, "the first took the bucket's token at once");
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_never_waits() {
        let pacer = Pacer::new(0.0);
        let start = Instant::now();
        for _ in 0..100 {
            pacer.pass(Priority::Resync, || panic!("no limit, no wait")).await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
