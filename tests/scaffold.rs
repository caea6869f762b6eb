//! An upstream operator project switched by its Dockerfile's `FROM` line: the project in
//! `tests/fixtures/upstream-project/` (laid out as `operator-sdk init --plugins=ansible` and `create
//! api --generate-role` lay it out) is built FROM our base image (`make docker-build-base`) with its
//! own `make docker-build`, deployed with its own `config/` (`make deploy`: the scaffold's RBAC, core
//! `events` only, no `AnsibleRun` CRD, metrics over HTTPS behind RBAC, a 768Mi limit), and used as a
//! user would. Needs the node and the base image: `make test` builds it before the tests run.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::api::ApiServer;
use support::node::{describe, is_ready, pods_with, require_ready_node};
use support::operator::{scratch_dir, venv};
use support::{kubectl, kubectl_ok, wait_for};

const PROJECT_NAMESPACE: &str = "memcached-operator-system";
const DEPLOYMENT: &str = "memcached-operator-controller-manager";
const IMAGE: &str = "localhost/memcached-operator:scaffold-test";
const GROUP: &str = "cache.example.org";
const SAMPLE: &str = "memcached-sample";
const MARKER: &str = "installed by the project image";
/// CRs beside the sample for the memory check (size 0: the operator's load, not the node's).
const LOAD: usize = 50;
const MEMORY_LIMIT: u64 = 768 * 1024 * 1024;
const WAIT: Duration = Duration::from_secs(240);
/// The LOAD CRs' runs share the operator's 500m CPU limit: minutes, not seconds. (`make test` runs
/// this test after the other lanes, by itself: beside them the operator missed its leader renew
/// deadline.)
const LOAD_WAIT: Duration = Duration::from_secs(900);

