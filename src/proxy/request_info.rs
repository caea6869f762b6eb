//! What a Kubernetes API request is about, parsed from its path the way the API server does
//! (`k8s.io/apiserver` RequestInfoFactory): group, version, namespace, resource, name, subresource.

/// Path prefixes the API server reads as a verb rather than a resource (`/api/v1/watch/pods`).
const SPECIAL_VERBS: [&str; 2] = ["watch", "proxy"];

/// Subresources of a namespace object, which the API server does not read as a resource inside it.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// API groups whose every resource is a review: the API server answers a create of one
/// (`SelfSubjectAccessReview`, `SubjectAccessReview`, `LocalSubjectAccessReview`,
/// `SelfSubjectRulesReview`, `TokenReview`, `SelfSubjectReview`) and stores nothing. Named by group,
/// so a review kind added later is one too. `rbac.authorization.k8s.io` is another group.
const REVIEW_GROUPS: [&str; 2] = ["authorization.k8s.io", "authentication.k8s.io"];

/// Core resources the API server acts on and does not store: a `Binding` assigns a pod to a node.
/// The other such writes (`serviceaccounts/token`, `pods/eviction`, `pods/binding`) are
/// subresources, which are never objects of their own.
const CORE_VIRTUAL_RESOURCES: [&str; 1] = ["bindings"];

/// A parsed resource request path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// API group ("" for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Namespace from the path, if any.
    pub namespace: Option<String>,
    /// Resource (plural), e.g. `configmaps`.
    pub resource: String,
    /// Object name, when the path names one.
    pub name: Option<String>,
    /// Subresource, e.g. `status`, `log`, `exec`.
    pub subresource: Option<String>,
}

impl RequestInfo {
    /// Parses `/api/v1/...` and `/apis/<group>/<version>/...`; `None` for anything else
    /// (discovery, `/version`, `/healthz`, ...) and for the deprecated special-verb paths
    /// (`/api/v1/watch/...`, `/api/v1/proxy/...`), which are forwarded without being interpreted:
    /// their responses are streams or proxied bytes, not objects.
    pub fn parse(path: &str) -> Option<Self> {
        let mut parts = path.trim_matches('/').split('/').filter(|p| !p.is_empty());
        let mut info = RequestInfo::default();
        match parts.next()? {
            "api" => info.version = parts.next()?.to_string(),
            "apis" => {
                info.group = parts.next()?.to_string();
                info.version = parts.next()?.to_string();
            }
            _ => return None,
        }
        let rest: Vec<&str> = parts.collect();
        let rest = match rest.as_slice() {
            [verb, ..] if SPECIAL_VERBS.contains(verb) => return None,
            // `/namespaces/<name>/status` and `/finalize` are subresources of the namespace itself.
            ["namespaces", _, sub, ..] if NAMESPACE_SUBRESOURCES.contains(sub) => rest.as_slice(),
            ["namespaces", namespace, tail @ ..] if !tail.is_empty() => {
                info.namespace = Some(namespace.to_string());
                tail
            }
            other => other,
        };
        let (resource, name, subresource) = match rest {
            [resource] => (resource, None, None),
            [resource, name] => (resource, Some(name), None),
            [resource, name, subresource, ..] => (resource, Some(name), Some(subresource)),
            [] => return None,
        };
        info.resource = resource.to_string();
        info.name = name.map(|n| n.to_string());
        info.subresource = subresource.map(|s| s.to_string());
        Some(info)
    }

