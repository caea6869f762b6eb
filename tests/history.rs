//! The run history against the real API server and real Ansible: an `AnsibleRun` per run that did
//! something, saying why it ran; resyncs that change nothing only confirm; retention; records
//! survive restarts and go with their CR; Events on the CR; nothing secret in records or Events.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::Event;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};
use support::operator::{Operator, OperatorConfig};
use support::setup::Test;

const GROUP: &str = "history.test.example.com";
const KIND: &str = "Recorded";
const WAIT: Duration = Duration::from_secs(180);
const PASSWORD: &str = "hunter2-in-the-spec";

fn watches(extra: &str) -> String {
    format!("{}{extra}", support::playbook_watch(GROUP, KIND, "history.yml"))
}

fn runs_api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"))
}

/// The CR's records, oldest first.
async fn records(runs: &Api<DynamicObject>, uid: &str) -> Vec<Value> {
    let params = ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}"));
    let mut items: Vec<Value> = runs
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    items
        .sort_by_key(|r| r["spec"]["startTime"].as_str().unwrap_or_default().parse::<jiff::Timestamp>().ok());
    items
}

/// Waits until the CR has a record matching `check`, and returns it.
async fn wait_record(
    runs: &Api<DynamicObject>,
    uid: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    support::wait_for(what, WAIT, || async {
        let all = records(runs, uid).await;
        Ok(all.iter().rev().find(|r| check(r)).cloned().ok_or_else(|| {
            let seen: Vec<&Value> = all.iter().map(|r| &r["spec"]["trigger"]).collect();
            format!("triggers so far {seen:?}")
        }))
    })
    .await
}

fn trigger(record: &Value) -> &str {
    record["spec"]["trigger"]["reason"].as_str().unwrap_or_default()
}

fn stop(mut operator: Operator) {
    assert!(operator.stop().is_some_and(|s| s.success()));
}

