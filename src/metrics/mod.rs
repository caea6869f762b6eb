//! Prometheus metrics (upstream §8.1): the operator's metric families, registered once, and the
//! drop-guard timer and gauges the reconcile loop and runner update.

mod server;
pub mod user;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::time::Instant;

pub use server::{OPENMETRICS_CONTENT_TYPE, Secure, serve_metrics};
pub use user::{UserMetricError, UserMetrics, serve_user_metrics};

/// Prometheus client libraries' default histogram buckets, in seconds.
pub const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Exposed names of the operator's own families; user metrics may not take them.
pub(crate) const OPERATOR_METRIC_NAMES: &[&str] = &[
    BUILD_INFO,
    RECONCILE_RESULT,
    RECONCILES,
    RECONCILE_TOTAL,
    RECONCILE_ERRORS_TOTAL,
    RECONCILE_TIME,
    ACTIVE_WORKERS,
    MAX_CONCURRENT,
    RUNS_IN_FLIGHT,
    RUNS_WAITING,
    EXECUTOR_RUNS,
    EXECUTOR_FALLBACKS,
    EXECUTOR_WORKER_RESTARTS,
    EXECUTOR_WORKER_RSS,
    SHARD_CRS,
    SHARD_INFO,
    UNDECODABLE_CRS,
];

const BUILD_INFO: &str = "ansible_operator_build_info";
const RECONCILE_RESULT: &str = "ansible_operator_reconcile_result";
const RECONCILES: &str = "ansible_operator_reconciles";
const RECONCILE_TOTAL: &str = "controller_runtime_reconcile_total";
const RECONCILE_ERRORS_TOTAL: &str = "controller_runtime_reconcile_errors_total";
const RECONCILE_TIME: &str = "controller_runtime_reconcile_time_seconds";
const ACTIVE_WORKERS: &str = "controller_runtime_active_workers";
const MAX_CONCURRENT: &str = "controller_runtime_max_concurrent_reconciles";
const RUNS_IN_FLIGHT: &str = "ansible_operator_runs_in_flight";
const RUNS_WAITING: &str = "ansible_operator_runs_waiting";
const EXECUTOR_RUNS: &str = "ansible_operator_executor_runs_total";
const EXECUTOR_FALLBACKS: &str = "ansible_operator_executor_fallbacks_total";
const EXECUTOR_WORKER_RESTARTS: &str = "ansible_operator_executor_worker_restarts_total";
const EXECUTOR_WORKER_RSS: &str = "ansible_operator_executor_worker_resident_memory_bytes";
const SHARD_CRS: &str = "ansible_operator_shard_crs";
const SHARD_INFO: &str = "ansible_operator_shard_info";
const UNDECODABLE_CRS: &str = "ansible_operator_undecodable_crs_total";

/// Every `result` of `controller_runtime_reconcile_total`.
const CONTROLLER_RESULTS: [&str; 4] = ["error", "requeue", "requeue_after", "success"];

