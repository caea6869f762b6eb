//! Events and the run history as a scaffolded deployment meets them, against the real API server
//! and real Ansible: core `v1` Events as controller-runtime records them (repeats counted on one
//! Event), the `LeaderElection` Event on the Lease, and an operator whose RBAC has neither events
//! nor run records (upstream's scaffold grants neither): it warns once for each and runs on.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "events.test.example.com";
const KIND: &str = "Noted";
const WAIT: Duration = Duration::from_secs(180);

fn watches(extra: &str) -> String {
    format!("{}{extra}", support::playbook_watch(GROUP, KIND, "history.yml"))
}

/// The core v1 Events about the object named `name` in `namespace`.
async fn events_about(client: &kube::Client, namespace: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let all = events.list(&ListParams::default()).await.expect("list core v1 Events");
    all.items.into_iter().filter(|e| e.involved_object.name.as_deref() == Some(name)).collect()
}

/// The `AnsibleRun`s of a namespace.
fn runs_api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"))
}

fn stop(mut operator: Operator) {
    assert!(operator.stop().is_some_and(|s| s.success()));
}

#[tokio::test]
async fn a_successful_run_writes_no_event_by_default_and_one_with_run_events_all() {
    let Test { client, ns, api } = Test::setup("events-quiet").kind(GROUP, KIND).run_records().build().await;
    let runs = runs_api(&client, &ns.name);
    let recorded = |uid: String| {
        let runs = runs.clone();
        async move {
            support::wait_for("the run's record", WAIT, || async {
                let params = ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}"));
                let items = runs.list(&params).await.map_err(|e| e.to_string())?.items;
                Ok(if items.is_empty() { Err("no record yet".to_string()) } else { Ok(()) })
            })
            .await
        }
    };

    // Upstream's quiet: a success is recorded, and no Event is written about it.
    let operator = OperatorConfig::new(&watches(""), &ns.name).start();
    let quiet = support::create_cr(&api, GROUP, KIND, "quiet", json!({"value": 1})).await;
    support::wait_for_condition(&api, "quiet", "Successful", "True", WAIT).await;
    recorded(quiet.metadata.uid.clone().unwrap()).await;
    // Stopping lets the run in flight finish: its Event, if any, is written by then.
    stop(operator);
    let events = events_about(&client, &ns.name, "quiet").await;
    assert!(events.is_empty(), "no Event for a successful run by default: {events:?}");

    // --run-events=all: every run gets one, successes a ReconcileSucceeded.
    let operator = OperatorConfig::new(&watches(""), &ns.name).arg("--run-events=all").start();
    support::create_cr(&api, GROUP, KIND, "told", json!({"value": 1})).await;
    let succeeded = support::wait_for("a ReconcileSucceeded Event", WAIT, || async {
        let events = events_about(&client, &ns.name, "told").await;
        let found = events.iter().find(|e| e.reason.as_deref() == Some("ReconcileSucceeded")).cloned();
        Ok(found.ok_or_else(|| format!("{:?}", events.iter().map(|e| &e.reason).collect::<Vec<_>>())))
    })
    .await;
    assert_eq!(succeeded.type_.as_deref(), Some("Normal"));
    assert!(
        succeeded.message.as_deref().unwrap_or_default().starts_with("Created run: ok="),
        "{succeeded:?}"
    );
    stop(operator);
}

