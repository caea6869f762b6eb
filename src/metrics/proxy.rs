//! What the API proxy held back: requests delayed or refused by its rate limits.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::family::{Labels, counter_family};

pub(super) const PROXY_THROTTLED: &str = "ansible_operator_proxy_throttled_requests_total";

/// The proxy's families, registered once.
#[derive(Debug, Clone)]
pub struct ProxyMetrics {
    throttled: Family<Labels<2>, Counter>,
}

impl ProxyMetrics {
    /// Registers the group's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let proxy = ProxyMetrics { throttled: Family::default() };
        registry.register(
            counter_family(PROXY_THROTTLED),
            "Requests of runs through the API proxy held back by its rate limits, by the limit \
             (run: --proxy-qps-per-run, operator: --proxy-qps) and the outcome (delayed: sent after a \
             wait, refused: answered 429)",
            proxy.throttled.clone(),
        );
        proxy
    }

    /// Counts a request held back by `limit` with `outcome`.
    pub fn throttled(&self, limit: &'static str, outcome: &'static str) {
        let labels = [("limit", limit.to_string()), ("outcome", outcome.to_string())];
        self.throttled.get_or_create(&labels).inc();
    }
}
