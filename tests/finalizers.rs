//! Finalizers: added on the first reconcile, run on deletion (the main playbook with the finalizer's
//! vars, or a finalizer playbook), removed only after a successful finalizer run.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "core.test.example.com";
const KIND: &str = "Finalized";
const FINALIZER: &str = "core.test.example.com/cleanup";
const WAIT: Duration = Duration::from_secs(180);

/// A watch on `owned_state.yml` with `finalizer` (YAML lines under `finalizer:`); runs leave their
/// marker files in `markers`.
fn watches(markers: &Path, finalizer: &str) -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/owned_state.yml\n  vars:\n    marker_dir: {}\n  finalizer:\n    name: {FINALIZER}\n{finalizer}",
        markers.display()
    )
}

/// Runs of one CR so far.
fn runs(operator: &Operator, namespace: &str, name: &str) -> usize {
    operator.runs(GROUP, KIND, namespace, name)
}

fn markers(namespace: &str) -> PathBuf {
    scratch_dir(&format!("{namespace}-markers"))
}

#[tokio::test]
async fn finalizer_vars_rerun_the_playbook_with_state_absent_before_the_cr_goes_away() {
    let Test { client, ns, api } = Test::setup("fin-vars").kind(GROUP, KIND).build().await;
    let markers = markers(&ns.name);
    let watches = watches(&markers, "    vars:\n      state: absent\n");
    let _operator = OperatorConfig::new(&watches, &ns.name).start();
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns.name);

    support::create_cr(&api, GROUP, KIND, "doomed", json!({})).await;
    let done = support::wait_for_condition(&api, "doomed", "Successful", "True", WAIT).await;
    assert_eq!(done.finalizers(), [FINALIZER], "added on the first reconcile");
    assert!(configmaps.get_opt("doomed-owned").await.unwrap().is_some());
    assert!(!markers.join("doomed.absent").exists());

    api.delete("doomed", &DeleteParams::default()).await.unwrap();
    support::wait_for_absent(&api, "doomed", WAIT).await;
    assert_eq!(
        std::fs::read_to_string(markers.join("doomed.absent")).ok().as_deref(),
        Some("absent\n"),
        "the finalizer run saw state=absent"
    );
    assert!(
        configmaps.get_opt("doomed-owned").await.unwrap().is_none(),
        "the finalizer run deleted the owned ConfigMap"
    );
}

#[tokio::test]
async fn failing_finalizer_keeps_the_cr_terminating_with_a_failure_and_retries_until_it_succeeds() {
    let Test { client, ns, api } = Test::setup("fin-playbook").kind(GROUP, KIND).build().await;
    let markers = markers(&ns.name);
    let watches = watches(&markers, "    playbook: {fixtures}/playbooks/finalize_when_released.yml\n");
    let operator = OperatorConfig::new(&watches, &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "gated", json!({})).await;
    let done = support::wait_for_condition(&api, "gated", "Successful", "True", WAIT).await;
    assert_eq!(done.finalizers(), [FINALIZER], "added on the first reconcile");
    let main_runs = runs(&operator, &ns.name, "gated");

    api.delete("gated", &DeleteParams::default()).await.unwrap();
    let failed = support::wait_for_condition(&api, "gated", "Failure", "True", WAIT).await;
    let failure = support::condition(&failed, "Failure").unwrap();
    assert_eq!(failure["reason"], "Failed");
    assert_eq!(failure["message"], "gated-release is missing, not finalizing");
    assert!(failed.metadata.deletion_timestamp.is_some());
    assert_eq!(failed.finalizers(), [FINALIZER], "kept after a failed finalizer run");

    let retried = support::wait_for("the failing finalizer to be retried", WAIT, || async {
        let runs = runs(&operator, &ns.name, "gated");
        Ok((runs >= main_runs + 2).then_some(runs).ok_or(format!("{runs} runs")))
    })
    .await;
    let still = api.get("gated").await.expect("still terminating after retries");
    assert_eq!(still.finalizers(), [FINALIZER], "after {retried} runs");
    assert!(!markers.join("gated.finalized").exists());

    let release: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "gated-release"}})).unwrap();
    Api::namespaced(client.clone(), &ns.name).create(&Default::default(), &release).await.unwrap();
    support::wait_for_absent(&api, "gated", WAIT).await;
    assert!(markers.join("gated.finalized").exists());
}
