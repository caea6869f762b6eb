//! What a kind without a status of the operator's (`manageStatus: false`: Namespaces, Secrets, CRs
//! whose playbooks write their own status) keeps of each object's last successful run, so that
//! `--startup-resync=due` can tell a converged one after a restart (kiali#6081, operator-sdk#6416:
//! every restart ran the playbook once per namespace). One ConfigMap per kind in the operator's
//! namespace, one entry per object under its uid: `<version> <unix seconds>`, the version being the
//! generation (`g3`) or, for kinds without one, the resourceVersion (`r1234`) its run saw.
//! Read once when the watch starts; written in batches, at most every [`FLUSH`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch};
use serde_json::json;

use crate::kubeapi::{self, with_timeout};
use crate::watches::Gvk;

/// How often new confirmations are written.
pub const FLUSH: Duration = Duration::from_secs(2);

/// Entries kept, in bytes of keys and values: a ConfigMap holds at most 1 MiB.
const MAX_BYTES: usize = 900 * 1024;

/// The confirmations of one kind.
#[derive(Debug)]
pub struct Confirmations {
    api: Api<ConfigMap>,
    name: String,
    /// What each object's last successful run left: from the ConfigMap, then from the runs.
    known: Mutex<HashMap<String, String>>,
    /// Entries not written yet (`None`: remove).
    pending: Mutex<BTreeMap<String, Option<String>>>,
    bytes: AtomicUsize,
    /// Set when the ConfigMap cannot be written (its rights are missing): said once, then nothing.
    off: AtomicBool,
    told_full: AtomicBool,
}

impl Confirmations {
    /// Reads the kind's ConfigMap in `namespace` (none yet: no confirmations) and starts writing new
    /// ones. A read that fails is logged; the kind then starts as without confirmations.
    pub async fn load(client: Client, namespace: &str, gvk: &Gvk) -> Arc<Self> {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let name = configmap_name(gvk);
        let known: HashMap<String, String> = match with_timeout(api.get_opt(&name)).await {
            Ok(configmap) => configmap.and_then(|c| c.data).unwrap_or_default().into_iter().collect(),
            Err(error) => {
                tracing::warn!(
                    %gvk, configmap = %name, namespace, error = %crate::logging::error_chain(&error),
                    "cannot read the confirmations of this kind: with --startup-resync=due, all its objects run at start"
                );
                HashMap::new()
            }
        };
        let bytes = known.iter().map(|(key, value)| key.len() + value.len()).sum();
        let confirmations = Arc::new(Confirmations {
            api,
            name,
            known: Mutex::new(known),
            pending: Mutex::default(),
            bytes: AtomicUsize::new(bytes),
            off: AtomicBool::new(false),
            told_full: AtomicBool::new(false),
        });
        tokio::spawn(flush(Arc::downgrade(&confirmations)));
        confirmations
    }

    /// When the object's last successful run ended, when that run saw it as it is now (same uid,
    /// same generation or resourceVersion): it has converged since then.
    pub fn confirmed_at(&self, meta: &ObjectMeta) -> Option<Timestamp> {
        let known = lock(&self.known);
        let (version, seconds) = parse(known.get(meta.uid.as_deref()?)?)?;
        (version == version_of(meta)?).then(|| Timestamp::from_second(seconds).ok()).flatten()
    }

    /// A run of the object, which saw it as `meta` says, succeeded at `at`.
    pub fn confirmed(&self, meta: &ObjectMeta, at: Timestamp) {
        let (Some(uid), Some(version)) = (meta.uid.as_deref(), version_of(meta)) else { return };
        let (key, value) = (uid.to_string(), format!("{version} {}", at.as_second()));
        let mut known = lock(&self.known);
        let before = known.get(&key).map_or(0, |old| key.len() + old.len());
        let after = self.bytes.load(Ordering::Relaxed) - before + key.len() + value.len();
        if after > MAX_BYTES {
            if !self.told_full.swap(true, Ordering::Relaxed) {
                tracing::warn!(configmap = %self.name, "the confirmations of this kind are full: further objects run at start");
            }
            return;
        }
        self.bytes.store(after, Ordering::Relaxed);
        known.insert(key.clone(), value.clone());
        lock(&self.pending).insert(key, Some(value));
    }

    /// The object is gone.
    pub fn forget(&self, meta: &ObjectMeta) {
        let Some(key) = meta.uid.clone() else { return };
        if let Some(old) = lock(&self.known).remove(&key) {
            self.bytes.fetch_sub(key.len() + old.len(), Ordering::Relaxed);
            lock(&self.pending).insert(key, None);
        }
    }

