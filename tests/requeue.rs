//! Runs without a spec change: the watch's `reconcilePeriod`, the reconcile-period annotation that
//! overrides it, and `operator_sdk.util.requeue_after`. The playbook counts its runs in a file.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "core.test.example.com";
const KIND: &str = "Requeued";
const WAIT: Duration = Duration::from_secs(180);
const PERIOD_ANNOTATION: &str = "ansible.sdk.operatorframework.io/reconcile-period";

/// A watch on `count_runs.yml` counting into `runs_dir`, with further entry lines.
fn watches(runs_dir: &Path, fields: &str) -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/count_runs.yml\n{fields}  vars:\n    runs_dir: {}\n",
        runs_dir.display()
    )
}

/// Where the CRs of a test count their runs.
fn runs_dir(namespace: &str) -> PathBuf {
    scratch_dir(&format!("{namespace}-runs"))
}

/// How many runs of CR `name` have started.
fn runs(runs_dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(runs_dir.join(format!("{name}.runs")))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// Waits until CR `name` has started at least `at_least` runs.
async fn wait_for_runs(runs_dir: &Path, name: &str, at_least: usize) {
    support::wait_for(&format!("{at_least} runs of {name}"), WAIT, || async {
        let runs = runs(runs_dir, name);
        Ok((runs >= at_least).then_some(()).ok_or(format!("{runs} runs")))
    })
    .await
}

#[tokio::test]
async fn reconcile_period_in_watches_reruns_the_cr_without_a_change() {
    let Test { client: _, ns, api } = Test::setup("requeue-period").kind(GROUP, KIND).build().await;
    let dir = runs_dir(&ns.name);
    let _operator = OperatorConfig::new(&watches(&dir, "  reconcilePeriod: 1s\n"), &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "periodic", json!({})).await;
    let first = support::wait_for_condition(&api, "periodic", "Successful", "True", WAIT).await;
    let completion = |object: &kube::api::DynamicObject| {
        support::condition(object, "Running").unwrap()["ansibleResult"]["completion"].clone()
    };
    let first_completion = completion(&first);
    support::wait_for("a newer completion time", WAIT, || async {
        let object = api.get("periodic").await.map_err(|e| e.to_string())?;
        let completion = completion(&object);
        Ok((completion != first_completion && !completion.is_null())
            .then_some(())
            .ok_or(format!("completion {completion}")))
    })
    .await;
    assert!(runs(&dir, "periodic") >= 2);
    let later = api.get("periodic").await.unwrap();
    assert_eq!(later.metadata.generation, Some(1), "nothing changed the CR");
}

#[tokio::test]
async fn reconcile_period_annotation_0s_stops_the_periodic_runs_of_the_watch() {
    let Test { client: _, ns, api } = Test::setup("requeue-annotation-off").kind(GROUP, KIND).build().await;
    let dir = runs_dir(&ns.name);
    let _operator = OperatorConfig::new(&watches(&dir, "  reconcilePeriod: 1s\n"), &ns.name).start();

    let metadata = json!({"name": "quiet", "annotations": {PERIOD_ANNOTATION: "0s"}});
    support::create_cr_with(&api, GROUP, KIND, metadata, json!({})).await;
    support::create_cr(&api, GROUP, KIND, "control", json!({})).await;
    support::wait_for_condition(&api, "quiet", "Successful", "True", WAIT).await;

    // The unannotated CR sets the pace: three of its runs leave ample time for periodic ones.
    wait_for_runs(&dir, "control", 3).await;
    assert_eq!(runs(&dir, "quiet"), 1, "the 0s annotation leaves the CR alone after its first run");
}

#[tokio::test]
async fn reconcile_period_annotation_overrides_the_default_period() {
    let Test { client: _, ns, api } = Test::setup("requeue-annotation-on").kind(GROUP, KIND).build().await;
    let dir = runs_dir(&ns.name);
    let _operator = OperatorConfig::new(&watches(&dir, ""), &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "default", json!({})).await;
    let metadata = json!({"name": "eager", "annotations": {PERIOD_ANNOTATION: "1s"}});
    support::create_cr_with(&api, GROUP, KIND, metadata, json!({})).await;
    support::wait_for_condition(&api, "default", "Successful", "True", WAIT).await;

    wait_for_runs(&dir, "eager", 2).await;
    assert_eq!(runs(&dir, "default"), 1, "without the annotation the default period (10h) applies");
}

#[tokio::test]
async fn requeue_after_module_causes_another_run_without_a_spec_change() {
    let Test { client: _, ns, api } = Test::setup("requeue-after").kind(GROUP, KIND).build().await;
    let dir = runs_dir(&ns.name);
    let watches = watches(&dir, "").replace("  vars:\n", "  vars:\n    requeue_period: 2s\n");
    let _operator = OperatorConfig::new(&watches, &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "again", json!({})).await;
    wait_for_runs(&dir, "again", 2).await;
    let object = api.get("again").await.unwrap();
    assert_eq!(object.metadata.generation, Some(1), "nothing changed the CR");
}
