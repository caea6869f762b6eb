//! Re-running a CR when what its run read changes (`watchReadResources`), against the real API server
//! and real Ansible: a playbook reads a user's ConfigMap and Secret with `kubernetes.core.k8s_info`;
//! the run record lists both; with the key, editing either re-runs the CR within seconds (a run record
//! saying which object changed), and editing an unrelated ConfigMap or only an annotation does not;
//! without it nothing re-runs.

use crate::support;

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
const WAIT: Duration = Duration::from_secs(180);
/// How soon a change to what the run read re-runs the CR.
const SOON: Duration = Duration::from_secs(30);
/// How long a change that must not re-run the CR is given to do so anyway.
const QUIET: Duration = Duration::from_secs(8);

fn start(namespace: &str, extra: &str) -> Operator {
    let watches = format!("{}{extra}", support::playbook_watch(GROUP, KIND, "read_set.yml"));
    OperatorConfig::new(&watches, namespace).start()
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

/// The CR's run records, oldest first.
async fn records(client: &kube::Client, namespace: &str, uid: &str) -> Result<Vec<Value>, String> {
    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "ansibleruns");
    let runs: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let params = ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}"));
    let list = runs.list(&params).await.map_err(|e| e.to_string())?;
    let mut items: Vec<Value> = list.items.into_iter().map(|o| serde_json::to_value(o).unwrap()).collect();
    items.sort_by_key(|r| r["spec"]["startTime"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()));
    Ok(items)
}

/// How many of the records are re-runs because the object `name` changed.
fn reruns_for(records: &[Value], name: &str) -> usize {
    records
        .iter()
        .filter(|r| {
            let trigger = &r["spec"]["trigger"];
            trigger["reason"] == "DependentChanged" && trigger["dependent"]["name"] == name
        })
        .count()
}

/// Waits until the CR has `count` re-runs because `name` changed, within `within`; on timeout says
/// what the records and the operator's log show.
async fn wait_for_reruns(
    client: &kube::Client,
    namespace: &str,
    uid: &str,
    name: &str,
    count: usize,
    operator: &Operator,
) {
    let what = format!("{count} re-runs of the CR because {name} changed");
    support::wait_for(&what, SOON, || async {
        let records = records(client, namespace, uid).await?;
        if reruns_for(&records, name) >= count {
            return Ok(Ok(()));
        }
        let triggers: Vec<&Value> = records.iter().map(|r| &r["spec"]["trigger"]).collect();
        let log = operator.log();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("runs read") || l.contains("run record") || l.contains("reconcile failed"))
            .collect();
        Ok(Err(format!("triggers {triggers:?}; operator: {lines:?}")))
    })
    .await
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
    tokio::time::sleep(Duration::from_secs(3)).await;
}

#[tokio::test]
async fn with_watch_read_resources_a_cr_reruns_when_a_configmap_or_secret_it_read_changes_and_not_for_others()
{
    let Test { client, ns, api } = Test::setup("read-set").kind(GROUP, KIND).run_records().build().await;
    let (config_maps, secrets) = user_objects(&client, &ns.name).await;
    let operator = start(&ns.name, "  watchReadResources: true\n");
    let created = support::create_cr(&api, GROUP, KIND, "reader", json!({})).await;
    let uid = created.metadata.uid.clone().unwrap();

    let reads = support::wait_for("a run record listing what the run read", WAIT, || async {
        let records = records(&client, &ns.name, &uid).await?;
        let reads = records.first().and_then(|r| r["spec"]["reads"].as_array().cloned()).unwrap_or_default();
        Ok(if reads.len() >= 2 { Ok(reads) } else { Err(format!("reads {reads:?}")) })
    })
    .await;
    let named: Vec<(&str, &str)> = reads
        .iter()
        .map(|r| (r["kind"].as_str().unwrap_or_default(), r["name"].as_str().unwrap_or_default()))
        .collect();
    assert!(named.contains(&("ConfigMap", "settings")) && named.contains(&("Secret", "creds")), "{reads:?}");
    assert!(reads.iter().all(|r| r["verb"] == "get" && r["namespace"] == ns.name.as_str()), "{reads:?}");
    assert!(!serde_json::to_string(&reads).unwrap().contains("one"), "no Secret value in the record");

    wait_for_read_watches(&operator).await;
    merge(&config_maps, "settings", json!({"data": {"level": "2"}})).await;
    wait_for_reruns(&client, &ns.name, &uid, "settings", 1, &operator).await;

    let before = records(&client, &ns.name, &uid).await.unwrap();
    merge(&config_maps, "unrelated", json!({"data": {"level": "2"}})).await;
    merge(&config_maps, "settings", json!({"metadata": {"annotations": {"note": "only metadata"}}})).await;
    tokio::time::sleep(QUIET).await;
    let after = records(&client, &ns.name, &uid).await.unwrap();
    assert_eq!(reruns_for(&after, "unrelated"), 0, "an unrelated ConfigMap re-ran the CR");
    assert_eq!(
        reruns_for(&after, "settings"),
        reruns_for(&before, "settings"),
        "an annotation re-ran the CR"
    );

    merge(&secrets, "creds", json!({"stringData": {"password": "two"}})).await;
    wait_for_reruns(&client, &ns.name, &uid, "creds", 1, &operator).await;
}

#[tokio::test]
async fn without_watch_read_resources_nothing_reruns_when_what_it_read_changes() {
    let Test { client, ns, api } = Test::setup("read-set-off").kind(GROUP, KIND).run_records().build().await;
    let (config_maps, secrets) = user_objects(&client, &ns.name).await;
    let operator = start(&ns.name, "");
    let created = support::create_cr(&api, GROUP, KIND, "reader", json!({})).await;
    let uid = created.metadata.uid.clone().unwrap();
    support::wait_for_condition(&api, "reader", "Successful", "True", WAIT).await;
    let first = support::wait_for("the first run's record", WAIT, || async {
        let records = records(&client, &ns.name, &uid).await?;
        Ok(records.first().cloned().ok_or_else(|| "no record yet".to_string()))
    })
    .await;
    assert_eq!(
        first["spec"]["reads"].as_array().map(Vec::len),
        Some(2),
        "reads are recorded without the key"
    );

    merge(&config_maps, "settings", json!({"data": {"level": "2"}})).await;
    merge(&secrets, "creds", json!({"stringData": {"password": "two"}})).await;
    tokio::time::sleep(QUIET).await;
    let records = records(&client, &ns.name, &uid).await.unwrap();
    let reruns = reruns_for(&records, "settings") + reruns_for(&records, "creds");
    assert_eq!(reruns, 0, "a CR re-ran without watchReadResources");
    assert!(!operator.log().contains("watching what runs read"), "{}", operator.log());
}
