//! Re-running a CR when what its run read changes (`watchReadResources`), against the real API server
//! and real Ansible: a playbook reads a user's ConfigMap and Secret with `kubernetes.core.k8s_info`;
//! the run record lists both; with the key, editing either re-runs the CR within seconds, and editing
//! an unrelated ConfigMap or only an annotation does not; without it nothing re-runs.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use support::operator::{Operator, OperatorConfig};
use support::setup::Test;

const GROUP: &str = "readset.test.example.com";
const KIND: &str = "Reader";
const CONTROLLER: &str = "reader-v1alpha1-controller";
const WAIT: Duration = Duration::from_secs(180);
/// How soon a change to what the run read re-runs the CR.
const SOON: Duration = Duration::from_secs(30);
/// How long a change that must not re-run the CR is given to do so anyway.
const QUIET: Duration = Duration::from_secs(8);

struct Running {
    operator: Operator,
    port: u16,
}

fn start(namespace: &str, extra: &str) -> Running {
    let port = support::free_port();
    let watches = format!("{}{extra}", support::playbook_watch(GROUP, KIND, "read_set.yml"));
    let operator = OperatorConfig::new(&watches, namespace)
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .start();
    Running { operator, port }
}

/// Successful reconciles of the CR's kind so far.
fn runs(port: u16) -> usize {
    support::reconciles_counted(port, CONTROLLER, Some("success")).unwrap_or(0.0) as usize
}

async fn wait_for_runs(port: u16, at_least: usize, within: Duration) {
    support::wait_for(&format!("{at_least} successful runs"), within, || async {
        let runs = runs(port);
        Ok((runs >= at_least).then_some(()).ok_or(format!("{runs} runs")))
    })
    .await
}

/// The user's objects the playbook reads, and one it does not.
async fn user_objects(client: &kube::Client, namespace: &str) -> (Api<ConfigMap>, Api<Secret>) {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for name in ["settings", "unrelated"] {
        let object =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": {"level": "1"}})).unwrap();
        config_maps.create(&PostParams::default(), &object).await.unwrap();
    }
    let secret =
        serde_json::from_value(json!({"metadata": {"name": "creds"}, "stringData": {"password": "one"}}))
            .unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    (config_maps, secrets)
}

async fn merge<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// The CR's latest run record.
async fn latest_record(client: &kube::Client, namespace: &str, uid: &str) -> Option<Value> {
    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    let runs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"),
    );
    let params = ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}"));
    let mut items: Vec<Value> =
        runs.list(&params).await.ok()?.items.into_iter().map(|o| serde_json::to_value(o).unwrap()).collect();
    items.sort_by_key(|r| r["spec"]["startTime"].as_str().unwrap_or_default().to_string());
    items.pop()
}

/// Waits until the operator watches the ConfigMap and the Secret the run read.
async fn wait_for_read_watches(operator: &Operator) {
    support::wait_for("watches of what the run read", WAIT, || async {
        let log = operator.log();
        let watching: Vec<&str> = log.lines().filter(|l| l.contains("watching what runs read")).collect();
        let both = ["configmaps", "secrets"].iter().all(|r| watching.iter().any(|l| l.contains(r)));
        Ok(both.then_some(()).ok_or(format!("{} read watches so far", watching.len())))
    })
    .await;
    // The watches list before they see changes: give the two narrowed lists a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn with_watch_read_resources_a_cr_reruns_when_a_configmap_or_secret_it_read_changes_and_not_for_others()
{
    let Test { client, ns, api } = Test::setup("read-set").kind(GROUP, KIND).run_records().build().await;
    let (config_maps, secrets) = user_objects(&client, &ns.name).await;
    let Running { operator, port } = start(&ns.name, "  watchReadResources: true\n");
    let created = support::create_cr(&api, GROUP, KIND, "reader", json!({})).await;
    let uid = created.metadata.uid.clone().unwrap();
    wait_for_runs(port, 1, WAIT).await;

    let record = support::wait_for("a run record listing what the run read", WAIT, || async {
        let record = latest_record(&client, &ns.name, &uid).await.ok_or("no record yet")?;
        let reads = record["spec"]["reads"].as_array().cloned().unwrap_or_default();
        Ok(if reads.len() >= 2 { Ok(reads) } else { Err(format!("reads {reads:?}")) })
    })
    .await;
    let named: Vec<(&str, &str)> = record
        .iter()
        .map(|r| (r["kind"].as_str().unwrap_or_default(), r["name"].as_str().unwrap_or_default()))
        .collect();
    assert!(named.contains(&("ConfigMap", "settings")) && named.contains(&("Secret", "creds")), "{record:?}");
    assert!(record.iter().all(|r| r["verb"] == "get" && r["namespace"] == ns.name.as_str()), "{record:?}");
    assert!(!serde_json::to_string(&record).unwrap().contains("one"), "no Secret value in the record");

    wait_for_read_watches(&operator).await;
    let before = runs(port);
    merge(&config_maps, "settings", json!({"data": {"level": "2"}})).await;
    wait_for_runs(port, before + 1, SOON).await;
    support::wait_for("the re-run's record naming the ConfigMap", WAIT, || async {
        let record = latest_record(&client, &ns.name, &uid).await.ok_or("no record")?;
        let trigger = &record["spec"]["trigger"];
        let named = trigger["reason"] == "DependentChanged" && trigger["dependent"]["name"] == "settings";
        Ok(named.then_some(()).ok_or(format!("trigger {trigger}")))
    })
    .await;

    let before = runs(port);
    merge(&config_maps, "unrelated", json!({"data": {"level": "2"}})).await;
    merge(&config_maps, "settings", json!({"metadata": {"annotations": {"note": "only metadata"}}})).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(runs(port), before, "an unrelated ConfigMap or an annotation re-ran the CR");

    merge(&secrets, "creds", json!({"stringData": {"password": "two"}})).await;
    wait_for_runs(port, before + 1, SOON).await;
    drop(operator);
}

#[tokio::test]
async fn without_watch_read_resources_nothing_reruns_when_what_it_read_changes() {
    let Test { client, ns, api } = Test::setup("read-set-off").kind(GROUP, KIND).build().await;
    let (config_maps, secrets) = user_objects(&client, &ns.name).await;
    let Running { operator, port } = start(&ns.name, "");
    support::create_cr(&api, GROUP, KIND, "reader", json!({})).await;
    wait_for_runs(port, 1, WAIT).await;
    support::wait_for_condition(&api, "reader", "Successful", "True", WAIT).await;

    let before = runs(port);
    merge(&config_maps, "settings", json!({"data": {"level": "2"}})).await;
    merge(&secrets, "creds", json!({"stringData": {"password": "two"}})).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(runs(port), before, "a CR re-ran without watchReadResources");
    assert!(!operator.log().contains("watching what runs read"), "{}", operator.log());
}
