//! Where a scenario's steps run (its namespace, the operator's kinds and run records), and how a
//! step looks at the cluster until what it waits for holds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::Kind;
use crate::history::History;
use crate::scenario::name_of;

/// Between two looks at the cluster.
const POLL: Duration = Duration::from_millis(250);

/// Where a scenario's steps run.
pub(super) struct Stage<'a> {
    pub client: &'a Client,
    pub history: &'a History,
    /// The kinds the operator watches, with their planners.
    pub kinds: &'a [Kind],
    /// The scenario's namespace: objects without one are in it.
    pub namespace: &'a str,
    /// The scenario file's directory.
    pub dir: &'a Path,
    /// The command's work directory (the operator's log and runner directory).
    pub work: &'a Path,
    /// The resource and scope of each kind a step named, found once (`group/version/kind`).
    discovered: Mutex<HashMap<String, (ApiResource, Scope)>>,
    /// With `--image`: the cluster-scoped objects the manager's deploy made, removed after.
    deployed: Mutex<Vec<Value>>,
}

impl<'a> Stage<'a> {
    pub fn new(
        client: &'a Client,
        history: &'a History,
        kinds: &'a [Kind],
        namespace: &'a str,
        dir: &'a Path,
        work: &'a Path,
    ) -> Self {
        Stage {
            client,
            history,
            kinds,
            namespace,
            dir,
            work,
            discovered: Mutex::default(),
            deployed: Mutex::default(),
        }
    }
}

/// Why one look did not settle the step.
pub(super) enum Miss {
    /// Not yet: look again until the step's timeout (what was seen).
    Again(String),
    /// Failed for good.
    Fatal(String),
}

impl From<kube::Error> for Miss {
    fn from(error: kube::Error) -> Self {
        match &error {
            // Not there yet (a CRD being established), a conflict or a busy server: look again.
            kube::Error::Api(status) if [404, 409, 429].contains(&status.code) || status.code >= 500 => {
                Miss::Again(status.message.clone())
            }
            kube::Error::Api(status) => Miss::Fatal(status.message.clone()),
            other => Miss::Again(other.to_string()),
        }
    }
}

/// Looks with `look` until it settles or `timeout` passes; then the last thing seen is the failure.
pub(super) async fn until<T, F, Fut>(timeout: Duration, mut look: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Miss>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match look().await {
            Ok(value) => return Ok(value),
            Err(Miss::Fatal(message)) => return Err(message),
            Err(Miss::Again(seen)) if Instant::now() >= deadline => {
                return Err(format!("{seen} (after {})", crate::go_duration::format(timeout)));
            }
            Err(Miss::Again(_)) => tokio::time::sleep(POLL).await,
        }
    }
}

impl Stage<'_> {
    /// The object's API and name.
    pub(super) async fn api(&self, object: &Value) -> Result<(Api<DynamicObject>, String), Miss> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let key = format!("{api_version}/{kind}");
        let known = self.discovered().get(&key).cloned();
        let (resource, scope) = match known {
            Some(found) => found,
            None => {
                // Looked up until served (a CRD just applied), and then kept for the steps after.
                let gvk = GroupVersionKind::gvk(group, version, kind);
                let (resource, capabilities) = kube::discovery::pinned_kind(self.client, &gvk)
                    .await
                    .map_err(|error| Miss::Again(format!("{kind} ({api_version}) is not served: {error}")))?;
                self.discovered().insert(key, (resource.clone(), capabilities.scope.clone()));
                (resource, capabilities.scope)
            }
        };
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let api = match scope {
            Scope::Namespaced => {
                let namespace = object["metadata"]["namespace"].as_str().unwrap_or(self.namespace);
                Api::namespaced_with(self.client.clone(), namespace, &resource)
            }
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
        };
        Ok((api, name))
    }

    fn discovered(&self) -> std::sync::MutexGuard<'_, HashMap<String, (ApiResource, Scope)>> {
        self.discovered.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn deployed(&self) -> std::sync::MutexGuard<'_, Vec<Value>> {
        self.deployed.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The CRs of the watched namespaced kinds in the scenario's namespace (a kind that cannot be
    /// listed is left out; cluster-scoped CRs are in no namespace).
    pub async fn crs(&self) -> Vec<Value> {
        let mut crs = Vec::new();
        for kind in self.kinds.iter().filter(|kind| kind.namespaced) {
            let Ok(list) = self.kind_api(kind).list(&Default::default()).await else { continue };
            crs.extend(list.items.into_iter().map(|cr| {
                let mut cr = serde_json::to_value(cr).unwrap_or_default();
                cr["apiVersion"] = json!(kind.resource.api_version);
                cr["kind"] = json!(kind.resource.kind);
                cr
            }));
        }
        crs
    }

    /// A watched kind's CRs in the scenario's namespace.
    pub(super) fn kind_api(&self, kind: &Kind) -> Api<DynamicObject> {
        match kind.namespaced {
            true => Api::namespaced_with(self.client.clone(), self.namespace, &kind.resource),
            false => Api::all_with(self.client.clone(), &kind.resource),
        }
    }
}

pub(super) fn in_object(object: &Value, error: kube::Error) -> Miss {
    match Miss::from(error) {
        Miss::Again(message) => Miss::Again(format!("{}: {message}", name_of(object))),
        Miss::Fatal(message) => Miss::Fatal(format!("{}: {message}", name_of(object))),
    }
}
