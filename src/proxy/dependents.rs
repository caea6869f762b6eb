//! Dependent watches (upstream §7.4, §6.1): once a run creates (or reads back) an object of some
//! kind linked to its CR, that kind is watched, and meaningful changes to such objects trigger a
//! reconcile of their owners. One watch per child kind is shared by every owner kind.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::own_writes::{OwnWrites, Verdict, Version};
use super::owner::{PRIMARY_RESOURCE, PRIMARY_RESOURCE_TYPE};
use crate::cached::{Cached, Kind};
use crate::decoded::{self, Decoded};
use crate::history::Ledger;
use crate::history::ledger::CrKey;
use crate::history::trigger::Dependent;
use crate::watch_errors::WatchErrors;

/// An owner kind, as `(group, kind)`: what ownerReferences and annotations name.
pub type OwnerKind = (String, String);

/// Requests to reconcile a CR, delivered to its controller.
pub type Trigger = ObjectRef<Cached>;

/// Where triggers for one owner kind go.
struct OwnerRoute {
    resource: Kind,
    /// Per watched namespace (`None`: all namespaces), the controller's trigger channel.
    senders: Vec<(Option<String>, mpsc::UnboundedSender<Trigger>)>,
}

/// The registry of owner kinds and the child kinds being watched for them.
pub struct Dependents {
    client: Client,
    /// Where a triggered owner's next run learns which child changed.
    ledger: Arc<Ledger>,
    namespaces: Vec<String>,
    /// With sharding: the label selector of this replica's shard (its runs' children carry it).
    selector: Option<String>,
    owners: RwLock<HashMap<OwnerKind, OwnerRoute>>,
    /// Child kinds watched, by API resource identity, with the owner kinds interested in each.
    children: Mutex<HashMap<String, Arc<RwLock<HashSet<OwnerKind>>>>>,
    /// What the owners' own runs wrote: those changes do not trigger them.
    own_writes: Arc<OwnWrites>,
}

