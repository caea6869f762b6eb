//! Run slots with two lanes: new CRs and spec changes are served before resyncs of converged CRs.
//! One budget per process is `--max-concurrent-runs` (at most N ansible-runner processes across all
//! kinds; upstream caps only per kind, operator-sdk#3585); one per watch entry is its
//! `maxConcurrentReconciles`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Who goes first when the budget is exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// A new CR, a spec change, a failure retry or a finalizer.
    Urgent,
    /// A CR already converged at its generation: periodic resync or a dependent change.
    Resync,
}

#[derive(Debug, Default)]
struct State {
    in_use: usize,
    urgent: VecDeque<oneshot::Sender<()>>,
    resync: VecDeque<oneshot::Sender<()>>,
}

/// A counting semaphore with two priority classes. `None` limit means unlimited.
#[derive(Debug)]
pub struct Budget {
    limit: Option<usize>,
    state: Mutex<State>,
}

/// A slot in the budget, given back when dropped.
#[derive(Debug)]
pub struct Permit {
    budget: Option<Arc<Budget>>,
}

impl Budget {
    /// A budget of `limit` concurrent runs (0 = unlimited).
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { limit: (limit > 0).then_some(limit), state: Mutex::default() })
    }

    /// Waits for a slot. Urgent waiters are served before resync waiters, each in arrival order.
    pub async fn acquire(self: &Arc<Self>, priority: Priority) -> Permit {
        let Some(limit) = self.limit else { return Permit { budget: None } };
        let receiver = {
            let mut state = self.lock();
            if state.in_use < limit && state.urgent.is_empty() && state.resync.is_empty() {
                state.in_use += 1;
                return Permit { budget: Some(self.clone()) };
            }
            let (sender, receiver) = oneshot::channel();
            match priority {
                Priority::Urgent => state.urgent.push_back(sender),
                Priority::Resync => state.resync.push_back(sender),
            }
            receiver
        };
        // The releaser hands its slot over by sending; `in_use` stays counted for us.
        let _ = receiver.await;
        Permit { budget: Some(self.clone()) }
    }

    /// Slots in use now.
    pub fn in_use(&self) -> usize {
        self.lock().in_use
    }

    fn release(&self) {
        let mut state = self.lock();
        loop {
            let next = state.urgent.pop_front().or_else(|| state.resync.pop_front());
            match next {
                // Hand the slot over; a waiter that gave up (dropped) is skipped.
                Some(waiter) => {
                    if waiter.send(()).is_ok() {
                        return;
                    }
                }
                None => {
                    state.in_use -= 1;
                    return;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(budget) = self.budget.take() {
            budget.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn unlimited_budget_never_waits() {
        let budget = Budget::new(0);
        let permits: Vec<Permit> =
            futures::future::join_all((0..100).map(|_| budget.acquire(Priority::Resync))).await;
        assert_eq!(permits.len(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn never_more_than_the_limit_run_at_once() {
        let budget = Budget::new(2);
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks = (0..10).map(|_| {
            let (budget, running, peak) = (budget.clone(), running.clone(), peak.clone());
            tokio::spawn(async move {
                let _permit = budget.acquire(Priority::Urgent).await;
                let now = running.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                peak.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            })
        });
        futures::future::join_all(tasks).await;
        assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn urgent_waiters_go_before_resyncs_that_came_first() {
        let budget = Budget::new(1);
        let held = budget.acquire(Priority::Urgent).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (label, priority) in
            [("resync-1", Priority::Resync), ("resync-2", Priority::Resync), ("urgent", Priority::Urgent)]
        {
            let (budget, order) = (budget.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = budget.acquire(priority).await;
                order.lock().unwrap().push(label);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(held);
        futures::future::join_all(tasks).await;
        assert_eq!(*order.lock().unwrap(), ["urgent", "resync-1", "resync-2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_does_not_leak_a_slot() {
        let budget = Budget::new(1);
        let held = budget.acquire(Priority::Urgent).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(5), budget.acquire(Priority::Urgent)).await;
        assert!(gave_up.is_err());
        drop(held);
        assert_eq!(budget.in_use(), 0);
        let _again = budget.acquire(Priority::Resync).await;
        assert_eq!(budget.in_use(), 1);
    }
}