#[tokio::test]
async fn identical_failing_runs_of_a_cr_are_one_core_event_whose_count_is_the_number_of_runs() {
    let Test { client, ns, api } = Test::setup("events-repeat").kind(GROUP, KIND).run_records().build().await;
    let operator = OperatorConfig::new(&watches("  runHistoryLimit: 1000\n"), &ns.name).start();
    let created = support::create_cr(&api, GROUP, KIND, "cr", json!({"fail": true})).await;
    let uid = created.metadata.uid.clone().unwrap();

    // The first run (Created) and its retries (Retry) fail alike: the retries are one Event, whose
    // last timestamp moves on with later retries (the first ones can fall in the same second).
    let retried = support::wait_for("a counted ReconcileFailed Event", WAIT, || async {
        let events = events_about(&client, &ns.name, "cr").await;
        let later =
            |e: &Event| e.first_timestamp.as_ref().map(|t| t.0) < e.last_timestamp.as_ref().map(|t| t.0);
        let retried = events.iter().find(|e| e.count.unwrap_or(0) >= 2 && later(e)).cloned();
        Ok(retried
            .ok_or_else(|| format!("{:?}", events.iter().map(|e| (&e.message, e.count)).collect::<Vec<_>>())))
    })
    .await;
    // Fixed: the retries end, and every failed run's record and Event are written before the fix's
    // run sets Successful.
    api.patch("cr", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"fail": false}}))).await.unwrap();
    support::wait_for_generation(&api, "cr", 2, WAIT).await;
    stop(operator);

    assert_eq!(retried.reason.as_deref(), Some("ReconcileFailed"));
    assert_eq!(retried.type_.as_deref(), Some("Warning"));
    assert_eq!(
        retried.message.as_deref(),
        Some("Retry run: task \"fail when asked\" on localhost: failing as asked")
    );
    let involved = &retried.involved_object;
    assert_eq!(involved.api_version.as_deref(), Some("events.test.example.com/v1alpha1"));
    assert_eq!(involved.kind.as_deref(), Some(KIND));
    assert_eq!(
        (involved.namespace.as_deref(), involved.uid.as_deref()),
        (Some(ns.name.as_str()), Some(uid.as_str()))
    );
    assert!(involved.resource_version.is_some(), "{involved:?}");
    assert_eq!(retried.source.as_ref().and_then(|s| s.component.as_deref()), Some("ansible-operator"));
    assert_eq!(retried.reporting_component.as_deref(), Some("ansible-operator"));
    let name = retried.metadata.name.clone().unwrap();
    let (object, stamp) = name.split_once('.').unwrap();
    assert!(object == "cr" && stamp.len() == 16 && stamp.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    assert!(retried.first_timestamp.as_ref().unwrap().0 < retried.last_timestamp.as_ref().unwrap().0);

    // One Event per message, and the retries' count is the number of retries run.
    let events = events_about(&client, &ns.name, "cr").await;
    let mut messages: Vec<&str> = events.iter().filter_map(|e| e.message.as_deref()).collect();
    messages.sort();
    let before = messages.len();
    messages.dedup();
    assert_eq!(before, messages.len(), "a message is on one Event only: {messages:?}");
    let runs = runs_api(&client, &ns.name);
    let records = runs
        .list(&ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}")))
        .await
        .unwrap()
        .items;
    let retries = records
        .iter()
        .filter(|r| r.data["spec"]["trigger"]["reason"] == "Retry" && r.data["spec"]["result"] == "Failure")
        .count();
    let counted = events_about(&client, &ns.name, "cr")
        .await
        .into_iter()
        .find(|e| e.metadata.name.as_deref() == Some(name.as_str()))
        .and_then(|e| e.count);
    assert_eq!(counted, Some(i32::try_from(retries).unwrap()), "one count per retry run");
}

