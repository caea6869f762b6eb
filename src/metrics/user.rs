//! The user-metrics API (upstream §8.1) that `operator_sdk.util.osdk_metric` posts to on
//! `localhost:5050/metrics`: the pure rules that create and update unlabelled user metrics, the
//! collector that exposes them with the operator's metrics, and the HTTP endpoint.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::exemplar::Exemplar;
use serde::Deserialize;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{DEFAULT_BUCKETS, Metrics, OPERATOR_METRIC_NAMES};
use crate::http_server::{Body, TEXT_CONTENT_TYPE, method_not_allowed, not_found, respond, serve, text};

/// Largest request body the endpoint reads.
const MAX_BODY: usize = 64 * 1024;

/// Longest metric name accepted (Prometheus sets none; this keeps a name a name).
pub const MAX_NAME_LENGTH: usize = 200;

/// Longest description accepted.
pub const MAX_DESCRIPTION_LENGTH: usize = 1024;

/// Most user metrics registered: the registry lives as long as the operator, and every name costs
/// memory and a series on every scrape.
pub const MAX_USER_METRICS: usize = 1000;

/// Why a user-metrics request was refused (answered with 400 and this message).
#[derive(Debug, thiserror::Error)]
pub enum UserMetricError {
    /// The body is not a JSON object of the expected shape.
    #[error("invalid metric request")]
    Malformed(#[source] serde_json::Error),
    /// More than one of counter, gauge, histogram, summary.
    #[error("only one metric can be processed at a time")]
    TooManyMetrics,
    /// None of counter, gauge, histogram, summary.
    #[error("a request should contain at least one metric")]
    NoMetric,
    /// The name is empty or not a valid Prometheus metric name.
    #[error("invalid metric name {name:?}")]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// The name is longer than [`MAX_NAME_LENGTH`].
    #[error("metric name of {length} characters is longer than the {MAX_NAME_LENGTH} allowed")]
    NameTooLong {
        /// The name's length.
        length: usize,
    },
    /// The description is longer than [`MAX_DESCRIPTION_LENGTH`].
    #[error("metric description of {length} characters is longer than the {MAX_DESCRIPTION_LENGTH} allowed")]
    DescriptionTooLong {
        /// The description's length.
        length: usize,
    },
    /// [`MAX_USER_METRICS`] are registered already and the name is new.
    #[error("{MAX_USER_METRICS} user metrics are registered already: metric {name:?} is not added")]
    RegistryFull {
        /// The new metric's name.
        name: String,
    },
    /// The name belongs to one of the operator's own metrics.
    #[error("metric name {name:?} is used by the operator")]
    ReservedName {
        /// The name as given.
        name: String,
    },
    /// The metric exists with another type.
    #[error("cannot change metric type of {name}, which is a {existing}")]
    TypeChange {
        /// The metric's name.
        name: String,
        /// Its registered type.
        existing: &'static str,
    },
    /// A counter `add` below zero.
    #[error("counter metrics cannot decrease in value")]
    NegativeCounter,
}

/// The request body `osdk_metric` sends; `null` options count as absent.
#[derive(Debug, Deserialize)]
struct MetricRequest {
    name: Option<String>,
    description: Option<String>,
    counter: Option<CounterRequest>,
    gauge: Option<GaugeRequest>,
    histogram: Option<ObserveRequest>,
    summary: Option<ObserveRequest>,
}

#[derive(Debug, Deserialize)]
struct CounterRequest {
    increment: Option<bool>,
    add: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct GaugeRequest {
    increment: Option<bool>,
    decrement: Option<bool>,
    add: Option<f64>,
    subtract: Option<f64>,
    set: Option<f64>,
    set_to_current_time: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct ObserveRequest {
    observe: Option<f64>,
}

/// One change to a metric, decided from a request before anything is mutated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Change {
    /// Register only (e.g. `counter: {}`).
    None,
    /// Add to a counter or gauge (negative for decrement and subtract).
    Add(f64),
    /// Set a gauge.
    Set(f64),
    /// Observe a histogram value.
    Observe(f64),
}

/// A user metric's current value.
#[derive(Debug, Clone, PartialEq)]
enum UserValue {
    Counter(f64),
    Gauge(f64),
    Histogram(HistogramState),
    /// Upstream's `prometheus.NewSummary` with no objectives: its sum and count.
    Summary {
        sum: f64,
        count: u64,
    },
}

impl UserValue {
    fn kind(&self) -> &'static str {
        match self {
            UserValue::Counter(_) => "counter",
            UserValue::Gauge(_) => "gauge",
            UserValue::Histogram(_) | UserValue::Summary { .. } => "histogram or summary",
        }
    }
}

/// A classic histogram over [`DEFAULT_BUCKETS`]: per-bucket (not cumulative) counts, the last
/// bucket being `+Inf`.
#[derive(Debug, Clone, PartialEq)]
struct HistogramState {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

impl HistogramState {
    fn new() -> Self {
        HistogramState { buckets: vec![0; DEFAULT_BUCKETS.len() + 1], sum: 0.0, count: 0 }
    }

