//! Secret values masked everywhere a run's output goes, against the real API server and real Ansible:
//! a playbook reads a Secret through the proxy, prints its value and its base64, uses a value in a
//! `no_log` task and fails with the value in its message. The operator's log, the run's live and
//! finished log from the API, the run record, the CR's Events and its `Failure` condition show
//! `********` instead, and never the value or its base64.
//!
//! Values derived from Secrets, printed each on its own: a kubeconfig's token, client key and
//! certificate and password; a registry config's username, password and decoded `auth`; and Secrets
//! read with `ansible.builtin.uri` asking for protobuf and gzip, through a pretty-printed LIST and
//! through a WATCH. None shows in the run's log, its record, the CR's status or the operator's log.

use crate::support;

use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};
use support::api::{ApiServer, grant_log_reading, service_account};
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "masked.test.example.com";
const KIND: &str = "Masked";
const PLURAL: &str = "maskeds";
const WAIT: Duration = Duration::from_secs(180);
/// The Secret's value: long enough to be masked, unlike anything else the run prints.
const VALUE: &str = "hunter2-\"quoted\"-pässword";
/// What only a `no_log` task sees (the playbook makes it at run time, so no input holds it).
const HIDDEN: &str = "nolog-value-7f3a9c";

/// Where `text` shows the value, its base64 or the `no_log` value (empty when nowhere).
fn leaks(text: &str) -> Vec<&'static str> {
    let encoded: &'static str =
        Box::leak(base64::engine::general_purpose::STANDARD.encode(VALUE).into_boxed_str());
    [VALUE, "hunter2", encoded, HIDDEN].into_iter().filter(|leak| text.contains(leak)).collect()
}

fn assert_masked(place: &str, text: &str) {
    assert!(leaks(text).is_empty(), "{place} shows {:?}: {text}", leaks(text));
    assert!(text.contains("********"), "{place} shows no mask: {text}");
}