#[tokio::test]
async fn every_run_is_recorded_with_why_it_ran_and_what_it_did() {
    let Test { client, ns, api } =
        Test::setup("history-triggers").kind(GROUP, KIND).run_records().build().await;
    // Every run's Event too (by default a success gets none).
    let operator =
        OperatorConfig::new(&watches("  runHistoryLimit: 20\n"), &ns.name).arg("--run-events=all").start();
    let runs = runs_api(&client, &ns.name);
    let created =
        support::create_cr(&api, GROUP, KIND, "cr", json!({"value": 1, "password": PASSWORD})).await;
    let uid = created.metadata.uid.clone().unwrap();

    let first = wait_record(&runs, &uid, "the first record", |r| trigger(r) == "Created").await;
    let spec = &first["spec"];
    assert_eq!(spec["result"], "Successful");
    assert_eq!(spec["owner"]["name"], "cr");
    assert_eq!(spec["owner"]["generation"], 1);
    assert!(spec["executor"] == "warm" || spec["executor"] == "cold", "{spec}");
    let tasks: Vec<(&str, &str)> = spec["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tasks,
        [("write the child", "changed"), ("use the password", "ok"), ("fail when asked", "skipped")]
    );
    assert_eq!(spec["tasks"][0]["action"], "kubernetes.core.k8s");
    assert!(spec["tasks"][0]["durationSeconds"].as_f64().unwrap() > 0.0);
    assert_eq!(
        spec["objects"],
        json!([{"verb": "create", "kind": "ConfigMap", "namespace": ns.name, "name": "cr-child"}])
    );
    assert_eq!(spec["ansibleResult"]["changed"], 1);
    assert!(spec["log"].as_str().unwrap().ends_with("/stdout"));
    assert_eq!(first["metadata"]["ownerReferences"][0]["uid"], uid.as_str());

    api.patch("cr", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"value": 2}}))).await.unwrap();
    let changed = wait_record(&runs, &uid, "a spec change", |r| trigger(r) == "SpecChanged").await;
    assert_eq!(
        changed["spec"]["trigger"],
        json!({"reason": "SpecChanged", "fromGeneration": 1, "toGeneration": 2})
    );
    assert_eq!(changed["spec"]["objects"][0]["verb"], "patch", "an existing child is patched");
    // The runs' own writes to the child (its create, that patch) run nothing again: upstream runs
    // the CR once more after each, within a fraction of a second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let triggers: Vec<String> = records(&runs, &uid).await.iter().map(|r| trigger(r).to_string()).collect();
    assert_eq!(triggers, ["Created", "SpecChanged"]);

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let drift = json!({"data": {"value": "drifted"}});
    configmaps.patch("cr-child", &PatchParams::default(), &Patch::Merge(&drift)).await.unwrap();
    let dependent =
        wait_record(&runs, &uid, "a dependent change", |r| trigger(r) == "DependentChanged").await;
    assert_eq!(
        dependent["spec"]["trigger"]["dependent"],
        json!({"kind": "ConfigMap", "namespace": ns.name, "name": "cr-child"})
    );
    assert_eq!(dependent["spec"]["ansibleResult"]["changed"], 1, "the run puts back the outside change");

    api.patch("cr", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"fail": true}}))).await.unwrap();
    let failed = wait_record(&runs, &uid, "a failed run", |r| r["spec"]["result"] == "Failure").await;
    assert_eq!(
        failed["spec"]["failedTask"],
        json!({"task": "fail when asked", "host": "localhost", "message": "failing as asked"})
    );
    let retry = wait_record(&runs, &uid, "a retry", |r| trigger(r) == "Retry").await;
    assert!(retry["spec"]["trigger"]["attempt"].as_u64().unwrap() >= 2, "{}", retry["spec"]["trigger"]);
    api.patch("cr", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"fail": false}}))).await.unwrap();
    wait_record(&runs, &uid, "the fix", |r| {
        trigger(r) == "SpecChanged"
            && r["spec"]["result"] == "Successful"
            && r["spec"]["owner"]["generation"] == 4
    })
    .await;

    let request = json!({"at": jiff::Timestamp::now().to_string(), "by": "someone@example.com"}).to_string();
    let annotate =
        json!({"metadata": {"annotations": {"ansible-operator.dev/reconcile-requested": request}}});
    api.patch("cr", &PatchParams::default(), &Patch::Merge(&annotate)).await.unwrap();
    let manual = wait_record(&runs, &uid, "a manual run", |r| trigger(r) == "Manual").await;
    assert_eq!(manual["spec"]["trigger"]["by"], "someone@example.com");

    // Nothing secret anywhere: the spec's password went to a no_log task only.
    let all = serde_json::to_string(&records(&runs, &uid).await).unwrap();
    assert!(!all.contains(PASSWORD), "no secret in the records");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let events = events.list(&ListParams::default()).await.unwrap().items;
    let ours: Vec<&Event> =
        events.iter().filter(|e| e.involved_object.name.as_deref() == Some("cr")).collect();
    let reasons: Vec<&str> = ours.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert!(reasons.contains(&"ReconcileSucceeded") && reasons.contains(&"ReconcileFailed"), "{reasons:?}");
    let failed_event = ours.iter().find(|e| e.reason.as_deref() == Some("ReconcileFailed")).unwrap();
    assert!(
        failed_event.message.as_deref().unwrap_or_default().contains("failing as asked"),
        "{failed_event:?}"
    );
    assert_eq!(failed_event.type_.as_deref(), Some("Warning"));
    assert!(!serde_json::to_string(&ours).unwrap().contains(PASSWORD), "no secret in the Events");
    drop(operator);
}

/// A ClusterRole and its ClusterRoleBinding of one name, which a test made; deleted when dropped.
struct ClusterRbac(String);

impl Drop for ClusterRbac {
    fn drop(&mut self) {
        for kind in ["clusterrolebinding", "clusterrole"] {
            let _ = support::kubectl(["delete", kind, self.0.as_str(), "--ignore-not-found"]);
        }
    }
}

