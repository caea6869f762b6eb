//! The reconciles' metrics (upstream's and controller-runtime's): results, durations, and the
//! workers of each controller, timed by a drop guard.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use super::family::{HistogramFamily, Labels, counter_family, histogram_family};

pub(super) const RECONCILE_RESULT: &str = "ansible_operator_reconcile_result";
pub(super) const RECONCILES: &str = "ansible_operator_reconciles";
pub(super) const RECONCILE_TOTAL: &str = "controller_runtime_reconcile_total";
pub(super) const RECONCILE_ERRORS_TOTAL: &str = "controller_runtime_reconcile_errors_total";
pub(super) const RECONCILE_TIME: &str = "controller_runtime_reconcile_time_seconds";
pub(super) const ACTIVE_WORKERS: &str = "controller_runtime_active_workers";
pub(super) const MAX_CONCURRENT: &str = "controller_runtime_max_concurrent_reconciles";
pub(super) const PAUSED_CRS: &str = "ansible_operator_paused_crs";

/// Every `result` of `controller_runtime_reconcile_total`.
const CONTROLLER_RESULTS: [&str; 4] = ["error", "requeue", "requeue_after", "success"];

/// How a reconcile ended, as the metrics count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileOutcome {
    /// The run succeeded; `requeue_after` when it asked to run again after a delay.
    Succeeded {
        /// The reconcile requeued itself after a delay (periodic or `requeue_after`).
        requeue_after: bool,
    },
    /// The reconcile failed.
    Failed,
}

impl ReconcileOutcome {
    /// `result` label of `ansible_operator_reconcile_result`.
    fn ansible_result(self) -> &'static str {
        match self {
            ReconcileOutcome::Succeeded { .. } => "succeeded",
            ReconcileOutcome::Failed => "failed",
        }
    }

    /// `result` label of `controller_runtime_reconcile_total`.
    fn controller_result(self) -> &'static str {
        match self {
            ReconcileOutcome::Succeeded { requeue_after: false } => "success",
            ReconcileOutcome::Succeeded { requeue_after: true } => "requeue_after",
            ReconcileOutcome::Failed => "error",
        }
    }
}

/// The reconciles' families, registered once.
#[derive(Debug, Clone)]
pub struct ReconcileMetrics {
    result: Family<Labels<2>, Gauge>,
    reconciles: HistogramFamily<1>,
    total: Family<Labels<2>, Counter>,
    errors: Family<Labels<1>, Counter>,
    time: HistogramFamily<1>,
    active_workers: Family<Labels<1>, Gauge>,
    max_concurrent: Family<Labels<1>, Gauge>,
    paused: Family<Labels<1>, Gauge>,
}

impl ReconcileMetrics {
    /// Registers the group's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let i = ReconcileMetrics {
            result: Family::default(),
            reconciles: histogram_family(),
            total: Family::default(),
            errors: Family::default(),
            time: histogram_family(),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
            paused: Family::default(),
        };
        registry.register(RECONCILE_RESULT, "Gauge of reconciles and their results", i.result.clone());
        registry.register(RECONCILES, "How long in seconds a reconcile takes", i.reconciles.clone());
        registry.register(
            counter_family(RECONCILE_TOTAL),
            "Total number of reconciliations per controller",
            i.total.clone(),
        );
        registry.register(
            counter_family(RECONCILE_ERRORS_TOTAL),
            "Total number of reconciliation errors per controller",
            i.errors.clone(),
        );
        registry.register(RECONCILE_TIME, "Length of time per reconciliation per controller", i.time.clone());
        registry.register(
            ACTIVE_WORKERS,
            "Number of currently used workers per controller",
            i.active_workers.clone(),
        );
        registry.register(
            MAX_CONCURRENT,
            "Maximum number of concurrent reconciles per controller",
            i.max_concurrent.clone(),
        );
        registry.register(
            PAUSED_CRS,
            "CRs paused by the ansible.sdk.operatorframework.io/paused annotation, by GVK",
            i.paused.clone(),
        );
        i
    }

    /// Sets `ansible_operator_paused_crs` of `gvk`.
    pub fn set_paused_crs(&self, gvk: &str, n: i64) {
        self.paused.get_or_create(&[("GVK", gvk.to_string())]).set(n);
    }

    /// Starts timing one reconcile of `gvk` by `controller` and counts it as an active worker
    /// until the timer ends.
    pub fn started(&self, gvk: &str, controller: &str) -> ReconcileTimer {
        self.active_workers.get_or_create(&[("controller", controller.to_string())]).inc();
        ReconcileTimer {
            metrics: self.clone(),
            gvk: gvk.to_string(),
            controller: controller.to_string(),
            started: Instant::now(),
            finished: false,
        }
    }

    /// Sets `controller_runtime_max_concurrent_reconciles` for `controller`, and exposes the
    /// controller's result and error counters and active workers at 0.
    pub fn set_max_concurrent(&self, controller: &str, n: i64) {
        let label = || ("controller", controller.to_string());
        self.max_concurrent.get_or_create(&[label()]).set(n);
        // Creating the series is the point; the guards only hold the family lock.
        drop(self.active_workers.get_or_create(&[label()]));
        drop(self.errors.get_or_create(&[label()]));
        for result in CONTROLLER_RESULTS {
            drop(self.total.get_or_create(&[label(), ("result", result.to_string())]));
        }
    }
}

