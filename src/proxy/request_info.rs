//! What a Kubernetes API request is about, parsed from its path the way the API server does
//! (`k8s.io/apiserver` RequestInfoFactory): group, version, namespace, resource, name, subresource.

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
    /// (discovery, `/version`, `/healthz`, ...).
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
    fn non_resource_paths_are_not_parsed() {
        assert_eq!(RequestInfo::parse("/version"), None);
        assert_eq!(RequestInfo::parse("/apis"), None);
        assert_eq!(RequestInfo::parse("/apis/apps/v1"), None);
        assert_eq!(RequestInfo::parse("/api/v1"), None);
    }
}
