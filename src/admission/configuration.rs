//! The `ValidatingWebhookConfiguration` the operator applies at start: one webhook per kind with
//! `validate`, calling this operator's API server (by URL, or through a Service), trusting the
//! serving certificate's CA. Built purely from the watches; applied with server-side apply. And the
//! `spec.conversion` it patches into the CRD of each kind with `convert`, calling the same server.

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::kubeapi::{self, with_timeout};
use crate::watches::{Gvk, Validate};

/// The field manager of the configuration.
const MANAGER: &str = "ansible-operator";

/// The longest `timeoutSeconds` the API server accepts.
const MAX_TIMEOUT_SECONDS: u64 = 30;

/// How the API server reaches the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `https://<host>:<port>`: an operator outside the cluster (`--webhook-host`).
    Url {
        /// Host name or address.
        host: String,
        /// The API server's port.
        port: u16,
    },
    /// A Service in front of the operator's pods.
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port.
        port: u16,
    },
}

/// One kind the configuration validates.
#[derive(Debug, Clone)]
pub struct Kind {
    /// Its group, version and kind.
    pub gvk: Gvk,
    /// Its resource (plural).
    pub plural: String,
    /// Its `validate` settings.
    pub validate: Validate,
}

/// The path the webhook of `gvk` is served at.
pub fn path(gvk: &Gvk) -> String {
    format!("/validate/{}/{}/{}", gvk.group, gvk.version, gvk.kind)
}

/// The path the conversion webhook of `group`'s `kind` is served at.
pub fn conversion_path(group: &str, kind: &str) -> String {
    format!("/convert/{group}/{kind}")
}

/// How the API server calls `path` at `endpoint`, trusting `ca_bundle` (base64 PEM).
fn client_config(endpoint: &Endpoint, path: &str, ca_bundle: &str) -> Value {
    let mut config = match endpoint {
        Endpoint::Url { host, port } => json!({"url": format!("https://{host}:{port}{path}")}),
        Endpoint::Service { namespace, name, port } => {
            json!({"service": {"namespace": namespace, "name": name, "port": port, "path": path}})
        }
    };
    config["caBundle"] = Value::from(ca_bundle);
    config
}

/// A CRD's `spec.conversion` calling the conversion webhook of `group`'s `kind`; `ca_pem` is the CA
/// bundle (PEM).
pub fn conversion(group: &str, kind: &str, endpoint: &Endpoint, ca_pem: &[u8]) -> Value {
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    json!({
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": client_config(endpoint, &conversion_path(group, kind), &ca_bundle),
            "conversionReviewVersions": ["v1"],
        },
    })
}

/// Sets `conversion` as the `spec.conversion` of the CRD `name` (a merge patch: the rest of the CRD
/// is whoever installed it's).
pub async fn patch_conversion(client: &Client, name: &str, conversion: &Value) -> Result<(), kubeapi::Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let patch = json!({"spec": {"conversion": conversion}});
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
    with_timeout(api.patch(name, &params, &Patch::Merge(&patch))).await?;
    Ok(())
}

/// The configuration named `name` with one webhook per kind; `ca_pem` is the CA bundle (PEM). With
/// `namespaces` (`WATCH_NAMESPACE`), a namespaced object is sent only from those: an operator does not
/// judge the CRs it would never reconcile.
pub fn configuration(
    name: &str,
    kinds: &[Kind],
    endpoint: &Endpoint,
    ca_pem: &[u8],
    namespaces: &[String],
) -> Value {
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let webhooks: Vec<Value> = kinds
        .iter()
        .map(|kind| {
            let gvk = &kind.gvk;
            let client_config = client_config(endpoint, &path(gvk), &ca_bundle);
            let timeout = kind.validate.timeout.as_millis().div_ceil(1000) as u64;
            let mut webhook = json!({
                "name": format!("{}.{}.{}", gvk.version, kind.plural, gvk.group).to_lowercase(),
                "rules": [{
                    "apiGroups": [gvk.group],
                    "apiVersions": [gvk.version],
                    "resources": [kind.plural],
                    "operations": ["CREATE", "UPDATE"],
                    "scope": "*",
                }],
                "failurePolicy": kind.validate.failure_policy.as_str(),
                "timeoutSeconds": timeout.clamp(1, MAX_TIMEOUT_SECONDS),
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "clientConfig": client_config,
            });
            if !namespaces.is_empty() {
                webhook["namespaceSelector"] = json!({"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]});
            }
            webhook
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGER}},
        "webhooks": webhooks,
    })
}

