//! Ownership follows creation: what a run creates through the proxy (POST, PUT-create, server-side
//! apply that creates) is owned by its CR and stays owned when a later run replaces or re-applies
//! it; what existed before (made by a person) is never adopted, so deleting the CR leaves it, with
//! the data the playbook wrote. Also: the operator's own writes carry its field manager, and a
//! namespace-scoped identity that may not watch a cluster-scoped child kind gets one warning.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::{Value, json};
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "ownership.test.example.com";
const KIND: &str = "Owning";
const WAIT: Duration = Duration::from_secs(180);
const PREEXISTING: [&str; 3] = ["pre-forced", "pre-ssa", "pre-applied"];

fn watches(playbook: &str, extra: &str) -> String {
    format!("{}{extra}", support::playbook_watch(GROUP, KIND, playbook))
}

/// `(kind, name, uid)` of every ownerReference.
fn owners(object: &impl Resource) -> Vec<(String, String, String)> {
    let refs = object.meta().owner_references.iter().flatten();
    refs.map(|r| (r.kind.clone(), r.name.clone(), r.uid.clone())).collect()
}

async fn person_creates_configmap(configmaps: &Api<ConfigMap>, name: &str) {
    let object: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"by": "person", "keep": "me"}}))
            .unwrap();
    configmaps.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("create {name}: {e}"));
}

/// Waits for a successful run that finished after `previous` (the Running condition's completion).
async fn wait_for_run_after(api: &Api<DynamicObject>, name: &str, previous: &str) {
    support::wait_for(&format!("a new run of {name}"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let running = support::condition(&object, "Running").cloned().unwrap_or_default();
        let completion = running["ansibleResult"]["completion"].as_str().unwrap_or_default();
        let done = running["reason"] == "Successful" && !completion.is_empty() && completion != previous;
        Ok(if done { Ok(()) } else { Err(format!("Running condition {running}")) })
    })
    .await
}

fn completion(object: &DynamicObject) -> String {
    let running = support::condition(object, "Running").cloned().unwrap_or_default();
    running["ansibleResult"]["completion"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn runs_own_what_they_create_keep_it_across_replaces_and_never_adopt_existing_objects() {
    let Test { client, ns, api } = Test::setup("ownership").kind(GROUP, KIND).build().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    for name in PREEXISTING {
        person_creates_configmap(&configmaps, name).await;
    }
    let finalizer = format!("  finalizer:\n    name: {GROUP}/finalize\n    vars:\n      finalizing: true\n");
    let operator = OperatorConfig::new(&watches("ownership.yml", &finalizer), &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "owner", json!({})).await;
    let done = support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;
    let uid = done.metadata.uid.clone().unwrap();
    let ours = vec![(KIND.to_string(), "owner".to_string(), uid)];

    let assert_ownership = |round: &'static str| {
        let configmaps = configmaps.clone();
        let leases = leases.clone();
        let ours = ours.clone();
        async move {
            for name in PREEXISTING {
                let object = configmaps.get(name).await.unwrap();
                assert_eq!(owners(&object), vec![], "{round}: {name} existed before the run: not adopted");
                assert_eq!(object.data.unwrap()["by"], "playbook", "{round}: the playbook wrote {name}");
            }
            for name in ["owner-created", "owner-forced", "owner-ssa"] {
                let object = configmaps.get(name).await.unwrap();
                assert_eq!(owners(&object), ours, "{round}: {name} was created by the run");
            }
            let lease = leases.get("owner-lease").await.expect("the run created the Lease with PUT");
            assert_eq!(owners(&lease), ours, "{round}: a PUT that creates is owned like a POST");
        }
    };
    assert_ownership("first run").await;

    // A second run replaces (PUT) and re-applies (server-side apply) its own children.
    let previous = completion(&done);
    api.patch("owner", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"run": 2}}))).await.unwrap();
    wait_for_run_after(&api, "owner", &previous).await;
    for name in ["owner-forced", "owner-ssa"] {
        assert_eq!(configmaps.get(name).await.unwrap().data.unwrap()["run"], "2", "{name} was rewritten");
    }
    let lease = leases.get("owner-lease").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("run-2"), "the Lease was replaced");
    assert_ownership("second run").await;

    // The finalizer replaces a pre-existing object once more; that must not adopt it either.
    api.delete("owner", &DeleteParams::background()).await.unwrap();
    support::wait_for_absent(&api, "owner", WAIT).await;
    let finalized = configmaps.get("pre-forced").await.unwrap();
    assert_eq!(finalized.data.clone().unwrap()["by"], "finalizer", "the finalizer ran");
    assert_eq!(owners(&finalized), vec![], "the finalizer's replace did not adopt it");
    // kube-controller-manager notices a new CRD at its next discovery resync: allow for it.
    support::wait_for("the run's own children to be garbage-collected", Duration::from_secs(120), || async {
        let mut left = Vec::new();
        for name in ["owner-created", "owner-forced", "owner-ssa"] {
            if configmaps.get_opt(name).await.map_err(|e| e.to_string())?.is_some() {
                left.push(name);
            }
        }
        if leases.get_opt("owner-lease").await.map_err(|e| e.to_string())?.is_some() {
            left.push("owner-lease");
        }
        Ok(if left.is_empty() { Ok(()) } else { Err(format!("still there: {left:?}")) })
    })
    .await;
    for name in PREEXISTING {
        let object = configmaps.get(name).await.unwrap_or_else(|e| panic!("{name} must survive the CR: {e}"));
        let by = if name == "pre-forced" { "finalizer" } else { "playbook" };
        assert_eq!(object.data.unwrap()["by"], by, "{name} keeps what the playbook wrote");
    }
    let log = operator.log();
    assert!(log.contains("proxied write"), "writes are logged:\n{log}");
}

