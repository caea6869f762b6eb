//! What a kind's runs may ask the API server for: the watch's `permissions`, checked for each
//! request before it leaves the proxy, as the API server's RBAC authorizer would check it. The
//! request's attributes (verb, group, resource, subresource, namespace, name) are read from the
//! method, path and query the way the API server reads them; a rule matches as an RBAC
//! `PolicyRule` in a Role of the namespaces its scope names. Besides the rules a run may always:
//! read and update its own CR and its status, read API discovery, and ask what it may do itself
//! (self-subject reviews), as every authenticated user may.

use std::fmt;

use http::Method;

use super::dry_run::go_query;
use super::owner::Owner;
use super::request_info::RequestInfo;
use crate::watches::permissions::{Rule, Scope};

/// What a kind's runs act with: its declared rules (none: the operator's whole identity), and the
/// identity the proxy impersonates for them (`--kind-identities`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rights {
    /// The watch's `permissions`; `None` when it has none.
    pub rules: Option<Vec<Rule>>,
    /// The user name the API server sees for the kind's runs, `system:serviceaccount:<ns>:<name>`.
    pub identity: Option<String>,
}

/// A request as the API server's authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// A resource request.
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
        verb: &'static str,
        /// Its path, parsed.
        info: RequestInfo,
    },
    /// Anything else: discovery, `/version`, `/openapi/...`, or a path that is neither.
    NonResource {
        /// The path.
        path: String,
    },
}

impl Attributes {
    /// Reads a request's attributes as the API server does: a GET of a collection is a `list`, or a
    /// `watch` with `watch=true`; a DELETE of one is a `deletecollection`; a namespace's own
    /// requests are in that namespace. A path or query the API server could read otherwise than the
    /// proxy (percent escapes, empty or dot segments, a pair Go's `url.ParseQuery` drops, a `watch`
    /// value other than `true`, `1`, `false`, `0`) is `Err` with the reason: the proxy checks only
    /// what it reads as the API server will. As RBAC reads it, a `list` or `watch` names no object
    /// (the API server's reading of `fieldSelector=metadata.name=` is not followed: a rule with
    /// `resourceNames` allows no collection request here).
    pub fn of(method: &Method, path: &str, query: Option<&str>) -> Result<Attributes, String> {
        if path.contains('%') {
            return Err(format!("the path {path:?} has percent escapes"));
        }
        let inner = path.trim_matches('/');
        if inner.split('/').any(|segment| matches!(segment, "" | "." | "..")) && !inner.is_empty() {
            return Err(format!("the path {path:?} has an empty or dot segment"));
        }
        let Some(info) = RequestInfo::parse(path) else {
            return Ok(Attributes::NonResource { path: path.to_string() });
        };
        let mut info = info;
        let verb = match *method {
            Method::GET | Method::HEAD if info.name.is_some() => "get",
            Method::GET | Method::HEAD => match watch_value(query.unwrap_or_default())?.as_deref() {
                Some("true" | "1") => "watch",
                None | Some("false" | "0") => "list",
                Some(other) => return Err(format!("the query's watch={other:?} is not true, 1, false or 0")),
            },
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if info.name.is_some() => "delete",
            Method::DELETE => "deletecollection",
            _ => return Err(format!("the method {method} is not one the API server serves")),
        };
        if info.resource == "namespaces" && info.namespace.is_none() {
            info.namespace = info.name.clone();
        }
        Ok(Attributes::Resource { verb, info })
    }
}

/// The first `watch` value of a query, read as Go's `url.ParseQuery` reads it; a pair it would
/// drop (a `;`, a bad escape) or more than `MAX_PAIRS` pairs is `Err`.
fn watch_value(query: &str) -> Result<Option<String>, String> {
    let pairs = go_query(query).map_err(|reason| reason.to_string())?;
    Ok(pairs.into_iter().find(|(key, _)| key == "watch").map(|(_, value)| value))
}

/// Why a request was refused: the request, and the rule that would allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The CR's kind.
    pub kind: String,
    /// The request, as `create deployments.apps in namespace "kube-system"`.
    pub request: String,
    /// The rule to declare, as YAML flow, when one can allow it.
    pub missing: Option<String>,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the watch's permissions for {} do not allow {}", self.kind, self.request)?;
        match &self.missing {
            Some(rule) => write!(f, "; to allow it, declare in its permissions: {rule}"),
            None => Ok(()),
        }
    }
}

