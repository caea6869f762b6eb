//! What a controller's cache keeps of a CR: kube-runtime's store holds one of these per CR for as
//! long as the CR exists, so it is typed and small. Its metadata (less `managedFields`), and from its
//! status only the facts a reconcile reads before its own read of the CR ([`Standing`]): a status kept
//! as JSON holds every object in it, each condition and its `ansibleResult` as a map of its own
//! (about 4.5 KB per CR). The spec is not kept, so the cache does not grow with the size of the CRs.
//!
//! Its kind travels as an `Arc` ([`Resource::DynamicType`]): every key of the store, entry of
//! kube-runtime's queue and reference to a CR carries one, and they share the kind's names instead
//! of five strings each.

use std::borrow::Cow;
use std::sync::Arc;

use jiff::Timestamp;
use kube::Resource;
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::{DynamicResourceScope, TypeMeta};
use serde::{Deserialize, Deserializer};

use crate::status::{self, conditions};

/// The kind of a cached CR, shared.
pub type Kind = Arc<ApiResource>;

/// A CR as the controller's cache keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    /// Its metadata, without `managedFields`.
    pub metadata: ObjectMeta,
    /// What its conditions say about its last runs.
    pub standing: Standing,
    /// This version triggers a run: what triggers one changed since the cached version before it,
    /// or there is none (see `controller`'s trigger filter). True until the filter marks it.
    pub triggers: bool,
    /// With `watchFields`: the digest of their values in this version (see `controller`'s trigger
    /// filter), taken before the spec and status are dropped.
    pub watched: Option<u64>,
}

impl From<DynamicObject> for Cached {
    fn from(object: DynamicObject) -> Self {
        let standing = Standing::of(&object);
        let mut metadata = object.metadata;
        metadata.managed_fields = None;
        Cached { metadata, standing, triggers: true, watched: None }
    }
}

impl Cached {
    /// The CR with its metadata only (no spec, no status), as the steps after a reconcile's wait
    /// for a slot take it until they read the CR.
    pub fn to_object(&self, kind: &ApiResource) -> DynamicObject {
        DynamicObject {
            types: Some(TypeMeta { api_version: kind.api_version.clone(), kind: kind.kind.clone() }),
            metadata: self.metadata.clone(),
            data: serde_json::Value::Object(Default::default()),
        }
    }
}

/// What a CR's conditions say about its last runs, read once as the controller's cache takes the CR
/// (see [`Cached`]): whether it converged, since when, and whether it is marked paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Standing {
    /// Its `Successful=True` condition names its generation.
    successful: bool,
    /// When it was last confirmed (with `successful`): its last run's completion (the `Running`
    /// condition's `ansibleResult.completion`), else when it became `Successful`; `None` when that
    /// is not a time.
    confirmed: Option<Timestamp>,
    /// Its `Paused` condition is `True`.
    paused: bool,
}

impl Standing {
    /// Converged, last confirmed `at`: what a kind without status conditions keeps of an object's
    /// last successful run (see `history::confirmations`).
    pub fn confirmed_at(at: Timestamp) -> Self {
        Standing { successful: true, confirmed: Some(at), paused: false }
    }

    /// Reads the standing of `object` from its conditions.
    pub fn of(object: &DynamicObject) -> Self {
        let conditions = status::conditions_of(object);
        let successful = conditions.iter().find(|c| {
            c["type"] == conditions::SUCCESSFUL
                && c["status"] == "True"
                && c["observedGeneration"].as_i64() == object.metadata.generation
        });
        let confirmed = successful.and_then(|successful| {
            let completion = conditions
                .iter()
                .find(|c| c["type"] == conditions::RUNNING)
                .and_then(|c| c["ansibleResult"]["completion"].as_str());
            completion
                .or_else(|| successful["lastTransitionTime"].as_str())
                .and_then(|time| time.parse::<Timestamp>().ok())
        });
        let paused = conditions.iter().any(|c| c["type"] == conditions::PAUSED && c["status"] == "True");
        Standing { successful: successful.is_some(), confirmed, paused }
    }

    /// Whether its `Paused` condition is already `True`.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Whether its `Successful=True` condition names its generation.
    pub fn successful(&self) -> bool {
        self.successful
    }

    /// When it was last confirmed, with [`Standing::successful`].
    pub fn confirmed(&self) -> Option<Timestamp> {
        self.confirmed
    }
}

/// kube-runtime's controller asks for it; the cache is filled from decoded objects
/// ([`Cached::from`]) and never deserializes one.
impl<'de> Deserialize<'de> for Cached {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        DynamicObject::deserialize(deserializer).map(Cached::from)
    }
}

impl Resource for Cached {
    type DynamicType = Kind;
    type Scope = DynamicResourceScope;

    fn kind(kind: &Kind) -> Cow<'_, str> {
        Cow::Borrowed(&kind.kind)
    }

    fn group(kind: &Kind) -> Cow<'_, str> {
        Cow::Borrowed(&kind.group)
    }

    fn version(kind: &Kind) -> Cow<'_, str> {
        Cow::Borrowed(&kind.version)
    }

    fn api_version(kind: &Kind) -> Cow<'_, str> {
        Cow::Borrowed(&kind.api_version)
    }

    fn plural(kind: &Kind) -> Cow<'_, str> {
        Cow::Borrowed(&kind.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_cache_keeps_the_metadata_without_managed_fields_and_the_standing() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "x.example.com/v1", "kind": "X",
            "metadata": {"name": "a", "namespace": "ns", "generation": 2, "labels": {"l": "1"},
                "annotations": {"a": "1"}, "finalizers": ["f"], "resourceVersion": "7",
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"size": 3},
            "status": {"conditions": [
                {"type": "Successful", "status": "True", "observedGeneration": 2,
                 "lastTransitionTime": "2026-11-21T04:00:00Z"}], "big": "x"}
        }))
        .unwrap();
        let cached = Cached::from(object.clone());
        assert_eq!(cached.metadata, ObjectMeta { managed_fields: None, ..object.metadata.clone() });
        assert_eq!(cached.standing, Standing::of(&object));
        let kind =
            Arc::new(ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("x.example.com", "v1", "X")));
        let view = cached.to_object(&kind);
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            json!({"apiVersion": "x.example.com/v1", "kind": "X",
                   "metadata": {"name": "a", "namespace": "ns", "generation": 2, "labels": {"l": "1"},
                       "annotations": {"a": "1"}, "finalizers": ["f"], "resourceVersion": "7"}})
        );
        assert_eq!(Cached::kind(&kind), "X");
        assert_eq!(Cached::api_version(&kind), "x.example.com/v1");
        assert_eq!(Cached::plural(&kind), kind.plural);
        assert_eq!(cached.name_any(), "a");
    }

    #[test]
    fn it_deserializes_as_the_object_it_comes_from() {
        let text = r#"{"apiVersion":"x/v1","kind":"X","metadata":{"name":"a"},"spec":{"s":1}}"#;
        let cached: Cached = serde_json::from_str(text).unwrap();
        assert_eq!(cached, Cached::from(serde_json::from_str::<DynamicObject>(text).unwrap()));
    }
}