/// Managers of the CR's managedFields entries, as `(manager, subresource)`.
fn managers(object: &DynamicObject) -> Vec<(String, String)> {
    let entries = object.metadata.managed_fields.iter().flatten();
    entries
        .map(|m| (m.manager.clone().unwrap_or_default(), m.subresource.clone().unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn status_and_finalizer_writes_show_field_manager_ansible_operator() {
    let Test { client: _, ns, api } = Test::setup("ownership-manager").kind(GROUP, KIND).build().await;
    let finalizer = format!("  finalizer:\n    name: {GROUP}/cleanup\n    vars:\n      state: absent\n");
    let _operator = OperatorConfig::new(&watches("marker.yml", &finalizer), &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "managed", json!({})).await;
    let done = support::wait_for_condition(&api, "managed", "Successful", "True", WAIT).await;

    let manager_of = |field: &str| {
        let entries = done.metadata.managed_fields.iter().flatten();
        let entry = entries
            .into_iter()
            .find(|m| m.fields_v1.as_ref().is_some_and(|f| f.0.to_string().contains(field)));
        entry.map(|m| (m.manager.clone().unwrap_or_default(), m.subresource.clone().unwrap_or_default()))
    };
    let all = managers(&done);
    assert_eq!(manager_of("f:conditions"), Some(("ansible-operator".into(), "status".into())), "{all:?}");
    assert_eq!(manager_of("f:finalizers"), Some(("ansible-operator".into(), String::new())), "{all:?}");
    assert_eq!(done.metadata.finalizers.clone().unwrap_or_default(), [format!("{GROUP}/cleanup")]);
    api.delete("managed", &DeleteParams::default()).await.unwrap();
    support::wait_for_absent(&api, "managed", WAIT).await;
}

/// RBAC for an operator identity scoped to one namespace: everything it needs there, and on
/// Namespaces `create`, `get` and `patch` (a run may create one; the operator may not watch them).
async fn namespace_scoped_rbac(client: &Client, namespace: &str, user: &str) -> impl Drop + use<> {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "scoped-operator", "namespace": namespace},
        "rules": [
            {"apiGroups": [GROUP], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["configmaps", "events"], "verbs": ["*"]},
        ]
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "scoped-operator", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "scoped-operator"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), namespace).create(&PostParams::default(), &role).await.unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let name = format!("{namespace}-create-namespaces");
    let cluster_role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create", "get", "patch"]}]
    }))
    .unwrap();
    let cluster_binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone()).create(&PostParams::default(), &cluster_role).await.unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &cluster_binding)
        .await
        .unwrap();
    ClusterScoped { names: vec![("clusterrolebinding", name.clone()), ("clusterrole", name)] }
}

