//! The run budget's metrics: ansible-runner processes running now, and reconciles waiting for
//! the budget, each held up by a drop guard.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub(super) const RUNS_IN_FLIGHT: &str = "ansible_operator_runs_in_flight";
pub(super) const RUNS_WAITING: &str = "ansible_operator_runs_waiting";
pub(super) const RESYNCS_WAITING: &str = "ansible_operator_resyncs_waiting";
pub(super) const RUNS_WAITING_FOR_MEMORY: &str = "ansible_operator_runs_waiting_for_memory";

/// The run budget's gauges, registered once.
#[derive(Debug, Clone)]
pub struct RunMetrics {
    in_flight: Gauge,
    waiting: Gauge,
    resyncs_waiting: Gauge,
    memory_waiting: Gauge,
}

impl RunMetrics {
    /// Registers the group's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let runs = RunMetrics {
            in_flight: Gauge::default(),
            waiting: Gauge::default(),
            resyncs_waiting: Gauge::default(),
            memory_waiting: Gauge::default(),
        };
        registry.register(
            RUNS_IN_FLIGHT,
            "Number of ansible-runner processes running now",
            runs.in_flight.clone(),
        );
        registry.register(
            RUNS_WAITING,
            "Number of reconciles waiting for the global ansible-runner budget",
            runs.waiting.clone(),
        );
        registry.register(
            RESYNCS_WAITING,
            "Number of resyncs held by the resync rate limit (--max-resyncs-per-second)",
            runs.resyncs_waiting.clone(),
        );
        registry.register(
            RUNS_WAITING_FOR_MEMORY,
            "Number of reconciles held by the memory guard: their run would take the operator's cgroup \
             past --memory-high-water",
            runs.memory_waiting.clone(),
        );
        runs
    }

    /// Counts one running ansible-runner process until the guard is dropped.
    pub fn started(&self) -> RunGuard {
        GaugeGuard::new(self.in_flight.clone())
    }

    /// Counts one reconcile waiting for the global run budget until the guard is dropped.
    pub fn waiting(&self) -> WaitGuard {
        GaugeGuard::new(self.waiting.clone())
    }

    /// Counts one resync held by the resync rate limit until the guard is dropped.
    pub fn resync_waiting(&self) -> WaitGuard {
        GaugeGuard::new(self.resyncs_waiting.clone())
    }

    /// Counts one reconcile held by the memory guard until the guard is dropped.
    pub fn memory_waiting(&self) -> WaitGuard {
        GaugeGuard::new(self.memory_waiting.clone())
    }
}

/// Holds a gauge one higher until dropped.
#[must_use = "the gauge goes back down when the guard is dropped"]
#[derive(Debug)]
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    fn new(gauge: Gauge) -> Self {
        gauge.inc();
        GaugeGuard(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Counts one running ansible-runner process (`ansible_operator_runs_in_flight`).
pub type RunGuard = GaugeGuard;

/// Counts one reconcile waiting for the run budget (`ansible_operator_runs_waiting`).
pub type WaitGuard = GaugeGuard;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::metrics::test_support::value;

    #[test]
    fn fresh_registry_exposes_the_run_gauges_at_zero() {
        let text = Metrics::new("v", "c").encode();
        assert_eq!(value(&text, RUNS_IN_FLIGHT, &[]), Some(0.0));
        assert_eq!(value(&text, RUNS_WAITING, &[]), Some(0.0));
        assert_eq!(value(&text, RESYNCS_WAITING, &[]), Some(0.0));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn run_and_wait_guards_hold_their_gauges_until_dropped() {
        let metrics = Metrics::new("v", "c");
        let first = metrics.run_started();
        let second = metrics.run_started();
        let waiting = metrics.waiting();
        let text = metrics.encode();
        assert_eq!(value(&text, RUNS_IN_FLIGHT, &[]), Some(2.0));
        assert_eq!(value(&text, RUNS_WAITING, &[]), Some(1.0));
        drop((first, waiting));
        let text = metrics.encode();
        assert_eq!(value(&text, RUNS_IN_FLIGHT, &[]), Some(1.0));
        assert_eq!(value(&text, RUNS_WAITING, &[]), Some(0.0));
        drop(second);
        assert_eq!(value(&metrics.encode(), RUNS_IN_FLIGHT, &[]), Some(0.0));
    }

    #[test]
    fn a_held_resync_holds_its_gauge_until_dropped() {
        let metrics = Metrics::new("v", "c");
        let held = metrics.resync_waiting();
        assert_eq!(value(&metrics.encode(), RESYNCS_WAITING, &[]), Some(1.0));
        drop(held);
        assert_eq!(value(&metrics.encode(), RESYNCS_WAITING, &[]), Some(0.0));
        let held = metrics.memory_waiting();
        assert_eq!(value(&metrics.encode(), RUNS_WAITING_FOR_MEMORY, &[]), Some(1.0));
        drop(held);
        assert_eq!(value(&metrics.encode(), RUNS_WAITING_FOR_MEMORY, &[]), Some(0.0));
    }
}
