//! The CR a run acts for, and what the proxy does to objects that run creates (upstream §7.3):
//! an ownerReference when owner and child share a namespace (or the owner is cluster-scoped),
//! otherwise the `operator-sdk/primary-resource` annotations. Ownership follows creation: an
//! object that existed before a run wrote it is never adopted, and a child keeps its link when the
//! run replaces or re-applies it.

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
    /// Its resource (plural), as the API server serves it.
    pub plural: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Namespace; `None` for a cluster-scoped CR.
    pub namespace: Option<String>,
    /// With sharding: the CR's shard label (key, value), given to every child the run creates so
    /// that the owner's replica watches it.
    pub shard_label: Option<(String, String)>,
}

/// How a child is tied to its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// An ownerReference: garbage collection applies.
    OwnerReference,
    /// The primary-resource annotations (across namespaces, or a cluster-scoped child).
    Annotations,
}

/// A write through the proxy that may create the object it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// POST to a collection: creates the object or fails.
    Create,
    /// PUT of one object: updates it, or creates it where the kind allows create-on-update.
    Replace,
    /// Server-side apply: creates the object, or merges into the one that exists.
    Apply,
}

/// The object a replace or apply names, as read just before the write.
#[derive(Debug, Clone, Copy)]
pub enum Prior<'a> {
    /// Not there: the write creates it.
    Absent,
    /// There, with this content.
    Present(&'a Value),
    /// Could not be read (no permission, API error): treated as somebody else's.
    Unknown,
}

/// Whether the proxy links the object a write sends to the run's CR.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// Link it, because the write creates it.
    Claim,
    /// Link it again, because it already is the CR's child and a replace or apply would drop the link.
    Keep,
    /// Send the body as it is: the object exists and is not the CR's (it is never adopted).
    Leave,
}

impl Owner {
    /// The CR as the ledger keys it: `(group, kind, namespace, name)`.
    pub fn cr_key(&self) -> crate::history::ledger::CrKey {
        (self.gvk.group.clone(), self.gvk.kind.clone(), self.namespace.clone(), self.name.clone())
    }

