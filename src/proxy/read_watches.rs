//! Re-running a CR when something its last run read changes (watch entries with
//! `watchReadResources: true`): the [`ReadIndex`] of every such CR's read-set, one shared watch per
//! resource and namespace it wants, and a change those watches see turned into reconciles of the CRs
//! that read the object, through the same path as dependent watches.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::dependents::Dependents;
use super::read_index::{Changed, Narrowing, Observed, ReadIndex, Scope, changes, content_hash};
use crate::decoded::{self, Decoded};
use crate::history::Read;
use crate::history::availability::{self, Access};
use crate::history::ledger::CrKey;
use crate::history::trigger::Dependent;
use crate::watch_errors::WatchErrors;

/// The index and the watches it wants.
pub struct ReadWatches {
    client: Client,
    dependents: Arc<Dependents>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    index: ReadIndex,
    /// The watches running (or refused), with how they are narrowed and what stops them.
    running: BTreeMap<Scope, (Narrowing, CancellationToken)>,
    /// Scopes the operator may not watch, already warned about.
    warned: BTreeSet<Scope>,
}

impl ReadWatches {
    /// Read watches with the operator's `client`, triggering owners through `dependents`.
    pub fn new(client: Client, dependents: Arc<Dependents>) -> Arc<Self> {
        Arc::new(Self { client, dependents, state: Mutex::default() })
    }

    /// The run of `cr` (UID `uid`) that just ended read `reads`: they replace what it read before,
    /// and the watches follow.
    pub fn replace(self: &Arc<Self>, cr: CrKey, uid: String, reads: Vec<Read>) {
        let mut state = self.lock();
        state.index.replace(cr, uid, reads);
        self.follow(&mut state);
    }

    /// Forgets a CR that is gone.
    pub fn forget(self: &Arc<Self>, cr: &CrKey) {
        let mut state = self.lock();
        state.index.forget(cr);
        self.follow(&mut state);
    }

    /// Starts and stops watches to match the index.
    fn follow(self: &Arc<Self>, state: &mut State) {
        let running: BTreeMap<Scope, Narrowing> =
            state.running.iter().map(|(scope, (narrowing, _))| (scope.clone(), narrowing.clone())).collect();
        let changes = changes(&running, &state.index.plan());
        for scope in changes.stop {
            if let Some((_, stop)) = state.running.remove(&scope) {
                stop.cancel();
            }
        }
        for (scope, narrowing) in changes.start {
            let stop = CancellationToken::new();
            state.running.insert(scope.clone(), (narrowing.clone(), stop.clone()));
            tokio::spawn(self.clone().watch(scope, narrowing, stop));
        }
    }

    /// Watches one scope until stopped, if the operator may.
    async fn watch(self: Arc<Self>, scope: Scope, narrowing: Narrowing, stop: CancellationToken) {
        if !self.may_watch(&scope).await {
            return;
        }
        let resource = ApiResource {
            group: scope.group.clone(),
            version: scope.version.clone(),
            api_version: if scope.group.is_empty() {
                scope.version.clone()
            } else {
                format!("{}/{}", scope.group, scope.version)
            },
            kind: String::new(),
            plural: scope.resource.clone(),
        };
        // Each object decoded on its own: one too deep to decode does not stop the watch.
        let api: Api<Decoded> = match &scope.namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        tracing::info!(
            group = %scope.group,
            resource = %scope.resource,
            namespace = scope.namespace.as_deref().unwrap_or("*"),
            labels = narrowing.labels.as_deref().unwrap_or_default(),
            fields = narrowing.fields.as_deref().unwrap_or_default(),
            "watching what runs read"
        );
        let mut errors = WatchErrors::new(
            api.resource_url(),
            "changes to these objects do not re-run the CRs that read them",
        );
        let mut config = watcher::Config::default();
        if let Some(labels) = &narrowing.labels {
            config = config.labels(labels);
        }
        if let Some(fields) = &narrowing.fields {
            config = config.fields(fields);
        }
        let mut observed = Observed::default();
        let mut reported = decoded::Reported::default();
        let mut decode = decoded::decode_logged(
            &mut reported,
            "its changes re-run the CRs that read it only as a deletion",
        );
        let mut events = watcher(api, config).default_backoff().boxed();
        loop {
            let item = tokio::select! {
                item = events.next() => item,
                () = stop.cancelled() => return,
            };
            let event = match item {
                None => None,
                Some(item) => match decode(item) {
                    Some(event) => Some(event),
                    None => continue,
                },
            };
            let changed = match event {
                None => return,
                Some(Ok(watcher::Event::Init)) => continue,
                Some(Ok(watcher::Event::InitDone)) => {
                    errors.listed();
                    observed.listed();
                    continue;
                }
                Some(Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object))) => {
                    let hash = content_hash(&serde_json::to_value(&object).unwrap_or_default());
                    observed.applied(&object.uid().unwrap_or_default(), hash).then_some(object)
                }
                Some(Ok(watcher::Event::Delete(object))) => {
                    observed.deleted(&object.uid().unwrap_or_default()).then_some(object)
                }
                Some(Err(error)) => {
                    errors.failed(&error);
                    continue;
                }
            };
            if let Some(object) = changed {
                self.changed(&scope, &object);
            }
        }
    }

    /// Re-runs the CRs that read `object`, which changed.
    fn changed(&self, scope: &Scope, object: &DynamicObject) {
        let kind = object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
        let (namespace, name, labels) = (object.namespace(), object.name_any(), object.labels().clone());
        let owner_uids: Vec<String> = object.owner_references().iter().map(|r| r.uid.clone()).collect();
        let changed = Changed {
            kind: &kind,
            namespace: namespace.as_deref(),
            name: &name,
            labels: &labels,
            owner_uids: &owner_uids,
        };
        let readers = self.lock().index.hit(scope, &changed);
        if readers.is_empty() {
            return;
        }
        tracing::info!(
            resource = %scope.resource,
            namespace = namespace.as_deref().unwrap_or_default(),
            name,
            readers = readers.len(),
            "an object runs read changed: re-running the CRs that read it"
        );
        let kind = if kind.is_empty() { scope.resource.clone() } else { kind };
        for reader in readers {
            let because = Dependent { kind: kind.clone(), namespace: namespace.clone(), name: name.clone() };
            self.dependents.reconcile_owner(reader, because);
        }
    }

    /// Whether the operator may list and watch the scope's objects; if not, says so once.
    async fn may_watch(&self, scope: &Scope) -> bool {
        for verb in ["list", "watch"] {
            let access = Access {
                group: &scope.group,
                resource: &scope.resource,
                subresource: "",
                verb,
                namespace: scope.namespace.as_deref(),
            };
            let denied = match availability::may(&self.client, access).await {
                Ok(allowed) => !allowed,
                Err(error) => {
                    tracing::warn!(
                        resource = %scope.resource,
                        error = %crate::logging::error_chain(&error),
                        "could not check the right to watch what runs read: watching anyway"
                    );
                    false
                }
            };
            if denied {
                if self.lock().warned.insert(scope.clone()) {
                    tracing::warn!(
                        group = %scope.group,
                        resource = %scope.resource,
                        namespace = scope.namespace.as_deref().unwrap_or("*"),
                        missing = verb,
                        "the operator may not watch these objects: changes to those runs read do not re-run \
                         their CRs (grant list and watch on them to the operator's ServiceAccount)"
                    );
                }
                return false;
            }
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
