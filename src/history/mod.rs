//! The run history: a record of each run that did something, stored as an `AnsibleRun` object owned
//! by the CR (so it survives operator restarts, reads with kubectl and goes with the CR), with a
//! Kubernetes Event on the CR. A successful periodic resync that changed nothing only confirms the
//! latest record. Without the `AnsibleRun` CRD or the rights to write it the history is kept in
//! memory, said once, until they appear (see [`availability`]). A cluster-scoped CR's records live
//! in the operator's own namespace (see [`home`]).

pub mod availability;
pub mod confirmations;
pub mod events;
pub mod home;
pub mod ledger;
pub mod live;
mod memory;
pub mod record;
pub mod trigger;

use std::sync::Mutex;

use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::kubeapi::{self, with_timeout};
use availability::{Store, Tell};
pub use ledger::Ledger;
pub use live::LiveRuns;
use memory::Memory;
pub use record::{Read, RunRecord, Touched};
pub use trigger::Trigger;

/// Why the history could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API call failed.
    #[error("{action} run records of {owner}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// namespace/name of the CR.
        owner: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
}

impl Error {
    /// The CR's namespace is being deleted, so no record can be written in it.
    pub fn is_namespace_terminating(&self) -> bool {
        let Error::Api { source, .. } = self;
        source.is_namespace_terminating()
    }
}

/// The latest record of a CR, as far as the next run needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Latest {
    /// The record's name.
    pub name: String,
    /// The generation its run saw.
    pub generation: Option<i64>,
    /// When its run started (RFC 3339).
    pub started: String,
    /// Times it was confirmed by a resync that changed nothing.
    pub confirmations: i64,
}

/// Where records go.
pub struct History {
    client: Client,
    resource: ApiResource,
    /// Where the access reviews ask (the watched namespaces, or all).
    scopes: Vec<Option<String>>,
    /// Where the records of cluster-scoped CRs go: the operator's own namespace.
    home: String,
    state: Mutex<State>,
    /// Whether the warning about a CRD without `spec.input` or `spec.reads` was given.
    told_old_crd: std::sync::atomic::AtomicBool,
}

/// Where records go now, and those kept in memory meanwhile.
#[derive(Debug)]
struct State {
    store: Store,
    memory: Memory,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").field("store", &lock(&self.state).store).finish_non_exhaustive()
    }
}

impl History {
    /// The history, stored in the cluster when the `AnsibleRun` CRD is served and the operator may
    /// write records in `namespaces` (empty: all), else in memory with one warning. Records of
    /// cluster-scoped CRs go to `home`.
    pub async fn new(client: Client, namespaces: &[String], home: String) -> History {
        let scopes = availability::scopes(namespaces);
        let store = availability::probe(&client, &scopes).await;
        announce(availability::tell(None, &store));
        let gvk = GroupVersionKind::gvk(record::GROUP, record::VERSION, record::KIND);
        let resource = ApiResource::from_gvk_with_plural(&gvk, record::PLURAL);
        History {
            client,
            resource,
            scopes,
            home,
            state: Mutex::new(State { store, memory: Memory::default() }),
            told_old_crd: Default::default(),
        }
    }

    /// The operator's own namespace, where the records of cluster-scoped CRs go.
    pub fn home(&self) -> &str {
        &self.home
    }

    /// While records are kept in memory, looks again every [`availability::RECHECK`] and moves to
    /// the cluster once the CRD and the rights are there; ends then, or at `shutdown`.
    pub async fn recheck(self: std::sync::Arc<Self>, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(availability::RECHECK);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        while !self.in_cluster() {
            tokio::select! {
                _ = interval.tick() => {}
                () = shutdown.cancelled() => return,
            }
            let store = availability::probe(&self.client, &self.scopes).await;
            let mut state = lock(&self.state);
            announce(availability::tell(Some(&state.store), &store));
            if let (Store::Memory(_), Store::Memory(availability::Missing::Unknown(_))) =
                (&state.store, &store)
            {
                continue;
            }
            if store == Store::Cluster {
                // Records from before live on in memory no more: the cluster's are the history.
                state.memory.clear();
            }
            state.store = store;
        }
    }

    /// Where records go now.
    pub fn store(&self) -> Store {
        lock(&self.state).store.clone()
    }

    /// Whether records are in the cluster (false: in memory only).
    pub fn in_cluster(&self) -> bool {
        lock(&self.state).store == Store::Cluster
    }

    /// `f` on the records in memory, when that is where they are (`None`: in the cluster).
    fn in_memory<R>(&self, f: impl FnOnce(&mut Memory) -> R) -> Option<R> {
        let mut state = lock(&self.state);
        match state.store {
            Store::Cluster => None,
            Store::Memory(_) => Some(f(&mut state.memory)),
        }
    }

    /// Where the records of a CR in `namespace` are: there, or for a cluster-scoped CR (`None`) in
    /// the operator's namespace.
    fn place<'a>(&'a self, namespace: Option<&'a str>) -> &'a str {
        namespace.unwrap_or(&self.home)
    }