#[tokio::test]
async fn a_namespace_primary_s_runs_are_recorded_in_the_operator_s_namespace_with_why_they_ran() {
    let Test { client, ns, api: _ } =
        Test::setup("history-cluster").kind(GROUP, KIND).run_records().build().await;
    let home = support::TestNamespace::new(&client, "history-home").await;
    let primary = support::TestNamespace::new(&client, "history-primary").await;
    let label = format!("{GROUP}/primary");
    support::kubectl_ok(["label", "namespace", &primary.name, &format!("{label}={}", ns.name)]);
    let watches = format!(
        "- version: v1\n  group: \"\"\n  kind: Namespace\n  playbook: {{fixtures}}/playbooks/namespace_primary.yml\n  \
         manageStatus: false\n  watchAnnotationsChanges: true\n  selector:\n    matchLabels:\n      {label}: {}\n",
        ns.name
    );
    let port = support::free_port();
    let operator = OperatorConfig::new(&watches, &ns.name)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .env("POD_NAMESPACE", home.name.as_str())
        .start();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let uid = namespaces.get(&primary.name).await.unwrap().metadata.uid.unwrap();

    // The records are in the operator's namespace (POD_NAMESPACE), owned by the Namespace.
    let runs = runs_api(&client, &home.name);
    let first = wait_record(&runs, &uid, "the first record", |r| trigger(r) == "Created").await;
    assert_eq!(first["spec"]["result"], "Successful");
    assert_eq!(
        first["spec"]["owner"],
        json!({"apiVersion": "v1", "kind": "Namespace", "name": primary.name, "uid": uid})
    );
    assert_eq!(first["metadata"]["ownerReferences"][0]["uid"], uid.as_str());

    // The cluster is shared: a test of an older tree may have applied its AnsibleRun CRD, whose
    // trigger reasons lack AnnotationsChanged. This tree's goes back on first.
    support::install_run_records_crd(&client).await;
    let note = json!({"metadata": {"annotations": {"example.com/note": "changed"}}});
    namespaces.patch(&primary.name, &PatchParams::default(), &Patch::Merge(&note)).await.unwrap();
    wait_record(&runs, &uid, "the annotation change's record", |r| trigger(r) == "AnnotationsChanged").await;

    // The API lists them as the CR's runs, to a reader who may get the Namespace.
    let api = support::api::ApiServer::localhost(port, None);
    api.wait_until_up(WAIT);
    let reader = support::api::service_account(&ns.name, "reader", "get", "configmaps");
    let rbac = ClusterRbac(format!("{}-reader", ns.name));
    support::kubectl_ok(["create", "clusterrole", &rbac.0, "--verb=get", "--resource=namespaces"]);
    let (role, account) =
        (format!("--clusterrole={}", rbac.0), format!("--serviceaccount={}:reader", ns.name));
    support::kubectl_ok(["create", "clusterrolebinding", &rbac.0, &role, &account]);
    let path = format!("/api/v1/kinds/core/namespaces/crs/-/{}", primary.name);
    let detail = support::wait_for("the runs listed by the API", WAIT, || async {
        let reply = api.request("GET", &path, Some(&reader));
        let reasons: Vec<String> = reply.body["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|run| run["trigger"]["reason"].as_str().map(str::to_string))
            .collect();
        let listed =
            reasons.iter().any(|r| r == "Created") && reasons.iter().any(|r| r == "AnnotationsChanged");
        Ok(if listed { Ok(reply.body) } else { Err(format!("{}: {}", reply.status, reply.body)) })
    })
    .await;
    assert!(detail["runs"].as_array().unwrap().len() >= 2, "{detail}");
    let log = operator.log();
    assert!(!log.contains("could not write the run record"), "{log}");
    drop(operator);
}

#[tokio::test]
async fn resyncs_that_change_nothing_confirm_and_records_survive_restarts_and_go_with_the_cr() {
    let Test { client, ns, api } =
        Test::setup("history-resync").kind(GROUP, KIND).run_records().build().await;
    let operator = OperatorConfig::new(&watches("  runHistoryLimit: 2\n"), &ns.name).start();
    let runs = runs_api(&client, &ns.name);
    let metadata =
        json!({"name": "steady", "annotations": {"ansible.sdk.operatorframework.io/reconcile-period": "1s"}});
    let created = support::create_cr_with(&api, GROUP, KIND, metadata, json!({"value": 1})).await;
    let uid = created.metadata.uid.clone().unwrap();
    let confirmed = wait_record(&runs, &uid, "resyncs to confirm the record", |r| {
        r["status"]["confirmations"].as_i64().unwrap_or(0) >= 2
    })
    .await;
    assert_eq!(trigger(&confirmed), "Created");
    assert_eq!(records(&runs, &uid).await.len(), 1, "a resync that changed nothing adds no record");

    // Retention: more changes than the limit keeps the newest two.
    for value in 2..=4 {
        api.patch("steady", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"value": value}})))
            .await
            .unwrap();
        wait_record(&runs, &uid, "the change's record", |r| r["spec"]["owner"]["generation"] == value).await;
    }
    support::wait_for("retention to prune", WAIT, || async {
        let generations: Vec<Value> =
            records(&runs, &uid).await.iter().map(|r| r["spec"]["owner"]["generation"].clone()).collect();
        Ok(if generations == [json!(3), json!(4)] { Ok(()) } else { Err(format!("{generations:?}")) })
    })
    .await;

    stop(operator);
    let before: BTreeMap<String, Value> = records(&runs, &uid)
        .await
        .into_iter()
        .map(|r| (r["metadata"]["name"].as_str().unwrap().to_string(), r["spec"].clone()))
        .collect();
    let _again = OperatorConfig::new(&watches("  runHistoryLimit: 2\n"), &ns.name).start();
    wait_record(&runs, &uid, "the restarted operator to confirm", |r| {
        r["spec"]["owner"]["generation"] == 4 && r["status"]["confirmations"].as_i64().unwrap_or(0) >= 1
    })
    .await;
    let after: BTreeMap<String, Value> = records(&runs, &uid)
        .await
        .into_iter()
        .map(|r| (r["metadata"]["name"].as_str().unwrap().to_string(), r["spec"].clone()))
        .collect();
    assert_eq!(before, after, "the records survived the restart unchanged");

    api.delete("steady", &DeleteParams::background()).await.unwrap();
    // kube-controller-manager notices a new CRD at its next discovery resync: allow for it.
    support::wait_for(
        "the records to be garbage-collected with the CR",
        Duration::from_secs(120),
        || async {
            let left = records(&runs, &uid).await.len();
            Ok(if left == 0 { Ok(()) } else { Err(format!("{left} left")) })
        },
    )
    .await;
}

