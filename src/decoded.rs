//! A watched object decoded on its own. kube's client decodes a whole list (or watch event) at once
//! with serde_json's recursion limit of 128, so one CR nested deeper than that (the API server takes
//! it for kinds that keep unknown fields) would fail its kind's list and watch on every retry and
//! stop every CR of the kind. Here each object is first taken as raw JSON text (skipped over without
//! recursion), then decoded by itself: one that cannot be decoded becomes [`Decoded::Undecodable`]
//! with its name, and the others go on.

use std::borrow::Cow;
use std::collections::HashMap;

use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::{DynamicResourceScope, TypeMeta};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// Annotation on the stand-in of a CR that could not be decoded (see [`Undecodable::stand_in`]).
pub const UNDECODABLE: &str = "ansible-operator.dev/undecodable";

/// An object as the API server sent it: decoded, or named and set aside.
#[derive(Debug, Clone)]
pub enum Decoded {
    /// Decoded in full.
    Object(DynamicObject),
    /// Could not be decoded; its metadata could (a name and namespace to report).
    Undecodable(Undecodable),
}

/// An object the operator could not decode.
#[derive(Debug, Clone)]
pub struct Undecodable {
    /// `apiVersion` and `kind`, when they could be read.
    pub types: Option<TypeMeta>,
    /// Its metadata (name, namespace, uid, resourceVersion).
    pub metadata: ObjectMeta,
    /// Why it could not be decoded (serde_json's message, e.g. `recursion limit exceeded`).
    pub error: String,
}

impl Undecodable {
    /// The object with its metadata only (e.g. to remove it from a cache when it is deleted).
    pub fn metadata_only(&self) -> DynamicObject {
        DynamicObject {
            types: self.types.clone(),
            metadata: self.metadata.clone(),
            data: serde_json::Value::Null,
        }
    }

    /// [`Undecodable::metadata_only`] marked with [`UNDECODABLE`]: in place of a CR that still
    /// exists, it removes the CR from a cache that held an older, decodable version.
    pub fn stand_in(&self) -> DynamicObject {
        let mut object = self.metadata_only();
        object.metadata.annotations.get_or_insert_default().insert(UNDECODABLE.into(), "true".into());
        object
    }

    /// A reference to the object, for an Event.
    pub fn reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: self.types.as_ref().map(|t| t.api_version.clone()),
            kind: self.types.as_ref().map(|t| t.kind.clone()),
            name: self.metadata.name.clone(),
            namespace: self.metadata.namespace.clone(),
            uid: self.metadata.uid.clone(),
            resource_version: self.metadata.resource_version.clone(),
            ..Default::default()
        }
    }
}

impl Decoded {
    /// Decodes one object's JSON text.
    pub fn from_json(text: &str) -> Decoded {
        match serde_json::from_str::<DynamicObject>(text) {
            Ok(object) => Decoded::Object(object),
            Err(error) => {
                // Only the head, and of the metadata only what names the object: the rest
                // (`spec`, and `managedFields`, which mirror the spec's depth) is skipped without
                // recursion.
                #[derive(Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Head {
                    api_version: Option<String>,
                    kind: Option<String>,
                    #[serde(default)]
                    metadata: HeadMeta,
                }
                #[derive(Default, Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct HeadMeta {
                    name: Option<String>,
                    namespace: Option<String>,
                    uid: Option<String>,
                    resource_version: Option<String>,
                    generation: Option<i64>,
                }
                let head = serde_json::from_str::<Head>(text).ok();
                let (types, meta) = match head {
                    Some(Head { api_version: Some(api_version), kind: Some(kind), metadata }) => {
                        (Some(TypeMeta { api_version, kind }), metadata)
                    }
                    Some(head) => (None, head.metadata),
                    None => (None, HeadMeta::default()),
                };
                let metadata = ObjectMeta {
                    name: meta.name,
                    namespace: meta.namespace,
                    uid: meta.uid,
                    resource_version: meta.resource_version,
                    generation: meta.generation,
                    ..ObjectMeta::default()
                };
                Decoded::Undecodable(Undecodable { types, metadata, error: error.to_string() })
            }
        }
    }
}

impl<'de> Deserialize<'de> for Decoded {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(Decoded::from_json(raw.get()))
    }
}