    fn api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &self.resource),
            None => Api::all_with(self.client.clone(), &self.resource),
        }
    }

    /// A CR's records, newest first (its runs: plans are kept apart); `namespace` is the CR's.
    pub async fn runs(&self, owner_uid: &str, namespace: Option<&str>) -> Result<Vec<Value>, Error> {
        let params =
            ListParams::default().labels(&format!("{}={owner_uid},!{}", record::OWNER_UID, record::PLAN));
        self.list(Some(self.place(namespace)), &params, Some(owner_uid), owner_uid).await
    }

    /// A CR's plans, newest first; `namespace` is the CR's.
    pub async fn plans(&self, owner_uid: &str, namespace: Option<&str>) -> Result<Vec<Value>, Error> {
        let params =
            ListParams::default().labels(&format!("{}={owner_uid},{}", record::OWNER_UID, record::PLAN));
        self.list(Some(self.place(namespace)), &params, Some(&plan_key(owner_uid)), owner_uid).await
    }

    /// Every run record in a namespace (`None`: in all), newest first.
    pub async fn all_runs(&self, namespace: Option<&str>) -> Result<Vec<Value>, Error> {
        let owner = namespace.unwrap_or("all namespaces");
        let params = ListParams::default().labels(&format!("!{}", record::PLAN));
        self.list(namespace, &params, None, owner).await
    }

    /// The records `params` select in the cluster, or in memory those of `owner_uid` (`None`: all);
    /// newest first.
    async fn list(
        &self,
        namespace: Option<&str>,
        params: &ListParams,
        owner_uid: Option<&str>,
        owner: &str,
    ) -> Result<Vec<Value>, Error> {
        let remembered = self.in_memory(|memory| {
            memory
                .records(owner_uid)
                .filter(|run| namespace.is_none() || run["metadata"]["namespace"].as_str() == namespace)
                // Every CR's records are its runs: plans are asked for by their own key.
                .filter(|run| owner_uid.is_some() || run["spec"]["kind"] != "Plan")
                .collect()
        });
        let mut runs: Vec<Value> = match remembered {
            Some(runs) => runs,
            None => with_timeout(self.api(namespace).list(params))
                .await
                .map_err(|source| Error::Api { action: "list", owner: owner.to_string(), source })?
                .items
                .into_iter()
                .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
                .collect(),
        };
        runs.sort_by_key(|run| std::cmp::Reverse(start_time(run)));
        Ok(runs)
    }

    /// The latest record of a CR.
    pub async fn latest(&self, owner_uid: &str, namespace: Option<&str>) -> Result<Option<Latest>, Error> {
        let runs = self.runs(owner_uid, namespace).await?;
        Ok(runs.first().map(|run| Latest {
            name: run["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            generation: run["spec"]["owner"]["generation"].as_i64(),
            started: started(run).to_string(),
            confirmations: run["status"]["confirmations"].as_i64().unwrap_or(0),
        }))
    }

    /// Stores a record and keeps the CR's newest `limit` (of its runs, or of its plans).
    pub async fn record(&self, record: &RunRecord, limit: usize) -> Result<(), Error> {
        let owner = || record.owner.name.clone();
        let namespace = Some(self.place(record.owner.namespace.as_deref()));
        let mut manifest = record.manifest();
        // Where the record is, in memory as in the cluster (a cluster-scoped CR's is in `home`).
        manifest["metadata"]["namespace"] = json!(namespace);
        let key = if record.plan { plan_key(&record.owner.uid) } else { record.owner.uid.clone() };
        let kept = self.in_memory(|memory| memory.push(&key, &manifest, limit));
        match kept {
            Some(()) => {}
            None => {
                let params = kube::api::PatchParams::apply(kubeapi::FIELD_MANAGER).force();
                let api = self.api(namespace);
                let name = record.object_name();
                let mut written = with_timeout(api.patch(&name, &params, &Patch::Apply(&manifest))).await;
                let undeclared = written.as_ref().err().map(undeclared).unwrap_or_default();
                if !undeclared.is_empty() {
                    // A CRD older than the operator (upgraded first): the record without those fields.
                    if !self.told_old_crd.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::warn!(
                            fields = ?undeclared,
                            install = availability::INSTALL,
                            "the AnsibleRun CRD is older than the operator: run records are written without \
                             these fields (replay --run needs spec.input); update the CRD"
                        );
                    }
                    let mut manifest = manifest.clone();
                    if let Some(spec) = manifest["spec"].as_object_mut() {
                        undeclared.iter().for_each(|field| _ = spec.remove(*field));
                    }
                    written = with_timeout(api.patch(&name, &params, &Patch::Apply(&manifest))).await;
                }
                written.map_err(|source| Error::Api { action: "write", owner: owner(), source })?;
                self.prune(&record.owner.uid, namespace, limit, record.plan).await?;
            }
        }
        Ok(())
    }

    /// Notes that a resync that changed nothing confirmed the latest record.
    pub async fn confirm(
        &self,
        latest: &Latest,
        owner_uid: &str,
        namespace: Option<&str>,
    ) -> Result<(), Error> {
        let namespace = Some(self.place(namespace));
        let status = json!({"confirmations": latest.confirmations + 1, "lastConfirmed": jiff::Timestamp::now().to_string()});
        let kept = self.in_memory(|memory| memory.set_latest_status(owner_uid, &status));
        match kept {
            Some(()) => {}
            None => {
                let patch = json!({"status": status});
                with_timeout(self.api(namespace).patch_status(
                    &latest.name,
                    &kubeapi::patch_params(),
                    &Patch::Merge(&patch),
                ))
                .await
                .map_err(|source| Error::Api {
                    action: "confirm",
                    owner: latest.name.clone(),
                    source,
                })?;
            }
        }
        Ok(())
    }

    /// Deletes all but the newest `limit` records of a CR (of its plans when `plans`).
    async fn prune(
        &self,
        owner_uid: &str,
        namespace: Option<&str>,
        limit: usize,
        plans: bool,
    ) -> Result<(), Error> {
        let runs = match plans {
            true => self.plans(owner_uid, namespace).await?,
            false => self.runs(owner_uid, namespace).await?,
        };
        for old in runs.iter().skip(limit) {
            let name = old["metadata"]["name"].as_str().unwrap_or_default();
            let api = self.api(old["metadata"]["namespace"].as_str());
            match with_timeout(api.delete(name, &DeleteParams::default())).await {
                Ok(_) => {}
                Err(error) if error.is_not_found() => {}
                Err(source) => {
                    return Err(Error::Api { action: "prune", owner: owner_uid.to_string(), source });
                }
            }
        }
        Ok(())
    }

    /// One record by name; `namespace` is its CR's.
    pub async fn run(&self, namespace: Option<&str>, name: &str) -> Result<Option<Value>, Error> {
        let namespace = Some(self.place(namespace));
        let remembered = self.in_memory(|memory| {
            memory
                .records(None)
                .find(|r| r["metadata"]["name"] == name && r["metadata"]["namespace"].as_str() == namespace)
        });
        match remembered {
            Some(found) => Ok(found),
            None => with_timeout(self.api(namespace).get_opt(name))
                .await
                .map(|found| found.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
                .map_err(|source| Error::Api { action: "read", owner: name.to_string(), source }),
        }
    }
}