    fn observe(&mut self, v: f64) {
        let index = DEFAULT_BUCKETS.iter().position(|bound| v <= *bound).unwrap_or(DEFAULT_BUCKETS.len());
        self.buckets[index] += 1;
        self.sum += v;
        self.count += 1;
    }

    fn bounds(&self) -> Vec<(f64, u64)> {
        DEFAULT_BUCKETS.iter().copied().chain([f64::INFINITY]).zip(self.buckets.iter().copied()).collect()
    }
}

/// A registered user metric.
#[derive(Debug, Clone, PartialEq)]
struct UserMetric {
    help: String,
    value: UserValue,
}

/// The user metrics registered so far, by name.
#[derive(Debug, Default)]
pub struct UserMetrics {
    metrics: BTreeMap<String, UserMetric>,
}

impl UserMetrics {
    /// Applies one request at the current time (see [`UserMetrics::apply_at`]).
    pub fn apply(&mut self, request: &Value) -> Result<(), UserMetricError> {
        self.apply_at(request, SystemTime::now())
    }

    /// Applies one request: registers the metric unlabelled on first use (keeping the first
    /// description), then changes it. Nothing changes when the request is refused.
    ///
    /// Counter: `increment`, else `add` (≥ 0). Gauge: the first of `increment`, `decrement`, `add`,
    /// `subtract`, `set`, `set_to_current_time` that is given. Histogram and summary: `observe`; both
    /// are kept as one histogram, so either may update a metric created by the other.
    pub fn apply_at(&mut self, request: &Value, now: SystemTime) -> Result<(), UserMetricError> {
        let request = MetricRequest::deserialize(request).map_err(UserMetricError::Malformed)?;
        let (fresh, change) = decide(&request, now)?;
        let name = request.name.unwrap_or_default();
        validate_name(&name)?;
        let metric = match self.metrics.get_mut(&name) {
            Some(metric) => {
                // A summary and a histogram take each other's `observe`, as upstream's, whose
                // Histogram and Summary interfaces are one.
                if metric.value.kind() != fresh.kind() {
                    return Err(UserMetricError::TypeChange { existing: metric.value.kind(), name });
                }
                metric
            }
            None => {
                if self.metrics.len() >= MAX_USER_METRICS {
                    return Err(UserMetricError::RegistryFull { name });
                }
                let help = request.description.unwrap_or_default();
                if help.chars().count() > MAX_DESCRIPTION_LENGTH {
                    return Err(UserMetricError::DescriptionTooLong { length: help.chars().count() });
                }
                tracing::info!(metric = %name, kind = fresh.kind(), "registering user metric");
                self.metrics.entry(name).or_insert(UserMetric { help, value: fresh })
            }
        };
        match (&mut metric.value, change) {
            (_, Change::None) => {}
            (UserValue::Counter(v) | UserValue::Gauge(v), Change::Add(delta)) => *v += delta,
            (UserValue::Gauge(v), Change::Set(value)) => *v = value,
            (UserValue::Histogram(h), Change::Observe(value)) => h.observe(value),
            (UserValue::Summary { sum, count }, Change::Observe(value)) => {
                *sum += value;
                *count += 1;
            }
            // `decide` pairs each change with its own type, and the type was checked above.
            (value, change) => unreachable!("{change:?} does not apply to a {}", value.kind()),
        }
        Ok(())
    }

