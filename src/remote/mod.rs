//! Running against hosts over SSH (watch keys `inventory`, `sshKeySecret`, `hostKeyChecking`): the
//! inventory rendered from the CR, the key and known_hosts read from a Secret in the CR's namespace,
//! combined into what one run needs. Every problem is an [`Error`] with a condition reason.

pub mod inventory;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use serde_json::Value;

use crate::kubeapi::{self, with_timeout};
use crate::runner::ssh::{PrivateKey, Ssh};
use crate::template;
use crate::watches::Extensions;

/// The Secret type `sshKeySecret` must have.
pub const SSH_AUTH_TYPE: &str = "kubernetes.io/ssh-auth";
/// The Secret key holding the private key.
pub const PRIVATE_KEY: &str = "ssh-privatekey";
/// The optional Secret key holding known host keys.
pub const KNOWN_HOSTS: &str = "known_hosts";
/// The annotation by which a Secret a CR names opts in to being used for CRs of the kinds it lists
/// (comma-separated, `*` for any): whoever may create a CR does not thereby use every key of the
/// namespace.
pub const ALLOW_KINDS: &str = "ansible-operator.dev/allow-kinds";

/// Whether a Secret's annotations let CRs of `kind` use it.
pub fn allows_kind(annotations: Option<&std::collections::BTreeMap<String, String>>, kind: &str) -> bool {
    annotations
        .and_then(|annotations| annotations.get(ALLOW_KINDS))
        .is_some_and(|kinds| kinds.split(',').map(str::trim).any(|allowed| allowed == kind || allowed == "*"))
}

/// What a run against remote hosts needs.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The rendered inventory and its hosts, when the watch has an `inventory` template.
    pub inventory: Option<(String, Vec<String>)>,
    /// Key, known_hosts and host key policy.
    pub ssh: Ssh,
}

/// Why a CR cannot be run against its hosts; becomes a `Failure` condition and a retry.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A template did not render.
    #[error(transparent)]
    Template(#[from] template::Error),
    /// The rendered inventory is not one Ansible reads as intended.
    #[error(transparent)]
    Inventory(#[from] inventory::Error),
    /// The CR is cluster-scoped, so there is no namespace to read the Secret from.
    #[error(
        "sshKeySecret: {name:?} cannot be read for a cluster-scoped resource (Secrets are read only in the CR's namespace)"
    )]
    ClusterScoped {
        /// The Secret's name.
        name: String,
    },
    /// The Secret does not exist.
    #[error("sshKeySecret: Secret {namespace}/{name} not found")]
    SecretNotFound {
        /// Namespace of the CR.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
    /// The Secret has the wrong type.
    #[error("sshKeySecret: Secret {namespace}/{name} has type {found:?}, not {SSH_AUTH_TYPE:?}")]
    SecretType {
        /// Namespace of the CR.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// Its type.
        found: String,
    },
    /// The Secret does not opt in to CRs of this kind.
    #[error(
        "sshKeySecret: Secret {namespace}/{name} is not allowed for kind {kind}: annotate it {ALLOW_KINDS}: \"{kind}\" (a comma-separated list of kinds) to let CRs of that kind use it"
    )]
    NotAllowed {
        /// Namespace of the CR.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The CR's kind.
        kind: String,
    },
    /// The Secret has no private key.
    #[error("sshKeySecret: Secret {namespace}/{name} has no {PRIVATE_KEY:?} key")]
    KeyMissing {
        /// Namespace of the CR.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
    /// The Secret could not be read (RBAC, API errors).
    #[error("sshKeySecret: read Secret {namespace}/{name}: {cause}")]
    Read {
        /// Namespace of the CR.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// Cause, in the message (a status condition shows only the message).
        cause: kubeapi::Error,
    },
}

impl Error {
    /// The `Failure` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Template(template::Error { field: "inventory", .. }) | Error::Inventory(_) => {
                "InventoryError"
            }
            Error::Template(_) | Error::ClusterScoped { .. } | Error::SecretType { .. } => {
                "SSHKeySecretInvalid"
            }
            Error::NotAllowed { .. } => "SSHKeySecretNotAllowed",
            Error::SecretNotFound { .. } => "SSHKeySecretNotFound",
            Error::KeyMissing { .. } => "SSHKeyMissing",
            Error::Read { .. } => "SSHKeySecretUnreadable",
        }
    }
}

/// What a watch's SSH keys render to for one CR, before any Secret is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// The rendered inventory and its hosts, when the watch has an `inventory` template.
    pub inventory: Option<(String, Vec<String>)>,
    /// The name of the key Secret in the CR's namespace, when the watch has `sshKeySecret`.
    pub ssh_key_secret: Option<String>,
}

