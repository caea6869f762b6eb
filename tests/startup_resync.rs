//! What a restart runs: with `--startup-resync=due` only the CRs that are not converged (changed,
//! failed, never confirmed while no operator ran), not the converged ones, which come due at their
//! period; with the default (`all`) every CR, as upstream. Kinds without our status
//! (`manageStatus: false`) are told converged by the confirmations kept in a ConfigMap.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "resync.test.example.com";
const KIND: &str = "Paced";
const CRS: usize = 50;
const WAIT: Duration = Duration::from_secs(300);
/// How long the converged CRs are watched after the restart for a run that should not come.
const QUIET: Duration = Duration::from_secs(20);

/// A quick playbook, with a period far beyond the test.
fn watches() -> String {
    format!("{}  reconcilePeriod: 1h\n", support::playbook_watch(GROUP, KIND, "validate.yml"))
}

fn stop(mut operator: Operator) {
    assert!(operator.stop().is_some_and(|s| s.success()), "a clean stop");
}

/// Each CR's last run completion (the `Running` condition's `ansibleResult.completion`), by name.
async fn completions(api: &Api<DynamicObject>) -> BTreeMap<String, Option<String>> {
    let list = api.list(&ListParams::default()).await.expect("list the CRs");
    list.items
        .iter()
        .map(|cr| {
            let completion = support::condition(cr, "Running")
                .and_then(|c| c["ansibleResult"]["completion"].as_str())
                .map(str::to_string);
            (cr.metadata.name.clone().unwrap_or_default(), completion)
        })
        .collect()
}

/// Waits until every CR in `names` converged at its generation with a completion other than the
/// one in `before`.
async fn wait_for_new_runs(
    api: &Api<DynamicObject>,
    names: &[String],
    before: &BTreeMap<String, Option<String>>,
) {
    support::wait_for(&format!("{} CRs to run again", names.len()), WAIT, || async {
        let list = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let now = completions(api).await;
        let pending: Vec<&String> = names
            .iter()
            .filter(|name| {
                let converged = list
                    .items
                    .iter()
                    .any(|cr| cr.metadata.name.as_ref() == Some(*name) && support::converged(cr));
                !converged || now.get(*name) == before.get(*name)
            })
            .collect();
        Ok(if pending.is_empty() { Ok(()) } else { Err(format!("not yet run: {pending:?}")) })
    })
    .await
}

/// Reconciles of the watch counted in the operator's `/metrics`, whatever their result.
fn reconciles(port: u16) -> Option<f64> {
    support::reconciles_counted(port, "paced-v1alpha1-controller", None)
}