#[tokio::test]
async fn a_secret_value_a_playbook_prints_is_masked_in_logs_records_events_and_status() {
    let Test { client, ns, api: crs } =
        Test::setup("secrets-masked").kind(GROUP, KIND).run_records().build().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "stringData": {"password": VALUE},
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &secret).await.expect("create the Secret");
    let resource = format!("{PLURAL}.{GROUP}");
    let reader = service_account(&ns.name, "reader", "get,list", &resource);
    grant_log_reading(&ns.name, "reader", &resource);
    let port = support::free_port();
    let watches = support::playbook_watch(GROUP, KIND, "secrets_masked.yml");
    let operator =
        OperatorConfig::new(&watches, &ns.name).arg(format!("--api-bind-address=127.0.0.1:{port}")).start();
    let api = ApiServer::localhost(port, None);
    api.wait_until_up(WAIT);
    // The run holds open until this file exists: its live log is read first, however slow the run.
    let release = scratch_dir(&format!("{}-release", ns.name)).join("release");
    let spec = json!({"secret": "db", "release": release.display().to_string()});
    let created = support::create_cr(&crs, GROUP, KIND, "app", spec).await;
    let uid = created.metadata.uid.clone().unwrap();
    let path = format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs/{}/app", ns.name);

    // The live log, read while the run holds open after printing.
    let live = support::wait_for("the live log past the prints", WAIT, || async {
        let detail = api.get_ok(&path, &reader);
        let Some(ident) = detail["inFlight"]["ident"].as_str() else { return Ok(Err(format!("{detail}"))) };
        let reply = api.request("GET", &format!("{path}/runs/{ident}/log"), Some(&reader));
        let text = reply.body.as_str().unwrap_or_default().to_string();
        Ok(if text.contains("TASK [hold the run open]") { Ok(text) } else { Err(text) })
    })
    .await;
    assert_masked("the live log", &live);
    std::fs::write(&release, "").expect("release the run");

    // The Failure condition, once the run has ended.
    let failed = support::wait_for_condition(&crs, "app", "Failure", "True", WAIT).await;
    let failure = support::condition(&failed, "Failure").unwrap();
    let message = failure["message"].as_str().unwrap_or_default();
    assert_eq!(message, "could not log in with ********");

    // The run record, and the finished run's log (from its artifacts), through the API.
    let detail = support::wait_for("a recorded failed run", WAIT, || async {
        let detail = api.get_ok(&path, &reader);
        Ok(if detail["runs"][0]["result"] == "Failure" { Ok(detail) } else { Err(format!("{detail}")) })
    })
    .await;
    assert_masked("the CR's detail", &detail.to_string());
    let run_name = detail["runs"][0]["name"].as_str().unwrap().to_string();
    let run = api.get_ok(&format!("{path}/runs/{run_name}"), &reader);
    assert_masked("the run from the API", &run.to_string());
    let log = api.request("GET", &format!("{path}/runs/{run_name}/log"), Some(&reader));
    assert_eq!(log.status, 200, "{}", log.body);
    let log = log.body.as_str().unwrap_or_default();
    assert!(log.contains("the password is ********") && log.contains("encoded ********"), "{log}");
    assert_masked("the finished run's log", log);

    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    let runs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"),
    );
    let records = runs
        .list(&ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}")))
        .await
        .unwrap()
        .items;
    assert!(!records.is_empty());
    for record in &records {
        assert_masked("the run record", &serde_json::to_string(&record.data).unwrap());
    }

    // The Events about the CR.
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let about: Vec<Value> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| event.involved_object.name.as_deref() == Some("app"))
        .map(|event| serde_json::to_value(event).unwrap())
        .collect();
    assert!(!about.is_empty(), "the failed run is an Event");
    assert_masked("the Events", &Value::from(about).to_string());

    // The operator's log: what it logged of the tasks.
    let mut operator = operator;
    assert!(operator.stop().is_some());
    let text = operator.log();
    assert!(text.contains("[playbook debug]"), "{text}");
    assert_masked("the operator's log", &text);
}

/// The kind whose playbook prints values derived from Secrets.
const DERIVED_KIND: &str = "Derived";
const DERIVED_PLURAL: &str = "deriveds";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.kubeconfig-token-1234";
const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n";
const CERT_PEM: &str =
    "-----BEGIN CERTIFICATE-----\nMIIDBTCCAe2gAwIBAgIIYmFzZTY0Y2VydGlmaWNhdGU\n-----END CERTIFICATE-----\n";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Every value the derived-values playbook prints, and its base64 where it is printed so.
fn derived_values() -> Vec<String> {
    [
        TOKEN,
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
        "kc-basic-pass-31",
        "robot-ci",
        "dckr-pass-9f2x",
        "only-in-auth-77",
        "pb-gzip-token-5150",
        "listed-value-8086",
        "watched-value-6502",
    ]
    .into_iter()
    .map(str::to_string)
    .chain([b64(KEY_PEM), b64(CERT_PEM)])
    .collect()
}

fn assert_no_derived(place: &str, text: &str) {
    let shown: Vec<String> =
        derived_values().into_iter().filter(|value| text.contains(value.as_str())).collect();
    assert!(shown.is_empty(), "{place} shows {shown:?}: {text}");
    assert!(text.contains("********"), "{place} shows no mask: {text}");
}

