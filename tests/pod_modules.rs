//! Playbooks that need a running Pod, run by the operator through its proxy on the local node:
//! `kubernetes.core.k8s` with `wait: true`, `k8s_info` with `wait_condition`, `k8s_exec` (an
//! upgraded connection through the proxy) and `k8s_log`.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use serde_json::json;
use support::node::{MEMCACHED_IMAGE, require_ready_node};
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "pods.test.example.com";
const KIND: &str = "PodUser";
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test]
async fn playbook_waits_for_a_deployment_then_execs_in_and_reads_the_log_of_its_pod() {
    let Test { client, ns, api } = Test::setup("pod-modules").kind(GROUP, KIND).build().await;
    require_ready_node(&client).await;
    let watches = support::playbook_watch(GROUP, KIND, "pod_modules.yml");
    let _operator = OperatorConfig::new(&watches, &ns.name).start();

    let spec = json!({"image": MEMCACHED_IMAGE, "greeting": "hello from the Pod"});
    support::create_cr(&api, GROUP, KIND, "user", spec).await;
    let done = support::wait_for_condition(&api, "user", "Successful", "True", WAIT).await;

    let status = &done.data["status"];
    assert_eq!(status["readyReplicas"], 1, "k8s wait: true returned the ready Deployment: {status}");
    assert_eq!(status["available"], "True", "k8s_info wait_condition returned it Available: {status}");
    assert_eq!(status["execStdout"], "42\nmemcache\n", "k8s_exec ran in the container: {status}");
    assert_eq!(status["execRc"], 0);
    assert_eq!(status["log"], "hello from the Pod\n", "k8s_log read the container's output: {status}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deployment = deployments.get("user-shell").await.expect("the playbook's Deployment");
    assert_eq!(deployment.status.and_then(|s| s.ready_replicas), Some(1));
}