    /// Writes the pending entries: a merge patch of the ConfigMap's data, or the ConfigMap itself
    /// when it is not there yet. Entries that could not be written are kept for the next time.
    async fn write(&self) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        if pending.is_empty() || self.off.load(Ordering::Relaxed) {
            return;
        }
        let patch = json!({"data": pending});
        let written =
            match with_timeout(self.api.patch(&self.name, &kubeapi::patch_params(), &Patch::Merge(&patch)))
                .await
            {
                Err(error) if error.is_not_found() => {
                    let data = pending.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))).collect();
                    let configmap = ConfigMap {
                        metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                        data: Some(data),
                        ..Default::default()
                    };
                    with_timeout(self.api.create(&kubeapi::post_params(), &configmap)).await.map(drop)
                }
                other => other.map(drop),
            };
        match written {
            Ok(()) => {}
            Err(error) if error.code() == Some(403) => {
                self.off.store(true, Ordering::Relaxed);
                tracing::warn!(
                    configmap = %self.name, error = %crate::logging::error_chain(&error),
                    "may not write the confirmations of this kind (grant get, create and patch on configmaps in the operator's namespace): with --startup-resync=due, its objects run at every start"
                );
            }
            Err(error)
                if error
                    .code()
                    .is_some_and(|code| (400..500).contains(&code) && code != 409 && code != 429) =>
            {
                tracing::warn!(
                    configmap = %self.name, error = %crate::logging::error_chain(&error),
                    "the API server refused these confirmations: their objects run at the next start"
                );
            }
            Err(error) => {
                tracing::warn!(configmap = %self.name, error = %crate::logging::error_chain(&error), "could not write confirmations: trying again");
                let mut kept = lock(&self.pending);
                for (key, value) in pending {
                    kept.entry(key).or_insert(value);
                }
            }
        }
    }
}

/// Writes what is pending every [`FLUSH`] until the confirmations are gone.
async fn flush(confirmations: Weak<Confirmations>) {
    let mut ticks = tokio::time::interval(FLUSH);
    loop {
        ticks.tick().await;
        let Some(confirmations) = confirmations.upgrade() else { return };
        confirmations.write().await;
    }
}

/// The ConfigMap of a kind: `ansible-operator-confirmed.<kind>.<version>[.<group>]`, lowercase.
pub fn configmap_name(gvk: &Gvk) -> String {
    let mut name = format!("ansible-operator-confirmed.{}.{}", gvk.kind, gvk.version);
    if !gvk.group.is_empty() {
        name.push('.');
        name.push_str(&gvk.group);
    }
    name.to_lowercase()
}

/// `g<generation>`, else `r<resourceVersion>`.
fn version_of(meta: &ObjectMeta) -> Option<String> {
    match (meta.generation, &meta.resource_version) {
        (Some(generation), _) => Some(format!("g{generation}")),
        (None, Some(version)) => Some(format!("r{version}")),
        (None, None) => None,
    }
}

fn parse(value: &str) -> Option<(String, i64)> {
    let (version, seconds) = value.split_once(' ')?;
    Some((version.to_string(), seconds.parse().ok()?))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confirmations() -> Confirmations {
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        Confirmations {
            api: Api::namespaced(client, "ops"),
            name: "c".into(),
            known: Mutex::default(),
            pending: Mutex::default(),
            bytes: AtomicUsize::new(0),
            off: AtomicBool::new(false),
            told_full: AtomicBool::new(false),
        }
    }

    fn meta(uid: &str, generation: Option<i64>, version: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some("kiali".into()),
            namespace: Some("team-a".into()),
            uid: Some(uid.into()),
            generation,
            resource_version: Some(version.into()),
            ..Default::default()
        }
    }

    const AT: i64 = 1_800_000_000;

    #[tokio::test]
    async fn an_object_as_its_last_successful_run_left_it_is_converged_since_then() {
        let confirmations = confirmations();
        let namespace = meta("u1", None, "41");
        assert_eq!(confirmations.confirmed_at(&namespace), None, "never confirmed");
        confirmations.confirmed(&namespace, Timestamp::from_second(AT).unwrap());
        assert_eq!(confirmations.confirmed_at(&namespace), Some(Timestamp::from_second(AT).unwrap()));
        assert_eq!(confirmations.confirmed_at(&meta("u1", None, "42")), None, "changed since");
        assert_eq!(confirmations.confirmed_at(&meta("u2", None, "41")), None, "another object of that name");
        assert_eq!(lock(&confirmations.pending).get("u1"), Some(&Some(format!("r41 {AT}"))), "to be written");
    }

    #[tokio::test]
    async fn a_kind_with_generations_compares_the_generation_only() {
        let confirmations = confirmations();
        confirmations.confirmed(&meta("u1", Some(3), "41"), Timestamp::from_second(AT).unwrap());
        assert!(
            confirmations.confirmed_at(&meta("u1", Some(3), "57")).is_some(),
            "a status write is no change"
        );
        assert_eq!(confirmations.confirmed_at(&meta("u1", Some(4), "58")), None);
    }

    #[tokio::test]
    async fn a_deleted_object_is_forgotten_and_removed_from_the_configmap() {
        let confirmations = confirmations();
        let object = meta("u1", None, "41");
        confirmations.confirmed(&object, Timestamp::from_second(AT).unwrap());
        confirmations.forget(&object);
        assert_eq!(confirmations.confirmed_at(&object), None);
        assert_eq!(lock(&confirmations.pending).get("u1"), Some(&None));
        assert_eq!(confirmations.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_configmap_is_named_after_the_kind() {
        assert_eq!(
            configmap_name(&Gvk::new("", "v1", "Namespace")),
            "ansible-operator-confirmed.namespace.v1"
        );
        assert_eq!(
            configmap_name(&Gvk::new("kiali.io", "v1alpha1", "Kiali")),
            "ansible-operator-confirmed.kiali.v1alpha1.kiali.io"
        );
    }
}