impl Resource for Decoded {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Object(object) => object.meta(),
            Decoded::Undecodable(undecodable) => &undecodable.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Object(object) => object.meta_mut(),
            Decoded::Undecodable(undecodable) => &mut undecodable.metadata,
        }
    }
}

/// A watch event with its object decoded. An object that could not be decoded is reported
/// (`report`) and, when it was added or changed, becomes the deletion of a stand-in (see
/// [`Undecodable::stand_in`]): a cache forgets an older version and nothing runs for it; in the
/// initial list it is left out.
pub fn decode_event(
    event: watcher::Event<Decoded>,
    mut report: impl FnMut(&Undecodable),
) -> Option<watcher::Event<DynamicObject>> {
    use watcher::Event;
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::Apply(Decoded::Object(object)) => Some(Event::Apply(object)),
        Event::InitApply(Decoded::Object(object)) => Some(Event::InitApply(object)),
        Event::Delete(Decoded::Object(object)) => Some(Event::Delete(object)),
        Event::Apply(Decoded::Undecodable(undecodable)) => {
            report(&undecodable);
            Some(Event::Delete(undecodable.stand_in()))
        }
        Event::InitApply(Decoded::Undecodable(undecodable)) => {
            report(&undecodable);
            None
        }
        Event::Delete(Decoded::Undecodable(undecodable)) => Some(Event::Delete(undecodable.metadata_only())),
    }
}

/// A watcher's item decoded as [`decode_event`] does, errors passed through; `report` hears of each
/// version of an undecodable object once (`reported` remembers which it heard of).
pub fn decode_item<E>(
    item: Result<watcher::Event<Decoded>, E>,
    reported: &mut Reported,
    mut report: impl FnMut(&Undecodable),
) -> Option<Result<watcher::Event<DynamicObject>, E>> {
    match item {
        Ok(event) => decode_event(event, |undecodable| {
            if reported.first_time(undecodable) {
                report(undecodable);
            }
        })
        .map(Ok),
        Err(error) => Some(Err(error)),
    }
}

/// One item of a watcher's stream.
pub type Item<K, E> = Result<watcher::Event<K>, E>;

/// [`decode_item`] for a watch of objects that are not CRs (a run's children, what runs read): an
/// undecodable version is logged once as a warning naming the object and `consequence`, and the
/// watch goes on with the others.
pub fn decode_logged<'r, E>(
    reported: &'r mut Reported,
    consequence: &'static str,
) -> impl FnMut(Item<Decoded, E>) -> Option<Item<DynamicObject, E>> + 'r {
    move |item| {
        decode_item(item, reported, |undecodable| {
            tracing::warn!(
                object = %object_name(&undecodable.metadata),
                error = %undecodable.error,
                "cannot decode this object: {consequence}; the others go on"
            );
        })
    }
}

/// The undecodable objects reported so far: uid → the resourceVersion last reported (one entry per
/// object, however often it is edited).
#[derive(Debug, Default)]
pub struct Reported(HashMap<String, String>);

impl Reported {
    /// Whether this version of the object is reported for the first time (a relist sees it again).
    pub fn first_time(&mut self, undecodable: &Undecodable) -> bool {
        let meta = &undecodable.metadata;
        let version = meta.resource_version.clone().unwrap_or_default();
        self.0.insert(meta.uid.clone().unwrap_or_default(), version.clone()) != Some(version)
    }
}

/// `namespace/name` (or `name`) of an object, for messages.
pub fn object_name(meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(namespace) => format!("{namespace}/{}", meta.name.as_deref().unwrap_or_default()),
        None => meta.name.clone().unwrap_or_default(),
    }
}

