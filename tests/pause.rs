//! Pause against the real API server and real Ansible: a CR annotated
//! `ansible.sdk.operatorframework.io/paused: "true"` does not run for a spec edit nor for its short
//! reconcile period, is not counted as a reconcile, shows a `Paused` condition and the
//! `ansible_operator_paused_crs` gauge; resuming runs it once at once at its new generation; a paused
//! CR is still finalized when deleted; the API's pause and resume need `patch` on the CR.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use support::api::{ApiServer, service_account};
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "pause.test.example.com";
const KIND: &str = "Held";
const PLURAL: &str = "helds";
const CONTROLLER: &str = "held-v1alpha1-controller";
const FINALIZER: &str = "pause.test.example.com/cleanup";
const PAUSED: &str = "ansible.sdk.operatorframework.io/paused";
const WAIT: Duration = Duration::from_secs(180);

/// A watch on `owned_state.yml` resyncing every 2 s, with a finalizer that leaves
/// `<markers>/<name>.absent`.
fn watches(markers: &Path) -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/owned_state.yml\n  reconcilePeriod: 2s\n  vars:\n    marker_dir: {}\n  finalizer:\n    name: {FINALIZER}\n    vars:\n      state: absent\n",
        markers.display()
    )
}

/// Runs of one CR so far.
fn runs(operator: &Operator, namespace: &str, name: &str) -> usize {
    operator.runs(GROUP, KIND, namespace, name)
}

