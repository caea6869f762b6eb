//! Whether the run history can be stored in the cluster: the `AnsibleRun` CRD is served (API
//! discovery) and the operator may write records where it watches (`SelfSubjectAccessReview`s).
//! Checked at start and every minute until it can, because a scaffolded project installs neither
//! and may add them later; until then records are kept in memory, said once.
//!
//! Access reviews rather than the first refused write: the answer is known before the first run
//! (whose record would otherwise be lost), and it is asked in the namespaces the operator watches,
//! so an operator whose RBAC is namespaced is judged by its own namespaces.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::Api;

use super::record::{GROUP, PLURAL, VERSION};
use crate::kubeapi::{self, with_timeout};

/// How often a history kept in memory looks again for the CRD and the rights.
pub const RECHECK: Duration = Duration::from_secs(60);

/// What installs the history, for the warning.
pub const INSTALL: &str = "add the deploy/history kustomize component of ansible-operator to your config/default \
(components:), or apply deploy/history/ansible-operator.dev_ansibleruns.yaml and grant the operator ansibleruns";

/// What the history needs on `ansibleruns` (subresource, verb): list and read records, write them
/// with server-side apply (create and patch), prune (delete), confirm (patch status).
pub const NEEDED: [(&str, &str); 6] =
    [("", "get"), ("", "list"), ("", "create"), ("", "patch"), ("", "delete"), ("status", "patch")];

/// One right the operator lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    /// The verb.
    pub verb: &'static str,
    /// `ansibleruns` or `ansibleruns/status`.
    pub resource: String,
    /// Where (`None`: in all namespaces).
    pub namespace: Option<String>,
}

impl std::fmt::Display for Right {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resource = format!("{}.{GROUP}", self.resource);
        match &self.namespace {
            Some(namespace) => write!(f, "{} {resource} in namespace {namespace}", self.verb),
            None => write!(f, "{} {resource} in all namespaces", self.verb),
        }
    }
}

/// Where records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// `AnsibleRun` objects in the cluster.
    Cluster,
    /// Memory only, because something is missing.
    Memory(Missing),
}

/// What the history lacks in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The `AnsibleRun` CRD is not served.
    Crd,
    /// The operator may not do these.
    Rights(Vec<Right>),
    /// The check itself failed (API server unreachable): assume missing, look again later.
    Unknown(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Crd => write!(f, "the CRD {PLURAL}.{GROUP} is not served"),
            Missing::Rights(rights) => {
                let rights: Vec<String> = rights.iter().map(Right::to_string).collect();
                write!(f, "the operator may not {}", rights.join(", "))
            }
            Missing::Unknown(error) => write!(f, "could not check: {error}"),
        }
    }
}

/// Where records go, given whether the CRD is served and which rights were denied.
#[must_use]
pub fn decide(crd_served: bool, denied: Vec<Right>) -> Store {
    match (crd_served, denied.is_empty()) {
        (false, _) => Store::Memory(Missing::Crd),
        (true, false) => Store::Memory(Missing::Rights(denied)),
        (true, true) => Store::Cluster,
    }
}

/// What to tell when the store was `before` (`None`: at start) and is `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Tell {
    /// Nothing new.
    Nothing,
    /// Warn once: records are kept in memory, because of this.
    InMemory(Missing),
    /// The history is now in the cluster.
    Installed,
}

/// Whether a change of store is worth a line: the first answer, and every change of what is
/// missing; never the same answer again (checks repeat every minute).
pub fn tell(before: Option<&Store>, now: &Store) -> Tell {
    match (before, now) {
        (Some(before), now) if before == now => Tell::Nothing,
        // A failed check after a known answer says nothing new about the cluster.
        (Some(Store::Memory(_)), Store::Memory(Missing::Unknown(_))) => Tell::Nothing,
        (_, Store::Memory(missing)) => Tell::InMemory(missing.clone()),
        (None, Store::Cluster) => Tell::Nothing,
        (Some(_), Store::Cluster) => Tell::Installed,
    }
}

/// The scopes rights are checked in: the watched namespaces, or all namespaces.
pub fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    match namespaces {
        [] => vec![None],
        namespaces => namespaces.iter().cloned().map(Some).collect(),
    }
}

/// Asks the API server: discovery for the CRD, then an access review per needed right and scope.
pub async fn probe(client: &Client, scopes: &[Option<String>]) -> Store {
    match served(client).await {
        Ok(false) => return decide(false, Vec::new()),
        Ok(true) => {}
        Err(error) => return Store::Memory(Missing::Unknown(crate::logging::error_chain(&error))),
    }
    let mut denied = Vec::new();
    for namespace in scopes {
        for (subresource, verb) in NEEDED {
            match allowed(client, namespace.as_deref(), subresource, verb).await {
                Ok(true) => {}
                Ok(false) => {
                    let resource = if subresource.is_empty() {
                        PLURAL.to_string()
                    } else {
                        format!("{PLURAL}/{subresource}")
                    };
                    denied.push(Right { verb, resource, namespace: namespace.clone() });
                }
                Err(error) => return Store::Memory(Missing::Unknown(crate::logging::error_chain(&error))),
            }
        }
        // One scope's denials say what is missing; the other namespaces' would repeat it.
        if !denied.is_empty() {
            break;
        }
    }
    decide(true, denied)
}

