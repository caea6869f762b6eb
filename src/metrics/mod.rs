//! Prometheus metrics (upstream §8.1): the operator's registry and its facade. Each group of
//! families (reconciles, runs, executor, shards, per-CR status) is a struct registered once, in its
//! own file.

mod crs;
mod executor;
mod family;
mod proxy;
mod reconcile;
mod runs;
mod server;
mod shards;
#[cfg(test)]
pub(crate) mod test_support;
pub mod user;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::text;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;

use self::crs::{CR_CONDITION, CR_CONSECUTIVE_FAILURES, CR_LAST_SUCCESS, CrMetrics};
use self::executor::{
    EXECUTOR_FALLBACKS, EXECUTOR_RUNS, EXECUTOR_WORKER_RESTARTS, EXECUTOR_WORKER_RSS, ExecutorMetrics,
};
use self::family::Labels;
use self::proxy::{PROXY_THROTTLED, ProxyMetrics};
use self::reconcile::{
    ACTIVE_WORKERS, MAX_CONCURRENT, PAUSED_CRS, RECONCILE_ERRORS_TOTAL, RECONCILE_RESULT, RECONCILE_TIME,
    RECONCILE_TOTAL, RECONCILES, ReconcileMetrics,
};
use self::runs::{RESYNCS_WAITING, RUNS_IN_FLIGHT, RUNS_WAITING, RUNS_WAITING_FOR_MEMORY, RunMetrics};
use self::shards::{SHARD_CRS, SHARD_INFO, ShardMetrics, UNDECODABLE_CRS};
use crate::executor_mode::Executor;

pub use crs::CrRef;
pub use family::DEFAULT_BUCKETS;
pub use reconcile::{ReconcileOutcome, ReconcileTimer};
pub use runs::{GaugeGuard, RunGuard, WaitGuard};
pub use server::{OPENMETRICS_CONTENT_TYPE, Secure, serve_metrics};
pub use shards::CachedCrs;
pub use user::{UserMetricError, UserMetrics, serve_user_metrics};

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
    PAUSED_CRS,
    RUNS_IN_FLIGHT,
    RUNS_WAITING,
    RESYNCS_WAITING,
    RUNS_WAITING_FOR_MEMORY,
    EXECUTOR_RUNS,
    EXECUTOR_FALLBACKS,
    EXECUTOR_WORKER_RESTARTS,
    EXECUTOR_WORKER_RSS,
    SHARD_CRS,
    SHARD_INFO,
    UNDECODABLE_CRS,
    PROXY_THROTTLED,
    CR_CONDITION,
    CR_LAST_SUCCESS,
    CR_CONSECUTIVE_FAILURES,
];

const BUILD_INFO: &str = "ansible_operator_build_info";

/// The `GVK` label value upstream uses: Go's `GroupVersionKind.String()`, e.g.
/// `cache.example.com/v1alpha1, Kind=Memcached` (the core group gives `/v1, Kind=Pod`).
pub fn gvk_label(group: &str, version: &str, kind: &str) -> String {
    format!("{group}/{version}, Kind={kind}")
}

/// The `controller` label value upstream uses: `<lower(kind)>-<lower(version)>-controller`.
pub fn controller_label(kind: &str, version: &str) -> String {
    format!("{}-{}-controller", kind.to_lowercase(), version.to_lowercase())
}

/// The operator's metrics registry; create once with [`Metrics::new`] and share the `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconcile: ReconcileMetrics,
    runs: RunMetrics,
    executor: ExecutorMetrics,
    shards: ShardMetrics,
    proxy: ProxyMetrics,
    /// `None` with `--cr-metrics=false`.
    crs: Option<CrMetrics>,
    user: Arc<Mutex<UserMetrics>>,
}

impl Metrics {
    /// Registers every family and sets `ansible_operator_build_info{commit, version}` to 1.
    pub fn new(version: &str, commit: &str) -> Arc<Metrics> {
        Metrics::with_cr_metrics(version, commit, true)
    }

    /// [`Metrics::new`], with the per-CR families only when `cr_metrics` (`--cr-metrics`).
    pub fn with_cr_metrics(version: &str, commit: &str, cr_metrics: bool) -> Arc<Metrics> {
        let build_info = Family::<Labels<2>, Gauge>::default();
        build_info.get_or_create(&[("commit", commit.to_string()), ("version", version.to_string())]).set(1);
        let user = Arc::new(Mutex::new(UserMetrics::default()));

        let mut registry = Registry::default();
        // A gauge, not prometheus-client's Info type, so the name and type match upstream exactly.
        registry.register(BUILD_INFO, "Build information for the ansible-operator binary", build_info);
        // The groups register in this order, which is the order of the exposition.
        let reconcile = ReconcileMetrics::register(&mut registry);
        let runs = RunMetrics::register(&mut registry);
        let executor = ExecutorMetrics::register(&mut registry);
        let shards = ShardMetrics::register(&mut registry);
        let proxy = ProxyMetrics::register(&mut registry);
        let crs = cr_metrics.then(|| CrMetrics::register(&mut registry));
        registry.register_collector(Box::new(user::Collector(user.clone())));
        Arc::new(Metrics { registry, reconcile, runs, executor, shards, proxy, crs, user })
    }

    /// Starts timing one reconcile of `gvk` (see [`gvk_label`]) by `controller` (see
    /// [`controller_label`]) and counts it as an active worker until the timer ends.
    pub fn reconcile_started(&self, gvk: &str, controller: &str) -> ReconcileTimer {
        self.reconcile.started(gvk, controller)
    }