impl Dependents {
    /// A registry whose watches are limited to `namespaces` (empty: all) and, with sharding, to
    /// children labelled with this replica's shard (`selector`).
    pub fn new(
        client: Client,
        namespaces: Vec<String>,
        ledger: Arc<Ledger>,
        selector: Option<String>,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            ledger,
            namespaces,
            selector,
            owners: Default::default(),
            children: Default::default(),
            own_writes: Arc::default(),
        })
    }

    /// The versions the owners' runs wrote, which do not trigger them.
    pub fn own_writes(&self) -> &Arc<OwnWrites> {
        &self.own_writes
    }

    /// Registers a controller of an owner kind for one namespace scope and returns its trigger stream.
    pub fn register_owner(
        &self,
        resource: &Kind,
        namespace: Option<&str>,
    ) -> impl futures::Stream<Item = Trigger> + Send + 'static + use<> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let key = (resource.group.clone(), resource.kind.clone());
        let mut owners = self.owners.write().unwrap_or_else(|p| p.into_inner());
        let route = owners
            .entry(key)
            .or_insert_with(|| OwnerRoute { resource: resource.clone(), senders: Vec::new() });
        route.senders.push((namespace.map(str::to_string), sender));
        futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|trigger| (trigger, receiver))
        })
    }

    /// Makes sure `child` (namespaced or not) is watched on behalf of `owner`. Idempotent and cheap
    /// after the first call.
    pub fn ensure(self: &Arc<Self>, child: &ApiResource, namespaced: bool, owner: OwnerKind) {
        let key = format!("{}/{}/{}", child.group, child.version, child.plural);
        let interested = {
            let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(interested) = children.get(&key) {
                interested.write().unwrap_or_else(|p| p.into_inner()).insert(owner);
                return;
            }
            let interested = Arc::new(RwLock::new(HashSet::from([owner])));
            children.insert(key, interested.clone());
            interested
        };
        tracing::info!(group = %child.group, kind = %child.kind, "watching child resource");
        let scopes: Vec<Option<String>> = if namespaced && !self.namespaces.is_empty() {
            self.namespaces.iter().cloned().map(Some).collect()
        } else {
            vec![None]
        };
        for scope in scopes {
            // Each child decoded on its own: one too deep to decode does not stop its kind's watch.
            let api: Api<Decoded> = match &scope {
                Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, child),
                None => Api::all_with(self.client.clone(), child),
            };
            let this = self.clone();
            let interested = interested.clone();
            tokio::spawn(this.watch_child(api, interested));
        }
    }

    async fn watch_child(self: Arc<Self>, api: Api<Decoded>, interested: Arc<RwLock<HashSet<OwnerKind>>>) {
        let mut errors = WatchErrors::new(
            api.resource_url(),
            "changes to these children do not trigger a reconcile of their owners",
        );
        let mut seen = Seen::default();
        let mut config = watcher::Config::default();
        if let Some(selector) = &self.selector {
            config = config.labels(selector);
        }
        let mut reported = decoded::Reported::default();
        let mut decode = decoded::decode_logged(&mut reported, "its changes do not trigger its owner");
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(item) = events.next().await {
            let Some(event) = decode(item) else { continue };
            let changed = match event {
                Ok(watcher::Event::Init) => continue,
                Ok(watcher::Event::InitDone) => {
                    errors.listed();
                    continue;
                }
                Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object)) => {
                    seen.applied(&object).then_some(object)
                }
                Ok(watcher::Event::Delete(object)) => {
                    seen.deleted(&object);
                    Some(object)
                }
                Err(error) => {
                    errors.failed(&error);
                    continue;
                }
            };
            let Some(object) = changed else { continue };
            let interested = interested.read().unwrap_or_else(|p| p.into_inner()).clone();
            let version = Version {
                uid: object.uid().unwrap_or_default(),
                resource_version: object.resource_version().unwrap_or_default(),
            };
            for (kind, name, namespace) in owners_of(&object, &interested) {
                let dependent = Dependent {
                    kind: object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default(),
                    namespace: object.namespace(),
                    name: object.name_any(),
                };
                self.changed((kind.0, kind.1, namespace, name), dependent, &version);
            }
        }
    }

    /// A dependent of `owner` changed to `version`: the owner runs unless its own run wrote that
    /// version, which is known once the owner's run in flight, if any, ends.
    fn changed(self: &Arc<Self>, owner: CrKey, dependent: Dependent, version: &Version) {
        match self.own_writes.judge(&owner, version) {
            Verdict::Own => tracing::debug!(owner = owner.3, "a dependent changed by its owner's own run"),
            Verdict::Foreign => self.reconcile_owner(owner, dependent),
            Verdict::AfterRun(mut ended) => {
                let this = self.clone();
                let version = version.clone();
                tokio::spawn(async move {
                    let _ = ended.changed().await;
                    if !matches!(this.own_writes.judge(&owner, &version), Verdict::Own) {
                        this.reconcile_owner(owner, dependent);
                    }
                });
            }
        }
    }

    /// Reconciles a CR because `changed` (an object it depends on) changed: the CR's next run learns
    /// why from the ledger.
    pub fn reconcile_owner(&self, owner: CrKey, changed: Dependent) {
        let (group, kind, namespace, name) = owner;
        self.ledger
            .dependent_changed((group.clone(), kind.clone(), namespace.clone(), name.clone()), changed);
        self.trigger(&(group, kind), &name, namespace.as_deref());
    }

    fn trigger(&self, kind: &OwnerKind, name: &str, namespace: Option<&str>) {
        let owners = self.owners.read().unwrap_or_else(|p| p.into_inner());
        let Some(route) = owners.get(kind) else { return };
        let sender = route
            .senders
            .iter()
            .find(|(scope, _)| scope.is_some() && scope.as_deref() == namespace)
            .or_else(|| route.senders.iter().find(|(scope, _)| scope.is_none()));
        if let Some((_, sender)) = sender {
            let mut target = ObjectRef::new_with(name, route.resource.clone());
            if let Some(namespace) = namespace {
                target = target.within(namespace);
            }
            tracing::debug!(owner_kind = %kind.1, owner = name, "dependent changed: reconciling owner");
            let _ = sender.send(target);
        }
    }
}

/// Owners of `object` among `interested` kinds, as `(kind, name, namespace)`: through every
/// ownerReference of a matching group and kind (in the child's namespace), or through the
/// primary-resource annotations.
pub fn owners_of(
    object: &DynamicObject,
    interested: &HashSet<OwnerKind>,
) -> Vec<(OwnerKind, String, Option<String>)> {
    let mut owners = Vec::new();
    for reference in object.owner_references() {
        let group = reference.api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let kind = (group.to_string(), reference.kind.clone());
        if interested.contains(&kind) {
            owners.push((kind, reference.name.clone(), object.namespace()));
        }
    }
    let annotations = object.annotations();
    if let (Some(resource), Some(kind_group)) =
        (annotations.get(PRIMARY_RESOURCE), annotations.get(PRIMARY_RESOURCE_TYPE))
    {
        let (kind, group) = kind_group.split_once('.').unwrap_or((kind_group.as_str(), ""));
        let kind = (group.to_string(), kind.to_string());
        let (namespace, name) = resource.split_once('/').unwrap_or(("", resource.as_str()));
        if interested.contains(&kind) {
            owners.push((kind, name.to_string(), Some(namespace.to_string()).filter(|ns| !ns.is_empty())));
        }
    }
    owners
}