/// A label set of one or two low-cardinality labels (GVK, controller, result).
type Labels<const N: usize> = [(&'static str, String); N];

/// Constructor of the histogram families.
type HistogramFamily<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// The `GVK` label value upstream uses: Go's `GroupVersionKind.String()`, e.g.
/// `cache.example.com/v1alpha1, Kind=Memcached` (the core group gives `/v1, Kind=Pod`).
pub fn gvk_label(group: &str, version: &str, kind: &str) -> String {
    format!("{group}/{version}, Kind={kind}")
}

/// The `controller` label value upstream uses: `<lower(kind)>-<lower(version)>-controller`.
pub fn controller_label(kind: &str, version: &str) -> String {
    format!("{}-{}-controller", kind.to_lowercase(), version.to_lowercase())
}

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

/// The metric handles, shared by the registry and the timers and guards.
#[derive(Debug)]
struct Instruments {
    reconcile_result: Family<Labels<2>, Gauge>,
    reconciles: HistogramFamily<1>,
    reconcile_total: Family<Labels<2>, Counter>,
    reconcile_errors: Family<Labels<1>, Counter>,
    reconcile_time: HistogramFamily<1>,
    active_workers: Family<Labels<1>, Gauge>,
    max_concurrent: Family<Labels<1>, Gauge>,
    runs_in_flight: Gauge,
    runs_waiting: Gauge,
    shard_crs: Family<Labels<2>, Gauge>,
    shard_info: Family<Labels<2>, Gauge>,
    executor_runs: Family<Labels<1>, Counter>,
    executor_fallbacks: Family<Labels<1>, Counter>,
    executor_worker_restarts: Counter,
    executor_worker_rss: Gauge,
    undecodable_crs: Family<Labels<1>, Counter>,
}

/// The operator's metrics registry; create once with [`Metrics::new`] and share the `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    instruments: Arc<Instruments>,
    user: Arc<Mutex<UserMetrics>>,
}

impl Metrics {
    /// Registers every family and sets `ansible_operator_build_info{commit, version}` to 1.
    pub fn new(version: &str, commit: &str) -> Arc<Metrics> {
        let instruments = Arc::new(Instruments {
            reconcile_result: Family::default(),
            reconciles: Family::new_with_constructor(default_histogram),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(default_histogram),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
            runs_in_flight: Gauge::default(),
            runs_waiting: Gauge::default(),
            shard_crs: Family::default(),
            shard_info: Family::default(),
            executor_runs: Family::default(),
            executor_fallbacks: Family::default(),
            executor_worker_restarts: Counter::default(),
            executor_worker_rss: Gauge::default(),
            undecodable_crs: Family::default(),
        });
        let build_info = Family::<Labels<2>, Gauge>::default();
        build_info.get_or_create(&[("commit", commit.to_string()), ("version", version.to_string())]).set(1);
        let user = Arc::new(Mutex::new(UserMetrics::default()));

        let i = &instruments;
        let mut registry = Registry::default();
        // A gauge, not prometheus-client's Info type, so the name and type match upstream exactly.
        registry.register(BUILD_INFO, "Build information for the ansible-operator binary", build_info);
        registry.register(
            RECONCILE_RESULT,
            "Gauge of reconciles and their results",
            i.reconcile_result.clone(),
        );
        registry.register(RECONCILES, "How long in seconds a reconcile takes", i.reconciles.clone());
        // prometheus-client appends `_total` to counter names.
        registry.register(
            counter_family(RECONCILE_TOTAL),
            "Total number of reconciliations per controller",
            i.reconcile_total.clone(),
        );
        registry.register(
            counter_family(RECONCILE_ERRORS_TOTAL),
            "Total number of reconciliation errors per controller",
            i.reconcile_errors.clone(),
        );
        registry.register(
            RECONCILE_TIME,
            "Length of time per reconciliation per controller",
            i.reconcile_time.clone(),
        );
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
            RUNS_IN_FLIGHT,
            "Number of ansible-runner processes running now",
            i.runs_in_flight.clone(),
        );
        registry.register(
            RUNS_WAITING,
            "Number of reconciles waiting for the global ansible-runner budget",
            i.runs_waiting.clone(),
        );
        registry.register(
            counter_family(EXECUTOR_RUNS),
            "Playbook runs by the executor that ran them (warm: forked from the worker; cold: a new ansible-runner, or a warm run that fell back)",
            i.executor_runs.clone(),
        );
        registry.register(
            counter_family(EXECUTOR_FALLBACKS),
            "Runs asked to be warm that ran cold, by reason",
            i.executor_fallbacks.clone(),
        );
        registry.register(
            counter_family(EXECUTOR_WORKER_RESTARTS),
            "Times the warm Ansible worker ended and was started again",
            i.executor_worker_restarts.clone(),
        );
        registry.register(
            EXECUTOR_WORKER_RSS,
            "Resident memory of the warm Ansible worker",
            i.executor_worker_rss.clone(),
        );
        registry.register(
            SHARD_CRS,
            "With --sharding: CRs assigned to this replica's shard, as held in its watch cache",
            i.shard_crs.clone(),
        );
        registry.register(
            SHARD_INFO,
            "With --sharding: 1, labelled with this replica's ring and shard (join on it to break the \
             run budget's and the reconciles' series down by shard)",
            i.shard_info.clone(),
        );
        registry.register(
            counter_family(UNDECODABLE_CRS),
            "CRs (each version of one) the operator could not decode and so skipped, by GVK",
            i.undecodable_crs.clone(),
        );
        registry.register_collector(Box::new(user::Collector(user.clone())));
        Arc::new(Metrics { registry, instruments, user })
    }

    /// Starts timing one reconcile of `gvk` (see [`gvk_label`]) by `controller` (see
    /// [`controller_label`]) and counts it as an active worker until the timer ends.
    pub fn reconcile_started(&self, gvk: &str, controller: &str) -> ReconcileTimer {
        self.instruments.active_workers.get_or_create(&[("controller", controller.to_string())]).inc();
        ReconcileTimer {
            instruments: self.instruments.clone(),
            gvk: gvk.to_string(),
            controller: controller.to_string(),
            started: Instant::now(),
            finished: false,
        }
    }

    /// Sets `controller_runtime_max_concurrent_reconciles` for `controller`. Call it once when the
    /// controller starts: like controller-runtime, it also exposes the controller's result and error
    /// counters and active workers at 0, so rate queries work before the first failure.
    pub fn set_max_concurrent(&self, controller: &str, n: i64) {
        let i = &self.instruments;
        let label = || ("controller", controller.to_string());
        i.max_concurrent.get_or_create(&[label()]).set(n);
        // Creating the series is the point; the guards only hold the family lock.
        drop(i.active_workers.get_or_create(&[label()]));
        drop(i.reconcile_errors.get_or_create(&[label()]));
        for result in CONTROLLER_RESULTS {
            drop(i.reconcile_total.get_or_create(&[label(), ("result", result.to_string())]));
        }
    }

    /// With `--sharding`: names this replica's ring and shard (`ansible_operator_shard_info`).
    pub fn set_shard(&self, ring: &str, shard: &str) {
        let labels = [("ring", ring.to_string()), ("shard", shard.to_string())];
        self.instruments.shard_info.get_or_create(&labels).set(1);
    }

    /// Counts one running ansible-runner process until the guard is dropped.
    pub fn run_started(&self) -> RunGuard {
        GaugeGuard::new(self.instruments.runs_in_flight.clone())
    }

    /// Counts one reconcile waiting for the global run budget until the guard is dropped.
    pub fn waiting(&self) -> WaitGuard {
        GaugeGuard::new(self.instruments.runs_waiting.clone())
    }

    /// Counts a playbook run by the executor that ran it.
    pub fn executor_run(&self, executor: crate::executor_mode::Executor) {
        self.instruments.executor_runs.get_or_create(&[("executor", executor.as_str().to_string())]).inc();
    }

    /// Counts a run asked to be warm that ran cold, by `reason` (a short, fixed label).
    pub fn executor_fallback(&self, reason: &'static str) {
        self.instruments.executor_fallbacks.get_or_create(&[("reason", reason.to_string())]).inc();
    }

    /// Counts a restart of the warm worker.
    pub fn executor_worker_restarted(&self) {
        self.instruments.executor_worker_restarts.inc();
    }

    /// Sets the warm worker's resident memory.
    pub fn executor_worker_rss(&self, bytes: u64) {
        self.instruments.executor_worker_rss.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts a version of a `gvk` CR that could not be decoded (and was skipped).
    pub fn undecodable_cr(&self, gvk: &str) {
        self.instruments.undecodable_crs.get_or_create(&[("GVK", gvk.to_string())]).inc();
    }

    /// Applies one user-metrics API request (see [`UserMetrics::apply`]).
    pub fn apply_user_metric(&self, request: &Value) -> Result<(), UserMetricError> {
        self.user.lock().unwrap_or_else(PoisonError::into_inner).apply(request)
    }

    /// Every metric, user metrics included, in OpenMetrics text ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(fmt::Error) = text::encode(&mut out, &self.registry) {
            // Writing to a String cannot fail; a collector would have to report it.
            tracing::error!("encoding metrics failed");
        }
        out
    }
}

