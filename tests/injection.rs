//! Outside values are data, whatever they hold: the corpus of `tests/fixtures/corpora/injection.json`
//! (Jinja delimiters, `#jinja2:` headers, YAML tags, look-alikes, lookups, sandbox escapes) in every
//! position a CR author controls (a spec leaf, nested, in a list, as a map key, in an annotation),
//! through every route to Ansible: `kubectl create` past the validating webhook, the reconcile, a
//! plan, forged reviews sent straight to the webhook, a replay. Nothing runs, each value arrives as
//! written, a normal CR still converges. The same playbook with `trustCRTemplates: true` runs them,
//! which shows the corpus reaches places Ansible templates.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use support::api::{ApiServer, service_account};
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "injection.test.example.com";
const KIND: &str = "Injected";
const PLURAL: &str = "injecteds";
const OBJECT_VAR: &str = "_injection_test_example_com_injected";
const WAIT: Duration = Duration::from_secs(240);

/// The corpus, each `MARKER` replaced by a file of its own in `markers`.
fn payloads(markers: &Path) -> Vec<String> {
    let path = support::operator::fixtures().join("corpora/injection.json");
    let corpus: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read the corpus")).unwrap();
    let payloads = corpus["payloads"].as_array().expect("payloads");
    let marker = |i: usize| markers.join(i.to_string()).display().to_string();
    payloads.iter().enumerate().map(|(i, p)| p.as_str().unwrap().replace("MARKER", &marker(i))).collect()
}

/// A spec with every payload in every position: top-level list, nested maps and lists, map keys.
fn spec(payloads: &[String]) -> Value {
    let keyed: BTreeMap<&String, usize> = payloads.iter().enumerate().map(|(i, p)| (p, i)).collect();
    json!({"payloads": payloads, "nested": {"deep": {"list": payloads, "first": payloads[0]}}, "keyed": keyed})
}

/// The CR: [`spec`], and every payload as an annotation's value too.
fn cr(namespace: &str, name: &str, payloads: &[String]) -> DynamicObject {
    let annotations: BTreeMap<String, &String> =
        payloads.iter().enumerate().map(|(i, p)| (format!("injection.test.example.com/p{i}"), p)).collect();
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": spec(payloads),
    }))
    .expect("a CR")
}

/// The watch of `kind`: the injection playbook records `probe_names`; `fields` are further lines.
fn watches(kind: &str, fields: &str) -> String {
    let names = json!([
        "payloads",
        "nested",
        "keyed",
        "ansible_operator_meta",
        OBJECT_VAR,
        format!("{OBJECT_VAR}_spec"),
        "ansible_operator_admission"
    ]);
    format!(
        "{}{fields}  vars:\n    probe_names: {names}\n",
        support::playbook_watch(GROUP, kind, "injection.yml")
    )
}

/// The payloads whose marker file exists: each one ran.
fn fired(markers: &Path) -> Vec<String> {
    let mut fired: Vec<String> = std::fs::read_dir(markers)
        .map(|dir| dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    fired.sort();
    fired
}

/// Deletes the cluster-wide webhook configuration when the test ends, passed or not.
struct Configuration(String);

impl Drop for Configuration {
    fn drop(&mut self) {
        support::kubectl(["delete", "validatingwebhookconfiguration", &self.0, "--ignore-not-found"]);
    }
}

/// What the run of `name` recorded it saw.
async fn seen(client: &kube::Client, namespace: &str, name: &str) -> Value {
    let data = support::configmaps::wait_for(client, namespace, &format!("{name}-seen"), WAIT).await;
    serde_json::from_str(&data["seen"]).expect("the playbook wrote JSON")
}

/// A forged review of `object` (`old`: an UPDATE's old object) from `user`.
fn review(operation: &str, object: &Value, old: Option<&Value>, user: &str, groups: &[String]) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "forged", "operation": operation, "namespace": object["metadata"]["namespace"],
        "userInfo": {"username": user, "groups": groups},
        "object": object, "oldObject": old.cloned().unwrap_or(Value::Null)}})
}

/// Sends a review to the webhook as anyone who reaches the port would: no credential.
fn send_review(api: &ApiServer, review: &Value) -> Value {
    let reply =
        api.request_with_body("POST", &format!("/validate/{GROUP}/v1alpha1/{KIND}"), None, Some(review));
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["response"].clone()
}

fn start(watches: &str, namespace: &str, port: u16, configuration: &str) -> Operator {
    OperatorConfig::new(watches, namespace)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .arg("--webhook-host=127.0.0.1")
        .arg(format!("--webhook-configuration-name={configuration}"))
        .start()
}

