//! The KubernetesCluster sample (`watches.yaml`, `playbooks/kubernetescluster*.yml`): a Kubernetes
//! control plane installed from binaries over SSH on real sshd test hosts (host5–host7, which the
//! EtcdRestore test uses while the lanes run; this test runs after them): prechecked, installed, reached through the admin
//! kubeconfig it stores, scaled 1 → 3 → 1 masters, one component reconfigured alone, a member
//! cluster joined and unjoined, and uninstalled.

use crate::support;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::etcd;
use support::hosts::{self, Host};
use support::operator::scratch_dir;
use support::setup::Test;

const GROUP: &str = "platform.example.com";
const KIND: &str = "KubernetesCluster";
/// A step installs binaries over SSH and waits for its EtcdCluster: 75 s on an idle machine, over
/// 420 s beside CI's other lanes on two cores.
const WAIT: Duration = Duration::from_secs(900);
const APISERVER_PORT: u16 = 26443;
const COMPONENTS: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];

fn kube_dir(host: &Host, namespace: &str, name: &str) -> PathBuf {
    host.file(&format!("kube-{namespace}-{name}"))
}

fn etcd_dir(host: &Host, namespace: &str, name: &str) -> PathBuf {
    etcd::install_dir(host, namespace, &format!("{name}-etcd"))
}

/// The PID of a component on a master, when it runs.
fn pid(host: &Host, namespace: &str, name: &str, component: &str) -> Option<u32> {
    etcd::running_pid(&kube_dir(host, namespace, name).join(format!("{component}.pid")))
}

/// PIDs of every component on every given master, in order.
fn pids(masters: &[&Host], namespace: &str, name: &str) -> Vec<(String, Option<u32>)> {
    masters
        .iter()
        .flat_map(|host| {
            COMPONENTS.iter().map(|c| (format!("{} {c}", host.name), pid(host, namespace, name, c)))
        })
        .collect()
}

/// Waits until generation `generation` succeeded with the cluster `Running`, and returns the CR.
async fn running(api: &Api<DynamicObject>, name: &str, generation: i64) -> DynamicObject {
    support::wait_for(&format!("{name} generation {generation} to be Running"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let ok = support::successful_at(&object, generation) && object.data["status"]["phase"] == "Running";
        Ok(if ok { Ok(object) } else { Err(format!("status {}", object.data["status"])) })
    })
    .await
}

/// The masters in status, each with every component healthy.
fn healthy_masters(object: &DynamicObject) -> Vec<String> {
    let masters = object.data["status"]["masters"].as_array().cloned().unwrap_or_default();
    for master in &masters {
        for key in ["apiserver", "controllerManager", "scheduler"] {
            assert_eq!(master["components"][key]["healthy"], true, "{key} on {master}");
        }
    }
    masters.iter().map(|m| m["name"].as_str().unwrap_or("").to_string()).collect()
}

/// kubectl with the cluster's admin kubeconfig, as read from its Secret.
fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    support::kubectl_at(kubeconfig, args)
}

fn kubectl_ok(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let output = kubectl(kubeconfig, args);
    assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

async fn patch_spec(api: &Api<DynamicObject>, name: &str, spec: Value) -> Result<DynamicObject, kube::Error> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(json!({ "spec": spec }))).await
}