/// `ansible_operator_paused_crs` of the kind in the operator's `/metrics`.
fn paused_gauge(port: u16) -> Option<f64> {
    let (200, text) = support::http_get(port, "/metrics", None)? else { return None };
    let series = format!("ansible_operator_paused_crs{{GVK=\"{GROUP}/v1alpha1, Kind={KIND}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&series)?.parse().ok())
}

async fn annotate(api: &Api<DynamicObject>, name: &str, paused: Value) {
    let patch = json!({"metadata": {"annotations": {PAUSED: paused}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate the CR");
}

async fn set_size(api: &Api<DynamicObject>, name: &str, size: i64) {
    let patch = json!({"spec": {"size": size}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("edit the spec");
}

#[tokio::test]
async fn a_paused_cr_neither_runs_nor_resyncs_and_resuming_runs_it_once_at_its_new_generation() {
    let Test { client: _, ns, api } = Test::setup("pause").kind(GROUP, KIND).build().await;
    let markers = scratch_dir(&format!("{}-markers", ns.name));
    let port = support::free_port();
    let watches = watches(&markers);
    let operator = OperatorConfig::new(&watches, &ns.name)
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .start();

    support::create_cr(&api, GROUP, KIND, "held", json!({"size": 1})).await;
    support::wait_for_generation(&api, "held", 1, WAIT).await;
    assert_eq!(paused_gauge(port), Some(0.0));

    annotate(&api, "held", json!("true")).await;
    let paused = support::wait_for_condition(&api, "held", "Paused", "True", WAIT).await;
    let condition = support::condition(&paused, "Paused").unwrap();
    assert_eq!(condition["reason"], "Paused");
    assert!(condition["message"].as_str().unwrap().contains(PAUSED), "{condition}");
    assert_eq!(condition["observedGeneration"], 1);
    assert!(support::successful_at(&paused, 1), "upstream's conditions untouched: {}", paused.data["status"]);
    assert_eq!(paused_gauge(port), Some(1.0));

    // Neither a spec edit nor the 2 s period runs it, and nothing counts as a reconcile.
    let runs_before = runs(&operator, &ns.name, "held");
    let counted = support::reconciles_counted(port, CONTROLLER, None).expect("metrics answer");
    set_size(&api, "held", 2).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(runs(&operator, &ns.name, "held"), runs_before, "no run while paused");
    assert_eq!(support::reconciles_counted(port, CONTROLLER, None), Some(counted), "no reconcile counted");
    let still = api.get("held").await.unwrap();
    assert_eq!(still.metadata.generation, Some(2));
    assert!(support::successful_at(&still, 1), "generation 2 did not run: {}", still.data["status"]);
    assert_eq!(support::condition(&still, "Paused").unwrap(), condition, "written once");

    // Any value but "true" resumes: one run at once, at the new generation.
    let resumed_at = Instant::now();
    annotate(&api, "held", json!("false")).await;
    let done = support::wait_for_generation(&api, "held", 2, WAIT).await;
    assert!(resumed_at.elapsed() < Duration::from_secs(15), "ran at once: {:?}", resumed_at.elapsed());
    assert!(runs(&operator, &ns.name, "held") > runs_before);
    let condition = support::condition(&done, "Paused").unwrap();
    assert_eq!((&condition["status"], &condition["reason"]), (&json!("False"), &json!("Resumed")));
    assert_eq!(condition["observedGeneration"], 2);
    assert_eq!(paused_gauge(port), Some(0.0));
    // The reconcile is counted when it returns, just after its status write.
    support::wait_for("the resumed run counted as a reconcile", Duration::from_secs(10), || async {
        let now = support::reconciles_counted(port, CONTROLLER, None);
        Ok(if now > Some(counted) { Ok(()) } else { Err(format!("{now:?} reconciles, {counted} before")) })
    })
    .await;

    // Paused again, then deleted: the finalizer still runs.
    annotate(&api, "held", json!("true")).await;
    support::wait_for_condition(&api, "held", "Paused", "True", WAIT).await;
    assert!(!markers.join("held.absent").exists());
    api.delete("held", &DeleteParams::default()).await.unwrap();
    support::wait_for_absent(&api, "held", WAIT).await;
    assert_eq!(
        std::fs::read_to_string(markers.join("held.absent")).ok().as_deref(),
        Some("absent\n"),
        "the finalizer ran for the paused CR"
    );
    support::wait_for("the gauge to forget the deleted CR", WAIT, || async {
        Ok(match paused_gauge(port) {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?}")),
        })
    })
    .await;
}

#[tokio::test]
async fn pausing_and_resuming_through_the_api_need_patch_on_the_cr() {
    let Test { client: _, ns, api } = Test::setup("pause-api").kind(GROUP, KIND).run_records().build().await;
    let resource = format!("{PLURAL}.{GROUP}");
    let reader = service_account(&ns.name, "reader", "get,list", &resource);
    let writer = service_account(&ns.name, "writer", "get,list,patch", &resource);
    let port = support::free_port();
    let watches = support::playbook_watch(GROUP, KIND, "api.yml");
    let _operator =
        OperatorConfig::new(&watches, &ns.name).arg(format!("--api-bind-address=127.0.0.1:{port}")).start();
    let server = ApiServer::localhost(port, None);
    server.wait_until_up(WAIT);
    support::create_cr(&api, GROUP, KIND, "held", json!({})).await;
    support::wait_for_generation(&api, "held", 1, WAIT).await;
    let path = format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs/{}/held", ns.name);

    let denied = server.request("POST", &format!("{path}/pause"), Some(&reader));
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert!(!api.get("held").await.unwrap().metadata.annotations.unwrap_or_default().contains_key(PAUSED));

    let paused = server.request("POST", &format!("{path}/pause"), Some(&writer));
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.body["paused"], true);
    assert_eq!(paused.body["by"], format!("system:serviceaccount:{}:writer", ns.name).as_str());
    let object = support::wait_for_condition(&api, "held", "Paused", "True", WAIT).await;
    assert_eq!(object.metadata.annotations.unwrap().get(PAUSED).map(String::as_str), Some("true"));
    assert_eq!(server.get_ok(&path, &reader)["paused"], true);

    assert_eq!(server.request("POST", &format!("{path}/resume"), Some(&reader)).status, 403);
    let resumed = server.request("POST", &format!("{path}/resume"), Some(&writer));
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let object = support::wait_for_condition(&api, "held", "Paused", "False", WAIT).await;
    assert!(
        !object.metadata.annotations.unwrap_or_default().contains_key(PAUSED),
        "the annotation is removed"
    );
    assert_eq!(server.get_ok(&path, &reader)["paused"], false);
}
