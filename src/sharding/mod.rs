//! Scale-out (`--sharding`): every replica reconciles, each only its share of the CRs.
//!
//! Built from what Kubernetes already has, after the design of `timebertt/kubernetes-controller-sharding`:
//! - membership: each replica (a *shard*) holds its own `coordination.k8s.io` Lease, labelled with
//!   the ring's name and renewed like the leader Lease ([`lease`]); a Lease past its duration is a
//!   shard gone;
//! - assignment: the replica holding the leader Lease is also the *sharder* ([`sharder`]): it labels
//!   every watched CR `ansible-operator.dev/shard-<ring>: <shard>` by consistent hashing with
//!   bounded loads ([`ring`], [`assign`]);
//! - handover: to move a CR between live shards the sharder sets `ansible-operator.dev/drain-<ring>`;
//!   the owner lets its run finish, then drops both labels ([`acknowledge_drain`]); only then does
//!   the sharder label it for the new shard, so two replicas never run one CR at once;
//! - caches: each replica's CR watches select `shard-<ring>=<itself>`, and the proxy labels the
//!   children a run creates with the same label so dependent watches are sharded too.

pub mod assign;
pub mod lease;
pub mod ring;
pub mod sharder;

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch};
use kube::core::Expression;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::watches::selector::is_label_name;

/// Domain of the labels sharding sets (the project's own, as its annotations).
pub const DOMAIN: &str = "ansible-operator.dev";
/// Label on each shard Lease naming its ring.
pub const RING_LABEL: &str = "ansible-operator.dev/ring";
/// Value of the drain label.
pub const DRAIN_VALUE: &str = "true";

/// The longest label name part (`shard-<ring>`) and label value Kubernetes accepts.
const LABEL_PART_MAX: usize = 63;

/// A failed step of sharding.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ring's name cannot be part of a label.
    #[error(
        "sharding ring {ring:?}: must be at most 57 characters of letters, digits, '-', '_' or '.', \
         starting and ending with a letter or digit (set --sharding-ring)"
    )]
    Ring {
        /// The name given.
        ring: String,
    },
    /// Labelling a CR failed (409: it changed since it was read).
    #[error("label {key}")]
    Label {
        /// `namespace/name` of the CR.
        key: String,
        /// Cause.
        #[source]
        source: crate::kubeapi::Error,
    },
}

impl Error {
    /// 409: the object changed since it was read; the next look sees the change.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Label { source, .. } if source.is_conflict())
    }
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// This replica's place in a ring: which ring, and which shard it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The ring's name (`--sharding-ring`).
    pub ring: String,
    /// This replica's shard name: a label value, unique among live replicas.
    pub shard: String,
}

impl Membership {
    /// Checks that `ring` fits in a label name; `shard` is made a label value.
    pub fn new(ring: impl Into<String>, shard: &str) -> Result<Self> {
        let ring = ring.into();
        if !is_label_name(&format!("shard-{ring}")) {
            return Err(Error::Ring { ring });
        }
        Ok(Self { ring, shard: label_value(shard) })
    }

    /// `ansible-operator.dev/shard-<ring>`: the label naming a CR's (or child's) shard.
    pub fn shard_label(&self) -> String {
        format!("{DOMAIN}/shard-{}", self.ring)
    }

    /// `ansible-operator.dev/drain-<ring>`: the sharder's request to let a CR go.
    pub fn drain_label(&self) -> String {
        format!("{DOMAIN}/drain-{}", self.ring)
    }

    /// The selector of this shard's objects.
    pub fn selector(&self) -> Expression {
        Expression::Equal(self.shard_label(), self.shard.clone())
    }

    /// Whether the sharder asked for `object` to be let go.
    pub fn draining(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.contains_key(&self.drain_label())
    }

    /// Name of this shard's Lease: the ring and shard, as a DNS subdomain.
    pub fn lease_name(&self) -> String {
        lease_name(&self.ring, &self.shard)
    }
}