    /// Writes the summaries in the text format, each family's `# HELP` and `# TYPE` lines and its
    /// `_sum` and `_count` samples, as a Go summary without objectives is exposed.
    pub fn encode_summaries(&self, out: &mut String) {
        use std::fmt::Write as _;
        for (name, metric) in &self.metrics {
            if let UserValue::Summary { sum, count } = metric.value {
                let help = escape_help(&metric.help);
                let _ = write!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} summary\n{name}_sum {sum}\n{name}_count {count}\n"
                );
            }
        }
    }

    /// Writes every user metric into a scrape.
    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, metric) in &self.metrics {
            let help = escape_help(&metric.help);
            match &metric.value {
                // OpenMetrics counter samples end in `_total`; upstream exposes the counter under
                // the user's name as is, so a name without that suffix is exposed as `unknown` to
                // keep the series name dashboards query.
                UserValue::Counter(v) => match name.strip_suffix("_total") {
                    Some(family) if !family.is_empty() => encoder
                        .encode_descriptor(family, &help, None, MetricType::Counter)?
                        .encode_counter(v, None::<&Exemplar<NoLabelSet, f64>>)?,
                    _ => {
                        encoder.encode_descriptor(name, &help, None, MetricType::Unknown)?.encode_gauge(v)?
                    }
                },
                UserValue::Gauge(v) => {
                    encoder.encode_descriptor(name, &help, None, MetricType::Gauge)?.encode_gauge(v)?
                }
                UserValue::Histogram(h) => encoder
                    .encode_descriptor(name, &help, None, MetricType::Histogram)?
                    .encode_histogram::<NoLabelSet>(h.sum, h.count, &h.bounds(), None)?,
                // prometheus-client has no summary type: [`UserMetrics::encode_summaries`].
                UserValue::Summary { .. } => {}
            }
        }
        Ok(())
    }
}

/// The metric type a request names, as a fresh value, and the change it asks for.
fn decide(request: &MetricRequest, now: SystemTime) -> Result<(UserValue, Change), UserMetricError> {
    let given = [
        request.counter.is_some(),
        request.gauge.is_some(),
        request.histogram.is_some(),
        request.summary.is_some(),
    ];
    match given.iter().filter(|g| **g).count() {
        0 => return Err(UserMetricError::NoMetric),
        1 => {}
        _ => return Err(UserMetricError::TooManyMetrics),
    }
    if let Some(counter) = &request.counter {
        let change = match (counter.increment, counter.add) {
            (Some(true), _) => Change::Add(1.0),
            (_, Some(add)) if add < 0.0 => return Err(UserMetricError::NegativeCounter),
            (_, Some(add)) => Change::Add(add),
            _ => Change::None,
        };
        return Ok((UserValue::Counter(0.0), change));
    }
    if let Some(gauge) = &request.gauge {
        let change = if gauge.increment == Some(true) {
            Change::Add(1.0)
        } else if gauge.decrement == Some(true) {
            Change::Add(-1.0)
        } else if let Some(add) = gauge.add {
            Change::Add(add)
        } else if let Some(subtract) = gauge.subtract {
            Change::Add(-subtract)
        } else if let Some(set) = gauge.set {
            Change::Set(set)
        } else if gauge.set_to_current_time == Some(true) {
            Change::Set(now.duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0))
        } else {
            Change::None
        };
        return Ok((UserValue::Gauge(0.0), change));
    }
    let (fresh, observe) = match (&request.histogram, &request.summary) {
        (Some(histogram), _) => (UserValue::Histogram(HistogramState::new()), histogram.observe),
        (None, summary) => {
            (UserValue::Summary { sum: 0.0, count: 0 }, summary.as_ref().and_then(|s| s.observe))
        }
    };
    Ok((fresh, observe.map_or(Change::None, Change::Observe)))
}