/// Whether discovery lists `ansibleruns` in the history's group and version.
async fn served(client: &Client) -> Result<bool, kubeapi::Error> {
    match with_timeout(client.list_api_group_resources(&format!("{GROUP}/{VERSION}"))).await {
        Ok(resources) => Ok(resources.resources.iter().any(|resource| resource.name == PLURAL)),
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(error),
    }
}

/// Whether the operator may `verb` ansibleruns (`subresource`) in `namespace`.
async fn allowed(
    client: &Client,
    namespace: Option<&str>,
    subresource: &str,
    verb: &str,
) -> Result<bool, kubeapi::Error> {
    may(client, Access { group: GROUP, resource: PLURAL, subresource, verb, namespace }).await
}

/// One right on a resource, as an access review asks about it.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    /// API group ("" for the core group).
    pub group: &'a str,
    /// Resource (plural).
    pub resource: &'a str,
    /// Subresource ("" for none).
    pub subresource: &'a str,
    /// Verb.
    pub verb: &'a str,
    /// Namespace (`None`: all namespaces).
    pub namespace: Option<&'a str>,
}

/// Whether the operator has `access`, asked with a `SelfSubjectAccessReview`.
pub async fn may(client: &Client, access: Access<'_>) -> Result<bool, kubeapi::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(access.group.into()),
                resource: Some(access.resource.into()),
                subresource: (!access.subresource.is_empty()).then(|| access.subresource.to_string()),
                verb: Some(access.verb.into()),
                namespace: access.namespace.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api = Api::<SelfSubjectAccessReview>::all(client.clone());
    let answer = with_timeout(api.create(&kube::api::PostParams::default(), &review)).await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(verb: &'static str, namespace: Option<&str>) -> Right {
        Right { verb, resource: PLURAL.into(), namespace: namespace.map(str::to_string) }
    }

    #[test]
    fn without_the_crd_records_stay_in_memory_whatever_the_rights() {
        assert_eq!(decide(false, Vec::new()), Store::Memory(Missing::Crd));
        assert_eq!(decide(false, vec![denied("create", None)]), Store::Memory(Missing::Crd));
    }

    #[test]
    fn with_the_crd_but_a_right_missing_records_stay_in_memory_naming_it() {
        let store = decide(true, vec![denied("create", Some("apps")), denied("delete", Some("apps"))]);
        let Store::Memory(missing) = store else { panic!("in memory: {store:?}") };
        assert_eq!(
            missing.to_string(),
            "the operator may not create ansibleruns.ansible-operator.dev in namespace apps, \
             delete ansibleruns.ansible-operator.dev in namespace apps"
        );
    }

    #[test]
    fn with_the_crd_and_every_right_records_go_to_the_cluster() {
        assert_eq!(decide(true, Vec::new()), Store::Cluster);
    }

    #[test]
    fn the_crd_missing_is_said_with_its_name() {
        assert_eq!(Missing::Crd.to_string(), "the CRD ansibleruns.ansible-operator.dev is not served");
    }

    #[test]
    fn a_missing_history_is_told_once_and_again_only_when_what_is_missing_changes() {
        let crd = Store::Memory(Missing::Crd);
        assert_eq!(tell(None, &crd), Tell::InMemory(Missing::Crd));
        assert_eq!(tell(Some(&crd), &crd), Tell::Nothing, "the minutely check repeats nothing");
        let rights = Store::Memory(Missing::Rights(vec![denied("create", None)]));
        assert_eq!(tell(Some(&crd), &rights), Tell::InMemory(Missing::Rights(vec![denied("create", None)])));
        let unknown = Store::Memory(Missing::Unknown("timeout".into()));
        assert_eq!(tell(Some(&crd), &unknown), Tell::Nothing, "a failed check is not news");
        assert!(matches!(tell(None, &unknown), Tell::InMemory(Missing::Unknown(_))));
    }

    #[test]
    fn a_history_that_becomes_installed_says_so_and_one_installed_from_the_start_says_nothing() {
        assert_eq!(tell(Some(&Store::Memory(Missing::Crd)), &Store::Cluster), Tell::Installed);
        assert_eq!(tell(None, &Store::Cluster), Tell::Nothing);
    }

    #[test]
    fn rights_are_checked_in_the_watched_namespaces_or_in_all() {
        assert_eq!(scopes(&[]), vec![None]);
        assert_eq!(scopes(&["a".into(), "b".into()]), vec![Some("a".into()), Some("b".into())]);
    }
}