/// Runs a command, fails the test unless it succeeds, and returns its stdout.
fn run(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|error| panic!("run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The module the project's own copy of `operator_sdk.util` has and the base image's has not.
const MARKER_MODULE: &str = r#"#!/usr/bin/python
DOCUMENTATION = r"""
module: scaffold_marker
short_description: Says that the project's own copy of the collection ran.
"""
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, collection="installed by the project image")


if __name__ == "__main__":
    main()
"#;

/// A copy of the project with the collection its requirements.yml installs: a newer
/// operator_sdk.util (0.5.1: ours is 0.5.0, and ansible-galaxy skips a version that is already
/// installed) with `scaffold_marker` added, built with ansible-galaxy.
fn project() -> PathBuf {
    let dir = scratch_dir("upstream-project");
    let fixture = support::repo().join("tests/fixtures/upstream-project");
    run(Command::new("cp").arg("-a").arg(fixture.join(".")).arg(&dir));
    let source = dir.join("collection-source");
    run(Command::new("cp")
        .arg("-a")
        .arg(support::repo().join("collections/ansible_collections/operator_sdk/util"))
        .arg(&source));
    std::fs::write(source.join("plugins/modules/scaffold_marker.py"), MARKER_MODULE).expect("write module");
    let galaxy = std::fs::read_to_string(source.join("galaxy.yml")).expect("read galaxy.yml");
    assert!(galaxy.contains("\nversion: 0.5.0\n"), "our collection is operator_sdk.util 0.5.0");
    std::fs::write(source.join("galaxy.yml"), galaxy.replace("\nversion: 0.5.0\n", "\nversion: 0.5.1\n"))
        .expect("write galaxy.yml");
    run(Command::new(venv().join("bin/ansible-galaxy"))
        .args(["collection", "build", "--force", "--output-path"])
        .arg(dir.join("collections"))
        .arg(&source));
    std::fs::remove_dir_all(&source).expect("remove the collection's source");
    let dockerfile = dir.join("Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).expect("read Dockerfile");
    let from = format!("FROM {}", support::node::DEFAULT_BASE_IMAGE);
    assert!(text.contains(&from), "the project's Dockerfile builds FROM our base image");
    std::fs::write(&dockerfile, text.replace(&from, &format!("FROM {}", support::node::base_image())))
        .expect("Dockerfile");
    dir
}

/// `make <target>` in the project, with kubectl on the test cluster and podman on our storage.
fn make(project: &Path, target: &str, extra: &[&str]) -> String {
    let kubectl = format!(
        "{} --kubeconfig {}",
        support::repo().join(".local/bin/kubectl").display(),
        support::kubeconfig().display()
    );
    let podman = format!("{} podman", support::repo().join("hack/images.sh").display());
    run(Command::new("make")
        .arg("-C")
        .arg(project)
        .arg(target)
        .arg(format!("IMG={IMAGE}"))
        .arg(format!("KUBECTL={kubectl}"))
        .arg(format!("CONTAINER_TOOL={podman}"))
        .args(extra))
}

/// The deployed project; on drop (a failed test included) its CRs' finalizers are released and
/// `make undeploy` removes what `make deploy` installed.
struct Deployed {
    project: PathBuf,
    cr_namespace: Option<String>,
    undeployed: bool,
}

impl Drop for Deployed {
    fn drop(&mut self) {
        if self.undeployed {
            return;
        }
        if std::thread::panicking() {
            let deployment = format!("deployment/{DEPLOYMENT}");
            let log = kubectl(["-n", PROJECT_NAMESPACE, "logs", &deployment]);
            eprintln!("---- the project's operator log ----\n{}", String::from_utf8_lossy(&log.stdout));
            // A container that restarted: what it said last, and how it ended.
            let previous = kubectl(["-n", PROJECT_NAMESPACE, "logs", &deployment, "--previous", "--tail=80"]);
            if previous.status.success() {
                let ended = kubectl([
                    "-n",
                    PROJECT_NAMESPACE,
                    "get",
                    "pods",
                    "-o",
                    "jsonpath={.items[*].status.containerStatuses[*].lastState}",
                ]);
                eprintln!(
                    "---- its log before the last restart ----\n{}\n---- how that container ended ----\n{}",
                    String::from_utf8_lossy(&previous.stdout),
                    String::from_utf8_lossy(&ended.stdout)
                );
            }
        }
        // The operator first, so that nothing adds a finalizer back; then the CRs' finalizers go,
        // or deleting the CRD would wait for them for ever.
        let _ = kubectl(["-n", PROJECT_NAMESPACE, "delete", "deployment", DEPLOYMENT, "--wait=true"]);
        if let Some(namespace) = &self.cr_namespace {
            let names = kubectl(["-n", namespace, "get", "memcacheds.cache.example.org", "-o", "name"]);
            for name in String::from_utf8_lossy(&names.stdout).lines() {
                let patch = r#"{"metadata":{"finalizers":null}}"#;
                let _ = kubectl(["-n", namespace, "patch", name, "--type=merge", "-p", patch]);
            }
        }
        let _ = std::panic::catch_unwind(|| make(&self.project, "undeploy", &["ignore-not-found=true"]));
    }
}

fn memcached(namespace: &str, name: &str, size: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "Memcached",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size, "image": support::node::MEMCACHED_IMAGE},
    }))
    .expect("a Memcached")
}

/// Waits until the sample is converged with `size` running, ready Pods (none terminating).
async fn wait_for_size(memcacheds: &Api<DynamicObject>, pods: &Api<Pod>, size: usize) -> DynamicObject {
    let selector = format!("memcached={SAMPLE}");
    wait_for(&format!("{size} ready memcached Pods"), WAIT, || async {
        let cr = memcacheds.get(SAMPLE).await.map_err(|e| e.to_string())?;
        let pods = pods_with(pods, &selector).await?;
        let ready = pods.iter().filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none()).count();
        Ok(if support::converged(&cr) && pods.len() == size && ready == size {
            Ok(cr)
        } else {
            Err(format!(
                "status {}, Pods {:?}",
                cr.data["status"],
                pods.iter().map(describe).collect::<Vec<_>>()
            ))
        })
    })
    .await
}