/// Whether `object` is a stand-in for an undecodable CR.
pub fn is_stand_in<K: Resource>(object: &K) -> bool {
    object.annotations().contains_key(UNDECODABLE)
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectList;
    use serde_json::json;

    use super::*;

    /// A CR whose spec nests `depth` objects deep.
    fn nested(name: &str, depth: usize) -> String {
        let spec = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        // As the API server sends it: managedFields mirror the spec's depth.
        let fields = format!("{}{{}}{}", r#"{"f:a":"#.repeat(depth), "}".repeat(depth));
        let managed = format!(
            r#"[{{"manager":"kubectl","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{{"f:spec":{fields}}}}}]"#
        );
        format!(
            r#"{{"apiVersion":"x.example.com/v1","kind":"Deep","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"7","managedFields":{managed}}},"spec":{spec}}}"#
        )
    }

    fn list(items: &[String]) -> String {
        format!(
            r#"{{"apiVersion":"x.example.com/v1","kind":"DeepList","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    #[test]
    fn a_list_with_one_object_too_deep_for_serde_json_still_yields_the_others() {
        let text = list(&[nested("normal", 3), nested("deep", 200), nested("other", 10)]);
        assert!(serde_json::from_str::<ObjectList<DynamicObject>>(&text).is_err(), "kube's own decode fails");
        let decoded: ObjectList<Decoded> = serde_json::from_str(&text).unwrap();
        let names: Vec<(String, bool)> =
            decoded.items.iter().map(|item| (item.name_any(), matches!(item, Decoded::Object(_)))).collect();
        assert_eq!(names, [("normal".into(), true), ("deep".into(), false), ("other".into(), true)]);
        let Decoded::Undecodable(deep) = &decoded.items[1] else { unreachable!() };
        assert!(deep.error.contains("recursion limit exceeded"), "{}", deep.error);
        assert_eq!(object_name(&deep.metadata), "ns/deep");
        assert_eq!(deep.metadata.uid.as_deref(), Some("u-deep"));
        assert_eq!(deep.metadata.resource_version.as_deref(), Some("7"), "the watch resumes from it");
        let stand_in = deep.stand_in();
        assert!(is_stand_in(&stand_in));
        assert_eq!(stand_in.types.as_ref().map(|t| t.kind.as_str()), Some("Deep"));
        let Decoded::Object(normal) = &decoded.items[0] else { unreachable!() };
        assert_eq!(normal.data["spec"], json!({"a": {"a": {"a": 1}}}));
        assert!(!is_stand_in(normal));
    }

    #[test]
    fn an_undecodable_cr_is_reported_and_leaves_the_cache_while_the_others_pass() {
        let deep = format!(
            r#"{{"apiVersion":"x/v1","kind":"X","metadata":{{"name":"deep","uid":"u"}},"spec":{}1{}}}"#,
            r#"{"a":"#.repeat(200),
            "}".repeat(200)
        );
        let undecodable = || Decoded::from_json(&deep);
        let good = || Decoded::from_json(r#"{"apiVersion":"x/v1","kind":"X","metadata":{"name":"good"}}"#);
        let mut reported = Vec::new();
        let mut decide =
            |event| decode_event(event, |u: &Undecodable| reported.push(u.metadata.name.clone()));
        assert!(matches!(decide(watcher::Event::Apply(good())), Some(watcher::Event::Apply(_))));
        assert!(matches!(decide(watcher::Event::InitApply(good())), Some(watcher::Event::InitApply(_))));
        assert!(decide(watcher::Event::InitApply(undecodable())).is_none());
        let Some(watcher::Event::Delete(stand_in)) = decide(watcher::Event::Apply(undecodable())) else {
            panic!("a changed CR that cannot be decoded leaves the cache")
        };
        assert!(is_stand_in(&stand_in));
        let Some(watcher::Event::Delete(deleted)) = decide(watcher::Event::Delete(undecodable())) else {
            panic!("a deleted one is deleted")
        };
        assert!(!is_stand_in(&deleted), "its runner directory goes");
        assert_eq!(reported, [Some("deep".to_string()), Some("deep".to_string())]);
    }

    #[test]
    fn each_version_of_an_undecodable_object_is_reported_once() {
        let Decoded::Undecodable(first) = Decoded::from_json(&nested("deep", 200)) else { unreachable!() };
        let mut reported = Reported::default();
        assert!(reported.first_time(&first));
        assert!(!reported.first_time(&first), "a relist sees it again");
        let mut edited = first.clone();
        edited.metadata.resource_version = Some("8".into());
        assert!(reported.first_time(&edited));
    }

    #[test]
    fn a_watch_event_of_an_object_too_deep_is_decoded_as_undecodable() {
        let line = format!(r#"{{"type":"ADDED","object":{}}}"#, nested("deep", 500));
        let event: kube::api::WatchEvent<Decoded> = serde_json::from_str(&line).unwrap();
        let kube::api::WatchEvent::Added(Decoded::Undecodable(deep)) = event else {
            panic!("not undecodable")
        };
        assert_eq!(deep.metadata.name.as_deref(), Some("deep"));
    }
}