/// `<ring>-shard-<shard>`, lowercased, with anything a Lease name may not hold turned into `-`.
pub fn lease_name(ring: &str, shard: &str) -> String {
    let name: String = format!("{ring}-shard-{shard}")
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
        .take(253)
        .collect();
    name.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string()
}

/// This process's shard name: the pod's name (`POD_NAME`, set by the deploy/ manifests) or, outside
/// a cluster, the host name with a random suffix so that processes on one host differ.
pub fn shard_name(pod_name: Option<&str>, hostname: &str, suffix: &str) -> String {
    match pod_name.filter(|name| !name.is_empty()) {
        Some(pod) => label_value(pod),
        None => {
            let suffix = label_value(suffix);
            let host: String =
                label_value(hostname).chars().take(LABEL_PART_MAX - suffix.len() - 1).collect();
            label_value(&format!("{host}-{suffix}"))
        }
    }
}

/// `text` as a label value: at most 63 of `[A-Za-z0-9-_.]`, starting and ending alphanumeric
/// (other characters become `-`; an empty result becomes `shard`).
fn label_value(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' })
        .take(LABEL_PART_MAX)
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() { "shard".to_string() } else { trimmed.to_string() }
}

/// The owner's half of the handover: drop the shard and drain labels of `object`, which this replica
/// no longer runs (the controller calls this only between runs of the CR). The write carries the
/// `resourceVersion` read, so it fails rather than drop labels the sharder changed meanwhile.
pub async fn acknowledge_drain<K: Resource>(
    api: &Api<DynamicObject>,
    object: &K,
    membership: &Membership,
) -> Result<()> {
    let key = format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any());
    let patch = json!({
        "metadata": {
            "resourceVersion": object.resource_version(),
            "labels": { (membership.shard_label()): null, (membership.drain_label()): null },
        }
    });
    label(api, &object.name_any(), &patch).await.map_err(|source| Error::Label { key, source })
}

/// Merge-patches `name`'s metadata (labels, with a `resourceVersion` precondition).
pub(crate) async fn label(
    api: &Api<DynamicObject>,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), crate::kubeapi::Error> {
    let params = crate::kubeapi::patch_params();
    crate::kubeapi::with_timeout(api.patch_metadata(name, &params, &Patch::Merge(patch))).await.map(drop)
}

/// The stable identity of a CR on the ring: `group/kind/namespace/name`.
pub fn ring_key<K: Resource>(object: &K, group: &str, kind: &str) -> String {
    let meta = object.meta();
    format!(
        "{group}/{kind}/{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_named_after_the_ring() {
        let membership = Membership::new("memcached-operator", "pod-a").unwrap();
        assert_eq!(membership.shard_label(), "ansible-operator.dev/shard-memcached-operator");
        assert_eq!(membership.drain_label(), "ansible-operator.dev/drain-memcached-operator");
        assert_eq!(membership.selector().to_string(), "ansible-operator.dev/shard-memcached-operator=pod-a");
        assert_eq!(membership.lease_name(), "memcached-operator-shard-pod-a");
    }

    #[test]
    fn a_ring_that_cannot_be_a_label_is_rejected() {
        assert!(Membership::new("has space", "a").is_err());
        assert!(Membership::new("x".repeat(58), "a").is_err());
        assert!(Membership::new("x".repeat(57), "a").is_ok());
        assert!(Membership::new("lead-", "a").is_err());
    }

    #[test]
    fn the_shard_is_the_pod_name_or_the_host_with_a_suffix() {
        assert_eq!(shard_name(Some("op-7d9f-x2"), "host", "ab12"), "op-7d9f-x2");
        assert_eq!(shard_name(None, "My_Host!", "ab12"), "My_Host-ab12");
        let long = shard_name(None, &"h".repeat(80), "0123456789abcdef");
        assert!(long.len() <= 63 && long.ends_with("-0123456789abcdef"), "{long}");
    }

    #[test]
    fn lease_names_are_dns_subdomains() {
        assert_eq!(lease_name("My_Ring", "Host_1"), "my-ring-shard-host-1");
    }
}