#[tokio::test]
async fn the_leader_records_a_leader_election_event_on_its_lease() {
    let Test { client, ns, api: _ } = Test::setup("events-leader").kind(GROUP, KIND).build().await;
    let operator = OperatorConfig::new(&watches(""), &ns.name)
        .arg("--leader-elect")
        .arg("--leader-election-id=events-leader")
        .arg(format!("--leader-election-namespace={}", ns.name))
        .start();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let holder = support::wait_for("the Lease to be held", WAIT, || async {
        let lease = leases.get_opt("events-leader").await.map_err(|e| e.to_string())?;
        let holder = lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).filter(|h| !h.is_empty());
        Ok(holder.ok_or_else(|| "no holder yet".to_string()))
    })
    .await;
    let event = support::wait_for("the LeaderElection Event", WAIT, || async {
        let events = events_about(&client, &ns.name, "events-leader").await;
        let found = events.iter().find(|e| e.reason.as_deref() == Some("LeaderElection")).cloned();
        Ok(found.ok_or_else(|| format!("{events:?}")))
    })
    .await;
    drop(operator);

    assert_eq!(event.message, Some(format!("{holder} became leader")));
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    let involved = &event.involved_object;
    assert_eq!(involved.api_version.as_deref(), Some("coordination.k8s.io/v1"));
    assert_eq!(involved.kind.as_deref(), Some("Lease"));
    assert_eq!(involved.namespace.as_deref(), Some(ns.name.as_str()));
    let lease = leases.get("events-leader").await.unwrap();
    assert_eq!(involved.uid, lease.metadata.uid);
    assert_eq!(
        event.source.as_ref().and_then(|s| s.component.clone()),
        Some(holder),
        "as controller-runtime"
    );
}

/// A Role in `namespace` with what the history fixture's runs need (the CRs, their status and
/// finalizers, the child ConfigMaps), bound to `user`: no events, no ansibleruns.
async fn scaffold_like_rights(client: &kube::Client, namespace: &str, user: &str) {
    let plural = format!("{}s", KIND.to_lowercase());
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "operator"},
        "rules": [
            {"apiGroups": [GROUP], "resources": [plural], "verbs": ["get", "list", "watch", "update", "patch"]},
            {"apiGroups": [GROUP], "resources": [format!("{plural}/status")], "verbs": ["get", "update", "patch"]},
            {"apiGroups": [GROUP], "resources": [format!("{plural}/finalizers")], "verbs": ["update"]},
            {"apiGroups": [""], "resources": ["configmaps"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        ],
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), namespace).create(&PostParams::default(), &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// An operator on the history fixture in its own namespace, acting as a user with only
/// [`scaffold_like_rights`] there (through an impersonating kubeconfig, removed when dropped).
struct Scaffolded {
    operator: Operator,
    kubeconfig: std::path::PathBuf,
    api: Api<DynamicObject>,
    ns: support::TestNamespace,
}

impl Scaffolded {
    async fn start(client: &kube::Client, prefix: &str) -> Self {
        support::install_crd(client, &support::crd(GROUP, KIND, true)).await;
        support::install_run_records_crd(client).await;
        let ns = support::TestNamespace::new(client, prefix).await;
        let user = format!("scaffolded-{}", ns.name);
        scaffold_like_rights(client, &ns.name, &user).await;
        let dir = scratch_dir(&format!("{}-identity", ns.name));
        let kubeconfig = support::impersonating_kubeconfig(&dir, &user, &["system:authenticated"]);
        // Every run's Event, so that the refusals are many: by default successes get none.
        let operator = OperatorConfig::new(&watches(""), &ns.name)
            .arg("--run-events=all")
            .env("KUBECONFIG", kubeconfig.display().to_string())
            .start();
        let api = support::cr_api(client, GROUP, KIND, &ns.name);
        Scaffolded { operator, kubeconfig, api, ns }
    }
}

impl Drop for Scaffolded {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// Log lines (JSON or not) that contain `text`.
fn lines_with(log: &str, text: &str) -> Vec<String> {
    log.lines().filter(|line| line.contains(text)).map(str::to_string).collect()
}

#[tokio::test]
async fn without_rights_to_events_and_run_records_the_operator_warns_once_for_each_and_runs_succeed() {
    let client = support::client().await;
    let mut setup = Scaffolded::start(&client, "events-refused").await;
    let (api, ns) = (setup.api.clone(), setup.ns.name.clone());
    for name in ["one", "two", "three"] {
        support::create_cr(&api, GROUP, KIND, name, json!({"value": name})).await;
    }
    for name in ["one", "two", "three"] {
        support::wait_for_condition(&api, name, "Successful", "True", WAIT).await;
    }
    // A second run of each, so each CR's Event is refused twice.
    for name in ["one", "two", "three"] {
        api.patch(name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"value": "again"}})))
            .await
            .unwrap();
    }
    for name in ["one", "two", "three"] {
        support::wait_for("the second run", WAIT, || async {
            let cr = api.get(name).await.map_err(|e| e.to_string())?;
            let done = support::converged(&cr);
            Ok(if done { Ok(()) } else { Err(cr.data["status"].to_string()) })
        })
        .await;
    }
    assert!(setup.operator.stop().is_some_and(|s| s.success()));
    let log = setup.operator.log();

    let refused = lines_with(&log, "Events are refused");
    assert_eq!(refused.len(), 1, "one warning for six refused Events:\n{log}");
    assert!(
        refused[0].contains(r#"apiGroups: [\"\"], resources: [events], verbs: [create, patch]"#)
            || refused[0].contains(r#"apiGroups: [""], resources: [events], verbs: [create, patch]"#),
        "{}",
        refused[0]
    );
    assert!(refused[0].contains(&ns), "names the namespace: {}", refused[0]);
    assert!(lines_with(&log, "could not record the Event").is_empty(), "a refusal is no other error:\n{log}");

    let history = lines_with(&log, "run history is not installed");
    assert_eq!(history.len(), 1, "one warning about the history:\n{log}");
    assert!(history[0].contains("deploy/history"), "says how to install it: {}", history[0]);
    assert!(history[0].contains("create ansibleruns.ansible-operator.dev in namespace"), "{}", history[0]);
    assert!(lines_with(&log, "could not write the run record").is_empty(), "no error per run:\n{log}");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let ours: Vec<Value> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref().is_some_and(|r| r.starts_with("Reconcile")))
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert!(ours.is_empty(), "the identity could not write Events: {ours:?}");
}