/// The part of a child that matters to its owner: everything but status, resourceVersion and
/// managedFields (upstream's DependentPredicate, fix for operator-sdk#4258). `apiVersion` and `kind`
/// are left out too: list responses omit them on items, watch events carry them.
pub fn significant_hash(object: &DynamicObject) -> u64 {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
        map.remove("apiVersion");
        map.remove("kind");
        if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("resourceVersion");
            metadata.remove("managedFields");
        }
    }
    let mut hasher = DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// Children seen so far, by UID, with their significant hash: creates are ignored, updates that
/// change the hash and deletes trigger.
#[derive(Debug, Default)]
pub struct Seen {
    hashes: HashMap<String, u64>,
}

impl Seen {
    /// Records an object from a list or an add/update event; true when it meaningfully changed.
    pub fn applied(&mut self, object: &DynamicObject) -> bool {
        let uid = object.uid().unwrap_or_default();
        let hash = significant_hash(object);
        self.hashes.insert(uid, hash).is_some_and(|old| old != hash)
    }

    /// Forgets a deleted object.
    pub fn deleted(&mut self, object: &DynamicObject) {
        self.hashes.remove(&object.uid().unwrap_or_default());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn child(extra: Value) -> DynamicObject {
        let mut value = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "uid": "child-1", "resourceVersion": "1"},
            "data": {"a": "1"}
        });
        merge(&mut value, extra);
        serde_json::from_value(value).unwrap()
    }

    fn merge(target: &mut Value, patch: Value) {
        match (target, patch) {
            (Value::Object(target), Value::Object(patch)) => {
                for (key, value) in patch {
                    merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
            (target, patch) => *target = patch,
        }
    }

    fn kinds(pairs: &[(&str, &str)]) -> HashSet<OwnerKind> {
        pairs.iter().map(|(g, k)| (g.to_string(), k.to_string())).collect()
    }

    #[test]
    fn creation_is_ignored_and_meaningful_updates_trigger() {
        let mut seen = Seen::default();
        assert!(!seen.applied(&child(json!({}))), "a new object does not trigger");
        assert!(!seen.applied(&child(json!({"metadata": {"resourceVersion": "2"}}))));
        assert!(!seen.applied(&child(json!({"metadata": {"resourceVersion": "3"}, "status": {"x": 1}}))));
        assert!(seen.applied(&child(json!({"data": {"a": "2"}}))), "a data change triggers");
    }

    #[test]
    fn list_items_without_type_fields_match_watch_events() {
        let mut seen = Seen::default();
        let mut listed = child(json!({}));
        listed.types = None;
        assert!(!seen.applied(&listed));
        assert!(!seen.applied(&child(json!({"metadata": {"resourceVersion": "2"}}))));
    }

    #[test]
    fn owners_are_found_through_references_of_interested_kinds() {
        let object = child(json!({"metadata": {"ownerReferences": [
            {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "name": "m", "uid": "u"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "v"}
        ]}}));
        let owners = owners_of(&object, &kinds(&[("cache.example.com", "Memcached")]));
        assert_eq!(
            owners,
            vec![(("cache.example.com".into(), "Memcached".into()), "m".into(), Some("ns".into()))]
        );
    }

    #[test]
    fn owners_are_found_through_the_annotations() {
        let object = child(json!({"metadata": {"annotations": {
            "operator-sdk/primary-resource": "team/m",
            "operator-sdk/primary-resource-type": "Memcached.cache.example.com"
        }}}));
        let owners = owners_of(&object, &kinds(&[("cache.example.com", "Memcached")]));
        assert_eq!(
            owners,
            vec![(("cache.example.com".into(), "Memcached".into()), "m".into(), Some("team".into()))]
        );
        assert!(owners_of(&object, &kinds(&[("other.example.com", "Memcached")])).is_empty());
    }
}