/// Cluster-scoped objects a test made, deleted with kubectl when dropped.
struct ClusterScoped {
    names: Vec<(&'static str, String)>,
}

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        for (kind, name) in &self.names {
            let _ = std::process::Command::new(support::repo().join(".local/bin/kubectl"))
                .arg("--kubeconfig")
                .arg(support::kubeconfig())
                .args(["delete", kind, name, "--ignore-not-found", "--wait=false"])
                .stdout(std::process::Stdio::null())
                .status();
        }
    }
}

#[tokio::test]
async fn a_forbidden_watch_of_a_cluster_scoped_child_warns_once_and_reconciles_go_on() {
    let Test { client, ns, api } = Test::setup("ownership-scoped").kind(GROUP, KIND).build().await;
    let user = format!("scoped-operator-{}", ns.name);
    let _rbac = namespace_scoped_rbac(&client, &ns.name, &user).await;
    let child_namespace = format!("{}-child", ns.name);
    let _child = ClusterScoped { names: vec![("namespace", child_namespace.clone())] };
    let dir = scratch_dir(&format!("{}-identity", ns.name));
    let kubeconfig = support::impersonating_kubeconfig(&dir, &user, &["system:authenticated"]);

    let watches = watches("cluster_scoped_child.yml", "  watchClusterScopedResources: true\n");
    let operator =
        OperatorConfig::new(&watches, &ns.name).env("KUBECONFIG", kubeconfig.display().to_string()).start();
    support::create_cr(&api, GROUP, KIND, "scoped", json!({"childNamespace": child_namespace})).await;
    let done = support::wait_for_condition(&api, "scoped", "Successful", "True", WAIT).await;
    let created = Api::<Namespace>::all(client.clone()).get(&child_namespace).await.expect("the run made it");
    assert_eq!(
        created.metadata.annotations.unwrap_or_default().get("operator-sdk/primary-resource"),
        Some(&format!("{}/scoped", ns.name)),
        "a cluster-scoped child is linked by annotations"
    );

    let warned = |log: &str| log.lines().filter(|l| l.contains("not allowed to list and watch")).count();
    support::wait_for("the forbidden watch to be reported", WAIT, || async {
        let log = operator.log();
        Ok(if warned(&log) > 0 { Ok(()) } else { Err("no warning yet".to_string()) })
    })
    .await;
    let previous = completion(&done);
    api.patch("scoped", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"run": 2}}))).await.unwrap();
    wait_for_run_after(&api, "scoped", &previous).await;
    // Long enough for several watch retries (kube's backoff starts at 0.8 s).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = operator.log();
    assert_eq!(warned(&log), 1, "one warning, however often the watch is retried:\n{log}");
    let warning = log.lines().find(|l| l.contains("not allowed to list and watch")).unwrap();
    assert!(
        warning.contains("namespaces") && warning.contains("forbidden"),
        "names the kind and the refusal: {warning}"
    );
    let object = api.get("scoped").await.unwrap();
    let successful = support::condition(&object, "Successful").cloned().unwrap_or(Value::Null);
    assert_eq!(successful["status"], "True", "reconciles are unaffected: {successful}");
    let _ = std::fs::remove_file(kubeconfig);
}