    /// Whether the resource is virtual: a create of it is a request the API server answers without
    /// storing an object (upstream asks discovery for the verbs; these are the kinds that lack
    /// get, list and watch). Such a body must reach the API server as sent: a review's metadata
    /// must be empty, and nothing is there to own, watch or record.
    pub fn is_virtual(&self) -> bool {
        REVIEW_GROUPS.contains(&self.group.as_str())
            || (self.group.is_empty() && CORE_VIRTUAL_RESOURCES.contains(&self.resource.as_str()))
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(
        group: &str,
        namespace: Option<&str>,
        resource: &str,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> RequestInfo {
        RequestInfo {
            group: group.into(),
            version: "v1".into(),
            namespace: namespace.map(Into::into),
            resource: resource.into(),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
        }
    }

    #[test]
    fn core_and_group_paths_parse_like_the_api_server() {
        assert_eq!(
            RequestInfo::parse("/api/v1/namespaces/ns/configmaps"),
            Some(info("", Some("ns"), "configmaps", None, None))
        );
        assert_eq!(
            RequestInfo::parse("/api/v1/namespaces/ns/pods/p/log"),
            Some(info("", Some("ns"), "pods", Some("p"), Some("log")))
        );
        assert_eq!(
            RequestInfo::parse("/apis/apps/v1/namespaces/ns/deployments/d"),
            Some(info("apps", Some("ns"), "deployments", Some("d"), None))
        );
        assert_eq!(
            RequestInfo::parse("/apis/rbac.authorization.k8s.io/v1/clusterroles"),
            Some(RequestInfo {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                resource: "clusterroles".into(),
                ..Default::default()
            })
        );
    }

    #[test]
    fn namespaces_themselves_are_cluster_scoped_objects() {
        assert_eq!(RequestInfo::parse("/api/v1/namespaces"), Some(info("", None, "namespaces", None, None)));
        assert_eq!(
            RequestInfo::parse("/api/v1/namespaces/ns"),
            Some(info("", None, "namespaces", Some("ns"), None))
        );
    }

    #[test]
    fn namespace_status_and_finalize_are_subresources_of_the_namespace() {
        // Found by comparing with the API server: these were read as a resource named "status"
        // inside the namespace.
        for sub in ["status", "finalize"] {
            assert_eq!(
                RequestInfo::parse(&format!("/api/v1/namespaces/ns/{sub}")),
                Some(info("", None, "namespaces", Some("ns"), Some(sub)))
            );
        }
        assert_eq!(
            RequestInfo::parse("/api/v1/namespaces/ns/statuses"),
            Some(info("", Some("ns"), "statuses", None, None))
        );
    }

    #[test]
    fn special_verb_paths_are_not_interpreted() {
        // They were read as a resource named "watch" with the name "namespaces".
        assert_eq!(RequestInfo::parse("/api/v1/watch/namespaces/ns/pods/p"), None);
        assert_eq!(RequestInfo::parse("/apis/apps/v1/proxy/namespaces/ns/pods/p"), None);
        assert_eq!(RequestInfo::parse("/api/v1/watch"), None);
        assert_eq!(
            RequestInfo::parse("/apis/watch/v1/things"),
            Some(RequestInfo {
                group: "watch".into(),
                version: "v1".into(),
                resource: "things".into(),
                ..Default::default()
            })
        );
    }

    #[test]
    fn reviews_and_bindings_are_virtual_and_stored_kinds_are_not() {
        let virtual_paths = [
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            "/apis/authorization.k8s.io/v1/namespaces/ns/localsubjectaccessreviews",
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            "/api/v1/namespaces/ns/bindings",
        ];
        for path in virtual_paths {
            assert!(RequestInfo::parse(path).unwrap().is_virtual(), "{path}");
        }
        let stored = [
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings",
            "/api/v1/namespaces/ns/configmaps",
            "/apis/g.example.com/v1/namespaces/ns/bindings",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        ];
        for path in stored {
            assert!(!RequestInfo::parse(path).unwrap().is_virtual(), "{path}");
        }
    }

    #[test]
    fn non_resource_paths_are_not_parsed() {
        assert_eq!(RequestInfo::parse("/version"), None);
        assert_eq!(RequestInfo::parse("/apis"), None);
        assert_eq!(RequestInfo::parse("/apis/apps/v1"), None);
        assert_eq!(RequestInfo::parse("/api/v1"), None);
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use crate::proptest_support::{config, text};

    /// A path segment as clients write names, namespaces, groups and resources.
    fn segment() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9.-]{0,12}".prop_filter("not a word the parser treats specially", |s| {
            !["namespaces", "api", "apis"].contains(&s.as_str())
        })
    }

    /// A resource request and the path a client sends for it.
    fn request() -> impl Strategy<Value = RequestInfo> {
        (
            prop_oneof![Just(String::new()), segment()],
            segment(),
            proptest::option::of(segment()),
            segment().prop_filter("not a special verb", |s| !SPECIAL_VERBS.contains(&s.as_str())),
            proptest::option::of((segment(), proptest::option::of(segment()))),
        )
            .prop_filter("not a namespace subresource", |(_, _, namespace, resource, _)| {
                namespace.is_none() || !NAMESPACE_SUBRESOURCES.contains(&resource.as_str())
            })
            .prop_map(|(group, version, namespace, resource, named)| RequestInfo {
                group,
                version,
                namespace,
                resource,
                name: named.as_ref().map(|(name, _)| name.clone()),
                subresource: named.and_then(|(_, sub)| sub),
            })
    }

    fn path(info: &RequestInfo) -> String {
        let mut parts = vec![];
        match info.group.as_str() {
            "" => parts.push("api".to_string()),
            group => parts.extend(["apis".to_string(), group.to_string()]),
        }
        parts.push(info.version.clone());
        if let Some(namespace) = &info.namespace {
            parts.extend(["namespaces".to_string(), namespace.clone()]);
        }
        parts.push(info.resource.clone());
        parts.extend(info.name.iter().chain(&info.subresource).cloned());
        format!("/{}", parts.join("/"))
    }

    proptest! {
        #![proptest_config(config(1024))]

        #[test]
        fn any_path_parses_to_segments_of_the_path_or_none(raw in prop_oneof![
            text(),
            proptest::collection::vec(prop_oneof![text(), segment(), Just("namespaces".to_string()), Just("api".to_string()), Just("apis".to_string()), Just("watch".to_string()), Just("status".to_string()), Just(String::new())], 0..8)
                .prop_map(|parts| format!("/{}", parts.join("/"))),
        ]) {
            let segments: Vec<&str> = raw.split('/').collect();
            if let Some(info) = RequestInfo::parse(&raw) {
                prop_assert!(!info.version.is_empty() && !info.resource.is_empty(), "{info:?}");
                let fields = [Some(&info.version), Some(&info.resource), info.namespace.as_ref(), info.name.as_ref(), info.subresource.as_ref()];
                for field in fields.into_iter().flatten() {
                    prop_assert!(segments.contains(&field.as_str()), "{field:?} is not a segment of {raw:?}");
                }
                prop_assert!(info.group.is_empty() || segments.contains(&info.group.as_str()));
            }
        }

        #[test]
        fn request_paths_reconstruct(info in request(), trailing_slash in any::<bool>()) {
            let mut path = path(&info);
            if trailing_slash {
                path.push('/');
            }
            prop_assert_eq!(RequestInfo::parse(&path), Some(info));
        }
    }
}