#[tokio::test]
async fn kubernetes_cluster_is_prechecked_installed_scaled_reconfigured_joined_and_uninstalled_over_ssh() {
    let all = hosts::hosts();
    let (h5, h6, h7) = (&all[4], &all[5], &all[6]);
    let Test { client, ns, api } = Test::setup("sample-kubernetescluster").sample(GROUP, KIND).build().await;
    let kube_releases = support::repo().join(".local/kube-releases");
    let operator =
        etcd::sample_operator(&ns.name).env("KUBE_RELEASES_DIR", kube_releases.display().to_string()).start();
    etcd::create_hosts_secret(&client, &ns.name, "hosts-ssh").await;
    let etcd_clusters = support::cr_api(&client, "etcd.example.com", "EtcdCluster", &ns.name);
    let name = "kc";

    // Precheck: the apiserver's port is taken on host5, so nothing is installed anywhere, and the
    // Failure names the host and the port.
    let squatter = TcpListener::bind((h5.address.as_str(), APISERVER_PORT)).expect("take the apiserver port");
    let spec = json!({
        "version": "1.35.4", "sshKeySecret": "hosts-ssh",
        "ports": {"apiserver": APISERVER_PORT, "controllerManager": 20257, "scheduler": 20259,
                  "etcdClient": 23792, "etcdPeer": 23802},
        "etcd": Host::specs(&[h5]), "masters": Host::specs(&[h5]),
    });
    support::create_cr(&api, GROUP, KIND, name, spec).await;
    let failed = support::wait_for_condition(&api, name, "Failure", "True", WAIT).await;
    let failure = support::condition(&failed, "Failure").unwrap();
    assert_eq!(failure["reason"], "PrecheckFailed", "{failure}");
    let expected = format!("host5: port {APISERVER_PORT} (kube-apiserver) is in use on {}", h5.address);
    assert!(failure["message"].as_str().unwrap_or("").contains(&expected), "{failure}");
    assert_eq!(failed.data["status"]["phase"], "Failed");
    assert!(!kube_dir(h5, &ns.name, name).exists(), "nothing installed on host5");
    assert!(etcd_clusters.get_opt("kc-etcd").await.unwrap().is_none(), "no EtcdCluster made");

    // The port is free again: the retry installs etcd (an EtcdCluster owned by the cluster) and the
    // three components on host5; the admin kubeconfig in the Secret reaches the new API server.
    drop(squatter);
    let installed = running(&api, name, 1).await;
    assert_eq!(healthy_masters(&installed), ["host5"]);
    assert_eq!(installed.data["status"]["endpoint"], format!("https://{}:{APISERVER_PORT}", h5.address));
    let etcd = etcd_clusters.get("kc-etcd").await.unwrap();
    assert_eq!(etcd.metadata.owner_references.unwrap_or_default()[0].name, name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let admin = secrets.get("kc-admin-kubeconfig").await.unwrap();
    let kubeconfig = scratch_dir(&format!("{}-admin", ns.name)).join("kubeconfig");
    std::fs::write(&kubeconfig, &admin.data.unwrap()["kubeconfig"].0).unwrap();
    assert_eq!(kubectl_ok(&kubeconfig, &["get", "--raw", "/readyz"]), "ok");
    assert!(kubectl_ok(&kubeconfig, &["get", "namespaces", "-o", "name"]).contains("namespace/kube-system"));

    // What may not change is refused at admission, saying what may.
    for (spec, message) in [
        (json!({"serviceCIDR": "10.97.0.0/24"}), "spec.serviceCIDR cannot change"),
        (
            json!({"etcd": Host::specs(&[h6])}),
            "spec.etcd cannot change: the cluster's data lives on these hosts. What may change: spec.masters",
        ),
    ] {
        let refused = patch_spec(&api, name, spec).await.expect_err("an immutable field changed");
        assert!(refused.to_string().contains(message), "{refused}");
    }

    // 1 → 3 masters: host6 and host7 join, host5 is not restarted; every apiserver answers.
    let before = pids(&[h5], &ns.name, name);
    patch_spec(&api, name, json!({"masters": Host::specs(&[h5, h6, h7])})).await.unwrap();
    let scaled = running(&api, name, 2).await;
    assert_eq!(healthy_masters(&scaled), ["host5", "host6", "host7"]);
    assert_eq!(pids(&[h5], &ns.name, name), before, "host5 restarted while scaling");
    for host in [h5, h6, h7] {
        let server = format!("--server=https://{}:{APISERVER_PORT}", host.address);
        assert_eq!(kubectl_ok(&kubeconfig, &[&server, "get", "--raw", "/readyz"]), "ok", "{}", host.name);
    }

    // A flag for the scheduler restarts the scheduler on each master and nothing else.
    let before = pids(&[h5, h6, h7], &ns.name, name);
    patch_spec(&api, name, json!({"components": {"scheduler": {"flags": ["--v=2"]}}})).await.unwrap();
    let upgraded = running(&api, name, 3).await;
    healthy_masters(&upgraded);
    assert_eq!(upgraded.data["status"]["components"]["scheduler"]["flags"], json!(["--v=2"]));
    for ((what, old), (_, new)) in before.iter().zip(pids(&[h5, h6, h7], &ns.name, name)) {
        assert!(new.is_some(), "{what} is not running");
        if what.ends_with("kube-scheduler") {
            assert_ne!(*old, new, "{what} was not restarted");
        } else {
            assert_eq!(*old, new, "{what} was restarted");
        }
    }
    let script = std::fs::read_to_string(kube_dir(h6, &ns.name, name).join("kube-scheduler.sh")).unwrap();
    assert!(script.contains("--v=2"), "{script}");

    // Join the local control plane as a member: registered in the new cluster with its version.
    let local = std::fs::read_to_string(support::kubeconfig()).unwrap();
    let member_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "local-kubeconfig", "annotations": {hosts::ALLOW_KINDS: "KubernetesCluster"}},
        "stringData": {"kubeconfig": local},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &member_secret).await.unwrap();
    let members = json!({"members": [{"name": "local", "kubeconfigSecret": "local-kubeconfig"}]});
    patch_spec(&api, name, members).await.unwrap();
    let joined = running(&api, name, 4).await;
    let member = &joined.data["status"]["members"][0];
    let local_version = client.apiserver_version().await.unwrap().git_version;
    assert_eq!(member["name"], "local", "{member}");
    assert_eq!(member["joined"], true, "{member}");
    assert_eq!(member["reachable"], true, "{member}");
    assert_eq!(member["version"], local_version.as_str(), "{member}");
    let registration: Value = serde_json::from_str(&kubectl_ok(
        &kubeconfig,
        &["get", "memberclusters.platform.example.com", "local", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(registration["status"]["kubernetesVersion"], local_version.as_str(), "{registration}");
    assert_eq!(registration["status"]["reachable"], true, "{registration}");
    kubectl_ok(&kubeconfig, &["get", "secret", "kubeconfig", "-n", "member-local"]);

    // The cluster's keys and the member's kubeconfig went through many tasks: none of them is in the
    // operator's log or anything a run left behind.
    let pki = secrets.get("kc-pki").await.unwrap().data.unwrap();
    let mut secret_lines: Vec<String> = ["ca.key", "sa.key", "admin.key", "apiserver-host5.key"]
        .iter()
        .flat_map(|key| hosts::key_body(&String::from_utf8_lossy(&pki[*key].0)))
        .collect();
    let local_kubeconfig: Value =
        serde_json::from_str(&support::kubectl_ok(["config", "view", "--raw", "-o", "json"])).unwrap();
    secret_lines.push(local_kubeconfig["users"][0]["user"]["client-key-data"].as_str().unwrap().to_string());
    let mut places = vec![("operator log".to_string(), operator.log())];
    support::read_tree(&operator.runner_dir(GROUP, KIND, &ns.name, name), &mut places);
    assert!(places.len() > 3, "the runner directory has files: {}", places.len());
    for line in &secret_lines {
        for (place, text) in &places {
            assert!(!text.contains(line.as_str()), "a line of a key is in {place}");
        }
    }

    // Unjoin it and go back to one master: the registration and its namespace go, host6 and host7
    // are stopped and cleaned up.
    let stopped = pids(&[h6, h7], &ns.name, name);
    patch_spec(&api, name, json!({"members": [], "masters": Host::specs(&[h5])})).await.unwrap();
    let shrunk = running(&api, name, 5).await;
    assert_eq!(healthy_masters(&shrunk), ["host5"]);
    assert_eq!(shrunk.data["status"]["members"], json!([]));
    let gone = kubectl(&kubeconfig, &["get", "memberclusters.platform.example.com", "local"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"), "{gone:?}");
    let namespace = kubectl(
        &kubeconfig,
        &["get", "namespace", "member-local", "-o", "jsonpath={.metadata.deletionTimestamp}"],
    );
    assert!(!namespace.status.success() || !namespace.stdout.is_empty(), "member-local is not being deleted");
    for host in [h6, h7] {
        assert!(!kube_dir(host, &ns.name, name).exists(), "{} cleaned up", host.name);
    }
    for (what, pid) in stopped {
        let pid = pid.unwrap_or_else(|| panic!("{what} was not running"));
        assert!(!PathBuf::from(format!("/proc/{pid}")).exists(), "{what} still runs");
    }

    // Delete: the finalizer uninstalls the components and, through the EtcdCluster, etcd; the
    // homes are as they were.
    let running_pids = pids(&[h5], &ns.name, name);
    api.delete(name, &DeleteParams::default()).await.unwrap();
    support::wait_for_absent(&api, name, WAIT).await;
    assert!(etcd_clusters.get_opt("kc-etcd").await.unwrap().is_none(), "the EtcdCluster is gone");
    for host in [h5, h6, h7] {
        assert!(!kube_dir(host, &ns.name, name).exists(), "{} kube cleaned up", host.name);
        assert!(!etcd_dir(host, &ns.name, name).exists(), "{} etcd cleaned up", host.name);
    }
    for (what, pid) in running_pids {
        let pid = pid.unwrap_or_else(|| panic!("{what} was not running"));
        assert!(!PathBuf::from(format!("/proc/{pid}")).exists(), "{what} still runs");
    }
}