    /// What to do with the body of `write` to an object in `child_namespace`, given what was there.
    pub fn ownership(&self, write: Write, prior: Prior<'_>, child_namespace: Option<&str>) -> Ownership {
        match (write, prior) {
            (Write::Create, _) | (_, Prior::Absent) => Ownership::Claim,
            (_, Prior::Present(object)) if self.carries(self.link_for(child_namespace), object) => {
                Ownership::Keep
            }
            (_, Prior::Present(_) | Prior::Unknown) => Ownership::Leave,
        }
    }

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
        if let Some((key, value)) = &self.shard_label {
            let labels = metadata.entry("labels").or_insert_with(|| Value::Object(Map::new()));
            if !labels.is_object() {
                *labels = Value::Object(Map::new());
            }
            labels.as_object_mut()?.insert(key.clone(), value.clone().into());
        }
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
        self.carries(Link::OwnerReference, object) || self.carries(Link::Annotations, object)
    }

    /// Whether `object` carries this owner's `link`.
    pub fn carries(&self, link: Link, object: &Value) -> bool {
        let metadata = &object["metadata"];
        match link {
            Link::OwnerReference => metadata["ownerReferences"]
                .as_array()
                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == self.uid.as_str())),
            Link::Annotations => {
                let annotations = &metadata["annotations"];
                annotations[PRIMARY_RESOURCE] == self.resource_annotation().as_str()
                    && annotations[PRIMARY_RESOURCE_TYPE] == self.type_annotation().as_str()
            }
        }
    }

    /// With sharding: the merge patch that gives a child of this owner the owner's current shard
    /// label, when it carries another (it was created before the CR moved), or `None`.
    pub fn shard_patch(&self, object: &Value) -> Option<Value> {
        let (key, value) = self.shard_label.as_ref()?;
        let metadata = &object["metadata"];
        if !self.is_linked(object) || metadata["labels"][key] == value.as_str() {
            return None;
        }
        Some(json!({
            "metadata": {"resourceVersion": metadata["resourceVersion"], "labels": {(key.as_str()): value}}
        }))
    }

    /// A merge patch that takes this owner's `link` off `object` (as read, with its
    /// resourceVersion, so a concurrent change makes the patch fail instead of being overwritten).
    /// `None` when the object does not carry it.
    pub fn unlink_patch(&self, link: Link, object: &Value) -> Option<Value> {
        if !self.carries(link, object) {
            return None;
        }
        let metadata = &object["metadata"];
        let resource_version = metadata["resourceVersion"].clone();
        Some(match link {
            Link::OwnerReference => {
                let others: Vec<&Value> = metadata["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["uid"] != self.uid.as_str())
                    .collect();
                json!({"metadata": {"resourceVersion": resource_version, "ownerReferences": others}})
            }
            Link::Annotations => json!({"metadata": {"resourceVersion": resource_version, "annotations": {
                PRIMARY_RESOURCE: null, PRIMARY_RESOURCE_TYPE: null,
            }}}),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(namespace: Option<&str>) -> Owner {
        Owner {
            gvk: Gvk::new("cache.example.com", "v1alpha1", "Memcached"),
            plural: "memcacheds".into(),
            name: "m".into(),
            uid: "u-1".into(),
            namespace: namespace.map(Into::into),
            shard_label: None,
        }
    }

    #[test]
    fn a_child_from_before_a_move_is_relabelled_for_the_owner_s_shard() {
        let key = "ansible-operator.dev/shard-r";
        let owner = Owner { shard_label: Some((key.into(), "pod-b".into())), ..owner(Some("ns")) };
        let mut child = json!({"metadata": {"resourceVersion": "5", "labels": {key: "pod-a"}}});
        assert_eq!(owner.shard_patch(&child), None, "not this owner's child");
        let _ = owner.inject(&mut child, Some("ns"));
        assert_eq!(owner.shard_patch(&child), None, "already on the owner's shard");
        child["metadata"]["labels"][key] = json!("pod-a");
        assert_eq!(
            owner.shard_patch(&child),
            Some(json!({"metadata": {"resourceVersion": "5", "labels": {key: "pod-b"}}}))
        );
        assert_eq!(super::tests::owner(Some("ns")).shard_patch(&child), None, "no sharding");
    }

    #[test]
    fn a_sharded_owner_labels_its_children_with_its_shard() {
        let owner = Owner {
            shard_label: Some(("ansible-operator.dev/shard-r".into(), "pod-a".into())),
            ..owner(Some("ns"))
        };
        let mut body = json!({"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"app": "x"}}});
        owner.inject(&mut body, Some("ns"));
        assert_eq!(body["metadata"]["labels"], json!({"app": "x", "ansible-operator.dev/shard-r": "pod-a"}));
        let mut unsharded = json!({"kind": "ConfigMap", "metadata": {"name": "c"}});
        super::tests::owner(Some("ns")).inject(&mut unsharded, Some("ns"));
        assert!(unsharded["metadata"].get("labels").is_none(), "no label without sharding");
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
    fn creates_are_claimed_and_replaces_or_applies_claim_only_what_is_absent() {
        let owner = owner(Some("ns"));
        for write in [Write::Replace, Write::Apply] {
            assert_eq!(owner.ownership(write, Prior::Absent, Some("ns")), Ownership::Claim, "{write:?}");
        }
        let theirs = json!({"metadata": {"name": "c", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "u-0"}]}});
        assert_eq!(owner.ownership(Write::Create, Prior::Present(&theirs), Some("ns")), Ownership::Claim);
        for write in [Write::Replace, Write::Apply] {
            assert_eq!(owner.ownership(write, Prior::Present(&theirs), Some("ns")), Ownership::Leave);
            assert_eq!(owner.ownership(write, Prior::Unknown, Some("ns")), Ownership::Leave);
        }
    }

    #[test]
    fn an_existing_child_keeps_its_link_on_replace_and_apply() {
        let owner = owner(Some("ns"));
        let mut ours = json!({"metadata": {"name": "c"}});
        let _ = owner.inject(&mut ours, Some("ns"));
        let mut annotated = json!({"metadata": {"name": "c"}});
        let _ = owner.inject(&mut annotated, Some("other"));
        for write in [Write::Replace, Write::Apply] {
            assert_eq!(owner.ownership(write, Prior::Present(&ours), Some("ns")), Ownership::Keep);
            assert_eq!(owner.ownership(write, Prior::Present(&annotated), Some("other")), Ownership::Keep);
            // The link must be the one this child's place calls for.
            assert_eq!(owner.ownership(write, Prior::Present(&annotated), Some("ns")), Ownership::Leave);
        }
    }

    #[test]
    fn another_owner_of_the_same_name_is_not_this_owner() {
        let mut other = owner(Some("ns"));
        other.uid = "u-2".into();
        let mut object = json!({"metadata": {}});
        let _ = other.inject(&mut object, Some("ns"));
        assert_eq!(
            owner(Some("ns")).ownership(Write::Apply, Prior::Present(&object), Some("ns")),
            Ownership::Leave
        );
    }

    #[test]
    fn unlinking_removes_only_this_owner_and_is_guarded_by_the_resource_version() {
        let owner = owner(Some("ns"));
        let theirs = json!({"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "u-0"});
        let mut object = json!({"metadata": {"resourceVersion": "7", "ownerReferences": [theirs.clone()]}});
        assert_eq!(owner.unlink_patch(Link::OwnerReference, &object), None);
        let _ = owner.inject(&mut object, Some("ns"));
        assert_eq!(
            owner.unlink_patch(Link::OwnerReference, &object),
            Some(json!({"metadata": {"resourceVersion": "7", "ownerReferences": [theirs]}}))
        );
        let mut annotated = json!({"metadata": {"resourceVersion": "3", "annotations": {"keep": "me"}}});
        let _ = owner.inject(&mut annotated, Some("other"));
        assert_eq!(
            owner.unlink_patch(Link::Annotations, &annotated),
            Some(json!({"metadata": {"resourceVersion": "3", "annotations": {
                "operator-sdk/primary-resource": null, "operator-sdk/primary-resource-type": null}}}))
        );
    }

    #[test]
    fn non_object_bodies_are_left_alone() {
        assert_eq!(owner(Some("ns")).inject(&mut json!([1, 2]), Some("ns")), None);
    }
}
