//! Per-CR status series (`--cr-metrics`): each of our conditions' status, the last successful run's
//! time and the failures since, labelled by the CR itself, and dropped when the CR goes.
//!
//! Cardinality: one `ansible_operator_cr_condition` series per CR and condition type it carries,
//! plus one of each of the other two families per CR that has run. This is the one group whose
//! labels name objects (STYLE habit 9 otherwise): users asked for it, and the flag turns it off.
//!
//! The series are kept as one small entry per CR and written out by a collector on each scrape:
//! prometheus-client's `Family` keeps every series' label values as strings of their own and its
//! value behind an `Arc`, about 1.2 KB per CR for its five series; an entry here is about 150 bytes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub(super) const CR_CONDITION: &str = "ansible_operator_cr_condition";
pub(super) const CR_LAST_SUCCESS: &str = "ansible_operator_cr_last_success_timestamp_seconds";
pub(super) const CR_CONSECUTIVE_FAILURES: &str = "ansible_operator_cr_consecutive_failures";

// As a registered family's help: prometheus-client ends those with a full stop.
const CR_CONDITION_HELP: &str =
    "Status of each of the operator's conditions on each CR: 1 when True, else 0 (--cr-metrics).";
const CR_LAST_SUCCESS_HELP: &str =
    "Unix time of the last successful run of each CR since the operator started (--cr-metrics).";
const CR_CONSECUTIVE_FAILURES_HELP: &str =
    "Failed runs of each CR since its last successful one (--cr-metrics).";

/// One CR, as its series name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CrRef {
    /// API group (empty for the core group).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for a cluster-scoped CR).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl CrRef {
    /// The CR's key among its kind's: `namespace/name` (a namespace has no `/`).
    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The per-CR families, registered once.
#[derive(Debug, Default)]
pub struct CrMetrics(std::sync::Arc<Mutex<Crs>>);

/// The series of every CR, by kind.
#[derive(Debug, Default)]
struct Crs {
    /// A few kinds, each with its CRs.
    kinds: Vec<KindSeries>,
}

/// The CRs of one kind.
#[derive(Debug)]
struct KindSeries {
    group: String,
    kind: String,
    /// By `namespace/name` (see [`CrRef::key`]).
    crs: HashMap<Box<str>, Series>,
}

