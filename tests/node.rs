//! The local cluster's node runs Pods as users write them: ordinary Pods in their own network
//! namespace on the CNI bridge, host-network Pods, probes, `kubectl logs` and `kubectl exec`.
//! Traffic goes only to addresses inside the Pods' network namespaces.

use crate::support;

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::kubectl_ok;
use support::node::{MEMCACHED_IMAGE, internal_ip, require_ready_node, wait_until_ready};

const WAIT: Duration = Duration::from_secs(180);

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("valid Pod")
}

/// Sends one memcached text-protocol command and returns the first line of the answer.
fn memcached_command(address: &str, command: &str) -> String {
    let mut stream = TcpStream::connect((address, 11211)).expect("connect to memcached in the Pod");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(format!("{command}\r\n").as_bytes()).unwrap();
    let mut answer = [0u8; 256];
    let n = stream.read(&mut answer).expect("memcached answers");
    String::from_utf8_lossy(&answer[..n]).lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn ordinary_pod_gets_its_own_address_passes_its_readiness_probe_and_serves_on_it() {
    let client = support::client().await;
    let node = require_ready_node(&client).await;
    let ns = support::TestNamespace::new(&client, "node-pod").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let spec = json!({
        "containers": [{
            "name": "memcached", "image": MEMCACHED_IMAGE, "args": ["-m", "16"],
            "ports": [{"containerPort": 11211}],
            "readinessProbe": {"tcpSocket": {"port": 11211}, "periodSeconds": 1},
        }],
    });
    pods.create(&PostParams::default(), &pod("cache", spec)).await.expect("create Pod");

    let pod = wait_until_ready(&pods, "cache", WAIT).await;
    let status = pod.status.expect("status");
    let pod_ip = status.pod_ip.expect("Pod IP");
    let host_ip = status.host_ip.expect("host IP");
    assert_eq!(host_ip, internal_ip(&node));
    assert_ne!(pod_ip, host_ip, "an ordinary Pod has its own network namespace");
    let ip: IpAddr = pod_ip.parse().expect("Pod IP is an address");
    assert!(matches!(ip, IpAddr::V4(v4) if v4.octets()[..3] == [10, 244, 0]), "{pod_ip} in the Pod subnet");

    let version = memcached_command(&pod_ip, "version");
    assert!(version.starts_with("VERSION 1.6."), "memcached in the Pod answered {version:?}");
    let inside = kubectl_ok(["-n", &ns.name, "exec", "cache", "--", "cat", "/proc/net/fib_trie"]);
    assert!(inside.contains(&pod_ip), "the Pod's own namespace holds its address: {inside}");
}

#[tokio::test]
async fn host_network_pod_runs_on_the_node_address_with_kubectl_logs_and_exec() {
    let client = support::client().await;
    let node = require_ready_node(&client).await;
    let ns = support::TestNamespace::new(&client, "node-hostnet").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let spec = json!({
        "hostNetwork": true,
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "shell", "image": MEMCACHED_IMAGE,
            "command": ["sh", "-c", "echo started on the host network; exec sleep infinity"],
        }],
    });
    pods.create(&PostParams::default(), &pod("shell", spec)).await.expect("create Pod");

    let pod = wait_until_ready(&pods, "shell", WAIT).await;
    let status = pod.status.expect("status");
    assert_eq!(status.pod_ip.as_deref(), Some(internal_ip(&node).as_str()), "the Pod has the node's address");

    let logs = kubectl_ok(["-n", &ns.name, "logs", "shell"]);
    assert_eq!(logs, "started on the host network\n");
    let exec = kubectl_ok(["-n", &ns.name, "exec", "shell", "--", "sh", "-c", "echo $((6 * 7)); id -un"]);
    assert_eq!(exec, "42\nmemcache\n", "exec runs in the container, as its user");
}

#[tokio::test]
async fn failing_liveness_probe_restarts_the_container() {
    let client = support::client().await;
    require_ready_node(&client).await;
    let ns = support::TestNamespace::new(&client, "node-probes").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // Live while /tmp/alive exists: the container removes it after two seconds.
    let spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "flaky", "image": MEMCACHED_IMAGE,
            "command": ["sh", "-c", "touch /tmp/alive; sleep 2; rm /tmp/alive; exec sleep infinity"],
            "livenessProbe": {"exec": {"command": ["test", "-e", "/tmp/alive"]}, "periodSeconds": 1,
                              "failureThreshold": 1},
        }],
    });
    pods.create(&PostParams::default(), &pod("flaky", spec)).await.expect("create Pod");

    let restarted = support::wait_for("the liveness probe to restart the container", WAIT, || async {
        let pod = pods.get("flaky").await.map_err(|e| e.to_string())?;
        let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
        let restarts = statuses.first().map(|s| s.restart_count).unwrap_or(0);
        Ok(if restarts >= 1 { Ok(pod) } else { Err(support::node::describe(&pod)) })
    })
    .await;
    let events =
        kubectl_ok(["-n", &ns.name, "get", "events", "--field-selector", "involvedObject.name=flaky"]);
    assert!(events.contains("Liveness probe failed"), "the kubelet reported the probe: {events}");
    let last = restarted.status.unwrap().container_statuses.unwrap()[0].last_state.clone();
    assert!(last.and_then(|s| s.terminated).is_some(), "the first container was terminated");
}
