//! The ansible-runner processes running now, so a shutdown can end them as a whole.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use super::process::ProcessTree;

/// Root PIDs of the runs in flight.
#[derive(Debug, Default)]
pub struct ActiveRuns {
    roots: Mutex<HashSet<u32>>,
}

impl ActiveRuns {
    /// Records a started run.
    pub fn add(&self, pid: u32) {
        self.lock().insert(pid);
    }

    /// Forgets a finished run.
    pub fn remove(&self, pid: u32) {
        self.lock().remove(&pid);
    }

    /// How many runs are in flight.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no run is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SIGTERM to every run's process tree, SIGKILL to what is left after `grace`.
    pub async fn terminate_all(&self, grace: Duration) {
        let roots: Vec<u32> = self.lock().iter().copied().collect();
        if roots.is_empty() {
            return;
        }
        tracing::warn!(runs = roots.len(), grace = ?grace, "terminating the runs still in flight");
        let trees: Vec<ProcessTree> = roots.into_iter().map(ProcessTree::new).collect();
        futures::future::join_all(trees.iter().map(|tree| tree.terminate(grace))).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.roots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