#[tokio::test]
async fn no_injection_runs_through_a_create_a_reconcile_a_plan_a_forged_review_or_a_replay() {
    let Test { client, ns, api } = Test::setup("injection").kind(GROUP, KIND).run_records().build().await;
    let markers = scratch_dir("injection-markers");
    let payloads = payloads(&markers);
    let configuration = Configuration(format!("{}-validate", ns.name));
    let port = support::free_port();
    let watches = watches(KIND, "  validate: {fixtures}/playbooks/injection.yml\n  validateTimeout: 25s\n");
    let operator = start(&watches, &ns.name, port, &configuration.0);
    let webhook = ApiServer::localhost(port, None);
    webhook.wait_until_up(WAIT);
    let configurations =
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
            client.clone(),
        );
    support::wait_for("the webhook configuration", WAIT, || async {
        Ok(configurations
            .get_opt(&configuration.0)
            .await
            .map_err(|e| e.to_string())?
            .map(|_| ())
            .ok_or_else(|| "none yet".to_string()))
    })
    .await;

    // Created past the webhook (a validation run), then reconciled.
    let attack = cr(&ns.name, "attack", &payloads);
    support::wait_for("the attack CR to be admitted", WAIT, || async {
        Ok(match api.create(&PostParams::default(), &attack).await {
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            created => created.map(|_| ()).map_err(|e| e.to_string()),
        })
    })
    .await;
    support::create_cr(&api, GROUP, KIND, "normal", json!({"payloads": ["plain"]})).await;
    support::wait_for_condition(&api, "attack", "Successful", "True", WAIT).await;
    support::wait_for_condition(&api, "normal", "Successful", "True", WAIT).await;
    let seen = seen(&client, &ns.name, "attack").await;
    assert_eq!(seen["payloads"], json!(payloads), "every payload arrived as written");
    assert_eq!(seen["nested"]["deep"]["list"], json!(payloads));
    let annotations = &seen[OBJECT_VAR]["metadata"]["annotations"];
    assert_eq!(
        annotations["injection.test.example.com/p10"],
        json!(payloads[10]),
        "annotations arrive as written"
    );
    assert_eq!(seen["ansible_operator_meta"], json!({"name": "attack", "namespace": ns.name}));

    // A plan of the corpus, asked for through the API.
    let resource = format!("{PLURAL}.{GROUP}");
    let updater = service_account(&ns.name, "updater", "get,list,update", &resource);
    let cr_path = format!("/api/v1/kinds/{GROUP}/{PLURAL}/crs/{}/normal", ns.name);
    let proposed = json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
                          "metadata": {"name": "normal", "namespace": ns.name}, "spec": spec(&payloads)});
    let plan = webhook.request_with_body("POST", &format!("{cr_path}/plan"), Some(&updater), Some(&proposed));
    assert_eq!(plan.status, 200, "{}", plan.body);
    assert_eq!(plan.body["result"], "Successful", "{}", plan.body);

    // Forged reviews, sent straight to the webhook: the corpus in the object, the old object and the
    // user passes as data; in the operation or a name it is refused before anything runs.
    let object = serde_json::to_value(&attack).unwrap();
    let answer = send_review(&webhook, &review("UPDATE", &object, Some(&object), &payloads[10], &payloads));
    assert_eq!(answer["allowed"], true, "{answer}");
    for payload in &payloads {
        let answer = send_review(&webhook, &review(payload, &object, None, "someone", &[]));
        assert_eq!(answer["allowed"], false, "{answer}");
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("request.operation ") && message.ends_with("is not CREATE or UPDATE"),
            "{message}"
        );
        let mut named = object.clone();
        named["metadata"]["name"] = json!(payload);
        let answer = send_review(&webhook, &review("CREATE", &named, None, "someone", &[]));
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("request.object.metadata.name "), "{answer}");
    }

    // A replay of the CR, executed with the user's kubeconfig.
    let out = scratch_dir("injection-replay");
    let replay = support::operator::command(&operator.dir)
        .args(["replay", &format!("{}/attack", ns.name), "--output", out.to_str().unwrap(), "--execute"])
        .output()
        .expect("run replay");
    assert!(replay.status.success(), "{}", support::describe_output(&replay));

    assert_eq!(fired(&markers), Vec::<String>::new(), "payloads ran; log:\n{}", operator.log());
}

#[tokio::test]
async fn the_corpus_runs_where_a_watch_trusts_its_crs_templates() {
    // A kind of its own: the other test's webhook configuration is cluster-wide.
    const TRUSTED: &str = "TrustedInjected";
    let Test { client: _, ns, api } = Test::setup("injection-trusted").kind(GROUP, TRUSTED).build().await;
    let markers = scratch_dir("injection-trusted-markers");
    let payloads = payloads(&markers);
    let _operator = OperatorConfig::new(&watches(TRUSTED, "  trustCRTemplates: true\n"), &ns.name).start();
    // The plain lookup and the #jinja2: header: both run when trusted, neither runs by default.
    let chosen = vec![payloads[0].clone(), payloads[10].clone()];
    support::create_cr(&api, GROUP, TRUSTED, "trusted", json!({"payloads": chosen})).await;
    let markers_seen = support::wait_for("both payloads to run", WAIT, || async {
        let fired = fired(&markers);
        Ok(if fired == ["0", "10"] { Ok(fired) } else { Err(format!("fired {fired:?}")) })
    })
    .await;
    assert_eq!(markers_seen, ["0", "10"]);
}
