//! Shard membership: each replica's own Lease, kept by the leader-election machinery (so renewed,
//! given up on a missed renew deadline and released on shutdown exactly like the leader Lease), and
//! which shards of a ring are live.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;

use super::{Membership, RING_LABEL};
use crate::leader;

/// The leader-election config that keeps `membership`'s shard Lease in `namespace`: the Lease is
/// named after the ring and shard, held by the shard's name and labelled with the ring.
pub fn config(
    membership: &Membership,
    namespace: &str,
    lease_duration: Duration,
    renew_deadline: Duration,
) -> leader::Config {
    leader::Config {
        identity: membership.shard.clone(),
        labels: [(RING_LABEL.to_string(), membership.ring.clone())].into(),
        ..leader::Config::new(namespace, membership.lease_name(), lease_duration, renew_deadline)
    }
}

/// The label selector of a ring's shard Leases.
pub fn ring_selector(ring: &str) -> String {
    format!("{RING_LABEL}={ring}")
}

/// The live shards among `leases` at wall time `now`, sorted: a Lease with a holder that is not
/// past its duration. A released Lease (no holder) or an expired one is a shard gone.
pub fn live_shards<'a>(leases: impl IntoIterator<Item = &'a Lease>, now: Timestamp) -> Vec<String> {
    let mut live: Vec<String> = leases
        .into_iter()
        .filter_map(|lease| lease.spec.as_ref())
        .filter(|spec| !leader::expired(spec, now))
        .filter_map(|spec| spec.holder_identity.clone())
        .filter(|holder| !holder.is_empty())
        .collect();
    live.sort();
    live.dedup();
    live
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;

    fn now() -> Timestamp {
        "2026-11-23T12:00:00Z".parse().unwrap()
    }

    fn lease(holder: Option<&str>, renewed_ago: i64) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(10),
                renew_time: Some(MicroTime(now() - SignedDuration::from_secs(renewed_ago))),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn shards_with_a_current_lease_are_live() {
        let leases = [lease(Some("b"), 1), lease(Some("a"), 9), lease(Some("old"), 11), lease(None, 0)];
        assert_eq!(live_shards(&leases, now()), ["a", "b"]);
    }

    #[test]
    fn the_shard_lease_is_held_by_the_shard_and_names_its_ring() {
        let membership = Membership::new("ring", "pod-a").unwrap();
        let config = config(&membership, "ns", Duration::from_secs(15), Duration::from_secs(10));
        assert_eq!(config.identity, "pod-a");
        assert_eq!(config.name, "ring-shard-pod-a");
        assert_eq!(config.labels.get(RING_LABEL).map(String::as_str), Some("ring"));
        assert!(config.validate().is_ok());
    }
}
