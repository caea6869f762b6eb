//! The core loop against the real API server and real ansible-runner: CR in, status out.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "core.test.example.com";
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test]
async fn created_cr_reaches_successful_with_counts_from_the_playbook() {
    let Test { client, ns, api } = Test::setup("core-success").kind(GROUP, "Counter").build().await;
    let _operator =
        OperatorConfig::new(&support::playbook_watch(GROUP, "Counter", "counts.yml"), &ns.name).start();

    support::create_cr(&api, GROUP, "Counter", "one", json!({"size": 3})).await;
    let done = support::wait_for_condition(&api, "one", "Successful", "True", WAIT).await;

    let running = support::condition(&done, "Running").expect("Running condition");
    assert_eq!(running["status"], "True");
    assert_eq!(running["reason"], "Successful");
    assert_eq!(running["message"], "Awaiting next reconciliation");
    let result = &running["ansibleResult"];
    assert_eq!((result["ok"].as_i64(), result["changed"].as_i64()), (Some(2), Some(1)), "{result}");
    assert_eq!((result["skipped"].as_i64(), result["failures"].as_i64()), (Some(1), Some(0)), "{result}");
    assert!(result["completion"].as_str().is_some_and(|c| c.ends_with("+00:00")), "{result}");
    let successful = support::condition(&done, "Successful").unwrap();
    assert_eq!(successful["message"], "Last reconciliation succeeded");
    assert_eq!(successful["observedGeneration"], 1);
    assert_eq!(support::condition(&done, "Failure").unwrap()["status"], "False");

    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, &ns.name);
    let child = configmaps.get("one-child").await.expect("the playbook created its ConfigMap");
    assert_eq!(child.data.unwrap()["size"], "3");
}

#[tokio::test]
async fn failed_task_sets_failure_with_its_message_until_the_spec_is_fixed() {
    let Test { client: _, ns, api } = Test::setup("core-failure").kind(GROUP, "Validated").build().await;
    let _operator =
        OperatorConfig::new(&support::playbook_watch(GROUP, "Validated", "validate.yml"), &ns.name).start();

    support::create_cr(&api, GROUP, "Validated", "bad", json!({"size": -1})).await;
    let failed = support::wait_for_condition(&api, "bad", "Failure", "True", WAIT).await;
    let failure = support::condition(&failed, "Failure").unwrap();
    assert_eq!(failure["reason"], "Failed");
    assert_eq!(failure["message"], "size must not be negative, got -1");
    assert_eq!(failure["ansibleResult"]["failures"], 1);
    assert_eq!(support::condition(&failed, "Successful").map(|c| c["status"].clone()), Some(json!("False")));

    let fix = json!({"spec": {"size": 2}});
    api.patch("bad", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&fix)).await.unwrap();
    let fixed = support::wait_for_condition(&api, "bad", "Successful", "True", WAIT).await;
    assert_eq!(support::condition(&fixed, "Failure").unwrap()["status"], "False");
    assert_eq!(support::condition(&fixed, "Successful").unwrap()["observedGeneration"], 2);
    let running = support::condition(&fixed, "Running").unwrap();
    assert_eq!(running["ansibleResult"]["failures"], 0, "the ignored failure does not count");
}

#[tokio::test]
async fn run_without_play_recap_fails_with_the_runners_own_error() {
    let Test { client: _, ns, api } = Test::setup("core-nostats").kind(GROUP, "Broken").build().await;
    let _operator =
        OperatorConfig::new(&support::playbook_watch(GROUP, "Broken", "broken.yml"), &ns.name).start();

    support::create_cr(&api, GROUP, "Broken", "b", json!({})).await;
    let failed = support::wait_for_condition(&api, "b", "Failure", "True", WAIT).await;
    let message = support::condition(&failed, "Failure").unwrap()["message"].as_str().unwrap().to_string();
    assert!(message.starts_with("did not receive playbook_on_stats event"), "{message}");
    assert!(message.contains("no_such_namespace.no_such_collection.no_such_module"), "{message}");
    assert!(!message.contains('\u{1b}'), "no terminal colour codes: {message:?}");
}
