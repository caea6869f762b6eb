//! ConfigMaps that test playbooks write as evidence of what they saw and did.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

/// The data of a ConfigMap, or `None` when it does not exist.
pub async fn data(client: &Client, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .unwrap_or_else(|err| panic!("read ConfigMap {namespace}/{name}: {err}"))
        .map(|cm| cm.data.unwrap_or_default())
}

/// Waits until the ConfigMap exists and returns its data.
pub async fn wait_for(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> BTreeMap<String, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    super::wait_for(&format!("ConfigMap {namespace}/{name}"), timeout, || async {
        let found = api.get_opt(name).await.map_err(|e| e.to_string())?;
        Ok(found.map(|cm| cm.data.unwrap_or_default()).ok_or_else(|| "not found".to_string()))
    })
    .await
}