/// Applies `configuration` (server-side apply, forcing our fields).
pub async fn apply(client: &Client, configuration: &Value) -> Result<(), kubeapi::Error> {
    let name = configuration["metadata"]["name"].as_str().unwrap_or_default();
    let api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    with_timeout(api.patch(name, &params, &Patch::Apply(configuration))).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::watches::{FailurePolicy, Target};

    fn kind(failure_policy: FailurePolicy, timeout: Duration) -> Kind {
        Kind {
            gvk: Gvk {
                group: "infra.example.com".into(),
                version: "v1".into(),
                kind: "KubernetesCluster".into(),
            },
            plural: "kubernetesclusters".into(),
            validate: Validate { target: Target::Playbook("/v.yml".into()), failure_policy, timeout },
        }
    }

    #[test]
    fn each_kind_gets_a_webhook_on_create_and_update_calling_its_path_with_the_ca_bundle() {
        let endpoint = Endpoint::Url { host: "127.0.0.1".into(), port: 8443 };
        let config = configuration(
            "op-validate",
            &[kind(FailurePolicy::Ignore, Duration::from_millis(2500))],
            &endpoint,
            b"PEM",
            &[],
        );
        assert_eq!(config["metadata"]["name"], "op-validate");
        let webhook = &config["webhooks"][0];
        assert_eq!(webhook["name"], "v1.kubernetesclusters.infra.example.com");
        assert_eq!(
            webhook["rules"],
            json!([{"apiGroups": ["infra.example.com"], "apiVersions": ["v1"], "resources": ["kubernetesclusters"],
                    "operations": ["CREATE", "UPDATE"], "scope": "*"}])
        );
        assert_eq!(webhook["failurePolicy"], "Ignore");
        assert_eq!(webhook["timeoutSeconds"], 3, "2.5s rounds up");
        assert_eq!(webhook["sideEffects"], "None");
        assert_eq!(webhook["admissionReviewVersions"], json!(["v1"]));
        assert!(webhook.get("namespaceSelector").is_none(), "every namespace without WATCH_NAMESPACE");
        assert_eq!(
            webhook["clientConfig"],
            json!({"url": "https://127.0.0.1:8443/validate/infra.example.com/v1/KubernetesCluster", "caBundle": "UEVN"})
        );
    }

    #[test]
    fn a_converted_kinds_crd_calls_its_conversion_path_with_the_ca_bundle() {
        let endpoint = Endpoint::Url { host: "127.0.0.1".into(), port: 8443 };
        assert_eq!(
            conversion("cache.example.com", "Memcached", &endpoint, b"PEM"),
            json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig":
                {"url": "https://127.0.0.1:8443/convert/cache.example.com/Memcached", "caBundle": "UEVN"}}})
        );
        let endpoint = Endpoint::Service { namespace: "ops".into(), name: "op-api".into(), port: 8082 };
        assert_eq!(
            conversion("cache.example.com", "Memcached", &endpoint, b"PEM")["webhook"]["clientConfig"]["service"],
            json!({"namespace": "ops", "name": "op-api", "port": 8082, "path": "/convert/cache.example.com/Memcached"})
        );
    }

    #[test]
    fn an_in_cluster_operator_is_called_through_its_service() {
        let endpoint = Endpoint::Service { namespace: "ops".into(), name: "op-api".into(), port: 8082 };
        let namespaces = ["a".to_string(), "b".to_string()];
        let config = configuration(
            "x",
            &[kind(FailurePolicy::Fail, Duration::from_secs(5))],
            &endpoint,
            b"PEM",
            &namespaces,
        );
        let webhook = &config["webhooks"][0];
        assert_eq!(
            webhook["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}),
            "only the watched namespaces"
        );
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(webhook["timeoutSeconds"], 5);
        assert_eq!(
            webhook["clientConfig"]["service"],
            json!({"namespace": "ops", "name": "op-api", "port": 8082, "path": "/validate/infra.example.com/v1/KubernetesCluster"})
        );
    }
}
