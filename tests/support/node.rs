//! The local cluster's node (hack/local-cluster.sh with NODE=1): Pods that really run, kubectl for
//! logs and exec, the images built here (hack/images.sh).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

use super::wait_for;

/// The image the memcached sample runs here, as `deploy/samples/memcached.yaml` names it.
pub const MEMCACHED_IMAGE: &str = "localhost/memcached:1.6.18";

/// The operator image `make docker-build` builds and `make deploy` deploys (`IMG`).
pub fn operator_image() -> String {
    std::env::var("IMG")
        .ok()
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| "ansible-operator:dev".into())
}

/// The base image an upstream project builds FROM: `BASE_IMG`, as `make docker-build-base` names it.
pub fn base_image() -> String {
    std::env::var("BASE_IMG")
        .ok()
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| DEFAULT_BASE_IMAGE.into())
}

/// `make docker-build-base`'s image when `BASE_IMG` is not set.
pub const DEFAULT_BASE_IMAGE: &str = "localhost/ansible-operator-base:dev";

/// Builds `dir` (its Dockerfile) as `image` with podman on the local images' storage, and loads it
/// into the node, as a push and pull would.
pub fn build_and_load(dir: &std::path::Path, image: &str) {
    let images = super::repo().join("hack/images.sh");
    for args in [vec!["podman", "build", "-t", image, &dir.to_string_lossy()], vec!["load", image]] {
        let output = std::process::Command::new(&images).args(&args).output().expect("run hack/images.sh");
        assert!(output.status.success(), "hack/images.sh {args:?}: {}", super::describe_output(&output));
    }
}

/// Fails the test unless a node is Ready: the tests that need a running Pod say so instead of
/// timing out on a Pod that is never scheduled.
pub async fn require_ready_node(client: &Client) -> Node {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("list nodes");
    let ready = nodes.items.into_iter().find(|node| {
        let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
        conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    });
    ready.expect(
        "this test needs a Ready node: the local cluster's (hack/local-cluster.sh up, NODE=1; `make test` starts it)",
    )
}

/// The node's InternalIP.
pub fn internal_ip(node: &Node) -> String {
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref()).expect("node addresses");
    addresses.iter().find(|a| a.type_ == "InternalIP").expect("node has an InternalIP").address.clone()
}

/// Whether the Pod is Running with every container ready.
pub fn is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the Pod is Running and ready, and returns it.
pub async fn wait_until_ready(pods: &Api<Pod>, name: &str, timeout: Duration) -> Pod {
    wait_for(&format!("Pod {name} to be ready"), timeout, || async {
        let pod = pods.get(name).await.map_err(|e| e.to_string())?;
        Ok(if is_ready(&pod) { Ok(pod) } else { Err(describe(&pod)) })
    })
    .await
}

/// The Pods matching a label selector, with a one-line description each (for failure messages).
pub async fn pods_with(pods: &Api<Pod>, selector: &str) -> Result<Vec<Pod>, String> {
    let list = pods.list(&ListParams::default().labels(selector)).await.map_err(|e| e.to_string())?;
    Ok(list.items)
}

/// Phase, readiness and container states of a Pod, for failure messages.
pub fn describe(pod: &Pod) -> String {
    let status = serde_json::to_value(&pod.status).unwrap_or(Value::Null);
    format!(
        "{} phase {} deleting {} containers {}",
        pod.metadata.name.as_deref().unwrap_or("?"),
        status["phase"],
        pod.metadata.deletion_timestamp.is_some(),
        status["containerStatuses"]
    )
}