    /// Sets `controller_runtime_max_concurrent_reconciles` for `controller`. Call it once when the
    /// controller starts: like controller-runtime, it also exposes the controller's result and error
    /// counters and active workers at 0, so rate queries work before the first failure.
    pub fn set_max_concurrent(&self, controller: &str, n: i64) {
        self.reconcile.set_max_concurrent(controller, n);
    }

    /// Sets `ansible_operator_paused_crs`: the CRs of `gvk` paused by their annotation (set to 0 when
    /// the controller starts, so the series exists).
    pub fn set_paused_crs(&self, gvk: &str, n: i64) {
        self.reconcile.set_paused_crs(gvk, n);
    }

    /// With `--sharding`: names this replica's ring and shard (`ansible_operator_shard_info`).
    pub fn set_shard(&self, ring: &str, shard: &str) {
        self.shards.set_shard(ring, shard);
    }

    /// Counts one running ansible-runner process until the guard is dropped.
    pub fn run_started(&self) -> RunGuard {
        self.runs.started()
    }

    /// Counts one reconcile waiting for the global run budget until the guard is dropped.
    pub fn waiting(&self) -> WaitGuard {
        self.runs.waiting()
    }

    /// Counts one resync held by `--max-resyncs-per-second` until the guard is dropped.
    pub fn resync_waiting(&self) -> WaitGuard {
        self.runs.resync_waiting()
    }

    /// Counts one reconcile held by the memory guard until the guard is dropped.
    pub fn memory_waiting(&self) -> WaitGuard {
        self.runs.memory_waiting()
    }

    /// Counts a playbook run by the executor that ran it.
    pub fn executor_run(&self, executor: Executor) {
        self.executor.run(executor);
    }

    /// Counts a run asked to be warm that ran cold, by `reason` (a short, fixed label).
    pub fn executor_fallback(&self, reason: &'static str) {
        self.executor.fallback(reason);
    }

    /// Counts a restart of the warm worker.
    pub fn executor_worker_restarted(&self) {
        self.executor.worker_restarted();
    }

    /// Sets the warm worker's resident memory.
    pub fn executor_worker_rss(&self, bytes: u64) {
        self.executor.worker_rss(bytes);
    }

    /// Counts a version of a `gvk` CR that could not be decoded (and was skipped).
    pub fn undecodable_cr(&self, gvk: &str) {
        self.shards.undecodable_cr(gvk);
    }

    /// Counts a run's request through the proxy held back by `limit` (`run`, `operator`), with
    /// `outcome` (`delayed`, `refused`).
    pub fn proxy_throttled(&self, limit: &'static str, outcome: &'static str) {
        self.proxy.throttled(limit, outcome);
    }

    /// Sets the per-CR condition series of `cr` (type, whether `True`); types it no longer carries go.
    pub fn cr_conditions(&self, cr: &CrRef, conditions: impl IntoIterator<Item = (&'static str, bool)>) {
        if let Some(crs) = &self.crs {
            crs.set_conditions(cr, conditions);
        }
    }

    /// A run of `cr` succeeded at `unix_seconds`.
    pub fn cr_succeeded(&self, cr: &CrRef, unix_seconds: f64) {
        if let Some(crs) = &self.crs {
            crs.succeeded(cr, unix_seconds);
        }
    }

    /// A run of `cr` failed.
    pub fn cr_failed(&self, cr: &CrRef) {
        if let Some(crs) = &self.crs {
            crs.failed(cr);
        }
    }

    /// Drops every per-CR series of a deleted `cr`.
    pub fn forget_cr(&self, cr: &CrRef) {
        if let Some(crs) = &self.crs {
            crs.forget(cr);
        }
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
        // The user's summaries, which prometheus-client cannot encode, before `# EOF`.
        let mut summaries = String::new();
        self.user.lock().unwrap_or_else(PoisonError::into_inner).encode_summaries(&mut summaries);
        if !summaries.is_empty() {
            let end = out.rfind("# EOF\n").unwrap_or(out.len());
            out.insert_str(end, &summaries);
        }
        out
    }
}

// `CachedCrs::new` takes the facade, so its constructor lives beside it rather than in `shards`.
impl CachedCrs {
    /// Starts counting a cache of `gvk` CRs held by `shard`.
    pub fn new(metrics: Arc<Metrics>, gvk: &str, shard: &str) -> Self {
        metrics.shards.cached_crs(gvk, shard)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{samples, types, value};
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
            (RESYNCS_WAITING, "gauge"),
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
    fn user_metrics_appear_in_the_exposition() {
        let metrics = Metrics::new("v", "c");
        let request = serde_json::json!({"name": "my_gauge", "description": "mine", "gauge": {"set": 3}});
        metrics.apply_user_metric(&request).unwrap();
        let summary =
            serde_json::json!({"name": "my_summary", "description": "latency", "summary": {"observe": 2}});
        metrics.apply_user_metric(&summary).unwrap();
        let text = metrics.encode();
        assert_eq!(value(&text, "my_gauge", &[]), Some(3.0));
        assert!(types(&text).contains(&("my_summary".to_string(), "summary".to_string())), "{text}");
        assert_eq!(value(&text, "my_summary_sum", &[]), Some(2.0));
        assert_eq!(value(&text, "my_summary_count", &[]), Some(1.0));
        assert!(text.ends_with("# EOF\n"));
    }
}