/// Accepts a Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`) that is not one of ours.
fn validate_name(name: &str) -> Result<(), UserMetricError> {
    if name.len() > MAX_NAME_LENGTH {
        return Err(UserMetricError::NameTooLong { length: name.chars().count() });
    }
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if !valid {
        return Err(UserMetricError::InvalidName { name: name.to_string() });
    }
    let family = |n: &str| n.strip_suffix("_total").unwrap_or(n).to_string();
    if OPERATOR_METRIC_NAMES.iter().any(|ours| *ours == name || family(ours) == family(name)) {
        return Err(UserMetricError::ReservedName { name: name.to_string() });
    }
    Ok(())
}

/// OpenMetrics escaping of a HELP text, so a description cannot break the exposition.
fn escape_help(help: &str) -> String {
    let mut out = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// Exposes the user metrics in the operator's registry on every scrape.
#[derive(Debug)]
pub(super) struct Collector(pub(super) Arc<Mutex<UserMetrics>>);

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).encode(&mut encoder)
    }
}

/// Serves the user-metrics API (`POST /metrics`) until `shutdown` is cancelled; upstream binds
/// `localhost:5050`.
pub async fn serve_user_metrics(listener: TcpListener, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    serve("user-metrics", listener, None, shutdown, move |request| {
        let metrics = metrics.clone();
        async move { handle(&metrics, request).await }
    })
    .await;
}

async fn handle(metrics: &Metrics, request: Request<Incoming>) -> http::Response<Body> {
    if request.uri().path() != "/metrics" {
        return not_found();
    }
    if request.method() != Method::POST {
        return method_not_allowed("POST");
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => return text(StatusCode::BAD_REQUEST, &format!("reading the request body: {error}")),
    };
    let result = serde_json::from_slice::<Value>(&body)
        .map_err(UserMetricError::Malformed)
        .and_then(|value| metrics.apply_user_metric(&value));
    match result {
        // Upstream answers success with an empty body.
        Ok(()) => respond(StatusCode::OK, TEXT_CONTENT_TYPE, ""),
        Err(error) => {
            let message = chain(&error);
            tracing::info!(error = %message, "user metric refused");
            text(StatusCode::BAD_REQUEST, &message)
        }
    }
}