/// The family name under which prometheus-client exposes `name` as a counter.
fn counter_family(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}

/// Times one reconcile; [`ReconcileTimer::finish`] records it, dropping it unfinished counts an
/// error (a cancelled or panicked reconcile).
#[must_use = "a dropped timer records a failed reconcile"]
#[derive(Debug)]
pub struct ReconcileTimer {
    instruments: Arc<Instruments>,
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
        let i = &self.instruments;
        let gvk = || ("GVK", self.gvk.clone());
        let controller = || ("controller", self.controller.clone());
        i.reconciles.get_or_create(&[gvk()]).observe(seconds);
        i.reconcile_time.get_or_create(&[controller()]).observe(seconds);
        i.reconcile_result.get_or_create(&[gvk(), ("result", outcome.ansible_result().to_string())]).inc();
        i.reconcile_total
            .get_or_create(&[controller(), ("result", outcome.controller_result().to_string())])
            .inc();
        if outcome == ReconcileOutcome::Failed {
            i.reconcile_errors.get_or_create(&[controller()]).inc();
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

/// One watch cache's contribution to `ansible_operator_shard_crs{GVK,shard}` (a kind watched in
/// several namespaces has one cache each; their sizes add up).
pub struct CachedCrs {
    gauge: Gauge,
    last: i64,
}

impl CachedCrs {
    /// Starts counting a cache of `gvk` CRs held by `shard`.
    pub fn new(metrics: Arc<Metrics>, gvk: &str, shard: &str) -> Self {
        let labels = [("GVK", gvk.to_string()), ("shard", shard.to_string())];
        let gauge = metrics.instruments.shard_crs.get_or_create(&labels).clone();
        Self { gauge, last: 0 }
    }

    /// The cache now holds `len` CRs.
    pub fn set(&mut self, len: usize) {
        let len = i64::try_from(len).unwrap_or(i64::MAX);
        self.gauge.inc_by(len - self.last);
        self.last = len;
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
pub(crate) mod exposition {
    //! Test helpers that read OpenMetrics text back.

    /// One sample line: metric name, labels in order, value.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct Sample {
        pub name: String,
        pub labels: Vec<(String, String)>,
        pub value: f64,
    }

    /// Parses the sample lines (not `#` lines); label values must not contain `,` or `"`.
    pub(crate) fn samples(text: &str) -> Vec<Sample> {
        text.lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').expect("sample has a value");
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
                    None => (series, ""),
                };
                let labels = labels
                    .split("\",")
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = pair.split_once("=\"").expect("label has a value");
                        (key.to_string(), value.trim_end_matches('"').to_string())
                    })
                    .collect();
                let value = match value {
                    "+Inf" => f64::INFINITY,
                    value => value.parse().expect("numeric value"),
                };
                Sample { name: name.to_string(), labels, value }
            })
            .collect()
    }

    /// The `# TYPE` of each family, in order.
    pub(crate) fn types(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split_once(' '))
            .map(|(name, kind)| (name.to_string(), kind.to_string()))
            .collect()
    }

    /// The value of the sample with exactly this name and these labels (in any order).
    pub(crate) fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        samples(text)
            .into_iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels.iter().all(|(ek, ev)| s.labels.iter().any(|(k, v)| k == ek && v == ev))
            })
            .map(|s| s.value)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::exposition::{samples, types, value};
    use super::*;

    const GVK: &str = "cache.example.com/v1alpha1, Kind=Memcached";
    const CONTROLLER: &str = "memcached-v1alpha1-controller";

    /// The distinct sorted label-name sets of the samples called `name`.
    fn label_names(text: &str, name: &str) -> Vec<Vec<String>> {
        let mut sets: Vec<Vec<String>> = samples(text)
            .into_iter()
            .filter(|s| s.name == name)
            .map(|s| {
                let mut names: Vec<String> = s.labels.into_iter().map(|(k, _)| k).collect();
                names.sort();
                names
            })
            .collect();
        sets.sort();
        sets.dedup();
        sets
    }

    #[test]
    fn label_helpers_match_upstream_spelling() {
        assert_eq!(gvk_label("cache.example.com", "v1alpha1", "Memcached"), GVK);
        assert_eq!(gvk_label("", "v1", "Pod"), "/v1, Kind=Pod");
        assert_eq!(controller_label("Memcached", "v1Alpha1"), CONTROLLER);
    }

    #[test]
    fn build_info_is_a_gauge_named_exactly_with_commit_and_version() {
        let text = Metrics::new("v1.38.0", "0123abc").encode();
        assert!(types(&text).contains(&(BUILD_INFO.to_string(), "gauge".to_string())));
        assert_eq!(value(&text, BUILD_INFO, &[("commit", "0123abc"), ("version", "v1.38.0")]), Some(1.0));
        assert!(!text.contains("build_info_info"));
    }

    #[test]
    fn shard_info_names_ring_and_shard_only_when_set() {
        let metrics = Metrics::new("v", "c");
        assert!(!metrics.encode().contains("ansible_operator_shard_info{"));
        metrics.set_shard("ring", "replica-a");
        let text = metrics.encode();
        assert_eq!(value(&text, SHARD_INFO, &[("ring", "ring"), ("shard", "replica-a")]), Some(1.0));
    }

    #[test]
    fn fresh_registry_exposes_the_run_gauges_at_zero() {
        let text = Metrics::new("v", "c").encode();
        assert_eq!(value(&text, RUNS_IN_FLIGHT, &[]), Some(0.0));
        assert_eq!(value(&text, RUNS_WAITING, &[]), Some(0.0));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn finished_reconcile_exposes_every_family_with_upstream_names_types_and_labels() {
        let metrics = Metrics::new("v", "c");
        metrics.set_max_concurrent(CONTROLLER, 4);
        metrics
            .reconcile_started(GVK, CONTROLLER)
            .finish(ReconcileOutcome::Succeeded { requeue_after: false });
        let text = metrics.encode();

        let expected_types = [
            (BUILD_INFO, "gauge"),
            (RECONCILE_RESULT, "gauge"),
            (RECONCILES, "histogram"),
            ("controller_runtime_reconcile", "counter"),
            ("controller_runtime_reconcile_errors", "counter"),
            (RECONCILE_TIME, "histogram"),
            (ACTIVE_WORKERS, "gauge"),
            (MAX_CONCURRENT, "gauge"),
            (RUNS_IN_FLIGHT, "gauge"),
            (RUNS_WAITING, "gauge"),
        ];
        let types = types(&text);
        for (name, kind) in expected_types {
            assert!(
                types.contains(&(name.to_string(), kind.to_string())),
                "{name} {kind} missing in\n{text}"
            );
        }

        let gvk = vec!["GVK".to_string()];
        let controller = vec!["controller".to_string()];
        let with = |first: &Vec<String>, second: &str| vec![first[0].clone(), second.to_string()];
        assert_eq!(label_names(&text, RECONCILE_RESULT), vec![with(&gvk, "result")]);
        assert_eq!(label_names(&text, "ansible_operator_reconciles_bucket"), vec![with(&gvk, "le")]);
        assert_eq!(
            label_names(&text, "controller_runtime_reconcile_time_seconds_bucket"),
            vec![with(&controller, "le")]
        );
        assert_eq!(label_names(&text, "ansible_operator_reconciles_sum"), vec![gvk.clone()]);
        assert_eq!(label_names(&text, "ansible_operator_reconciles_count"), vec![gvk]);
        assert_eq!(label_names(&text, RECONCILE_TOTAL), vec![with(&controller, "result")]);
        assert_eq!(label_names(&text, RECONCILE_ERRORS_TOTAL), vec![controller.clone()]);
        assert_eq!(
            label_names(&text, "controller_runtime_reconcile_time_seconds_count"),
            vec![controller.clone()]
        );
        assert_eq!(label_names(&text, ACTIVE_WORKERS), vec![controller.clone()]);
        assert_eq!(label_names(&text, MAX_CONCURRENT), vec![controller]);
        assert_eq!(value(&text, MAX_CONCURRENT, &[("controller", CONTROLLER)]), Some(4.0));
    }

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
    fn user_metrics_appear_in_the_exposition() {
        let metrics = Metrics::new("v", "c");
        let request = serde_json::json!({"name": "my_gauge", "description": "mine", "gauge": {"set": 3}});
        metrics.apply_user_metric(&request).unwrap();
        let text = metrics.encode();
        assert_eq!(value(&text, "my_gauge", &[]), Some(3.0));
        assert!(text.ends_with("# EOF\n"));
    }
}