/// One CR's series.
#[derive(Debug, Default)]
struct Series {
    /// Our condition types it carries, and whether each is `True`.
    conditions: Box<[(&'static str, bool)]>,
    /// Unix time of its last successful run, once one succeeded.
    last_success: Option<f64>,
    /// Failed runs since the last successful one, once one ran.
    consecutive_failures: Option<i64>,
}

impl Series {
    fn is_empty(&self) -> bool {
        self.conditions.is_empty() && self.last_success.is_none() && self.consecutive_failures.is_none()
    }
}

impl Crs {
    /// The series of `cr`, created empty.
    fn series(&mut self, cr: &CrRef) -> &mut Series {
        let index = match self.kinds.iter().position(|k| k.group == cr.group && k.kind == cr.kind) {
            Some(index) => index,
            None => {
                let kind = KindSeries { group: cr.group.clone(), kind: cr.kind.clone(), crs: HashMap::new() };
                self.kinds.push(kind);
                self.kinds.len() - 1
            }
        };
        self.kinds[index].crs.entry(cr.key().into_boxed_str()).or_default()
    }

    /// Drops the series of `cr`.
    fn remove(&mut self, cr: &CrRef) {
        if let Some(kind) = self.kinds.iter_mut().find(|k| k.group == cr.group && k.kind == cr.kind) {
            kind.crs.remove(cr.key().as_str());
        }
    }

    /// Every series of one family, with its CR's labels: (group, kind, namespace, name, series).
    fn each(&self) -> impl Iterator<Item = ([(&'static str, &str); 4], &Series)> {
        self.kinds.iter().flat_map(|kind| {
            kind.crs.iter().map(|(key, series)| {
                let (namespace, name) = key.split_once('/').unwrap_or(("", key));
                let labels = [
                    ("group", kind.group.as_str()),
                    ("kind", kind.kind.as_str()),
                    ("namespace", namespace),
                    ("name", name),
                ];
                (labels, series)
            })
        })
    }
}

impl CrMetrics {
    /// Registers the group's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let crs = CrMetrics::default();
        registry.register_collector(Box::new(CrCollector(crs.0.clone())));
        crs
    }

    /// Sets the condition series of `cr` to `conditions` (type, whether `True`); types it no longer
    /// carries are dropped.
    pub fn set_conditions(&self, cr: &CrRef, conditions: impl IntoIterator<Item = (&'static str, bool)>) {
        let conditions: Box<[(&'static str, bool)]> = conditions.into_iter().collect();
        let mut crs = self.lock();
        if conditions.is_empty() {
            let series = crs.series(cr);
            series.conditions = conditions;
            if series.is_empty() {
                crs.remove(cr);
            }
        } else {
            crs.series(cr).conditions = conditions;
        }
    }

    /// A run of `cr` succeeded at `unix_seconds`: its failures start again from 0.
    pub fn succeeded(&self, cr: &CrRef, unix_seconds: f64) {
        let mut crs = self.lock();
        let series = crs.series(cr);
        series.last_success = Some(unix_seconds);
        series.consecutive_failures = Some(0);
    }

    /// A run of `cr` failed.
    pub fn failed(&self, cr: &CrRef) {
        let mut crs = self.lock();
        let failures = &mut crs.series(cr).consecutive_failures;
        *failures = Some(failures.unwrap_or(0).saturating_add(1));
    }

    /// Drops every series of a deleted `cr`.
    pub fn forget(&self, cr: &CrRef) {
        self.lock().remove(cr);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Crs> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes the per-CR families into a scrape, each only when it has a series (as an empty
/// `Family` is left out).
#[derive(Debug)]
struct CrCollector(std::sync::Arc<Mutex<Crs>>);

impl Collector for CrCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let crs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let conditions = crs.each().flat_map(|([group, kind, namespace, name], series)| {
            series.conditions.iter().map(move |(kind_of, is_true)| {
                ([group, kind, namespace, name, ("type", *kind_of)], i64::from(*is_true))
            })
        });
        encode_gauges(&mut encoder, CR_CONDITION, CR_CONDITION_HELP, conditions)?;
        let last_success =
            crs.each().filter_map(|(labels, series)| series.last_success.map(|value| (labels, value)));
        encode_gauges(&mut encoder, CR_LAST_SUCCESS, CR_LAST_SUCCESS_HELP, last_success)?;
        let failures = crs
            .each()
            .filter_map(|(labels, series)| series.consecutive_failures.map(|value| (labels, value)));
        encode_gauges(&mut encoder, CR_CONSECUTIVE_FAILURES, CR_CONSECUTIVE_FAILURES_HELP, failures)
    }
}

/// One gauge family: its descriptor and its series, nothing when it has none.
fn encode_gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl Iterator<Item = (L, V)>,
) -> Result<(), std::fmt::Error> {
    let mut series = series.peekable();
    if series.peek().is_none() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::metrics::test_support::{samples, value};

    fn cr(name: &str) -> CrRef {
        CrRef {
            group: "cache.example.com".into(),
            kind: "Memcached".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn labels<'a>(name: &'a str, kind: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
        let mut labels =
            vec![("group", "cache.example.com"), ("kind", "Memcached"), ("namespace", "ns"), ("name", name)];
        labels.extend(kind.map(|kind| ("type", kind)));
        labels
    }

    fn series_of(text: &str, name: &str) -> usize {
        samples(text).iter().filter(|s| s.labels.iter().any(|(k, v)| k == "name" && v == name)).count()
    }

    #[test]
    fn conditions_are_one_when_true_and_zero_otherwise_and_dropped_types_go() {
        let metrics = Metrics::new("v", "c");
        metrics.cr_conditions(&cr("a"), [("Ready", true), ("Stalled", false), ("Reconciling", false)]);
        let text = metrics.encode();
        assert_eq!(value(&text, CR_CONDITION, &labels("a", Some("Ready"))), Some(1.0));
        assert_eq!(value(&text, CR_CONDITION, &labels("a", Some("Stalled"))), Some(0.0));
        metrics.cr_conditions(&cr("a"), [("Ready", false)]);
        let text = metrics.encode();
        assert_eq!(value(&text, CR_CONDITION, &labels("a", Some("Ready"))), Some(0.0));
        assert_eq!(value(&text, CR_CONDITION, &labels("a", Some("Stalled"))), None);
    }

    #[test]
    fn failures_count_up_until_a_success_which_sets_the_time() {
        let metrics = Metrics::new("v", "c");
        metrics.cr_failed(&cr("a"));
        metrics.cr_failed(&cr("a"));
        let text = metrics.encode();
        assert_eq!(value(&text, CR_CONSECUTIVE_FAILURES, &labels("a", None)), Some(2.0));
        assert_eq!(value(&text, CR_LAST_SUCCESS, &labels("a", None)), None);
        metrics.cr_succeeded(&cr("a"), 1_700_000_000.0);
        let text = metrics.encode();
        assert_eq!(value(&text, CR_CONSECUTIVE_FAILURES, &labels("a", None)), Some(0.0));
        assert_eq!(value(&text, CR_LAST_SUCCESS, &labels("a", None)), Some(1_700_000_000.0));
    }

    #[test]
    fn a_forgotten_cr_leaves_no_series_and_others_keep_theirs() {
        let metrics = Metrics::new("v", "c");
        for name in ["a", "b"] {
            metrics.cr_conditions(&cr(name), [("Ready", true), ("Successful", true)]);
            metrics.cr_succeeded(&cr(name), 1.0);
            metrics.cr_failed(&cr(name));
        }
        metrics.forget_cr(&cr("a"));
        let text = metrics.encode();
        assert_eq!(series_of(&text, "a"), 0, "{text}");
        assert_eq!(series_of(&text, "b"), 4, "{text}");
    }

    #[test]
    fn the_exposition_is_what_prometheus_client_families_give() {
        use prometheus_client::metrics::family::Family;
        use prometheus_client::metrics::gauge::Gauge;
        use std::sync::atomic::AtomicU64;

        let labels = |kind: Option<&str>| {
            let mut labels = vec![
                ("group", "cache.example.com".to_string()),
                ("kind", "Memcached".to_string()),
                ("namespace", "ns".to_string()),
                ("name", "a".to_string()),
            ];
            labels.extend(kind.map(|kind| ("type", kind.to_string())));
            labels
        };
        let mut expected = Registry::default();
        let condition = Family::<Vec<(&str, String)>, Gauge>::default();
        let last_success = Family::<Vec<(&str, String)>, Gauge<f64, AtomicU64>>::default();
        let failures = Family::<Vec<(&str, String)>, Gauge>::default();
        let help = |help: &str| help.strip_suffix('.').unwrap().to_string();
        expected.register(CR_CONDITION, help(CR_CONDITION_HELP), condition.clone());
        expected.register(CR_LAST_SUCCESS, help(CR_LAST_SUCCESS_HELP), last_success.clone());
        expected.register(CR_CONSECUTIVE_FAILURES, help(CR_CONSECUTIVE_FAILURES_HELP), failures.clone());
        condition.get_or_create(&labels(Some("Successful"))).set(1);
        last_success.get_or_create(&labels(None)).set(1_700_000_000.5);
        failures.get_or_create(&labels(None)).set(0);

        let mut ours = Registry::default();
        let crs = CrMetrics::register(&mut ours);
        crs.set_conditions(&cr("a"), [("Successful", true)]);
        crs.succeeded(&cr("a"), 1_700_000_000.5);
        let encode = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        assert_eq!(encode(&ours), encode(&expected));
        crs.forget(&cr("a"));
        assert_eq!(encode(&ours), encode(&Registry::default()), "no family without series");
    }

    #[test]
    fn with_cr_metrics_off_no_per_cr_family_is_exposed() {
        let metrics = Metrics::with_cr_metrics("v", "c", false);
        metrics.cr_conditions(&cr("a"), [("Ready", true)]);
        metrics.cr_succeeded(&cr("a"), 1.0);
        metrics.cr_failed(&cr("a"));
        let text = metrics.encode();
        assert!(!text.contains("ansible_operator_cr_"), "{text}");
    }
}