/// An error and its sources, `: `-separated.
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(out, ": {cause}");
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::http_server::test_client::{listener, request};
    use crate::metrics::test_support::{types, value};

    fn apply(metrics: &mut UserMetrics, request: Value) -> Result<(), UserMetricError> {
        metrics.apply_at(&request, UNIX_EPOCH + Duration::from_secs(1_700_000_000))
    }

    fn current(metrics: &UserMetrics, name: &str) -> UserValue {
        metrics.metrics[name].value.clone()
    }

    #[test]
    fn counter_is_registered_on_first_use_and_incremented() {
        let mut m = UserMetrics::default();
        apply(&mut m, json!({"name": "c", "description": "d", "counter": {}})).unwrap();
        assert_eq!(current(&m, "c"), UserValue::Counter(0.0));
        apply(&mut m, json!({"name": "c", "description": "d", "counter": {"increment": true}})).unwrap();
        apply(&mut m, json!({"name": "c", "description": "d", "counter": {"add": 2.5}})).unwrap();
        assert_eq!(current(&m, "c"), UserValue::Counter(3.5));
    }

    #[test]
    fn names_and_descriptions_are_capped_in_length_and_metrics_in_number() {
        let mut m = UserMetrics::default();
        let long = "a".repeat(MAX_NAME_LENGTH + 1);
        let error = apply(&mut m, json!({"name": long, "counter": {}})).unwrap_err();
        assert_eq!(error.to_string(), "metric name of 201 characters is longer than the 200 allowed");
        apply(&mut m, json!({"name": "a".repeat(MAX_NAME_LENGTH), "counter": {}})).unwrap();
        let description = "d".repeat(MAX_DESCRIPTION_LENGTH + 1);
        let error =
            apply(&mut m, json!({"name": "d", "description": description, "counter": {}})).unwrap_err();
        assert!(matches!(error, UserMetricError::DescriptionTooLong { length: 1025 }), "{error}");
        for n in 1..MAX_USER_METRICS {
            apply(&mut m, json!({"name": format!("m{n}"), "counter": {}})).unwrap();
        }
        let error = apply(&mut m, json!({"name": "one_more", "counter": {}})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "1000 user metrics are registered already: metric \"one_more\" is not added"
        );
        assert_eq!(m.metrics.len(), MAX_USER_METRICS);
        // The registered ones still change.
        apply(&mut m, json!({"name": "m1", "counter": {"increment": true}})).unwrap();
        assert_eq!(current(&m, "m1"), UserValue::Counter(1.0));
    }

    #[test]
    fn counter_increment_wins_over_add() {
        let mut m = UserMetrics::default();
        apply(&mut m, json!({"name": "c", "counter": {"increment": true, "add": 10}})).unwrap();
        assert_eq!(current(&m, "c"), UserValue::Counter(1.0));
    }

    #[test]
    fn counter_refuses_a_negative_add_without_registering() {
        let mut m = UserMetrics::default();
        let error = apply(&mut m, json!({"name": "c", "counter": {"add": -1}})).unwrap_err();
        assert_eq!(error.to_string(), "counter metrics cannot decrease in value");
        assert!(m.metrics.is_empty());
    }

    #[test]
    fn null_options_count_as_absent_like_ansible_sends_them() {
        let mut m = UserMetrics::default();
        let request = json!({"name": "g", "description": "d", "counter": null, "histogram": null,
            "gauge": {"increment": null, "decrement": false, "add": null, "set": 7}});
        apply(&mut m, request).unwrap();
        assert_eq!(current(&m, "g"), UserValue::Gauge(7.0));
    }

    #[test]
    fn gauge_takes_the_first_option_in_upstream_order() {
        let cases = [
            (json!({"increment": true, "decrement": true, "set": 9}), 6.0),
            (json!({"decrement": true, "add": 3, "set": 9}), 4.0),
            (json!({"add": 3, "subtract": 1, "set": 9}), 8.0),
            (json!({"subtract": 1, "set": 9}), 4.0),
            (json!({"set": 9, "set_to_current_time": true}), 9.0),
            (json!({"set_to_current_time": true}), 1_700_000_000.0),
            (json!({}), 5.0),
        ];
        for (gauge, expected) in cases {
            let mut m = UserMetrics::default();
            apply(&mut m, json!({"name": "g", "gauge": {"set": 5}})).unwrap();
            apply(&mut m, json!({"name": "g", "gauge": gauge.clone()})).unwrap();
            assert_eq!(current(&m, "g"), UserValue::Gauge(expected), "{gauge}");
        }
    }

    #[test]
    fn gauge_set_to_zero_is_honoured() {
        let mut m = UserMetrics::default();
        apply(&mut m, json!({"name": "g", "gauge": {"set": 5}})).unwrap();
        apply(&mut m, json!({"name": "g", "gauge": {"set": 0}})).unwrap();
        assert_eq!(current(&m, "g"), UserValue::Gauge(0.0));
    }

    #[test]
    fn a_histogram_takes_a_summarys_observe() {
        let mut m = UserMetrics::default();
        apply(&mut m, json!({"name": "h", "histogram": {"observe": 0.3}})).unwrap();
        apply(&mut m, json!({"name": "h", "summary": {"observe": 20}})).unwrap();
        apply(&mut m, json!({"name": "h", "histogram": {}})).unwrap();
        let UserValue::Histogram(h) = current(&m, "h") else { panic!("not a histogram") };
        assert_eq!((h.count, h.sum), (2, 20.3));
        assert_eq!(h.buckets[6], 1, "0.3 lands in le=0.5");
        assert_eq!(h.buckets[DEFAULT_BUCKETS.len()], 1, "20 lands in +Inf");
    }

    #[test]
    fn a_summary_is_a_summary_and_takes_a_histograms_observe() {
        let mut m = UserMetrics::default();
        apply(&mut m, json!({"name": "s", "description": "ensure summary can be created", "summary": {}}))
            .unwrap();
        apply(&mut m, json!({"name": "s", "summary": {"observe": 1.5}})).unwrap();
        apply(&mut m, json!({"name": "s", "histogram": {"observe": 0.5}})).unwrap();
        assert_eq!(current(&m, "s"), UserValue::Summary { sum: 2.0, count: 2 });
        let mut text = String::new();
        m.encode_summaries(&mut text);
        assert_eq!(text, "# HELP s ensure summary can be created\n# TYPE s summary\ns_sum 2\ns_count 2\n");
        let error = apply(&mut m, json!({"name": "s", "gauge": {"set": 1}})).unwrap_err();
        assert!(error.to_string().contains("histogram or summary"), "{error}");
    }

    #[test]
    fn request_with_two_metric_types_is_refused() {
        let mut m = UserMetrics::default();
        let error = apply(&mut m, json!({"name": "x", "counter": {}, "gauge": {}})).unwrap_err();
        assert_eq!(error.to_string(), "only one metric can be processed at a time");
    }

    #[test]
    fn request_without_a_metric_type_is_refused() {
        let mut m = UserMetrics::default();
        let error = apply(&mut m, json!({"name": "x", "description": "d"})).unwrap_err();
        assert_eq!(error.to_string(), "a request should contain at least one metric");
    }

    #[test]
    fn changing_a_metric_type_is_refused_and_keeps_the_value() {
        let mut m = UserMetrics::default();
        apply(&mut m, json!({"name": "x", "counter": {"increment": true}})).unwrap();
        let error = apply(&mut m, json!({"name": "x", "gauge": {"set": 3}})).unwrap_err();
        assert_eq!(error.to_string(), "cannot change metric type of x, which is a counter");
        let error = apply(&mut m, json!({"name": "x", "histogram": {"observe": 1}})).unwrap_err();
        assert!(matches!(error, UserMetricError::TypeChange { existing: "counter", .. }));
        assert_eq!(current(&m, "x"), UserValue::Counter(1.0));
    }

    #[test]
    fn invalid_and_operator_names_are_refused() {
        let mut m = UserMetrics::default();
        for name in ["", "1abc", "has-dash", "spaced name"] {
            let error = apply(&mut m, json!({"name": name, "gauge": {}})).unwrap_err();
            assert!(matches!(error, UserMetricError::InvalidName { .. }), "{name:?}");
        }
        assert!(matches!(apply(&mut m, json!({"gauge": {}})), Err(UserMetricError::InvalidName { .. })));
        for name in [
            "ansible_operator_reconciles",
            "controller_runtime_reconcile",
            "controller_runtime_reconcile_total",
        ] {
            let error = apply(&mut m, json!({"name": name, "counter": {}})).unwrap_err();
            assert!(matches!(error, UserMetricError::ReservedName { .. }), "{name:?}");
        }
    }

    #[test]
    fn malformed_requests_are_refused() {
        let mut m = UserMetrics::default();
        for request in [json!([1]), json!({"name": "x", "counter": {"increment": "yes"}}), json!({"name": 3})]
        {
            assert!(matches!(apply(&mut m, request), Err(UserMetricError::Malformed(_))));
        }
    }

    #[test]
    fn first_description_is_kept() {
        let mut m = UserMetrics::default();
        apply(&mut m, json!({"name": "g", "description": "first", "gauge": {}})).unwrap();
        apply(&mut m, json!({"name": "g", "description": "second", "gauge": {}})).unwrap();
        assert_eq!(m.metrics["g"].help, "first");
    }

    #[test]
    fn exposition_keeps_user_names_and_escapes_descriptions() {
        let metrics = Metrics::new("v", "c");
        let requests = [
            json!({"name": "my_counter_metric", "description": "a\nb \"q\"", "counter": {"add": 2}}),
            json!({"name": "jobs_total", "description": "jobs", "counter": {"increment": true}}),
            json!({"name": "temperature", "description": "t", "gauge": {"set": -4.5}}),
            json!({"name": "latency", "description": "l", "histogram": {"observe": 0.2}}),
            json!({"name": "took", "description": "t", "summary": {"observe": 0.2}}),
        ];
        for request in &requests {
            metrics.apply_user_metric(request).unwrap();
        }
        let text = metrics.encode();
        assert!(text.contains("# HELP my_counter_metric a\\nb \\\"q\\\"\n"), "{text}");
        assert_eq!(value(&text, "my_counter_metric", &[]), Some(2.0));
        assert_eq!(value(&text, "jobs_total", &[]), Some(1.0));
        assert_eq!(value(&text, "temperature", &[]), Some(-4.5));
        assert_eq!(value(&text, "latency_count", &[]), Some(1.0));
        assert_eq!(value(&text, "latency_bucket", &[("le", "0.25")]), Some(1.0));
        assert_eq!(value(&text, "latency_bucket", &[("le", "0.1")]), Some(0.0));
        let types = types(&text);
        for (name, kind) in [
            ("my_counter_metric", "unknown"),
            ("jobs", "counter"),
            ("temperature", "gauge"),
            ("latency", "histogram"),
            ("took", "summary"),
        ] {
            assert!(types.contains(&(name.to_string(), kind.to_string())), "{name} {kind}");
        }
    }

    #[tokio::test]
    async fn user_metrics_endpoint_accepts_posts_and_refuses_the_rest() {
        let metrics = Metrics::new("v", "c");
        let (listener, address) = listener().await;
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_user_metrics(listener, metrics.clone(), shutdown.clone()));

        let body = r#"{"name": "my_counter_metric", "description": "d", "counter": {"increment": true}}"#;
        let reply = request(address, "POST", "/metrics", body).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, ""));
        assert_eq!(value(&metrics.encode(), "my_counter_metric", &[]), Some(1.0));

        let reply =
            request(address, "POST", "/metrics", r#"{"name": "x", "counter": {}, "gauge": {}}"#).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (400, "only one metric can be processed at a time\n")
        );
        let long = format!(r#"{{"name": "{}", "counter": {{}}}}"#, "n".repeat(MAX_NAME_LENGTH + 1));
        let reply = request(address, "POST", "/metrics", &long).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (400, "metric name of 201 characters is longer than the 200 allowed\n")
        );
        let reply = request(address, "POST", "/metrics", "not json").await;
        assert_eq!(reply.status, 400);
        assert!(reply.body.starts_with("invalid metric request: "), "{}", reply.body);
        let reply = request(address, "GET", "/metrics", "").await;
        assert_eq!((reply.status, reply.header("allow")), (405, Some("POST")));
        assert_eq!(request(address, "POST", "/other", body).await.status, 404);

        shutdown.cancel();
        server.await.unwrap();
    }
}