/// The operator container's peak memory, from its cgroup (v1 on the local node; v2 elsewhere).
fn peak_memory(pod: &str) -> u64 {
    let read =
        "cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.peak";
    let peak = kubectl_ok(["-n", PROJECT_NAMESPACE, "exec", pod, "--", "sh", "-c", read]);
    peak.trim().parse().unwrap_or_else(|_| panic!("a byte count from the cgroup: {peak:?}"))
}

#[tokio::test]
async fn an_upstream_project_builds_from_the_base_image_and_runs_with_its_own_config() {
    let client = support::client().await;
    require_ready_node(&client).await;

    // The user's steps: make docker-build (FROM our base image, their collection installed with
    // ansible-galaxy), the image loaded into the node as a push and pull would, make deploy.
    let project = project();
    make(&project, "docker-build", &[]);
    run(Command::new(support::repo().join("hack/images.sh")).args(["load", IMAGE]));
    let mut deployed = Deployed { project: project.clone(), cr_namespace: None, undeployed: false };
    make(&project, "deploy", &[]);

    // The Deployment becomes Available through /tini and the scaffold's probes.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), PROJECT_NAMESPACE);
    wait_for("the project's Deployment to be Available", WAIT, || async {
        let deployment = deployments.get(DEPLOYMENT).await.map_err(|e| e.to_string())?;
        let status = serde_json::to_value(&deployment.status).unwrap_or(Value::Null);
        let available = status["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Available" && c["status"] == "True"));
        Ok(if available { Ok(()) } else { Err(status.to_string()) })
    })
    .await;
    let operator_pods: Api<Pod> = Api::namespaced(client.clone(), PROJECT_NAMESPACE);
    let operator = pods_with(&operator_pods, "control-plane=controller-manager").await.expect("list Pods");
    let operator = operator.iter().find(|p| is_ready(p)).expect("a ready operator Pod");
    let operator_name = operator.metadata.name.clone().expect("Pod name");
    let started = operator.status.as_ref().and_then(|s| s.start_time.clone()).expect("the Pod's start time");
    let command =
        kubectl_ok(["-n", PROJECT_NAMESPACE, "exec", &operator_name, "--", "cat", "/proc/1/cmdline"]);
    assert!(command.starts_with("/tini\0"), "PID 1 is the ENTRYPOINT's /tini: {command:?}");

    // The sample converges into running Pods, through the project's own operator_sdk.util.
    let ns = support::TestNamespace::new(&client, "scaffold").await;
    deployed.cr_namespace = Some(ns.name.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let record: Secret = serde_json::from_value(json!({"metadata": {"name": "finalizer-record"}})).unwrap();
    secrets.create(&PostParams::default(), &record).await.expect("create the finalizer's record");
    let memcacheds = support::cr_api(&client, GROUP, "Memcached", &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    memcacheds.create(&PostParams::default(), &memcached(&ns.name, SAMPLE, 2)).await.expect("create sample");
    let cr = wait_for_size(&memcacheds, &pods, 2).await;
    assert_eq!(
        cr.data["status"]["collection"], MARKER,
        "the project's operator_sdk.util won over the base's"
    );

    // Scaling follows the spec.
    let patch = json!({"spec": {"size": 1}});
    memcacheds.patch(SAMPLE, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("scale to 1");
    wait_for_size(&memcacheds, &pods, 1).await;

    // Metrics over HTTPS behind the scaffold's RBAC: 401 without a token, 200 with the
    // metrics-reader role.
    let pod_ip = operator.status.as_ref().and_then(|s| s.pod_ip.clone()).expect("the operator Pod's IP");
    let metrics = ApiServer { host: pod_ip, port: 8443, cacert: None };
    assert_eq!(metrics.request("GET", "/metrics", None).status, 401, "no token");
    kubectl_ok(["-n", &ns.name, "create", "serviceaccount", "scraper"]);
    let binding = format!("{}-scraper", ns.name);
    kubectl_ok([
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=memcached-operator-metrics-reader",
        &format!("--serviceaccount={}:scraper", ns.name),
    ]);
    let scraper = kubectl_ok(["-n", &ns.name, "create", "token", "scraper"]);
    let scraped = wait_for("the scraper's RBAC", WAIT, || async {
        let reply = metrics.request("GET", "/metrics", Some(scraper.trim()));
        Ok(if reply.status == 200 { Ok(reply.body) } else { Err(format!("{} {}", reply.status, reply.body)) })
    })
    .await;
    let _ = kubectl(["delete", "clusterrolebinding", &binding]);
    assert!(scraped.as_str().unwrap_or_default().contains("ansible_operator_build_info{"), "{scraped}");

    // Memory under the scaffold's limit with LOAD more CRs, and no restart.
    for i in 0..LOAD {
        let cr = memcached(&ns.name, &format!("load-{i:02}"), 0);
        memcacheds.create(&PostParams::default(), &cr).await.expect("create a load CR");
    }
    wait_for(&format!("{LOAD} more Memcacheds to converge"), LOAD_WAIT, || async {
        let list = memcacheds.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let done = list.items.iter().filter(|cr| support::converged(cr)).count();
        Ok(if done == LOAD + 1 { Ok(()) } else { Err(format!("{done} of {} converged", LOAD + 1)) })
    })
    .await;
    let peak = peak_memory(&operator_name);
    eprintln!("scaffold: the operator container's peak memory with {} CRs: {} MiB", LOAD + 1, peak >> 20);
    assert!(peak < MEMORY_LIMIT, "peak {peak} bytes is over the scaffold's 768Mi limit");

    // Deleting a CR runs the finalizer role.
    memcacheds.delete(SAMPLE, &DeleteParams::default()).await.expect("delete the sample");
    support::wait_for_absent(&memcacheds, SAMPLE, WAIT).await;
    let record = secrets.get("finalizer-record").await.expect("the finalizer's record");
    let finalized = record.data.unwrap_or_default().get("finalized").map(|v| v.0.clone());
    assert_eq!(finalized.as_deref(), Some(SAMPLE.as_bytes()), "the finalizer role recorded the deletion");
    kubectl_ok([
        "-n",
        &ns.name,
        "delete",
        "memcacheds.cache.example.org",
        "--all",
        "--wait=true",
        "--timeout=900s",
    ]);

    // Nothing the operator does is refused by the scaffold's RBAC once it runs (a refused Event is
    // said once, at its kind's first run).
    let restarts = operator_pods
        .get(&operator_name)
        .await
        .expect("the operator Pod")
        .status
        .and_then(|s| s.container_statuses.map(|c| c.iter().map(|c| c.restart_count).sum::<i32>()));
    assert_eq!(restarts, Some(0), "the operator never restarted");
    let after_first_minute = started.0 + jiff::SignedDuration::from_secs(60);
    let wait = after_first_minute.duration_since(jiff::Timestamp::now()) + jiff::SignedDuration::from_secs(5);
    if wait.is_positive() {
        tokio::time::sleep(wait.unsigned_abs()).await;
    }
    let late = kubectl_ok([
        "-n",
        PROJECT_NAMESPACE,
        "logs",
        &operator_name,
        &format!("--since-time={after_first_minute}"),
    ]);
    // The scaffold grants Events only in the operator's namespace: the refusal in the CRs' is said
    // once for the kind (when its first run ends, which a loaded machine may push past the minute).
    let refused_events = |l: &&str| l.contains("Events are refused");
    let forbidden: Vec<&str> =
        late.lines().filter(|l| l.to_lowercase().contains("forbidden") && !refused_events(l)).collect();
    assert!(forbidden.is_empty(), "refused after the first minute:\n{}", forbidden.join("\n"));
    let log = kubectl_ok(["-n", PROJECT_NAMESPACE, "logs", &operator_name]);
    assert!(log.contains("ansible run finished"), "the log is the operator's: {log}");
    assert!(log.lines().filter(refused_events).count() <= 1, "a refused Event is said once per kind: {log}");

    make(&project, "undeploy", &[]);
    deployed.undeployed = true;
    let crds = kubectl_ok(["get", "crd", "-o", "name"]);
    assert!(!crds.contains("memcacheds.cache.example.org"), "make undeploy removed the CRD: {crds}");
}
