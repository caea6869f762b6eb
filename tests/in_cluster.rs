//! The operator as users run it: its own image (`make docker-build`), deployed with `deploy/`
//! (`make deploy`: hack/deploy.sh) as a Pod under its own ServiceAccount and RBAC, reconciling the
//! memcached sample into running Pods on the local node, then removed again (`make undeploy`).
//! Needs the node and the image: `make test` builds it before the tests run.

use crate::support;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::api::ApiServer;
use support::node::{describe, is_ready, operator_image, pods_with, require_ready_node};
use support::{kubectl, kubectl_ok};

const OPERATOR_NAMESPACE: &str = "ansible-operator-system";
const OPERATOR_DEPLOYMENT: &str = "ansible-operator-controller-manager";
const SAMPLE: &str = "memcached-sample";
const WAIT: Duration = Duration::from_secs(180);

/// `hack/deploy.sh apply|delete IMG` (what `make deploy` and `make undeploy` run) on the test cluster.
fn deploy_script(action: &str) -> std::process::Output {
    let path = format!(
        "{}:{}",
        support::repo().join(".local/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(support::repo().join("hack/deploy.sh"))
        .args([action, &operator_image()])
        .env("KUBECONFIG", support::kubeconfig())
        .env("PATH", path)
        .output()
        .expect("run hack/deploy.sh")
}

/// The deployed operator; undeployed when dropped, after the sample CR's finalizer is released (a
/// failed test must not leave a CR that nothing finalizes any more, or CRD deletion would hang).
struct Deployed {
    sample_namespace: Option<String>,
    undeployed: bool,
}

impl Deployed {
    fn apply() -> Self {
        let output = deploy_script("apply");
        assert!(
            output.status.success(),
            "make deploy failed (is the image built and loaded? `make docker-build IMG={}`):\n{}\n{}",
            operator_image(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Self { sample_namespace: None, undeployed: false }
    }

    fn undeploy(&mut self) {
        let output = deploy_script("delete");
        self.undeployed = true;
        assert!(
            output.status.success(),
            "make undeploy failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        if self.undeployed {
            return;
        }
        if let Some(namespace) = &self.sample_namespace {
            let patch = r#"{"metadata":{"finalizers":null}}"#;
            let _ = kubectl(["-n", namespace, "patch", "memcached", SAMPLE, "--type=merge", "-p", patch]);
        }
        if std::thread::panicking() {
            let log =
                kubectl(["-n", OPERATOR_NAMESPACE, "logs", &format!("deployment/{OPERATOR_DEPLOYMENT}")]);
            eprintln!("---- in-cluster operator log ----\n{}", String::from_utf8_lossy(&log.stdout));
        }
        let _ = deploy_script("delete");
    }
}

/// `deploy/samples/memcached.yaml`, moved to `namespace`.
fn memcached_sample(namespace: &str) -> DynamicObject {
    let text =
        std::fs::read_to_string(support::repo().join("deploy/samples/memcached.yaml")).expect("read sample");
    let mut sample: Value = serde_saphyr::from_str(&text).expect("sample is YAML");
    sample["metadata"]["namespace"] = json!(namespace);
    serde_json::from_value(sample).expect("sample is an object")
}

/// Waits until the CR reports `size` ready replicas and exactly `size` memcached Pods exist, all
/// running and ready (none left terminating).
async fn wait_for_size(memcacheds: &Api<DynamicObject>, pods: &Api<Pod>, size: i64) {
    let selector = format!("memcached={SAMPLE}");
    support::wait_for(&format!("{size} ready memcached Pods reported in status"), WAIT, || async {
        let cr = memcacheds.get(SAMPLE).await.map_err(|e| e.to_string())?;
        let status = &cr.data["status"];
        let pods = pods_with(pods, &selector).await?;
        let ready = pods.iter().filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none()).count();
        let successful = support::converged(&cr);
        Ok(
            if successful
                && status["readyReplicas"] == size
                && pods.len() as i64 == size
                && ready as i64 == size
            {
                Ok(())
            } else {
                let pods: Vec<String> = pods.iter().map(describe).collect();
                Err(format!("status {status}, Pods {pods:?}"))
            },
        )
    })
    .await
}

async fn set_size(memcacheds: &Api<DynamicObject>, size: i64) {
    let patch = json!({"spec": {"size": size}});
    memcacheds.patch(SAMPLE, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch size");
}

/// Releases the finalizers of sample CRs that other tests left in namespaces being deleted. Their
/// operators are gone, so nothing would finalize them: the operator deployed here would try (it
/// watches every namespace), and `make undeploy` would wait for them to delete the sample CRDs.
async fn release_abandoned_samples(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let with_finalizers =
        "jsonpath={range .items[?(@.metadata.finalizers)]}{.metadata.namespace} {.metadata.name}{'\\n'}{end}";
    for resource in support::SAMPLE_RESOURCES {
        // Nothing listed when the CRD is not installed.
        let listed = kubectl(["get", resource, "--all-namespaces", "-o", with_finalizers]).stdout;
        let listed = String::from_utf8_lossy(&listed);
        for (namespace, name) in listed.lines().filter_map(|line| line.split_once(' ')) {
            let deleting = namespaces.get_opt(namespace).await.expect("get namespace");
            if deleting.is_some_and(|ns| ns.metadata.deletion_timestamp.is_some()) {
                eprintln!(
                    "in_cluster: releasing {resource} {namespace}/{name}, left by a test whose operator is gone"
                );
                let patch = r#"{"metadata":{"finalizers":null}}"#;
                kubectl_ok(["-n", namespace, "patch", resource, name, "--type=merge", "-p", patch]);
            }
        }
    }
}

#[tokio::test]
async fn operator_image_deployed_with_deploy_reconciles_the_memcached_sample_into_running_pods() {
    let client = support::client().await;
    require_ready_node(&client).await;
    release_abandoned_samples(&client).await;
    let mut deployed = Deployed::apply();

    // The operator runs as shipped: its ServiceAccount, user 1001, probes passed, metrics served.
    let operator_pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let operator =
        pods_with(&operator_pods, "control-plane=controller-manager").await.expect("list operator Pods");
    let operator =
        operator.iter().find(|p| is_ready(p)).expect("a ready operator Pod (readiness probe passed)");
    let operator_name = operator.metadata.name.clone().expect("Pod name");
    let spec = operator.spec.as_ref().expect("Pod spec");
    assert_eq!(spec.service_account_name.as_deref(), Some("ansible-operator"));
    assert!(spec.containers[0].image.as_deref().unwrap_or_default().ends_with(&operator_image()));
    let id = kubectl_ok(["-n", OPERATOR_NAMESPACE, "exec", &operator_name, "--", "id", "-u"]);
    assert_eq!(id.trim(), "1001", "the image's user");
    let proxy = |port: u16, path: &str| {
        format!("/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/{operator_name}:{port}/proxy{path}")
    };
    assert_eq!(kubectl_ok(["get", "--raw", &proxy(6789, "/healthz")]), "ok");
    assert_eq!(kubectl_ok(["get", "--raw", &proxy(6789, "/readyz")]), "ok");
    // Metrics over HTTPS for callers allowed to read them (deploy/'s metrics-reader ClusterRole), as
    // upstream's scaffold; the API answers a token the API server accepts.
    let pod_ip = operator.status.as_ref().and_then(|s| s.pod_ip.clone()).expect("the operator Pod's IP");
    let metrics = ApiServer { host: pod_ip.clone(), port: 8443, cacert: None };
    assert_eq!(metrics.request("GET", "/metrics", None).status, 401, "no token");
    let stranger = kubectl_ok(["-n", OPERATOR_NAMESPACE, "create", "token", "default"]);
    assert_eq!(
        metrics.request("GET", "/metrics", Some(stranger.trim())).status,
        403,
        "a token without the role"
    );
    kubectl_ok(["-n", OPERATOR_NAMESPACE, "create", "serviceaccount", "scraper"]);
    let binding = format!("{OPERATOR_NAMESPACE}-scraper");
    let _ = kubectl(["delete", "clusterrolebinding", &binding, "--ignore-not-found"]);
    kubectl_ok([
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=ansible-operator-metrics-reader",
        &format!("--serviceaccount={OPERATOR_NAMESPACE}:scraper"),
    ]);
    let scraper = kubectl_ok(["-n", OPERATOR_NAMESPACE, "create", "token", "scraper"]);
    let scraped = support::wait_for("the scraper's RBAC", WAIT, || async {
        let reply = metrics.request("GET", "/metrics", Some(scraper.trim()));
        Ok(if reply.status == 200 { Ok(reply.body) } else { Err(format!("{} {}", reply.status, reply.body)) })
    })
    .await;
    let _ = kubectl(["delete", "clusterrolebinding", &binding]);
    assert!(
        scraped.as_str().unwrap_or_default().contains("ansible_operator_build_info{"),
        "metrics answer: {scraped}"
    );
    let api = ApiServer { host: pod_ip, port: 8082, cacert: None };
    let kinds = api.get_ok("/api/v1/kinds", stranger.trim());
    assert!(kinds.to_string().contains("Memcached"), "{kinds}");

    // The sample, applied as a user applies it, converges into running Pods.
    let ns = support::TestNamespace::new(&client, "in-cluster").await;
    deployed.sample_namespace = Some(ns.name.clone());
    let memcacheds = support::cr_api(&client, "cache.example.com", "Memcached", &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let sample = memcached_sample(&ns.name);
    let size = sample.data["spec"]["size"].as_i64().expect("sample spec.size");
    memcacheds.create(&PostParams::default(), &sample).await.expect("apply the sample");
    wait_for_size(&memcacheds, &pods, size).await;
    let cr = memcacheds.get(SAMPLE).await.expect("get sample");
    assert_eq!(cr.data["status"]["deployment"], format!("{SAMPLE}-memcached"), "k8s_status ran in the Pod");
    assert_eq!(cr.data["status"]["replicas"], size);

    // size drives the number of running Pods, both ways.
    set_size(&memcacheds, size + 1).await;
    wait_for_size(&memcacheds, &pods, size + 1).await;
    set_size(&memcacheds, 1).await;
    wait_for_size(&memcacheds, &pods, 1).await;

    // Deleting the CR runs its finalizer; the Deployment and its Pods go.
    memcacheds.delete(SAMPLE, &DeleteParams::default()).await.expect("delete the sample");
    support::wait_for_absent(&memcacheds, SAMPLE, WAIT).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    support::wait_for_absent(&deployments, &format!("{SAMPLE}-memcached"), WAIT).await;
    support::wait_for("the memcached Pods to be gone", WAIT, || async {
        let left = pods_with(&pods, &format!("memcached={SAMPLE}")).await?;
        Ok(if left.is_empty() {
            Ok(())
        } else {
            Err(left.iter().map(describe).collect::<Vec<_>>().join("; "))
        })
    })
    .await;

    // Every call the operator and its playbooks made was allowed by deploy/'s RBAC.
    let log = kubectl_ok(["-n", OPERATOR_NAMESPACE, "logs", &operator_name]);
    assert!(log.contains("ansible run finished"), "the log is the operator's: {log}");
    assert!(!log.to_lowercase().contains("forbidden"), "the operator hit a permission error:\n{log}");

    // `make undeploy` removes everything `make deploy` installed.
    deployed.undeploy();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    support::wait_for_absent(&namespaces, OPERATOR_NAMESPACE, WAIT).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    support::wait_for_absent(&crds, "memcacheds.cache.example.com", WAIT).await;
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    assert!(cluster_roles.get_opt("ansible-operator-manager").await.expect("get ClusterRole").is_none());
}