/// Times one reconcile; [`ReconcileTimer::finish`] records it, dropping it unfinished counts an
/// error (a cancelled or panicked reconcile).
#[must_use = "a dropped timer records a failed reconcile"]
#[derive(Debug)]
pub struct ReconcileTimer {
    metrics: ReconcileMetrics,
    gvk: String,
    controller: String,
    started: Instant,
    finished: bool,
}

impl ReconcileTimer {
    /// Observes the elapsed time in both histograms, bumps the result counters and releases the
    /// active worker.
    pub fn finish(mut self, outcome: ReconcileOutcome) {
        self.record(outcome);
    }

    fn record(&mut self, outcome: ReconcileOutcome) {
        self.finished = true;
        let seconds = self.started.elapsed().as_secs_f64();
        let i = &self.metrics;
        let gvk = || ("GVK", self.gvk.clone());
        let controller = || ("controller", self.controller.clone());
        i.reconciles.get_or_create(&[gvk()]).observe(seconds);
        i.time.get_or_create(&[controller()]).observe(seconds);
        i.result.get_or_create(&[gvk(), ("result", outcome.ansible_result().to_string())]).inc();
        i.total.get_or_create(&[controller(), ("result", outcome.controller_result().to_string())]).inc();
        if outcome == ReconcileOutcome::Failed {
            i.errors.get_or_create(&[controller()]).inc();
        }
        i.active_workers.get_or_create(&[controller()]).dec();
    }
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        if !self.finished {
            self.record(ReconcileOutcome::Failed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::metrics::Metrics;
    use crate::metrics::family::DEFAULT_BUCKETS;
    use crate::metrics::test_support::{samples, value};

    const GVK: &str = "cache.example.com/v1alpha1, Kind=Memcached";
    const CONTROLLER: &str = "memcached-v1alpha1-controller";

    #[test]
    fn started_controller_exposes_its_counters_at_zero() {
        let metrics = Metrics::new("v", "c");
        metrics.set_max_concurrent(CONTROLLER, 2);
        let text = metrics.encode();
        for result in CONTROLLER_RESULTS {
            assert_eq!(
                value(&text, RECONCILE_TOTAL, &[("controller", CONTROLLER), ("result", result)]),
                Some(0.0)
            );
        }
        assert_eq!(value(&text, RECONCILE_ERRORS_TOTAL, &[("controller", CONTROLLER)]), Some(0.0));
        assert_eq!(value(&text, ACTIVE_WORKERS, &[("controller", CONTROLLER)]), Some(0.0));
        assert_eq!(value(&text, MAX_CONCURRENT, &[("controller", CONTROLLER)]), Some(2.0));
    }

    #[test]
    fn histograms_use_the_default_prometheus_buckets() {
        let metrics = Metrics::new("v", "c");
        metrics.reconcile_started(GVK, CONTROLLER).finish(ReconcileOutcome::Failed);
        let text = metrics.encode();
        for name in ["ansible_operator_reconciles_bucket", "controller_runtime_reconcile_time_seconds_bucket"]
        {
            let bounds: Vec<f64> = samples(&text)
                .into_iter()
                .filter(|s| s.name == name)
                .filter_map(|s| s.labels.into_iter().find(|(k, _)| k == "le"))
                .map(|(_, v)| if v == "+Inf" { f64::INFINITY } else { v.parse().unwrap() })
                .collect();
            let mut expected = DEFAULT_BUCKETS.to_vec();
            expected.push(f64::INFINITY);
            assert_eq!(bounds, expected, "{name}");
        }
    }

    #[test]
    fn succeeded_reconcile_counts_success_and_releases_the_worker() {
        let metrics = Metrics::new("v", "c");
        let timer = metrics.reconcile_started(GVK, CONTROLLER);
        assert_eq!(value(&metrics.encode(), ACTIVE_WORKERS, &[("controller", CONTROLLER)]), Some(1.0));
        timer.finish(ReconcileOutcome::Succeeded { requeue_after: false });

        let text = metrics.encode();
        assert_eq!(value(&text, RECONCILE_RESULT, &[("GVK", GVK), ("result", "succeeded")]), Some(1.0));
        assert_eq!(
            value(&text, RECONCILE_TOTAL, &[("controller", CONTROLLER), ("result", "success")]),
            Some(1.0)
        );
        assert_eq!(value(&text, RECONCILE_ERRORS_TOTAL, &[("controller", CONTROLLER)]), None);
        assert_eq!(value(&text, ACTIVE_WORKERS, &[("controller", CONTROLLER)]), Some(0.0));
        assert_eq!(value(&text, "ansible_operator_reconciles_count", &[("GVK", GVK)]), Some(1.0));
        assert_eq!(
            value(&text, "controller_runtime_reconcile_time_seconds_count", &[("controller", CONTROLLER)]),
            Some(1.0)
        );
    }

    #[test]
    fn requeue_after_success_counts_as_requeue_after() {
        let metrics = Metrics::new("v", "c");
        metrics
            .reconcile_started(GVK, CONTROLLER)
            .finish(ReconcileOutcome::Succeeded { requeue_after: true });
        let text = metrics.encode();
        assert_eq!(value(&text, RECONCILE_RESULT, &[("GVK", GVK), ("result", "succeeded")]), Some(1.0));
        assert_eq!(
            value(&text, RECONCILE_TOTAL, &[("controller", CONTROLLER), ("result", "requeue_after")]),
            Some(1.0)
        );
    }

    #[test]
    fn failed_reconcile_counts_failed_error_and_errors_total() {
        let metrics = Metrics::new("v", "c");
        metrics.reconcile_started(GVK, CONTROLLER).finish(ReconcileOutcome::Failed);
        metrics.reconcile_started(GVK, CONTROLLER).finish(ReconcileOutcome::Failed);
        let text = metrics.encode();
        assert_eq!(value(&text, RECONCILE_RESULT, &[("GVK", GVK), ("result", "failed")]), Some(2.0));
        assert_eq!(
            value(&text, RECONCILE_TOTAL, &[("controller", CONTROLLER), ("result", "error")]),
            Some(2.0)
        );
        assert_eq!(value(&text, RECONCILE_ERRORS_TOTAL, &[("controller", CONTROLLER)]), Some(2.0));
    }

    #[test]
    fn dropped_unfinished_timer_counts_as_an_error() {
        let metrics = Metrics::new("v", "c");
        drop(metrics.reconcile_started(GVK, CONTROLLER));
        let text = metrics.encode();
        assert_eq!(value(&text, RECONCILE_ERRORS_TOTAL, &[("controller", CONTROLLER)]), Some(1.0));
        assert_eq!(value(&text, RECONCILE_RESULT, &[("GVK", GVK), ("result", "failed")]), Some(1.0));
        assert_eq!(value(&text, ACTIVE_WORKERS, &[("controller", CONTROLLER)]), Some(0.0));
    }

    #[tokio::test(start_paused = true)]
    async fn timer_observes_the_whole_reconcile_duration() {
        let metrics = Metrics::new("v", "c");
        let timer = metrics.reconcile_started(GVK, CONTROLLER);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        timer.finish(ReconcileOutcome::Succeeded { requeue_after: false });
        let text = metrics.encode();
        assert_eq!(value(&text, "ansible_operator_reconciles_sum", &[("GVK", GVK)]), Some(1.5));
        assert_eq!(
            value(&text, "ansible_operator_reconciles_bucket", &[("GVK", GVK), ("le", "1.0")]),
            Some(0.0)
        );
        assert_eq!(
            value(&text, "ansible_operator_reconciles_bucket", &[("GVK", GVK), ("le", "2.5")]),
            Some(1.0)
        );
        assert_eq!(
            value(&text, "controller_runtime_reconcile_time_seconds_sum", &[("controller", CONTROLLER)]),
            Some(1.5)
        );
    }
}
