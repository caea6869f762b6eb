//! What one CR author or one local user must not be able to do to everyone else, against the real
//! API server and real Ansible: a CR nested too deep for the operator to decode is reported by name
//! (log, metric, Event) while the other CRs of its kind keep converging; an operator refuses a
//! runner directory another user owns.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "deep.test.example.com";
const KIND: &str = "Nested";
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test]
async fn a_cr_too_deep_to_decode_is_reported_by_name_and_the_other_crs_of_its_kind_converge() {
    let Test { client: _, ns, api: crs } = Test::setup("deep-cr").kind(GROUP, KIND).build().await;
    let dir = scratch_dir(&format!("{}-crs", ns.name));
    // In the initial list, and added while the operator watches.
    support::create_deep_cr(&dir, GROUP, KIND, &ns.name, "deep", 200);
    let metrics = support::free_port();
    let watches = support::playbook_watch(GROUP, KIND, "marker.yml");
    let operator = OperatorConfig::new(&watches, &ns.name)
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .start();
    support::create_cr(&crs, GROUP, KIND, "normal", json!({"level": {"level": "bottom"}})).await;
    support::wait_for_condition(&crs, "normal", "Successful", "True", WAIT).await;
    support::create_deep_cr(&dir, GROUP, KIND, &ns.name, "deeper", 300);

    // A spec change of the normal one still converges: the watch did not stop at the deep ones.
    let patch = json!({"spec": {"changed": true}});
    crs.patch("normal", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
    support::wait_for_generation(&crs, "normal", 2, WAIT).await;

    // Each deep one is named: in the log, by a Warning Event on it, and counted.
    for name in ["deep", "deeper"] {
        support::wait_for(&format!("the log to name {name}"), WAIT, || async {
            let log = operator.log();
            let line = log
                .lines()
                .find(|l| l.contains("cannot decode this CR") && l.contains(&format!("\"{name}\"")));
            Ok(line.map(str::to_string).ok_or_else(|| "not yet".to_string()))
        })
        .await;
        let event = support::wait_for(&format!("a Warning Event on {name}"), WAIT, || async {
            let listed = support::kubectl_ok([
                "-n",
                &ns.name,
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={name}"),
                "-o",
                "json",
            ]);
            let listed: Value = serde_json::from_str(&listed).map_err(|e| e.to_string())?;
            let found =
                listed["items"].as_array().into_iter().flatten().find(|e| e["reason"] == "Undecodable");
            Ok(found.cloned().ok_or_else(|| format!("{listed}")))
        })
        .await;
        assert_eq!(event["type"], "Warning", "{event}");
        assert!(event["message"].as_str().unwrap().contains("recursion limit exceeded"), "{event}");
        // Nothing ran for it.
        let marker = support::kubectl(["-n", &ns.name, "get", "configmap", &format!("{name}-marker")]);
        assert!(!marker.status.success(), "{name} was run");
    }
    let gvk = format!("{GROUP}/v1alpha1, Kind={KIND}");
    let (code, text) = support::http_get(metrics, "/metrics", None).expect("the metrics endpoint answers");
    assert_eq!(code, 200);
    let counted = text
        .lines()
        .find(|l| l.starts_with("ansible_operator_undecodable_crs_total") && l.contains(&gvk))
        .unwrap_or_else(|| panic!("no undecodable count for {gvk}:\n{text}"));
    assert!(counted.ends_with(" 2"), "{counted}");
    let marker = support::kubectl_ok(["-n", &ns.name, "get", "configmap", "normal-marker", "-o", "name"]);
    assert_eq!(marker.trim(), "configmap/normal-marker");
}

#[test]
fn the_operator_refuses_to_start_on_a_runner_directory_another_user_owns() {
    let dir = scratch_dir("foreign-runner-dir");
    let foreign = dir.join("runner");
    std::fs::create_dir_all(&foreign).unwrap();
    // The tests run as root: the directory goes to nobody (65534). As another user, root's own
    // directory is the foreign one.
    let owner = if euid() == 0 {
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).expect("chown the runner dir");
        65534
    } else {
        0
    };
    let runner_dir = if owner == 0 { std::path::PathBuf::from("/") } else { foreign.clone() };
    let watches = support::playbook_watch(GROUP, KIND, "marker.yml");
    let mut operator = OperatorConfig::new(&watches, "default")
        .arg(format!("--runner-dir={}", runner_dir.display()))
        .start();
    let expected = format!(
        "error: runner directory {} is owned by uid {owner}, not by this operator's uid",
        runner_dir.display()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !operator.log().contains(&expected) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(operator.log().contains(&expected), "{}", operator.log());
    // It exited by itself, with a failure (terminate only reads the status of an ended process).
    let status = operator.terminate(Duration::from_secs(5)).expect("the operator exited");
    assert!(!status.success(), "it must not start: {}", operator.log());
}

/// The effective uid of the tests, as `id -u` says.
fn euid() -> u32 {
    let output = std::process::Command::new("id").arg("-u").output().expect("run id -u");
    String::from_utf8_lossy(&output.stdout).trim().parse().expect("a uid")
}
