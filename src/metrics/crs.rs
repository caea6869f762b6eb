//! Per-CR status series (`--cr-metrics`): each of our conditions' status, the last successful run's
//! time and the failures since, labelled by the CR itself, and dropped when the CR goes.
//!
//! Cardinality: one `ansible_operator_cr_condition` series per CR and condition type it carries,
//! plus one of each of the other two families per CR that has run. This is the one group whose
//! labels name objects (STYLE habit 9 otherwise): users asked for it, and the flag turns it off.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::family::Labels;

pub(super) const CR_CONDITION: &str = "ansible_operator_cr_condition";
pub(super) const CR_LAST_SUCCESS: &str = "ansible_operator_cr_last_success_timestamp_seconds";
pub(super) const CR_CONSECUTIVE_FAILURES: &str = "ansible_operator_cr_consecutive_failures";

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
    fn labels(&self) -> Labels<4> {
        [
            ("group", self.group.clone()),
            ("kind", self.kind.clone()),
            ("namespace", self.namespace.clone()),
            ("name", self.name.clone()),
        ]
    }

    fn with_type(&self, kind: &str) -> Labels<5> {
        let [group, cr_kind, namespace, name] = self.labels();
        [group, cr_kind, namespace, name, ("type", kind.to_string())]
    }
}

/// The per-CR families, registered once.
#[derive(Debug, Default)]
pub struct CrMetrics {
    condition: Family<Labels<5>, Gauge>,
    last_success: Family<Labels<4>, Gauge<f64, AtomicU64>>,
    consecutive_failures: Family<Labels<4>, Gauge>,
    /// The condition types exposed per CR, so a deleted CR's series all go.
    types: Mutex<HashMap<CrRef, BTreeSet<String>>>,
}

impl CrMetrics {
    /// Registers the group's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let crs = CrMetrics::default();
        registry.register(
            CR_CONDITION,
            "Status of each of the operator's conditions on each CR: 1 when True, else 0 (--cr-metrics)",
            crs.condition.clone(),
        );
        registry.register(
            CR_LAST_SUCCESS,
            "Unix time of the last successful run of each CR since the operator started (--cr-metrics)",
            crs.last_success.clone(),
        );
        registry.register(
            CR_CONSECUTIVE_FAILURES,
            "Failed runs of each CR since its last successful one (--cr-metrics)",
            crs.consecutive_failures.clone(),
        );
        crs
    }

    /// Sets the condition series of `cr` to `conditions` (type, whether `True`); types it no longer
    /// carries are dropped.
    pub fn set_conditions<'a>(&self, cr: &CrRef, conditions: impl IntoIterator<Item = (&'a str, bool)>) {
        let mut types = self.types.lock().unwrap_or_else(PoisonError::into_inner);
        let known = types.entry(cr.clone()).or_default();
        let mut now = BTreeSet::new();
        for (kind, is_true) in conditions {
            self.condition.get_or_create(&cr.with_type(kind)).set(i64::from(is_true));
            now.insert(kind.to_string());
        }
        for gone in known.difference(&now) {
            self.condition.remove(&cr.with_type(gone));
        }
        *known = now;
    }

    /// A run of `cr` succeeded at `unix_seconds`: its failures start again from 0.
    pub fn succeeded(&self, cr: &CrRef, unix_seconds: f64) {
        let labels = cr.labels();
        self.last_success.get_or_create(&labels).set(unix_seconds);
        self.consecutive_failures.get_or_create(&labels).set(0);
    }

    /// A run of `cr` failed.
    pub fn failed(&self, cr: &CrRef) {
        self.consecutive_failures.get_or_create(&cr.labels()).inc();
    }

    /// Drops every series of a deleted `cr`.
    pub fn forget(&self, cr: &CrRef) {
        let known = self.types.lock().unwrap_or_else(PoisonError::into_inner).remove(cr);
        for kind in known.into_iter().flatten() {
            self.condition.remove(&cr.with_type(&kind));
        }
        self.last_success.remove(&cr.labels());
        self.consecutive_failures.remove(&cr.labels());
    }
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
    fn with_cr_metrics_off_no_per_cr_family_is_exposed() {
        let metrics = Metrics::with_cr_metrics("v", "c", false);
        metrics.cr_conditions(&cr("a"), [("Ready", true)]);
        metrics.cr_succeeded(&cr("a"), 1.0);
        metrics.cr_failed(&cr("a"));
        let text = metrics.encode();
        assert!(!text.contains("ansible_operator_cr_"), "{text}");
    }
}
