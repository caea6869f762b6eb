//! The executors' metrics: runs by the executor that ran them, warm runs that fell back to cold,
//! and the warm worker's restarts and memory.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::family::{Labels, counter_family};
use crate::executor_mode::Executor;

pub(super) const EXECUTOR_RUNS: &str = "ansible_operator_executor_runs_total";
pub(super) const EXECUTOR_FALLBACKS: &str = "ansible_operator_executor_fallbacks_total";
pub(super) const EXECUTOR_WORKER_RESTARTS: &str = "ansible_operator_executor_worker_restarts_total";
pub(super) const EXECUTOR_WORKER_RSS: &str = "ansible_operator_executor_worker_resident_memory_bytes";

/// The executors' families, registered once.
#[derive(Debug, Clone)]
pub struct ExecutorMetrics {
    runs: Family<Labels<1>, Counter>,
    fallbacks: Family<Labels<1>, Counter>,
    worker_restarts: Counter,
    worker_rss: Gauge,
}

impl ExecutorMetrics {
    /// Registers the group's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let executor = ExecutorMetrics {
            runs: Family::default(),
            fallbacks: Family::default(),
            worker_restarts: Counter::default(),
            worker_rss: Gauge::default(),
        };
        registry.register(
            counter_family(EXECUTOR_RUNS),
            "Playbook runs by the executor that ran them (warm: forked from the worker; cold: a new ansible-runner, or a warm run that fell back)",
            executor.runs.clone(),
        );
        registry.register(
            counter_family(EXECUTOR_FALLBACKS),
            "Runs asked to be warm that ran cold, by reason",
            executor.fallbacks.clone(),
        );
        registry.register(
            counter_family(EXECUTOR_WORKER_RESTARTS),
            "Times the warm Ansible worker ended and was started again",
            executor.worker_restarts.clone(),
        );
        registry.register(
            EXECUTOR_WORKER_RSS,
            "Resident memory of the warm Ansible worker",
            executor.worker_rss.clone(),
        );
        executor
    }

    /// Counts a playbook run by the executor that ran it.
    pub fn run(&self, executor: Executor) {
        self.runs.get_or_create(&[("executor", executor.as_str().to_string())]).inc();
    }

    /// Counts a run asked to be warm that ran cold, by `reason` (a short, fixed label).
    pub fn fallback(&self, reason: &'static str) {
        self.fallbacks.get_or_create(&[("reason", reason.to_string())]).inc();
    }

    /// Counts a restart of the warm worker.
    pub fn worker_restarted(&self) {
        self.worker_restarts.inc();
    }

    /// Sets the warm worker's resident memory.
    pub fn worker_rss(&self, bytes: u64) {
        self.worker_rss.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}
