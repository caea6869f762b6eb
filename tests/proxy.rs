//! The API proxy against the real API server, kube-controller-manager and real playbooks:
//! owner injection on every create path, dependent watches, garbage collection, credentials.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;
use support::operator::{Operator, OperatorConfig};
use support::setup::Test;

const GROUP: &str = "proxy.test.example.com";
const KIND: &str = "Proxied";
const WAIT: Duration = Duration::from_secs(180);

fn watches() -> String {
    format!("- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  role: {{fixtures}}/roles/proxied\n")
}

/// The completion time of the CR's last successful run, which changes with every run.
async fn last_run(api: &Api<DynamicObject>, name: &str) -> Option<String> {
    let object = api.get(name).await.ok()?;
    let running = support::condition(&object, "Running")?;
    running["ansibleResult"]["completion"].as_str().map(str::to_string)
}

/// Waits for a successful run that finished after `previous` (`""`: the last run, once none is in
/// flight: a dependent's event can start one at any time).
async fn wait_for_run_after(api: &Api<DynamicObject>, name: &str, previous: &str) -> String {
    support::wait_for(&format!("a new run of {name}"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let running = support::condition(&object, "Running").cloned().unwrap_or_default();
        let completion = running["ansibleResult"]["completion"].as_str().unwrap_or_default().to_string();
        let done = running["reason"] == "Successful" && !completion.is_empty() && completion != previous;
        Ok(if done { Ok(completion) } else { Err(format!("Running condition {running}")) })
    })
    .await
}

/// The last run once no other follows it for a few seconds: events already on their way have
/// started theirs.
async fn settled_run(api: &Api<DynamicObject>, name: &str) -> String {
    let mut last = wait_for_run_after(api, name, "").await;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = wait_for_run_after(api, name, "").await;
        if now == last {
            return now;
        }
        last = now;
    }
}

fn owner_refs(object: &impl kube::Resource) -> Vec<(String, String)> {
    object.meta().owner_references.iter().flatten().map(|r| (r.kind.clone(), r.name.clone())).collect()
}

