//! What every group of the operator's metrics shares: label sets of one or two low-cardinality
//! labels, the default histogram buckets, and how prometheus-client names a counter.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// Prometheus client libraries' default histogram buckets, in seconds.
pub const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// A label set of one or two low-cardinality labels (GVK, controller, result).
pub type Labels<const N: usize> = [(&'static str, String); N];

/// Constructor of the histogram families.
pub type HistogramFamily<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

/// A histogram family over [`DEFAULT_BUCKETS`].
pub fn histogram_family<const N: usize>() -> HistogramFamily<N> {
    Family::new_with_constructor(default_histogram)
}

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// The family name under which prometheus-client exposes `name` as a counter (it appends
/// `_total` to counter names).
pub fn counter_family(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}