impl Rights {
    /// Whether a run for `owner` may send this request; without declared rules, anything.
    pub fn check(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        owner: &Owner,
    ) -> Result<(), Denied> {
        let Some(rules) = &self.rules else {
            return Ok(());
        };
        let denied = |request: String, missing: Option<String>| Denied {
            kind: owner.gvk.to_string(),
            request,
            missing,
        };
        let (verb, info) = match Attributes::of(method, path, query) {
            Err(unreadable) => {
                return Err(denied(
                    format!("a request it cannot read as the API server will: {unreadable}"),
                    None,
                ));
            }
            Ok(Attributes::NonResource { path }) if is_discovery(&path) => return Ok(()),
            Ok(Attributes::NonResource { path }) => {
                let why = "(with declared permissions a run reaches API resources and discovery only)";
                return Err(denied(format!("the path {path} {why}"), None));
            }
            Ok(Attributes::Resource { verb, info }) => (verb, info),
        };
        let info = &info;
        if always_allowed(verb, info, owner) || rules.iter().any(|rule| matches(rule, verb, info, owner)) {
            return Ok(());
        }
        Err(denied(describe(verb, info), Some(missing_rule(verb, info, owner))))
    }
}

/// Discovery and what every authenticated user may read (`system:discovery`,
/// `system:public-info-viewer`): `/api`, `/apis`, a group or version's resource list, `/version`,
/// the OpenAPI documents.
fn is_discovery(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    matches!(
        parts.as_slice(),
        ["api"] | ["api", _] | ["apis"] | ["apis", _] | ["apis", _, _] | ["version"] | ["openapi", ..]
    )
}

/// The run's own CR and its status (get, update, patch, by name, where it is), and self-subject
/// reviews (`system:basic-user`).
fn always_allowed(verb: &str, info: &RequestInfo, owner: &Owner) -> bool {
    let self_review = info.group == "authorization.k8s.io"
        && matches!(info.resource.as_str(), "selfsubjectaccessreviews" | "selfsubjectrulesreviews")
        || info.group == "authentication.k8s.io" && info.resource == "selfsubjectreviews";
    if self_review {
        return verb == "create";
    }
    info.group == owner.gvk.group
        && info.resource == owner.plural
        && matches!(info.subresource.as_deref(), None | Some("status"))
        && info.name.as_deref() == Some(owner.name.as_str())
        && info.namespace == owner.namespace
        && matches!(verb, "get" | "update" | "patch")
}

/// RBAC's `RuleAllows`, in the namespaces the rule's scope names.
fn matches(rule: &Rule, verb: &str, info: &RequestInfo, owner: &Owner) -> bool {
    let any = |values: &[String], wanted: &str| values.iter().any(|v| v == "*" || v == wanted);
    let resource_matches = rule.resources.iter().any(|resource| match &info.subresource {
        None => resource == "*" || *resource == info.resource,
        Some(sub) => {
            resource == "*"
                || *resource == format!("{}/{sub}", info.resource)
                || *resource == format!("*/{sub}")
        }
    });
    let name_matches = rule.resource_names.is_empty()
        || info.name.as_ref().is_some_and(|name| rule.resource_names.contains(name));
    let scope_matches = match (&rule.scope, &owner.namespace) {
        (Scope::Cluster, _) | (Scope::Own, None) => true,
        (Scope::Own, Some(own)) => info.namespace.as_ref() == Some(own),
        (Scope::Namespaces(namespaces), _) => {
            info.namespace.as_ref().is_some_and(|namespace| namespaces.contains(namespace))
        }
    };
    any(&rule.verbs, verb)
        && any(&rule.api_groups, &info.group)
        && resource_matches
        && name_matches
        && scope_matches
}

/// `create deployments.apps "web" in namespace "team-a"`.
fn describe(verb: &str, info: &RequestInfo) -> String {
    let mut text = format!("{verb} {}", info.resource);
    if let Some(sub) = &info.subresource {
        text.push('/');
        text.push_str(sub);
    }
    if !info.group.is_empty() {
        text.push('.');
        text.push_str(&info.group);
    }
    if let Some(name) = &info.name {
        text.push_str(&format!(" {name:?}"));
    }
    match &info.namespace {
        Some(namespace) => text.push_str(&format!(" in namespace {namespace:?}")),
        None if info.resource == "namespaces" => {}
        None => text.push_str(" cluster-wide"),
    }
    text
}

