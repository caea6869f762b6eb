//! Who writes the status (`manageStatus` and `operator_sdk.util.k8s_status`), which objects an
//! operator runs at all (label `selector`, `fieldSelector`, `WATCH_NAMESPACE`), and which of their
//! changes run them (`watchFields`).

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "core.test.example.com";
const KIND: &str = "StatusFilter";
const WAIT: Duration = Duration::from_secs(180);

fn watches(playbook: &str, fields: &str) -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/{playbook}\n  vars:\n    status_kind: {KIND}\n{fields}"
    )
}

fn condition_types(object: &DynamicObject) -> Vec<String> {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str().map(String::from))
        .collect()
}

fn assert_playbook_status(object: &DynamicObject) {
    let status = &object.data["status"];
    assert_eq!(status["phase"], "Ready", "{status}");
    assert_eq!(status["observedSize"], 3, "{status}");
    let ready = support::condition(object, "Ready").expect("the playbook's Ready condition");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "PlaybookSaysSo");
    assert_eq!(ready["message"], "written by k8s_status");
}

#[tokio::test]
async fn without_manage_status_only_the_playbooks_k8s_status_reaches_the_cr() {
    let Test { client: _, ns, api } = Test::setup("status-unmanaged").kind(GROUP, KIND).build().await;
    let watches = watches("k8s_status.yml", "  manageStatus: false\n");
    let operator = OperatorConfig::new(&watches, &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "self-reported", json!({"size": 3})).await;
    support::wait_for("the reconcile to finish", WAIT, || async {
        let done = operator.log().contains("reconcile done");
        Ok(done.then_some(()).ok_or_else(|| "still running".to_string()))
    })
    .await;

    let object = api.get("self-reported").await.unwrap();
    assert_playbook_status(&object);
    assert_eq!(condition_types(&object), ["Ready"], "no Running/Successful/Failure from the operator");
}

#[tokio::test]
async fn k8s_status_keys_and_conditions_survive_the_operators_condition_writes() {
    let Test { client: _, ns, api } = Test::setup("status-managed").kind(GROUP, KIND).build().await;
    let _operator = OperatorConfig::new(&watches("k8s_status.yml", ""), &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "both", json!({"size": 3})).await;
    let done = support::wait_for_condition(&api, "both", "Successful", "True", WAIT).await;

    assert_playbook_status(&done);
    let mut types = condition_types(&done);
    types.sort();
    assert_eq!(types, ["Failure", "Ready", "Running", "Successful"]);
}

#[tokio::test]
async fn cr_without_the_selected_label_is_never_run() {
    let Test { client, ns, api } = Test::setup("filter-selector").kind(GROUP, KIND).build().await;
    let watches = watches("marker.yml", "  selector:\n    matchLabels:\n      tier: selected\n");
    let _operator = OperatorConfig::new(&watches, &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "unlabelled", json!({})).await;
    let labelled = json!({"name": "labelled", "labels": {"tier": "selected"}});
    support::create_cr_with(&api, GROUP, KIND, labelled, json!({})).await;
    support::wait_for_condition(&api, "labelled", "Successful", "True", WAIT).await;

    let skipped = api.get("unlabelled").await.unwrap();
    assert_eq!(skipped.data["status"], Value::Null, "never reconciled");
    assert_eq!(support::configmaps::data(&client, &ns.name, "unlabelled-marker").await, None);
}

#[tokio::test]
async fn operator_watching_one_namespace_leaves_crs_in_another_alone() {
    let Test { client, ns: watched, api: watched_api } =
        Test::setup("filter-watched").kind(GROUP, KIND).build().await;
    let other = support::TestNamespace::new(&client, "filter-other").await;
    let _operator = OperatorConfig::new(&watches("marker.yml", ""), &watched.name).start();
    let other_api = support::cr_api(&client, GROUP, KIND, &other.name);

    support::create_cr(&other_api, GROUP, KIND, "elsewhere", json!({})).await;
    support::create_cr(&watched_api, GROUP, KIND, "here", json!({})).await;
    support::wait_for_condition(&watched_api, "here", "Successful", "True", WAIT).await;

    let untouched = other_api.get("elsewhere").await.unwrap();
    assert_eq!(untouched.data["status"], Value::Null, "never reconciled");
    assert_eq!(support::configmaps::data(&client, &other.name, "elsewhere-marker").await, None);
}

/// A Node-like kind: ConfigMaps have no generation, so upstream runs the playbook on every write
/// (a Node's heartbeats, ansible-operator-plugins#135). `watchFields` runs it only when a watched
/// field changes; `fieldSelector` leaves some objects out of the watch.
#[tokio::test]
async fn watch_fields_and_a_field_selector_decide_which_changes_of_which_objects_run() {
    let client = support::client().await;
    let ns = support::TestNamespace::new(&client, "filter-fields").await;
    let runs_dir = scratch_dir(&format!("{}-runs", ns.name));
    let watches = format!(
        "- version: v1\n  group: \"\"\n  kind: ConfigMap\n  playbook: {{fixtures}}/playbooks/count_runs.yml\n  \
         manageStatus: false\n  watchDependentResources: false\n  \
         watchFields: [.data.wanted, .metadata.labels]\n  fieldSelector: metadata.name!=left-out\n  \
         vars:\n    runs_dir: {}\n",
        runs_dir.display()
    );
    let _operator = OperatorConfig::new(&watches, &ns.name).start();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let runs = |name: &str| {
        std::fs::read_to_string(runs_dir.join(format!("{name}.runs"))).map(|t| t.lines().count()).unwrap_or(0)
    };
    let wait_for_runs = |name: &'static str, count: usize| async move {
        let what = format!("{count} runs of {name}");
        support::wait_for(&what, WAIT, move || async move {
            let seen = runs(name);
            Ok((seen >= count).then_some(()).ok_or(format!("{seen} runs")))
        })
        .await
    };
    let patch = |name: &'static str, patch: Value| {
        let configmaps = configmaps.clone();
        async move { configmaps.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap() }
    };
    for name in ["watched", "marker", "left-out"] {
        let configmap = serde_json::from_value(json!({
            "metadata": {"name": name}, "data": {"wanted": "1", "heartbeat": "0"}
        }))
        .unwrap();
        configmaps.create(&PostParams::default(), &configmap).await.unwrap();
    }
    wait_for_runs("watched", 1).await;
    wait_for_runs("marker", 1).await;

    for beat in 1..=5 {
        patch("watched", json!({"data": {"heartbeat": beat.to_string()}})).await;
    }
    // The watch brings events in order: once the marker's later change has run, a heartbeat's run
    // would have started too.
    patch("marker", json!({"data": {"wanted": "2"}})).await;
    wait_for_runs("marker", 2).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs("watched"), 1, "heartbeats (unwatched fields) ran the playbook");

    patch("watched", json!({"data": {"wanted": "2"}})).await;
    wait_for_runs("watched", 2).await;
    patch("watched", json!({"metadata": {"labels": {"tier": "gold"}}})).await;
    wait_for_runs("watched", 3).await;

    patch("left-out", json!({"data": {"wanted": "2"}})).await;
    patch("marker", json!({"data": {"wanted": "3"}})).await;
    wait_for_runs("marker", 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs("left-out"), 0, "the field selector leaves it out of the watch");
    assert_eq!(runs("watched"), 3);
}
