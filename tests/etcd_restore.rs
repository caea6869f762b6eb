//! The EtcdRestore sample (`playbooks/etcdrestore.yml`) and the EtcdBackup of an EtcdCluster
//! (`playbooks/etcdbackup.yml` with `spec.cluster`): a real three-member etcd on the SSH test hosts
//! host5–host7 is snapshotted, written to, and restored to the snapshot, while the EtcdCluster's own
//! failover runs every few seconds.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;
use support::etcd;
use support::hosts::{self, Host};
use support::operator::scratch_dir;
use support::setup::Test;

const GROUP: &str = "etcd.example.com";
/// Installing the three members over SSH beside CI's other lanes on two cores took over 180 s.
const WAIT: Duration = Duration::from_secs(420);
/// Other ports than tests/etcd_cluster.rs's cluster, which may run on the same hosts.
const CLIENT_PORT: u16 = 23890;
const PEER_PORT: u16 = 23900;

/// Runs the test's own etcdctl against `host`'s client URL: (success, stdout and stderr).
fn etcdctl(host: &Host, args: &[&str]) -> (bool, String) {
    let output = etcd::etcdctl(host, CLIENT_PORT)
        .args(["--dial-timeout=5s", "--command-timeout=10s"])
        .args(args)
        .output()
        .expect("run etcdctl");
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

fn etcdctl_ok(host: &Host, args: &[&str]) -> String {
    let (ok, text) = etcdctl(host, args);
    assert!(ok, "etcdctl {args:?}: {text}");
    text
}

/// This backup's snapshot files in `dir`.
fn snapshot_files(dir: &Path, namespace: &str, name: &str) -> Vec<String> {
    let prefix = format!("{namespace}-{name}-");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .expect("read the backup directory")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|file| file.starts_with(&prefix) && file.ends_with(".db"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn etcd_cluster_is_backed_up_and_restored_over_ssh_without_fighting_its_failover() {
    let all = hosts::hosts();
    // host5–host7: tests/kubernetes_cluster.rs's hosts, free while the lanes run (that test runs
    // after them), so this test runs beside tests/etcd_cluster.rs on host1–host4.
    let members = &all[4..7];
    let Test { client, ns, api: clusters } =
        Test::setup("sample-etcdrestore").sample(GROUP, "EtcdCluster").build().await;
    let backup_dir = scratch_dir(&format!("{}-backups", ns.name));
    let _operator =
        etcd::sample_operator(&ns.name).env("ETCD_BACKUP_DIR", backup_dir.display().to_string()).start();
    etcd::create_hosts_secret(&client, &ns.name, "etcd-hosts-ssh").await;
    let backups = support::cr_api(&client, GROUP, "EtcdBackup", &ns.name);
    let restores = support::cr_api(&client, GROUP, "EtcdRestore", &ns.name);

    // A three-member cluster whose failover runs every 5 s instead of 30 s, so it runs during the
    // restore too.
    let name = "main";
    let metadata =
        json!({"name": name, "annotations": {"ansible.sdk.operatorframework.io/reconcile-period": "5s"}});
    let spec = json!({
        "version": "3.6.5", "clientPort": CLIENT_PORT, "peerPort": PEER_PORT, "sshKeySecret": "etcd-hosts-ssh",
        "hosts": members.iter().map(|h| h.spec()).collect::<Vec<_>>(),
    });
    support::create_cr_with(&clusters, GROUP, "EtcdCluster", metadata, spec).await;
    // A restore from a backup that does not exist fails, saying so, before it holds the cluster:
    // the cluster still installs.
    let spec = json!({"cluster": name, "backup": "missing", "sshKeySecret": "etcd-hosts-ssh"});
    support::create_cr(&restores, GROUP, "EtcdRestore", "orphan", spec).await;
    support::wait_for_generation(&clusters, name, 1, WAIT).await;
    let orphan = support::wait_for_condition(&restores, "orphan", "Failure", "True", WAIT).await;
    let failure = support::condition(&orphan, "Failure").unwrap();
    assert!(failure["message"].as_str().unwrap_or("").contains("EtcdBackup missing not found"), "{failure}");
    assert!(orphan.data["status"].get("phase").is_none(), "{}", orphan.data["status"]);
    restores.delete("orphan", &DeleteParams::default()).await.unwrap();
    etcdctl_ok(&members[0], &["put", "key-a", "A"]);

    // An EtcdBackup names an endpoint or a cluster, not both: the CRD's CEL rule refuses it.
    let both: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "etcd.example.com/v1alpha1", "kind": "EtcdBackup", "metadata": {"name": "both"},
        "spec": {"endpoint": "http://127.0.0.1:2379", "cluster": name},
    }))
    .unwrap();
    let refused = backups.create(&Default::default(), &both).await.expect_err("both endpoint and cluster");
    assert!(
        refused
            .to_string()
            .contains("set exactly one of spec.endpoint (an etcd client URL) and spec.cluster"),
        "{refused}"
    );

    // A backup of the cluster: a snapshot with its revision and sha256.
    let spec = json!({"cluster": name, "keep": 2});
    support::create_cr(&backups, GROUP, "EtcdBackup", "snap", spec).await;
    let backup = support::wait_for_generation(&backups, "snap", 1, WAIT).await;
    let snapshot = backup.data["status"]["snapshot"].clone();
    let revision = snapshot["revision"].as_i64().expect("status.snapshot.revision");
    assert!(revision > 1, "{snapshot}");
    assert_eq!(snapshot["sha256"].as_str().map(str::len), Some(64), "{snapshot}");
    assert!(Path::new(snapshot["path"].as_str().unwrap()).exists(), "{snapshot}");
    let healthy: Vec<String> =
        members.iter().map(|h| format!("http://{}:{CLIENT_PORT}", h.address)).collect();
    assert!(
        healthy.iter().any(|url| snapshot["endpoint"] == url.as_str()),
        "a member was snapshotted: {snapshot}"
    );

    // Written after the snapshot: gone after the restore.
    etcdctl_ok(&members[1], &["put", "key-b", "B"]);
    let pids_before: Vec<Option<u32>> = members.iter().map(|h| etcd::member_pid(h, &ns.name, name)).collect();

    let started = Instant::now();
    let metadata =
        json!({"name": "back", "annotations": {"ansible.sdk.operatorframework.io/reconcile-period": "3s"}});
    let spec = json!({"cluster": name, "backup": "snap", "sshKeySecret": "etcd-hosts-ssh"});
    support::create_cr_with(&restores, GROUP, "EtcdRestore", metadata, spec).await;
    let restored = support::wait_for_generation(&restores, "back", 1, WAIT).await;
    let took = started.elapsed();
    let status = &restored.data["status"];
    assert_eq!(status["phase"], "Completed", "{status}");
    assert_eq!(status["restoredGeneration"], 1, "{status}");
    assert_eq!(status["snapshot"]["sha256"], snapshot["sha256"], "{status}");
    assert_eq!(status["snapshot"]["path"], snapshot["path"], "{status}");
    assert_eq!(status["snapshot"]["revision"].as_i64(), Some(revision), "{status}");
    let duration = status["durationSeconds"].as_f64().expect("status.durationSeconds");
    assert!(duration > 0.0 && duration < took.as_secs_f64() + 1.0, "{status}");

    // The snapshot's data on every member, all members healthy, each restarted by the restore.
    for host in members {
        etcdctl_ok(host, &["endpoint", "health"]);
        assert_eq!(etcdctl_ok(host, &["get", "key-a", "--print-value-only"]).trim(), "A", "{}", host.name);
        assert_eq!(etcdctl_ok(host, &["get", "key-b", "--print-value-only"]).trim(), "", "{}", host.name);
    }
    let pids_after: Vec<Option<u32>> = members.iter().map(|h| etcd::member_pid(h, &ns.name, name)).collect();
    for (before, after) in pids_before.iter().zip(&pids_after) {
        assert!(
            after.is_some() && after != before,
            "every member restarted: {pids_before:?} -> {pids_after:?}"
        );
    }
    let listed = etcdctl_ok(&members[0], &["member", "list"]);
    for host in members {
        assert!(listed.contains(&format!(", {}, ", host.name)), "{listed}");
    }

    // Afterwards neither kind touches the members again: the restore's reconciles (every 3 s) do
    // not restore twice, the cluster's failover (every 5 s) finds nothing to do.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let pids_later: Vec<Option<u32>> = members.iter().map(|h| etcd::member_pid(h, &ns.name, name)).collect();
    assert_eq!(pids_later, pids_after, "no member restarted after the restore");
    assert_eq!(etcdctl_ok(&members[2], &["get", "key-a", "--print-value-only"]).trim(), "A");
    let cluster = clusters.get(name).await.unwrap();
    assert_eq!(cluster.data["status"]["readyMembers"], 3, "{}", cluster.data["status"]);
    // Quieter from here on: back-to-back failover runs only slow the rest down.
    let period =
        json!({"metadata": {"annotations": {"ansible.sdk.operatorframework.io/reconcile-period": "10m"}}});
    clusters.patch(name, &PatchParams::default(), &Patch::Merge(&period)).await.unwrap();
    restores.patch("back", &PatchParams::default(), &Patch::Merge(&period)).await.unwrap();

    // keep: 2, and three more spec changes (four snapshots): the two newest files are left.
    for generation in 2..=4 {
        let patch = json!({"spec": {"note": format!("change {generation}")}});
        backups.patch("snap", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        support::wait_for_generation(&backups, "snap", generation, WAIT).await;
    }
    let files = snapshot_files(&backup_dir, &ns.name, "snap");
    let expected = [format!("{}-snap-3.db", ns.name), format!("{}-snap-4.db", ns.name)];
    assert_eq!(files, expected);

    // Cleanup: the finalizers uninstall etcd and remove the snapshots.
    for (api, object) in [(&restores, "back"), (&backups, "snap"), (&clusters, name)] {
        api.delete(object, &DeleteParams::default()).await.unwrap();
        support::wait_for_absent(api, object, WAIT).await;
    }
    assert!(snapshot_files(&backup_dir, &ns.name, "snap").is_empty());
    for host in members {
        assert!(!host.file(&format!("etcd-{}-{name}", ns.name)).exists(), "nothing left on {}", host.name);
    }
}
