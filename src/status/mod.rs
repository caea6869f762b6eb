//! The CR's status: conditions computed purely (`conditions`) and written through the status
//! subresource with a merge patch guarded by the resourceVersion read, so keys other than
//! `conditions` (for example from `operator_sdk.util.k8s_status`) are never touched.

pub mod conditions;

use kube::api::{Api, DynamicObject, Patch};
use serde_json::{Map, Value, json};

pub use conditions::Transition;

use crate::kubeapi::{self, with_timeout};

/// Attempts before a status write gives up on conflicting writers.
const ATTEMPTS: usize = 5;

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the CR failed.
    #[error("read {name} for its status")]
    Read {
        /// CR name.
        name: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
    /// The status subresource rejected the write (or the CRD has none).
    #[error("write the status of {name}")]
    Write {
        /// CR name.
        name: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
    /// The kind has no status subresource (enable `subresources: {status: {}}` in the CRD, or set
    /// `manageStatus: false`).
    #[error("write the status of {name}: the kind does not support the status subresource")]
    NoStatusSubresource {
        /// CR name.
        name: String,
    },
    /// Other writers kept changing the CR.
    #[error("write the status of {name}: still conflicting after {ATTEMPTS} attempts")]
    Conflict {
        /// CR name.
        name: String,
    },
}

/// Which conditions a status write keeps: upstream's always, the kstatus trio with
/// `readyConditions` (see [`conditions::kstatus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conditions {
    /// `Running`, `Successful`, `Failure`, exactly as upstream.
    Upstream,
    /// Upstream's, plus `Ready`, `Reconciling` and `Stalled`.
    WithKstatus,
}

impl Conditions {
    /// The conditions of a watch whose `readyConditions` (or the flag) is `ready`.
    pub fn with_ready(ready: bool) -> Self {
        if ready { Conditions::WithKstatus } else { Conditions::Upstream }
    }

    /// The next list after `transition`.
    fn next(
        self,
        current: &[Value],
        transition: &Transition,
        now: &str,
        generation: Option<i64>,
    ) -> Vec<Value> {
        let upstream = conditions::next(current, transition, now, generation);
        match self {
            Conditions::Upstream => upstream,
            Conditions::WithKstatus => conditions::kstatus(&upstream, transition, now, generation),
        }
    }
}

/// Applies a transition to the CR's conditions (with the kstatus ones in the same write when
/// `kinds` says so). Returns the CR as written (the freshest copy), or `None` when the CR no
/// longer exists.
pub async fn write(
    api: &Api<DynamicObject>,
    name: &str,
    kinds: Conditions,
    transition: &Transition,
    generation: Option<i64>,
) -> Result<Option<DynamicObject>, Error> {
    write_with_hosts(api, name, kinds, transition, generation, None, None).await
}

/// [`write`], also replacing `status.hosts` (per-host results of a run over an inventory) when
/// `hosts` is given: hosts no longer in the inventory are dropped. `fresh`, a copy of the CR the
/// caller has just read, is written on first instead of reading it again (a conflict reads it).
pub async fn write_with_hosts(
    api: &Api<DynamicObject>,
    name: &str,
    kinds: Conditions,
    transition: &Transition,
    generation: Option<i64>,
    hosts: Option<&Map<String, Value>>,
    mut fresh: Option<DynamicObject>,
) -> Result<Option<DynamicObject>, Error> {
    for _ in 0..ATTEMPTS {
        let read = match fresh.take() {
            Some(object) => Ok(Some(object)),
            None => with_timeout(api.get_opt(name)).await,
        };
        let current = match read {
            Ok(Some(object)) => object,
            Ok(None) => return Ok(None),
            Err(source) => {
                return Err(Error::Read { name: name.to_string(), source });
            }
        };
        let existing = current.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let next = kinds.next(&existing, transition, &now(), generation);
        let hosts_patch = hosts.and_then(|hosts| hosts_patch(&current.data["status"]["hosts"], hosts));
        if next == existing && hosts_patch.is_none() {
            return Ok(Some(current));
        }
        let mut status = json!({"conditions": next});
        if let Some(hosts) = hosts_patch {
            status["hosts"] = hosts;
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "status": status,
        });
        match with_timeout(api.patch_status(name, &kubeapi::patch_params(), &Patch::Merge(&patch))).await {
            Ok(written) => return Ok(Some(written)),
            Err(err) if err.is_conflict() => continue,
            Err(err) if err.is_not_found() => {
                // Either the CR is gone, or its kind has no status subresource.
                return match with_timeout(api.get_opt(name)).await {
                    Ok(None) => Ok(None),
                    _ => Err(Error::NoStatusSubresource { name: name.to_string() }),
                };
            }
            Err(source) => {
                return Err(Error::Write { name: name.to_string(), source });
            }
        }
    }
    Err(Error::Conflict { name: name.to_string() })
}

/// The merge patch turning `existing` into `wanted` (hosts, and keys of a host's result, that are
/// gone set to null), or `None` when they are equal.
fn hosts_patch(existing: &Value, wanted: &Map<String, Value>) -> Option<Value> {
    let existing = existing.as_object().cloned().unwrap_or_default();
    if &existing == wanted {
        return None;
    }
    let mut patch = wanted.clone();
    for (host, old) in &existing {
        match patch.get_mut(host) {
            None => {
                patch.insert(host.clone(), Value::Null);
            }
            Some(Value::Object(new)) => {
                for key in old.as_object().into_iter().flat_map(|old| old.keys()) {
                    new.entry(key.clone()).or_insert(Value::Null);
                }
            }
            Some(_) => {}
        }
    }
    Some(Value::Object(patch))
}

/// The current time as a Kubernetes condition timestamp (RFC 3339, seconds, UTC).
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The conditions of an object, for callers that inspect them.
pub fn conditions_of(object: &DynamicObject) -> &[Value] {
    object.data["status"]["conditions"].as_array().map(Vec::as_slice).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_patch_drops_hosts_no_longer_in_the_inventory() {
        let wanted = json!({"a": {"ok": 1}, "c": {"ok": 2}});
        let existing = json!({"a": {"ok": 1, "lastFailure": "x"}, "b": {"ok": 1}});
        let patch = hosts_patch(&existing, wanted.as_object().unwrap());
        assert_eq!(patch, Some(json!({"a": {"ok": 1, "lastFailure": null}, "b": null, "c": {"ok": 2}})));
        assert_eq!(hosts_patch(&wanted, wanted.as_object().unwrap()), None);
        assert_eq!(hosts_patch(&Value::Null, wanted.as_object().unwrap()), Some(wanted.clone()));
    }
}
