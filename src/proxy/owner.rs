//! The CR a run acts for, and what the proxy does to objects that run creates (upstream §7.3):
//! an ownerReference when owner and child share a namespace (or the owner is cluster-scoped),
//! otherwise the `operator-sdk/primary-resource` annotations.

use serde_json::{Map, Value, json};

use crate::watches::Gvk;

/// Annotation naming the owner as `<namespace>/<name>`.
pub const PRIMARY_RESOURCE: &str = "operator-sdk/primary-resource";
/// Annotation naming the owner's type as `<Kind>.<group>`.
pub const PRIMARY_RESOURCE_TYPE: &str = "operator-sdk/primary-resource-type";

/// The CR a run acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The CR's kind.
    pub gvk: Gvk,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Namespace; `None` for a cluster-scoped CR.
    pub namespace: Option<String>,
}

/// How a child is tied to its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// An ownerReference: garbage collection applies.
    OwnerReference,
    /// The primary-resource annotations (across namespaces, or a cluster-scoped child).
    Annotations,
}

impl Owner {
    /// How a child in `child_namespace` (`None`: cluster-scoped) is linked to this owner.
    pub fn link_for(&self, child_namespace: Option<&str>) -> Link {
        match (&self.namespace, child_namespace) {
            (None, _) => Link::OwnerReference,
            (Some(owner), Some(child)) if owner == child => Link::OwnerReference,
            _ => Link::Annotations,
        }
    }

    /// The value of the primary-resource-type annotation: `<Kind>.<group>`.
    pub fn type_annotation(&self) -> String {
        format!("{}.{}", self.gvk.kind, self.gvk.group)
    }

    /// The value of the primary-resource annotation: `<namespace>/<name>`.
    pub fn resource_annotation(&self) -> String {
        format!("{}/{}", self.namespace.as_deref().unwrap_or_default(), self.name)
    }

    /// Links `object` (a JSON object being created or replaced) to this owner. Existing
    /// ownerReferences are kept and a reference to this owner is never duplicated. Returns what was
    /// done, or `None` when the body is not an object.
    pub fn inject(&self, object: &mut Value, child_namespace: Option<&str>) -> Option<Link> {
        let metadata = object.as_object_mut()?.entry("metadata").or_insert_with(|| json!({}));
        let metadata = metadata.as_object_mut()?;
        let link = self.link_for(child_namespace);
        match link {
            Link::OwnerReference => {
                let refs = metadata.entry("ownerReferences").or_insert_with(|| json!([]));
                if !refs.is_array() {
                    *refs = json!([]);
                }
                let refs = refs.as_array_mut()?;
                if !refs.iter().any(|r| r["uid"] == self.uid.as_str()) {
                    refs.push(json!({
                        "apiVersion": self.gvk.api_version(),
                        "kind": self.gvk.kind,
                        "name": self.name,
                        "uid": self.uid,
                    }));
                }
            }
            Link::Annotations => {
                let annotations = metadata.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
                if !annotations.is_object() {
                    *annotations = Value::Object(Map::new());
                }
                let annotations = annotations.as_object_mut()?;
                annotations.insert(PRIMARY_RESOURCE.into(), self.resource_annotation().into());
                annotations.insert(PRIMARY_RESOURCE_TYPE.into(), self.type_annotation().into());
            }
        }
        Some(link)
    }

    /// Whether `object` is linked to this owner (by ownerReference UID or by the annotations).
    pub fn is_linked(&self, object: &Value) -> bool {
        let metadata = &object["metadata"];
        let by_ref = metadata["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == self.uid.as_str()));
        let annotations = &metadata["annotations"];
        by_ref
            || (annotations[PRIMARY_RESOURCE] == self.resource_annotation().as_str()
                && annotations[PRIMARY_RESOURCE_TYPE] == self.type_annotation().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(namespace: Option<&str>) -> Owner {
        Owner {
            gvk: Gvk::new("cache.example.com", "v1alpha1", "Memcached"),
            name: "m".into(),
            uid: "u-1".into(),
            namespace: namespace.map(Into::into),
        }
    }

    #[test]
    fn same_namespace_child_gets_an_owner_reference() {
        let mut body = json!({"kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(owner(Some("ns")).inject(&mut body, Some("ns")), Some(Link::OwnerReference));
        assert_eq!(
            body["metadata"]["ownerReferences"],
            json!([{"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "name": "m", "uid": "u-1"}])
        );
    }

    #[test]
    fn cluster_scoped_owner_always_owns() {
        let mut body = json!({"metadata": {}});
        assert_eq!(owner(None).inject(&mut body, Some("other")), Some(Link::OwnerReference));
        assert_eq!(owner(None).link_for(None), Link::OwnerReference);
    }

    #[test]
    fn other_namespace_or_cluster_scoped_child_gets_annotations() {
        let mut body = json!({"metadata": {"annotations": {"keep": "me"}}});
        assert_eq!(owner(Some("ns")).inject(&mut body, Some("other")), Some(Link::Annotations));
        assert_eq!(
            body["metadata"]["annotations"],
            json!({"keep": "me", "operator-sdk/primary-resource": "ns/m",
                   "operator-sdk/primary-resource-type": "Memcached.cache.example.com"})
        );
        assert_eq!(owner(Some("ns")).link_for(None), Link::Annotations);
    }

    #[test]
    fn existing_references_are_kept_and_ours_is_never_duplicated() {
        let theirs = json!({"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "u-0"});
        let mut body = json!({"metadata": {"ownerReferences": [theirs.clone()]}});
        let owner = owner(Some("ns"));
        owner.inject(&mut body, Some("ns"));
        owner.inject(&mut body, Some("ns"));
        let refs = body["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0], theirs);
        assert!(owner.is_linked(&body));
    }

    #[test]
    fn non_object_bodies_are_left_alone() {
        assert_eq!(owner(Some("ns")).inject(&mut json!([1, 2]), Some("ns")), None);
    }
}
