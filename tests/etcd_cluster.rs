//! The EtcdCluster sample (`watches.yaml`, `playbooks/etcdcluster*.yml`): etcd installed as a binary
//! over SSH on real sshd test hosts, planned (check mode: what adding a host would run), grown,
//! shrunk, upgraded and uninstalled through its CR.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use support::api::{ApiServer, service_account};
use support::etcd;
use support::hosts::{self, Host};
use support::setup::Test;

const GROUP: &str = "etcd.example.com";
const KIND: &str = "EtcdCluster";
/// A step installs or changes etcd over SSH on up to four hosts, which beside CI's other lanes on
/// two cores can take minutes.
const WAIT: Duration = Duration::from_secs(480);

/// Waits (membership changes reach every member within moments) until etcd, asked on `host`'s
/// client URL, lists exactly `expected`.
async fn assert_members(host: &Host, client_port: u16, expected: &[&str]) {
    support::wait_for(&format!("etcd to list members {expected:?}"), Duration::from_secs(60), || async {
        let names = member_names(host, client_port);
        Ok(if names == expected { Ok(()) } else { Err(format!("members {names:?}")) })
    })
    .await
}

/// Member names as etcd itself lists them, asked on the given host's client URL.
fn member_names(host: &Host, client_port: u16) -> Vec<String> {
    let list: Value =
        serde_json::from_str(&etcdctl(host, client_port, &["member", "list", "-w", "json"])).unwrap();
    let mut names: Vec<String> = list["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap_or("").to_string())
        .collect();
    names.sort();
    names
}

/// Runs the test's own etcdctl against `host`'s client URL and returns its output.
fn etcdctl(host: &Host, client_port: u16, args: &[&str]) -> String {
    let output = etcd::etcdctl(host, client_port).args(args).output().expect("run etcdctl");
    assert!(output.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The rolling-restart steps of a run, in order, from its runner artifacts: (`restart` or
/// `healthy`, host).
fn restart_steps(job_events: &std::path::Path) -> Vec<(String, String)> {
    let mut events: Vec<(i64, String, String)> = std::fs::read_dir(job_events)
        .expect("read job events")
        .filter_map(|entry| serde_json::from_slice::<Value>(&std::fs::read(entry.ok()?.path()).ok()?).ok())
        .filter(|event| event["event"] == "runner_on_ok")
        .filter_map(|event| {
            let step = match event["event_data"]["task"].as_str()? {
                "Restart a running member on the new binary" => "restart",
                "Wait until the restarted member is healthy" => "healthy",
                _ => return None,
            };
            let host = event["event_data"]["host"].as_str()?.to_string();
            Some((event["counter"].as_i64()?, step.to_string(), host))
        })
        .collect();
    events.sort();
    events.into_iter().map(|(_, step, host)| (step, host)).collect()
}

/// Waits until status.members says `member` is healthy after failover `action` (`restarted`,
/// `replaced`), and every member is healthy; returns the member.
async fn failover(api: &Api<DynamicObject>, name: &str, member: &str, action: &str) -> Value {
    support::wait_for(&format!("{member} to be {action} and healthy"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let members = object.data["status"]["members"].as_array().cloned().unwrap_or_default();
        let found = members.iter().find(|m| m["name"] == member).cloned().unwrap_or_default();
        let recovered = found["lastFailover"]["action"].as_str().is_some_and(|a| a.starts_with(action));
        let healthy = !members.is_empty() && members.iter().all(|m| m["healthy"] == true);
        Ok(if recovered && healthy { Ok(found) } else { Err(format!("members {members:?}")) })
    })
    .await
}

#[tokio::test]
async fn etcd_cluster_is_installed_planned_grown_shrunk_upgraded_and_uninstalled_over_ssh() {
    let all = hosts::hosts();
    let Test { client, ns, api } = Test::setup("sample-etcdcluster").sample(GROUP, KIND).build().await;
    let api_port = support::free_port();
    let operator =
        etcd::sample_operator(&ns.name).arg(format!("--api-bind-address=127.0.0.1:{api_port}")).start();
    etcd::create_hosts_secret(&client, &ns.name, "etcd-hosts-ssh").await;
    let (client_port, peer_port) = (23790, 23800);
    let name = "prod";
    let spec = json!({
        "version": "3.6.4", "clientPort": client_port, "peerPort": peer_port, "sshKeySecret": "etcd-hosts-ssh",
        "hosts": Host::specs(&[&all[0], &all[1], &all[2]]),
    });
    support::create_cr(&api, GROUP, KIND, name, spec).await;

    // Three hosts: binary installed and running on each, one cluster, health and per-host results in status.
    let done = support::wait_for_generation(&api, name, 1, WAIT).await;
    for host in &all[..3] {
        assert!(
            etcd::install_dir(host, &ns.name, name).join("bin/etcd").exists(),
            "etcd installed on {}",
            host.name
        );
        assert!(etcd::member_pid(host, &ns.name, name).is_some(), "etcd runs on {}", host.name);
        assert!(done.data["status"]["hosts"][&host.name]["changed"].as_i64().unwrap() > 0);
    }
    assert!(!etcd::install_dir(&all[3], &ns.name, name).exists());
    assert_members(&all[0], client_port, &["host1", "host2", "host3"]).await;
    let members = done.data["status"]["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{members:?}");
    assert!(members.iter().all(|m| m["healthy"] == true && m["version"] == "3.6.4"), "{members:?}");
    assert_eq!(done.data["status"]["readyMembers"], 3);
    let pids: Vec<Option<u32>> = all[..3].iter().map(|h| etcd::member_pid(h, &ns.name, name)).collect();

    // A plan of a fourth host names what would run on it and changes nothing anywhere.
    let planner = service_account(&ns.name, "planner", "get,list,update", "etcdclusters.etcd.example.com");
    let operator_api = ApiServer::localhost(api_port, None);
    operator_api.wait_until_up(WAIT);
    let mut four = done.data["spec"].clone();
    four["hosts"] = json!(Host::specs(&[&all[0], &all[1], &all[2], &all[3]]));
    let plan_path = format!("/api/v1/kinds/{GROUP}/etcdclusters/crs/{}/{name}/plan", ns.name);
    let reply =
        operator_api.request_with_body("POST", &plan_path, Some(&planner), Some(&json!({"spec": four})));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let plan = reply.body;
    assert_eq!(plan["result"], "Successful", "{plan}");
    let verdict = |task: &str, host: &str| {
        let tasks = plan["tasks"].as_array().unwrap();
        let found = tasks.iter().find(|t| t["name"] == task && t["host"] == host);
        found.map(|t| t["verdict"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(verdict("Binaries of etcd 3.6.4", "host4").as_deref(), Some("changed"), "{plan}");
    assert_eq!(verdict("Binaries of etcd 3.6.4", "host1").as_deref(), Some("ok"), "{plan}");
    assert_eq!(verdict("Join the running cluster", "host4").as_deref(), Some("notChecked"), "{plan}");
    assert_eq!(verdict("Start etcd", "host4").as_deref(), Some("notChecked"), "{plan}");
    assert!(!etcd::install_dir(&all[3], &ns.name, name).exists(), "the plan installed nothing on host4");
    assert_members(&all[0], client_port, &["host1", "host2", "host3"]).await;
    // The sample's 30 s resyncs may write the status meanwhile, but only of the three hosts.
    let unplanned = api.get(name).await.unwrap();
    assert!(unplanned.data["status"]["hosts"].get("host4").is_none(), "the plan wrote no status");
    assert_eq!(
        unplanned.data["status"]["members"].as_array().map(Vec::len),
        Some(3),
        "the plan wrote no status"
    );

    // A fourth host joins; only it changes.
    let patch = json!({"spec": {"hosts": Host::specs(&[&all[0], &all[1], &all[2], &all[3]])}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let grown = support::wait_for_generation(&api, name, 2, WAIT).await;
    let status_hosts = &grown.data["status"]["hosts"];
    for host in &all[..3] {
        assert_eq!(status_hosts[&host.name]["changed"], 0, "{} unchanged: {status_hosts}", host.name);
    }
    assert!(status_hosts["host4"]["changed"].as_i64().unwrap() > 0, "{status_hosts}");
    let still: Vec<Option<u32>> = all[..3].iter().map(|h| etcd::member_pid(h, &ns.name, name)).collect();
    assert_eq!(still, pids, "existing members were not restarted");
    assert!(etcd::member_pid(&all[3], &ns.name, name).is_some());
    assert_members(&all[0], client_port, &["host1", "host2", "host3", "host4"]).await;

    // host2 is removed from the spec: it leaves the cluster and is cleaned up.
    let patch = json!({"spec": {"hosts": Host::specs(&[&all[0], &all[2], &all[3]])}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let shrunk = support::wait_for_generation(&api, name, 3, WAIT).await;
    assert!(!etcd::install_dir(&all[1], &ns.name, name).exists(), "host2 cleaned up");
    assert_members(&all[0], client_port, &["host1", "host3", "host4"]).await;
    let names: Vec<&str> = shrunk.data["status"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["host1", "host3", "host4"]);

    // A new version rolls out one host at a time; the cluster and its data stay.
    let remaining = [&all[0], &all[2], &all[3]];
    etcdctl(&all[0], client_port, &["put", "upgrade-probe", "kept"]);
    let before: Vec<Option<u32>> = remaining.iter().map(|h| etcd::member_pid(h, &ns.name, name)).collect();
    let patch = json!({"spec": {"version": "3.6.5"}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let upgraded = support::wait_for_generation(&api, name, 4, WAIT).await;
    let members = upgraded.data["status"]["members"].as_array().unwrap();
    assert!(members.iter().all(|m| m["healthy"] == true && m["version"] == "3.6.5"), "{members:?}");
    let after: Vec<Option<u32>> = remaining.iter().map(|h| etcd::member_pid(h, &ns.name, name)).collect();
    for (old, new) in before.iter().zip(&after) {
        assert!(
            new.is_some() && new != old,
            "every member restarted on the new binary: {before:?} -> {after:?}"
        );
    }
    assert_eq!(etcdctl(&all[0], client_port, &["get", "upgrade-probe", "--print-value-only"]).trim(), "kept");
    let runner = operator.runner_dir(GROUP, KIND, &ns.name, name);
    let steps = restart_steps(&runner.join("artifacts/latest/job_events"));
    assert_eq!(steps.len(), 6, "{steps:?}");
    for pair in steps.chunks(2) {
        assert_eq!((pair[0].0.as_str(), pair[1].0.as_str()), ("restart", "healthy"), "{steps:?}");
        assert_eq!(pair[0].1, pair[1].1, "a host is healthy again before the next restarts: {steps:?}");
    }

    // Failover, on a shorter period than the sample's 30 s: a member whose process died is
    // restarted on its data; a member whose data directory is gone is replaced by an empty one
    // that catches up. Both show in status.members.
    let period =
        json!({"metadata": {"annotations": {"ansible.sdk.operatorframework.io/reconcile-period": "5s"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&period)).await.unwrap();
    let crashed = etcd::member_pid(&all[2], &ns.name, name).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(crashed as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    let restarted = failover(&api, name, "host3", "restarted").await;
    assert!(etcd::member_pid(&all[2], &ns.name, name).is_some_and(|pid| pid != crashed), "{restarted:?}");

    let lost = etcd::member_pid(&all[3], &ns.name, name).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(lost as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    std::fs::remove_dir_all(etcd::install_dir(&all[3], &ns.name, name).join("data")).unwrap();
    failover(&api, name, "host4", "replaced").await;
    assert_members(&all[0], client_port, &["host1", "host3", "host4"]).await;
    let replica = etcdctl(&all[3], client_port, &["get", "upgrade-probe", "--print-value-only"]);
    assert_eq!(replica.trim(), "kept", "the new member caught up with the cluster's data");

    // Deleting the CR uninstalls everywhere (finalizer).
    let pids: Vec<u32> =
        [&all[0], &all[2], &all[3]].iter().filter_map(|h| etcd::member_pid(h, &ns.name, name)).collect();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    support::wait_for_absent(&api, name, WAIT).await;
    for host in all {
        assert!(!etcd::install_dir(host, &ns.name, name).exists(), "nothing left on {}", host.name);
    }
    for pid in pids {
        assert!(!PathBuf::from(format!("/proc/{pid}")).exists(), "etcd {pid} stopped");
    }
}