#[tokio::test]
async fn children_get_owner_references_or_annotations_on_every_create_path() {
    let Test { client, ns, api } = Test::setup("proxy-inject").kind(GROUP, KIND).build().await;
    let other = support::TestNamespace::new(&client, "proxy-inject-other").await;
    let _operator = OperatorConfig::new(&watches(), &ns.name).start();
    let spec = json!({"otherNamespace": other.name, "clusterRole": true});
    support::create_cr(&api, GROUP, KIND, "owner", spec).await;
    let done = support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;
    let uid = done.metadata.uid.clone().unwrap();

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    for name in ["owner-cm", "owner-applied", "owner-forced", "owner-ssa"] {
        let child = configmaps.get(name).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let refs = child.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(refs.len(), 1, "{name}: exactly one owner reference, got {refs:?}");
        assert_eq!(
            (refs[0].kind.as_str(), refs[0].name.as_str(), refs[0].uid.as_str()),
            (KIND, "owner", uid.as_str())
        );
        assert_eq!(refs[0].api_version, format!("{GROUP}/v1alpha1"));
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deployment = deployments.get("owner-deploy").await.unwrap();
    assert_eq!(owner_refs(&deployment), vec![(KIND.to_string(), "owner".to_string())]);

    let remote = Api::<ConfigMap>::namespaced(client.clone(), &other.name).get("owner-remote").await.unwrap();
    assert!(remote.metadata.owner_references.is_none(), "no cross-namespace owner reference");
    let annotations = remote.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations["operator-sdk/primary-resource"], format!("{}/owner", ns.name));
    assert_eq!(annotations["operator-sdk/primary-resource-type"], format!("{KIND}.{GROUP}"));

    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role_name = format!("{}-owner", ns.name);
    let role = roles.get(&role_name).await.unwrap();
    assert!(role.metadata.owner_references.is_none());
    assert_eq!(
        role.metadata.annotations.unwrap_or_default()["operator-sdk/primary-resource"],
        format!("{}/owner", ns.name)
    );

    // A second run replaces the forced ConfigMap (PUT): the reference survives and is not doubled.
    let previous = wait_for_run_after(&api, "owner", "").await;
    let bump = json!({"spec": {"otherNamespace": other.name, "clusterRole": true, "generation": 2}});
    api.patch("owner", &PatchParams::default(), &Patch::Merge(&bump)).await.unwrap();
    wait_for_run_after(&api, "owner", &previous).await;
    let forced = configmaps.get("owner-forced").await.unwrap();
    assert_eq!(owner_refs(&forced), vec![(KIND.to_string(), "owner".to_string())]);
    roles.delete(&role_name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn reviews_pass_the_proxy_as_written_and_get_their_answers() {
    const REVIEWER: &str = "Reviewer";
    let Test { client: _, ns, api } = Test::setup("proxy-reviews").kind(GROUP, REVIEWER).build().await;
    let token = support::kubectl_ok(["-n", &ns.name, "create", "token", "default"]);
    let _operator =
        OperatorConfig::new(&support::playbook_watch(GROUP, REVIEWER, "reviews.yml"), &ns.name).start();
    support::create_cr(&api, GROUP, REVIEWER, "asks", json!({"token": token.trim()})).await;

    // Before the fix the proxy added the primary-resource annotations and the API server answered
    // 422 "metadata: must be empty", failing the run.
    let done = support::wait_for_condition(&api, "asks", "Successful", "True", WAIT).await;
    let status = &done.data["status"];
    assert_eq!(status["access"]["allowed"], true, "{status}");
    assert_eq!(status["access"]["annotations"], json!({}), "nothing injected: {status}");
    assert_eq!(status["token"]["authenticated"], true, "{status}");
    assert_eq!(status["token"]["username"], format!("system:serviceaccount:{}:default", ns.name));
    assert_eq!(status["token"]["annotations"], json!({}), "nothing injected: {status}");
}

#[tokio::test]
async fn deleted_child_is_restored_and_only_spec_edits_of_children_trigger() {
    let Test { client, ns, api } = Test::setup("proxy-dependents").kind(GROUP, KIND).build().await;
    let _operator = OperatorConfig::new(&watches(), &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "owner", json!({})).await;
    support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    // The node's deployment controller annotates a new Deployment with its revision, a metadata
    // change that rightly triggers the owner (as upstream): let that happen before counting runs.
    support::wait_for("the Deployment's revision annotation", WAIT, || async {
        let deployment = deployments.get("owner-deploy").await.map_err(|e| e.to_string())?;
        let revised = deployment
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("deployment.kubernetes.io/revision");
        Ok(if revised { Ok(()) } else { Err("no revision yet".to_string()) })
    })
    .await;
    let first = settled_run(&api, "owner").await;

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    configmaps.delete("owner-cm", &DeleteParams::default()).await.unwrap();
    wait_for_run_after(&api, "owner", &first).await;
    let second = settled_run(&api, "owner").await;
    configmaps.get("owner-cm").await.expect("the deleted ConfigMap is back");

    // Valid whatever the node's deployment controller has written meanwhile (it rewrites status
    // too, which must not trigger either).
    let status =
        json!({"status": {"replicas": 3, "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0}});
    deployments.patch_status("owner-deploy", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(last_run(&api, "owner").await.unwrap(), second, "a status-only change does not trigger");

    let scale = json!({"spec": {"replicas": 3}});
    deployments.patch("owner-deploy", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    wait_for_run_after(&api, "owner", &second).await;
    let deployment = deployments.get("owner-deploy").await.unwrap();
    assert_eq!(deployment.spec.unwrap().replicas, Some(1), "the run put the spec back");
}

#[tokio::test]
async fn deleting_the_cr_garbage_collects_its_owned_children() {
    let Test { client, ns, api } = Test::setup("proxy-gc").kind(GROUP, KIND).build().await;
    let _operator = OperatorConfig::new(&watches(), &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "owner", json!({})).await;
    support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;

    api.delete("owner", &DeleteParams::background()).await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    // kube-controller-manager notices a new CRD at its next discovery resync: allow for it.
    support::wait_for("owned children to be garbage-collected", Duration::from_secs(120), || async {
        let cm = configmaps.get_opt("owner-cm").await.map_err(|e| e.to_string())?;
        let deploy = deployments.get_opt("owner-deploy").await.map_err(|e| e.to_string())?;
        Ok(if cm.is_none() && deploy.is_none() {
            Ok(())
        } else {
            Err(format!("ConfigMap present: {}, Deployment present: {}", cm.is_some(), deploy.is_some()))
        })
    })
    .await;
}

#[tokio::test]
async fn proxy_rejects_made_up_and_expired_credentials_on_the_chosen_port() {
    let Test { client, ns, api } = Test::setup("proxy-auth").kind(GROUP, KIND).build().await;
    let port = support::free_port();
    let _operator = OperatorConfig::new(&watches(), &ns.name).arg(format!("--proxy-port={port}")).start();
    support::create_cr(&api, GROUP, KIND, "owner", json!({"leakToken": true})).await;
    support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;

    let leaked =
        Api::<ConfigMap>::namespaced(client, &ns.name).get("owner-token").await.unwrap().data.unwrap();
    assert_eq!(
        leaked["server"],
        format!("http://127.0.0.1:{port}"),
        "the run's kubeconfig names the chosen port"
    );
    let token = &leaked["token"];
    assert_eq!(
        support::http_get(port, "/api/v1/namespaces", Some(&format!("Bearer {token}"))).map(|(code, _)| code),
        Some(401),
        "a finished run's token is revoked"
    );
    assert_eq!(
        support::http_get(port, "/api/v1/namespaces", Some("Bearer made-up")).map(|(code, _)| code),
        Some(401)
    );
    assert_eq!(support::http_get(port, "/api/v1/namespaces", None).map(|(code, _)| code), Some(401));
}

#[tokio::test]
async fn a_playbooks_impersonation_headers_are_dropped_so_it_acts_as_the_operator() {
    let Test { client, ns, api } = Test::setup("proxy-impersonate").kind(GROUP, KIND).build().await;
    let _operator = OperatorConfig::new(&watches(), &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "owner", json!({"whoamiAs": "someone-else"})).await;
    support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;
    let seen =
        Api::<ConfigMap>::namespaced(client, &ns.name).get("owner-whoami").await.unwrap().data.unwrap();
    // The tests' operator runs with the admin's kubeconfig, which may impersonate anyone: only the
    // proxy stands between the header and the API server.
    let operator_user = support::kubectl_ok(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_ne!(seen["username"], "someone-else", "{seen:?}");
    assert_eq!(seen["username"], operator_user.trim(), "{seen:?}");
}

#[tokio::test]
async fn after_a_restart_deleting_a_child_still_triggers_its_owner() {
    let Test { client, ns, api } = Test::setup("proxy-restart").kind(GROUP, KIND).build().await;
    let first_operator = OperatorConfig::new(&watches(), &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "owner", json!({})).await;
    support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;
    let before = wait_for_run_after(&api, "owner", "").await;
    stop(first_operator);

    let _second = OperatorConfig::new(&watches(), &ns.name).start();
    let after_start = wait_for_run_after(&api, "owner", &before).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    configmaps.delete("owner-cm", &DeleteParams::default()).await.unwrap();
    wait_for_run_after(&api, "owner", &after_start).await;
    configmaps.get("owner-cm").await.expect("the ConfigMap is back");
}

fn stop(mut operator: Operator) {
    let status = operator.stop().expect("operator exits after SIGTERM");
    assert!(status.success(), "clean exit: {status}");
}

#[tokio::test]
async fn with_injection_off_children_are_created_without_owner_references() {
    let Test { client, ns, api } = Test::setup("proxy-noinject").kind(GROUP, KIND).build().await;
    let _operator = OperatorConfig::new(&watches(), &ns.name).arg("--inject-owner-ref=false").start();
    support::create_cr(&api, GROUP, KIND, "owner", json!({})).await;
    support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;
    let child = Api::<ConfigMap>::namespaced(client, &ns.name).get("owner-cm").await.unwrap();
    assert!(child.metadata.owner_references.is_none(), "{:?}", child.metadata.owner_references);
    assert!(!child.metadata.annotations.unwrap_or_default().contains_key("operator-sdk/primary-resource"));
}

/// A run over its rate limit (`--proxy-qps-per-run`) gets 429 with Retry-After on the reads it sends
/// too fast; the Kubernetes client waits and sends them again, so the run still succeeds, and the
/// refusals are counted and logged.
#[tokio::test]
async fn a_run_over_its_rate_limit_is_answered_429_and_its_client_retries_to_success() {
    let Test { client: _, ns, api } = Test::setup("proxy-throttled").kind(GROUP, KIND).build().await;
    let metrics_port = support::free_port();
    let operator = OperatorConfig::new(&support::playbook_watch(GROUP, KIND, "throttled.yml"), &ns.name)
        // One request every 5 s: the loop's next read comes sooner even when a loaded machine
        // takes seconds to start each module (at 1 a second, CI once saw no refusal).
        .arg("--proxy-qps-per-run=0.2")
        .arg("--proxy-burst-per-run=1")
        .arg("--proxy-max-wait=0s")
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
        .start();
    support::create_cr(&api, GROUP, KIND, "eager", json!({})).await;
    support::wait_for_condition(&api, "eager", "Successful", "True", WAIT).await;

    let refused = "ansible_operator_proxy_throttled_requests_total{limit=\"run\",outcome=\"refused\"}";
    let text = support::http_get(metrics_port, "/metrics", None).map(|(_, text)| text).unwrap_or_default();
    let count = text
        .lines()
        .find(|line| line.starts_with(refused))
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(count.is_some_and(|count| count >= 1.0), "{refused} in:\n{text}");
    assert!(
        operator.log().contains("the proxy's rate limit is reached (429)"),
        "the refusal is logged:\n{}",
        operator.log()
    );
}
