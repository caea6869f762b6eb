//! What the watch caches hold: CRs per shard, this replica's ring and shard, and the CRs skipped
//! because they could not be decoded.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::family::{Labels, counter_family};

pub(super) const SHARD_CRS: &str = "ansible_operator_shard_crs";
pub(super) const SHARD_INFO: &str = "ansible_operator_shard_info";
pub(super) const UNDECODABLE_CRS: &str = "ansible_operator_undecodable_crs_total";

/// The watch caches' families, registered once.
#[derive(Debug, Clone)]
pub struct ShardMetrics {
    crs: Family<Labels<2>, Gauge>,
    info: Family<Labels<2>, Gauge>,
    undecodable: Family<Labels<1>, Counter>,
}

impl ShardMetrics {
    /// Registers the group's families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let shards =
            ShardMetrics { crs: Family::default(), info: Family::default(), undecodable: Family::default() };
        registry.register(
            SHARD_CRS,
            "With --sharding: CRs assigned to this replica's shard, as held in its watch cache",
            shards.crs.clone(),
        );
        registry.register(
            SHARD_INFO,
            "With --sharding: 1, labelled with this replica's ring and shard (join on it to break the \
             run budget's and the reconciles' series down by shard)",
            shards.info.clone(),
        );
        registry.register(
            counter_family(UNDECODABLE_CRS),
            "CRs (each version of one) the operator could not decode and so skipped, by GVK",
            shards.undecodable.clone(),
        );
        shards
    }

    /// With `--sharding`: names this replica's ring and shard (`ansible_operator_shard_info`).
    pub fn set_shard(&self, ring: &str, shard: &str) {
        let labels = [("ring", ring.to_string()), ("shard", shard.to_string())];
        self.info.get_or_create(&labels).set(1);
    }

    /// Counts a version of a `gvk` CR that could not be decoded (and was skipped).
    pub fn undecodable_cr(&self, gvk: &str) {
        self.undecodable.get_or_create(&[("GVK", gvk.to_string())]).inc();
    }

    /// Starts counting a cache of `gvk` CRs held by `shard`.
    pub fn cached_crs(&self, gvk: &str, shard: &str) -> CachedCrs {
        let labels = [("GVK", gvk.to_string()), ("shard", shard.to_string())];
        CachedCrs { gauge: self.crs.get_or_create(&labels).clone(), last: 0 }
    }
}

/// One watch cache's contribution to `ansible_operator_shard_crs{GVK,shard}` (a kind watched in
/// several namespaces has one cache each; their sizes add up).
pub struct CachedCrs {
    gauge: Gauge,
    last: i64,
}

impl CachedCrs {
    /// The cache now holds `len` CRs.
    pub fn set(&mut self, len: usize) {
        let len = i64::try_from(len).unwrap_or(i64::MAX);
        self.gauge.inc_by(len - self.last);
        self.last = len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::metrics::test_support::value;

    #[test]
    fn shard_info_names_ring_and_shard_only_when_set() {
        let metrics = Metrics::new("v", "c");
        assert!(!metrics.encode().contains("ansible_operator_shard_info{"));
        metrics.set_shard("ring", "replica-a");
        let text = metrics.encode();
        assert_eq!(value(&text, SHARD_INFO, &[("ring", "ring"), ("shard", "replica-a")]), Some(1.0));
    }
}