#[tokio::test]
async fn values_derived_from_secrets_are_masked_however_the_run_reads_them() {
    let Test { client, ns, api: crs } =
        Test::setup("secrets-derived").kind(GROUP, DERIVED_KIND).run_records().build().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://10.0.0.1:6443\n    certificate-authority-data: {cert}\ncontexts:\n- name: prod\n  context: {{cluster: prod, user: prod-admin}}\ncurrent-context: prod\nusers:\n- name: prod-admin\n  user:\n    token: {TOKEN}\n    client-certificate-data: {cert}\n    client-key-data: {key}\n    username: kc-user\n    password: kc-basic-pass-31\n",
        cert = b64(CERT_PEM),
        key = b64(KEY_PEM),
    );
    let docker = json!({"auths": {
        "registry.example.com": {"username": "robot-ci", "password": "dckr-pass-9f2x", "auth": b64("robot-ci:dckr-pass-9f2x")},
        "other.example.com": {"auth": b64("robot-two:only-in-auth-77")},
    }});
    let made = [
        json!({"metadata": {"name": "kubeconfig"}, "stringData": {"config": kubeconfig}}),
        json!({"metadata": {"name": "registry"}, "type": "kubernetes.io/dockerconfigjson",
               "stringData": {".dockerconfigjson": docker.to_string()}}),
        json!({"metadata": {"name": "wire"}, "stringData": {"value": "pb-gzip-token-5150"}}),
        json!({"metadata": {"name": "listed", "labels": {"read-by": "list"}}, "stringData": {"value": "listed-value-8086"}}),
        json!({"metadata": {"name": "watched"}, "stringData": {"value": "watched-value-6502"}}),
    ];
    for secret in made {
        let secret: Secret = serde_json::from_value(secret).unwrap();
        secrets.create(&PostParams::default(), &secret).await.expect("create a Secret");
    }
    let resource = format!("{DERIVED_PLURAL}.{GROUP}");
    let reader = service_account(&ns.name, "reader", "get,list", &resource);
    grant_log_reading(&ns.name, "reader", &resource);
    let port = support::free_port();
    let watches = support::playbook_watch(GROUP, DERIVED_KIND, "secrets_derived.yml");
    let operator =
        OperatorConfig::new(&watches, &ns.name).arg(format!("--api-bind-address=127.0.0.1:{port}")).start();
    let api = ApiServer::localhost(port, None);
    api.wait_until_up(WAIT);
    let created = support::create_cr(&crs, GROUP, DERIVED_KIND, "app", json!({})).await;
    let uid = created.metadata.uid.clone().unwrap();
    let path = format!("/api/v1/kinds/{GROUP}/{DERIVED_PLURAL}/crs/{}/app", ns.name);

    // The run reaches its last task: every read worked, and the message is masked.
    let failed = support::wait_for_condition(&crs, "app", "Failure", "True", WAIT).await;
    let failure = support::condition(&failed, "Failure").unwrap();
    assert_eq!(failure["message"], "could not log in with ********", "{failure}");

    let detail = support::wait_for("a recorded failed run", WAIT, || async {
        let detail = api.get_ok(&path, &reader);
        Ok(if detail["runs"][0]["result"] == "Failure" { Ok(detail) } else { Err(format!("{detail}")) })
    })
    .await;
    let run_name = detail["runs"][0]["name"].as_str().unwrap().to_string();
    let run = api.get_ok(&format!("{path}/runs/{run_name}"), &reader);
    assert_no_derived("the run from the API", &run.to_string());
    let log = api.request("GET", &format!("{path}/runs/{run_name}/log"), Some(&reader));
    assert_eq!(log.status, 200, "{}", log.body);
    let log = log.body.as_str().unwrap_or_default();
    for printed in ["wire ********", "listed ********", "watched ********", "only in auth ********"] {
        assert!(log.contains(printed), "{printed:?} not in {log}");
    }
    assert_no_derived("the finished run's log", log);

    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    let runs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"),
    );
    let selector = format!("ansible-operator.dev/owner-uid={uid}");
    let records = runs.list(&ListParams::default().labels(&selector)).await.unwrap().items;
    assert!(!records.is_empty());
    for record in &records {
        assert_no_derived("the run record", &serde_json::to_string(&record.data).unwrap());
    }
    let status = crs.get("app").await.unwrap();
    assert_no_derived("the CR's status", &status.data["status"].to_string());

    let mut operator = operator;
    assert!(operator.stop().is_some());
    assert_no_derived("the operator's log", &operator.log());
}