/// Renders the inventory and the key Secret's name from the CR. `None` when the watch uses neither.
pub fn hosts(extensions: &Extensions, object: &Value) -> Result<Option<Hosts>, Error> {
    if !extensions.uses_ssh() {
        return Ok(None);
    }
    let inventory = match &extensions.inventory {
        Some(source) => {
            let marked = template::render_marked("inventory", source, object)?;
            let text = inventory::fill(&marked)?;
            let hosts = inventory::hosts(&text)?;
            Some((text, hosts))
        }
        None => None,
    };
    let ssh_key_secret = match &extensions.ssh_key_secret {
        Some(source) => Some(template::render("sshKeySecret", source, object)?.trim().to_string()),
        None => None,
    };
    Ok(Some(Hosts { inventory, ssh_key_secret }))
}

/// Renders the inventory and reads the key Secret for one run. `None` when the watch uses neither.
pub async fn prepare(
    client: &Client,
    extensions: &Extensions,
    object: &Value,
    namespace: Option<&str>,
) -> Result<Option<Remote>, Error> {
    let Some(Hosts { inventory, ssh_key_secret }) = hosts(extensions, object)? else {
        return Ok(None);
    };
    let (private_key, known_hosts) = match ssh_key_secret {
        Some(name) => {
            let Some(namespace) = namespace else {
                return Err(Error::ClusterScoped { name });
            };
            let kind = object["kind"].as_str().unwrap_or_default();
            let (key, known_hosts) = read_secret(client, namespace, &name, kind).await?;
            (Some(key), known_hosts)
        }
        None => (None, None),
    };
    Ok(Some(Remote {
        inventory,
        ssh: Ssh { private_key, known_hosts, policy: extensions.host_key_checking },
    }))
}

async fn read_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    kind: &str,
) -> Result<(PrivateKey, Option<String>), Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let (namespace, name) = (namespace.to_string(), name.to_string());
    let secret = match with_timeout(api.get_opt(&name)).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(Error::SecretNotFound { namespace, name }),
        Err(cause) => return Err(Error::Read { namespace, name, cause }),
    };
    if !allows_kind(secret.metadata.annotations.as_ref(), kind) {
        return Err(Error::NotAllowed { namespace, name, kind: kind.to_string() });
    }
    let found = secret.type_.clone().unwrap_or_default();
    if found != SSH_AUTH_TYPE {
        return Err(Error::SecretType { namespace, name, found });
    }
    let text = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    match text(PRIVATE_KEY).filter(|key| !key.trim().is_empty()) {
        Some(key) => Ok((PrivateKey::new(key), text(KNOWN_HOSTS))),
        None => Err(Error::KeyMissing { namespace, name }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_say_which_part_is_wrong() {
        let template = |field| Error::Template(template::Error { field, line: Some(1), reason: "x".into() });
        assert_eq!(template("inventory").reason(), "InventoryError");
        assert_eq!(template("sshKeySecret").reason(), "SSHKeySecretInvalid");
        let (namespace, name) = ("ns".to_string(), "keys".to_string());
        assert_eq!(
            Error::SecretNotFound { namespace: namespace.clone(), name: name.clone() }.reason(),
            "SSHKeySecretNotFound"
        );
        let missing = Error::KeyMissing { namespace, name };
        assert_eq!(missing.reason(), "SSHKeyMissing");
        assert_eq!(missing.to_string(), "sshKeySecret: Secret ns/keys has no \"ssh-privatekey\" key");
    }

    #[test]
    fn a_secret_is_used_only_for_the_kinds_its_annotation_lists() {
        let annotations =
            |value: &str| std::collections::BTreeMap::from([(ALLOW_KINDS.to_string(), value.to_string())]);
        assert!(allows_kind(Some(&annotations("EtcdCluster, EtcdRestore")), "EtcdRestore"));
        assert!(allows_kind(Some(&annotations("*")), "KubernetesCluster"));
        assert!(!allows_kind(Some(&annotations("EtcdCluster")), "EtcdRestore"));
        assert!(!allows_kind(Some(&annotations("etcdcluster")), "EtcdCluster"), "kinds are case-sensitive");
        assert!(!allows_kind(Some(&annotations("")), "EtcdCluster"));
        assert!(!allows_kind(None, "EtcdCluster"));
        let refused =
            Error::NotAllowed { namespace: "ns".into(), name: "keys".into(), kind: "EtcdCluster".into() };
        assert_eq!(refused.reason(), "SSHKeySecretNotAllowed");
        assert_eq!(
            refused.to_string(),
            "sshKeySecret: Secret ns/keys is not allowed for kind EtcdCluster: annotate it ansible-operator.dev/allow-kinds: \"EtcdCluster\" (a comma-separated list of kinds) to let CRs of that kind use it"
        );
    }
}