#[tokio::test]
async fn the_finalizer_run_is_recorded_before_the_record_goes_with_its_cr() {
    use futures::StreamExt;
    use kube::runtime::watcher;

    let Test { client, ns, api } =
        Test::setup("history-finalizer").kind(GROUP, KIND).run_records().build().await;
    let finalizer = format!("  finalizer:\n    name: {GROUP}/cleanup\n    vars:\n      value: gone\n");
    let operator = OperatorConfig::new(&watches(&finalizer), &ns.name).start();
    let runs = runs_api(&client, &ns.name);
    let created = support::create_cr(&api, GROUP, KIND, "leaving", json!({"value": 1})).await;
    let uid = created.metadata.uid.clone().unwrap();
    wait_record(&runs, &uid, "the first record", |r| trigger(r) == "Created").await;

    // The finalizer's record is written as the CR goes, and garbage-collected with it: watch for it.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let collect = seen.clone();
    let mut stream = watcher(runs.clone(), watcher::Config::default()).boxed();
    let watching = tokio::spawn(async move {
        while let Some(Ok(event)) = stream.next().await {
            if let watcher::Event::Apply(run) | watcher::Event::InitApply(run) = event {
                let run = serde_json::to_value(run).unwrap();
                collect.lock().unwrap().push(trigger(&run).to_string());
            }
        }
    });
    api.delete("leaving", &DeleteParams::default()).await.unwrap();
    support::wait_for_absent(&api, "leaving", WAIT).await;
    support::wait_for("the finalizer's record", WAIT, || async {
        let seen = seen.lock().unwrap().clone();
        Ok(if seen.iter().any(|t| t == "Finalizer") { Ok(()) } else { Err(format!("{seen:?}")) })
    })
    .await;
    watching.abort();
    stop(operator);
}