#[tokio::test]
async fn run_history_moves_to_the_cluster_within_a_minute_of_the_operator_being_granted_it() {
    let client = support::client().await;
    let mut setup = Scaffolded::start(&client, "events-granted").await;
    let (api, ns) = (setup.api.clone(), setup.ns.name.clone());
    support::create_cr(&api, GROUP, KIND, "cr", json!({"value": 1})).await;
    support::wait_for_condition(&api, "cr", "Successful", "True", WAIT).await;
    assert_eq!(lines_with(&setup.operator.log(), "run history is not installed").len(), 1);

    // What deploy/history grants, here in the namespace.
    let history: Role = serde_json::from_value(json!({
        "metadata": {"name": "operator"},
        "rules": [
            {"apiGroups": ["ansible-operator.dev"], "resources": ["ansibleruns"],
             "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
            {"apiGroups": ["ansible-operator.dev"], "resources": ["ansibleruns/status"], "verbs": ["patch"]},
        ],
    }))
    .unwrap();
    let roles = Api::<Role>::namespaced(client.clone(), &ns);
    let mut role = roles.get("operator").await.unwrap();
    role.rules.get_or_insert_default().extend(history.rules.unwrap());
    roles.replace("operator", &PostParams::default(), &role).await.unwrap();
    support::wait_for("the operator to notice", Duration::from_secs(150), || async {
        let installed = !lines_with(&setup.operator.log(), "run history installed").is_empty();
        Ok(if installed { Ok(()) } else { Err("not yet".to_string()) })
    })
    .await;

    api.patch("cr", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"value": 2}}))).await.unwrap();
    let runs = runs_api(&client, &ns);
    support::wait_for("the spec change's AnsibleRun", WAIT, || async {
        let records = runs.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let found = records.iter().any(|r| r.data["spec"]["trigger"]["reason"] == "SpecChanged");
        Ok(if found { Ok(()) } else { Err(format!("{} records", records.len())) })
    })
    .await;
    assert!(setup.operator.stop().is_some_and(|s| s.success()));
}