#[tokio::test]
async fn a_restart_with_due_runs_only_the_unconverged_crs_and_the_default_runs_every_cr() {
    let Test { client: _, ns, api } = Test::setup("startup-resync").kind(GROUP, KIND).build().await;
    let first = OperatorConfig::new(&watches(), &ns.name).start();
    let names: Vec<String> = (0..CRS).map(|i| format!("cr-{i:02}")).collect();
    for chunk in names.chunks(10) {
        join_all(chunk.iter().map(|name| support::create_cr(&api, GROUP, KIND, name, json!({"size": 1}))))
            .await;
    }
    wait_for_new_runs(&api, &names, &BTreeMap::new()).await;
    stop(first);
    let converged = completions(&api).await;

    // While no operator runs: three specs change, one CR's last run failed, one was never confirmed.
    let (changed, rest) = names.split_at(3);
    let (failed, rest) = rest.split_at(1);
    let (unconfirmed, untouched) = rest.split_at(1);
    let params = PatchParams::default();
    for name in changed {
        api.patch(name, &params, &Patch::Merge(&json!({"spec": {"size": 2}}))).await.unwrap();
    }
    let failure = json!({"status": {"conditions": [
        {"type": "Running", "status": "False", "reason": "Running", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
        {"type": "Successful", "status": "False", "reason": "", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
        {"type": "Failure", "status": "True", "reason": "Failed", "message": "it failed",
         "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
    ]}});
    api.patch_status(&failed[0], &params, &Patch::Merge(&failure)).await.unwrap();
    let never = json!({"status": {"conditions": []}});
    api.patch_status(&unconfirmed[0], &params, &Patch::Merge(&never)).await.unwrap();

    let port = support::free_port();
    let restarted = Instant::now();
    let due = OperatorConfig::new(&watches(), &ns.name)
        .arg("--startup-resync=due")
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .start();
    let unconverged: Vec<String> = [changed, failed, unconfirmed].concat();
    wait_for_new_runs(&api, &unconverged, &converged).await;
    tokio::time::sleep(QUIET.saturating_sub(restarted.elapsed())).await;
    let after = completions(&api).await;
    let ran: Vec<&String> =
        untouched.iter().filter(|name| after.get(*name) != converged.get(*name)).collect();
    assert!(ran.is_empty(), "converged CRs ran after a restart with due: {ran:?}");
    assert_eq!(
        reconciles(port),
        Some(unconverged.len() as f64),
        "only the runs count as reconciles, not the deferred CRs"
    );
    stop(due);

    let _all = OperatorConfig::new(&watches(), &ns.name).start();
    wait_for_new_runs(&api, &names, &after).await;
}

/// A kind without our status (ConfigMaps here; Namespaces and Secrets in Kiali, kiali#6081): with
/// `due`, a restart runs none of the 200 objects their last runs confirmed, only the one that changed
/// while no operator ran.
#[tokio::test]
async fn a_restart_with_due_runs_only_the_changed_objects_of_a_kind_without_status() {
    const OBJECTS: usize = 200;
    let client = support::client().await;
    let ns = support::TestNamespace::new(&client, "resync-statusless").await;
    let runs_dir = scratch_dir(&format!("{}-runs", ns.name));
    let watches = format!(
        "- version: v1\n  group: \"\"\n  kind: ConfigMap\n  playbook: {{fixtures}}/playbooks/count_runs.yml\n  \
         manageStatus: false\n  watchDependentResources: false\n  reconcilePeriod: 1h\n  \
         selector:\n    matchLabels:\n      primary: \"yes\"\n  vars:\n    runs_dir: {}\n",
        runs_dir.display()
    );
    let runs = |name: &str| {
        std::fs::read_to_string(runs_dir.join(format!("{name}.runs"))).map(|t| t.lines().count()).unwrap_or(0)
    };
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("object-{i:03}")).collect();
    for chunk in names.chunks(20) {
        join_all(chunk.iter().map(|name| {
            let configmap = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"primary": "yes"}}, "data": {"setting": "1"}
            }))
            .unwrap();
            let configmaps = configmaps.clone();
            async move { configmaps.create(&PostParams::default(), &configmap).await.unwrap() }
        }))
        .await;
    }
    let start = || OperatorConfig::new(&watches, &ns.name).arg("--startup-resync=due").start();
    let first = start();
    support::wait_for("every object's first run", WAIT, || async {
        let ran = names.iter().filter(|name| runs(name) >= 1).count();
        Ok((ran == OBJECTS).then_some(()).ok_or(format!("{ran} ran")))
    })
    .await;
    let confirmed = "ansible-operator-confirmed.configmap.v1";
    support::wait_for("the confirmations written", WAIT, || async {
        let entries = configmaps.get_opt(confirmed).await.map_err(|e| e.to_string())?.and_then(|c| c.data);
        let count = entries.map_or(0, |data| data.len());
        Ok((count == OBJECTS).then_some(()).ok_or(format!("{count} entries")))
    })
    .await;
    stop(first);

    let changed = &names[7];
    configmaps
        .patch(changed, &PatchParams::default(), &Patch::Merge(&json!({"data": {"setting": "2"}})))
        .await
        .unwrap();
    let _second = start();
    support::wait_for("the changed object's run", WAIT, || async {
        let count = runs(changed);
        Ok((count == 2).then_some(()).ok_or(format!("{count} runs")))
    })
    .await;
    tokio::time::sleep(QUIET).await;
    let ran_again: Vec<&String> = names.iter().filter(|name| runs(name) != 1 && *name != changed).collect();
    assert!(ran_again.is_empty(), "converged objects ran at the restart: {ran_again:?}");
    assert_eq!(runs(changed), 2);
}