/// The narrowest rule that allows the request, as YAML flow.
fn missing_rule(verb: &str, info: &RequestInfo, owner: &Owner) -> String {
    let resource = match &info.subresource {
        Some(sub) => format!("{}/{sub}", info.resource),
        None => info.resource.clone(),
    };
    let scope = match (&info.namespace, &owner.namespace) {
        (Some(namespace), Some(own)) if namespace == own => String::new(),
        (Some(namespace), _) if info.resource != "namespaces" => format!(", namespaces: [{namespace:?}]"),
        _ => ", scope: cluster".to_string(),
    };
    format!("{{apiGroups: [{:?}], resources: [{resource:?}], verbs: [{verb:?}]{scope}}}", info.group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watches::Gvk;

    fn owner(namespace: Option<&str>) -> Owner {
        Owner {
            gvk: Gvk::new("cache.example.com", "v1alpha1", "Memcached"),
            plural: "memcacheds".into(),
            name: "web".into(),
            uid: "u".into(),
            namespace: namespace.map(Into::into),
            shard_label: None,
        }
    }

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], scope: Scope) -> Rule {
        let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect();
        Rule {
            api_groups: strings(groups),
            resources: strings(resources),
            verbs: strings(verbs),
            resource_names: Vec::new(),
            scope,
        }
    }

    fn rights(rules: Vec<Rule>) -> Rights {
        Rights { rules: Some(rules), identity: None }
    }

    fn check(rights: &Rights, method: Method, path: &str, query: Option<&str>) -> Result<(), String> {
        rights.check(&method, path, query, &owner(Some("team-a"))).map_err(|d| d.to_string())
    }

    #[test]
    fn verbs_are_read_as_the_api_server_reads_them() {
        let verb =
            |method: Method, path: &str, query: Option<&str>| match Attributes::of(&method, path, query) {
                Ok(Attributes::Resource { verb, info }) => (verb, info.name, info.namespace),
                other => panic!("{path}: {other:?}"),
            };
        let deployments = "/apis/apps/v1/namespaces/a/deployments";
        assert_eq!(verb(Method::GET, deployments, None).0, "list");
        assert_eq!(verb(Method::GET, deployments, Some("watch=true&resourceVersion=1")).0, "watch");
        assert_eq!(verb(Method::GET, deployments, Some("watch=false")).0, "list");
        assert_eq!(verb(Method::GET, &format!("{deployments}/web"), None).0, "get");
        assert_eq!(verb(Method::DELETE, deployments, None).0, "deletecollection");
        assert_eq!(verb(Method::DELETE, &format!("{deployments}/web"), None).0, "delete");
        assert_eq!(verb(Method::PATCH, &format!("{deployments}/web/scale"), None).0, "patch");
        assert_eq!(
            verb(Method::GET, deployments, Some("fieldSelector=metadata.name%3Dweb")),
            ("list", None, Some("a".into()))
        );
        assert_eq!(
            verb(Method::GET, "/api/v1/namespaces/a", None),
            ("get", Some("a".into()), Some("a".into()))
        );
        assert!(matches!(
            Attributes::of(&Method::GET, "/api/v1/watch/pods", None),
            Ok(Attributes::NonResource { .. })
        ));
    }

    #[test]
    fn what_the_api_server_could_read_otherwise_is_not_read_at_all() {
        let deployments = "/apis/apps/v1/namespaces/a/deployments";
        let many = vec!["a=1"; crate::proxy::dry_run::MAX_PAIRS + 1].join("&");
        let unreadable = [
            ("/api/v1/namespaces/kube%2Dsystem/secrets", None),
            ("/api/v1/namespaces/a/../kube-system/secrets", None),
            ("/api/v1/namespaces//secrets", None),
            (deployments, Some("watch=yes")),
            (deployments, Some("watch=true;x=1")),
            (deployments, Some("watch=%zz")),
            (deployments, Some(many.as_str())),
        ];
        for (path, query) in unreadable {
            assert!(Attributes::of(&Method::GET, path, query).is_err(), "{path} {query:?}");
        }
        assert!(Attributes::of(&Method::OPTIONS, deployments, None).is_err());
        let denied =
            rights(Vec::new()).check(&Method::GET, deployments, Some("watch=yes"), &owner(Some("a")));
        assert!(
            denied
                .unwrap_err()
                .to_string()
                .contains("cannot read as the API server will: the query's watch=\"yes\"")
        );
    }

    #[test]
    fn a_rule_allows_its_verbs_on_its_resources_in_the_crs_namespace_only() {
        let rights = rights(vec![rule(&["apps"], &["deployments"], &["get", "create"], Scope::Own)]);
        let path = |ns: &str| format!("/apis/apps/v1/namespaces/{ns}/deployments");
        assert!(check(&rights, Method::POST, &path("team-a"), None).is_ok());
        assert!(check(&rights, Method::GET, &format!("{}/web", path("team-a")), None).is_ok());
        let other_namespace = check(&rights, Method::POST, &path("kube-system"), None).unwrap_err();
        assert_eq!(
            other_namespace,
            "the watch's permissions for cache.example.com/v1alpha1, Kind=Memcached do not allow create \
             deployments.apps in namespace \"kube-system\"; to allow it, declare in its permissions: \
             {apiGroups: [\"apps\"], resources: [\"deployments\"], verbs: [\"create\"], namespaces: [\"kube-system\"]}"
        );
        let verb = check(&rights, Method::DELETE, &format!("{}/web", path("team-a")), None).unwrap_err();
        assert!(verb.contains("verbs: [\"delete\"]}"), "{verb}");
        let subresource = check(&rights, Method::PATCH, &format!("{}/web/scale", path("team-a")), None);
        assert!(subresource.unwrap_err().contains("resources: [\"deployments/scale\"]"));
        let everywhere = check(&rights, Method::GET, "/apis/apps/v1/deployments", None).unwrap_err();
        assert!(
            everywhere.contains("list deployments.apps cluster-wide")
                && everywhere.contains("scope: cluster")
        );
        let other_group =
            check(&rights, Method::POST, "/apis/extensions/v1beta1/namespaces/team-a/deployments", None);
        assert!(other_group.is_err());
    }

    #[test]
    fn scopes_names_and_wildcards_match_as_rbac_does() {
        let named = Rule {
            resource_names: vec!["settings".into()],
            ..rule(&[""], &["configmaps"], &["get"], Scope::Namespaces(vec!["shared".into()]))
        };
        let rights = rights(vec![
            named,
            rule(&[""], &["namespaces"], &["get"], Scope::Cluster),
            rule(&["*"], &["*/status"], &["*"], Scope::Own),
        ]);
        assert!(check(&rights, Method::GET, "/api/v1/namespaces/shared/configmaps/settings", None).is_ok());
        assert!(check(&rights, Method::GET, "/api/v1/namespaces/shared/configmaps/other", None).is_err());
        assert!(check(&rights, Method::GET, "/api/v1/namespaces/team-a/configmaps/settings", None).is_err());
        assert!(check(&rights, Method::GET, "/api/v1/namespaces/kube-system", None).is_ok());
        assert!(
            check(&rights, Method::PUT, "/apis/apps/v1/namespaces/team-a/deployments/web/status", None)
                .is_ok()
        );
        assert!(
            check(&rights, Method::PUT, "/apis/apps/v1/namespaces/team-a/deployments/web", None).is_err()
        );
    }

    #[test]
    fn the_own_cr_discovery_and_self_reviews_need_no_rule_and_nothing_else_is_free() {
        let rights = rights(Vec::new());
        let own = "/apis/cache.example.com/v1alpha1/namespaces/team-a/memcacheds/web";
        assert!(check(&rights, Method::GET, own, None).is_ok());
        assert!(check(&rights, Method::PATCH, &format!("{own}/status"), None).is_ok());
        assert!(check(&rights, Method::DELETE, own, None).is_err(), "not deleting itself");
        assert!(
            check(
                &rights,
                Method::GET,
                "/apis/cache.example.com/v1alpha1/namespaces/team-a/memcacheds/other",
                None
            )
            .is_err()
        );
        assert!(
            check(
                &rights,
                Method::GET,
                "/apis/cache.example.com/v1alpha1/namespaces/team-b/memcacheds/web",
                None
            )
            .is_err()
        );
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/openapi/v3/apis/apps/v1",
        ] {
            assert!(check(&rights, Method::GET, path, None).is_ok(), "{path}");
        }
        assert!(
            check(&rights, Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", None)
                .is_ok()
        );
        assert!(
            check(&rights, Method::POST, "/apis/authorization.k8s.io/v1/subjectaccessreviews", None).is_err()
        );
        let watch_path =
            check(&rights, Method::GET, "/api/v1/watch/namespaces/team-a/secrets", None).unwrap_err();
        assert!(watch_path.contains("the path /api/v1/watch/namespaces/team-a/secrets"), "{watch_path}");
        assert!(check(&rights, Method::GET, "/metrics", None).is_err());
    }

    #[test]
    fn a_cluster_scoped_crs_own_scope_is_the_cluster_and_no_rules_means_no_check() {
        let rights = rights(vec![rule(&[""], &["configmaps"], &["get"], Scope::Own)]);
        assert!(
            rights.check(&Method::GET, "/api/v1/namespaces/any/configmaps/x", None, &owner(None)).is_ok()
        );
        let upstream = Rights::default();
        let anything = (&Method::DELETE, "/api/v1/namespaces/kube-system/secrets");
        assert!(upstream.check(anything.0, anything.1, None, &owner(Some("team-a"))).is_ok());
    }
}