/// Logs what [`availability::tell`] decided.
fn announce(tell: Tell) {
    match tell {
        Tell::Nothing => {}
        Tell::InMemory(missing) => tracing::warn!(
            missing = %missing,
            install = availability::INSTALL,
            "run history is not installed: run records are kept in memory only (the API and console show those); runs, status and metrics are unaffected"
        ),
        Tell::Installed => tracing::info!("run history installed: run records are now stored as AnsibleRuns"),
    }
}

/// Where a CR's plans are kept in memory: apart from its runs, so they neither count as its latest
/// run nor push its runs out.
fn plan_key(owner_uid: &str) -> String {
    format!("plan/{owner_uid}")
}

/// The record's start time as written.
fn started(run: &Value) -> &str {
    run["spec"]["startTime"].as_str().unwrap_or_default()
}

/// The record's start time, for ordering (unreadable ones first).
fn start_time(run: &Value) -> Option<jiff::Timestamp> {
    started(run).parse().ok()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The fields of a record's `spec` newer than the CRD [`record`] was refused by: the API server's
/// server-side apply answer names each field its schema lacks.
fn undeclared(error: &kubeapi::Error) -> Vec<&'static str> {
    let message = crate::logging::error_chain(error);
    if !message.contains("field not declared in schema") {
        return Vec::new();
    }
    ["input", "reads"].into_iter().filter(|field| message.contains(&format!(".spec.{field}:"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(message: &str) -> kubeapi::Error {
        let status = kube::core::Status::failure(message, "").with_code(500);
        kubeapi::Error::Kube(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn only_the_fields_a_crd_lacks_are_dropped_from_a_record() {
        let prefix =
            "failed to create typed patch object (ns/r-1; ansible-operator.dev/v1alpha1, Kind=AnsibleRun): ";
        let reads = format!("{prefix}.spec.reads: field not declared in schema");
        assert_eq!(undeclared(&refused(&reads)), ["reads"]);
        let both = format!(
            "{prefix}.spec.input: field not declared in schema, .spec.reads: field not declared in schema"
        );
        assert_eq!(undeclared(&refused(&both)), ["input", "reads"]);
        assert!(undeclared(&refused(".spec.other: field not declared in schema")).is_empty());
        assert!(undeclared(&kubeapi::Error::Timeout(std::time::Duration::from_secs(1))).is_empty());
    }
}
