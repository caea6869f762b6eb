//! Conversion playbooks against the real API server and real Ansible: a kind served as `v1alpha1`
//! (stored) and `v1beta1`, watched in both versions, the `v1beta1` entry naming `convert:`. The
//! operator sets the CRD's conversion webhook to call it; the API server itself then calls the
//! playbook to read a stored object as `v1beta1` and to store what is written as `v1beta1`; only
//! the newest version's entry reconciles. Forged reviews sent straight to the webhook, holding the
//! injection corpus in every string, come back converted with each string as written, and nothing
//! in them runs; reviews of another group or kind are refused before anything runs.

use crate::support;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use support::operator::{OperatorConfig, scratch_dir};

const GROUP: &str = "conversion.test.example.com";
const KIND: &str = "Shard";
const CRD: &str = "shards.conversion.test.example.com";
const WAIT: Duration = Duration::from_secs(120);

/// Deletes the CRD when the test ends, passed or not: its webhook calls an operator that is gone.
struct Crd;

impl Drop for Crd {
    fn drop(&mut self) {
        support::kubectl(["delete", "crd", CRD, "--ignore-not-found", "--wait=false"]);
    }
}

/// The kind in two versions with open schemas: `v1alpha1` stored, `v1beta1` served.
fn crd() -> Value {
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage, "subresources": {"status": {}},
               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                   "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                   "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "plural": "shards", "singular": "shard", "listKind": "ShardList"},
            "scope": "Namespaced",
            "versions": [version("v1alpha1", true), version("v1beta1", false)],
        }
    })
}

fn watches() -> String {
    format!(
        "- {{group: {GROUP}, version: v1alpha1, kind: {KIND}, playbook: '{{fixtures}}/playbooks/conversion_v1alpha1.yml'}}\n\
         - {{group: {GROUP}, version: v1beta1, kind: {KIND}, playbook: '{{fixtures}}/playbooks/conversion_replicas.yml',\n   \
            convert: '{{fixtures}}/playbooks/conversion_convert.yml'}}\n"
    )
}

fn api(client: &kube::Client, version: &str, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, version, KIND));
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// `kubectl apply` of a `v1alpha1` shard of `size`.
fn apply(namespace: &str, name: &str, size: i64) -> std::process::Output {
    let file = scratch_dir(&format!("{namespace}-{name}-{size}")).join("cr.json");
    let cr = json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
        "metadata": {"name": name, "namespace": namespace}, "spec": {"size": size}});
    std::fs::write(&file, cr.to_string()).expect("write the CR");
    support::kubectl(["apply", "-f", file.to_str().expect("a UTF-8 path")])
}

#[tokio::test]
async fn a_convert_playbook_answers_the_api_servers_conversions_and_one_version_reconciles() {
    let client = support::client().await;
    let ns = support::TestNamespace::new(&client, "conversion").await;
    let _crd = Crd;
    support::install_crd(&client, &crd()).await;
    let port = support::free_port();
    let operator = OperatorConfig::new(&watches(), &ns.name)
        .arg(format!("--api-bind-address=127.0.0.1:{port}"))
        .arg("--webhook-host=127.0.0.1")
        .start();

    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    support::wait_for("the CRD's conversion webhook", WAIT, || async {
        let crd = crds.get(CRD).await.map_err(|e| e.to_string())?;
        let conversion = crd.spec.conversion.unwrap_or_default();
        let url = conversion.webhook.and_then(|w| w.client_config).and_then(|c| c.url).unwrap_or_default();
        Ok(match conversion.strategy == "Webhook" && url.ends_with(&format!("/convert/{GROUP}/{KIND}")) {
            true => Ok(()),
            false => Err(format!("strategy {} url {url}", conversion.strategy)),
        })
    })
    .await;

    let created = apply(&ns.name, "s1", 3);
    assert!(created.status.success(), "{}\nlog:\n{}", support::describe_output(&created), operator.log());
    let data = support::configmaps::wait_for(&client, &ns.name, "s1-replicas", WAIT).await;
    assert_eq!(
        data.get("replicas").map(String::as_str),
        Some("replicas=3"),
        "the playbook saw the v1beta1 object"
    );

    let beta =
        support::wait_for_condition(&api(&client, "v1beta1", &ns.name), "s1", "Successful", "True", WAIT)
            .await;
    assert_eq!(beta.data["spec"], json!({"replicas": 3}), "read as v1beta1 through the playbook");
    assert_eq!(
        beta.types.as_ref().map(|t| t.api_version.as_str()),
        Some("conversion.test.example.com/v1beta1")
    );
    let alpha = api(&client, "v1alpha1", &ns.name).get("s1").await.expect("read as v1alpha1");
    assert_eq!(alpha.data["spec"], json!({"size": 3}), "stored as v1alpha1");
    assert!(
        support::condition(&alpha, "Successful").is_some_and(|c| c["status"] == "True"),
        "the status written as v1beta1 was converted back to be stored: {}",
        alpha.data["status"]
    );

    // An update in the stored version reaches the newest version's playbook converted.
    let updated = apply(&ns.name, "s1", 5);
    assert!(updated.status.success(), "{}", support::describe_output(&updated));
    support::wait_for("s1-replicas to say 5", WAIT, || async {
        let data = support::configmaps::data(&client, &ns.name, "s1-replicas").await.unwrap_or_default();
        let replicas = data.get("replicas").cloned().unwrap_or_default();
        Ok(if replicas == "replicas=5" { Ok(()) } else { Err(format!("replicas {replicas:?}")) })
    })
    .await;
    assert_eq!(
        support::configmaps::data(&client, &ns.name, "s1-v1alpha1").await,
        None,
        "the v1alpha1 entry reconciled too; log:\n{}",
        operator.log()
    );
    assert!(operator.log().contains("this entry does not reconcile"), "{}", operator.log());

    // A conversion the playbook fails is refused with the failed task's message.
    let stored = apply(&ns.name, "negative", -1);
    assert!(
        stored.status.success(),
        "stored as is, in the storage version: {}",
        support::describe_output(&stored)
    );
    let read = support::kubectl([
        "get",
        &format!("shards.v1beta1.{GROUP}"),
        "negative",
        "-n",
        &ns.name,
        "-o",
        "json",
    ]);
    assert!(!read.status.success(), "read as v1beta1: {}", support::describe_output(&read));
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("spec.size must not be negative, got -1"),
        "{}\nlog:\n{}",
        support::describe_output(&read),
        operator.log()
    );
    let deleted =
        support::kubectl(["delete", &format!("shards.v1alpha1.{GROUP}"), "negative", "-n", &ns.name]);
    assert!(deleted.status.success(), "{}", support::describe_output(&deleted));

    forged_reviews(port, &ns.name);
}

/// The injection corpus, each `MARKER` a file of its own in `markers`.
fn payloads(markers: &std::path::Path) -> Vec<String> {
    let path = support::operator::fixtures().join("corpora/injection.json");
    let corpus: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the corpus")).expect("JSON");
    let payloads = corpus["payloads"].as_array().expect("payloads");
    let marker = |i: usize| markers.join(i.to_string()).display().to_string();
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| p.as_str().expect("a string").replace("MARKER", &marker(i)))
        .collect()
}

/// Reviews anyone who reaches the port may send: the corpus converts to itself, verbatim, and runs
/// nowhere; a review of another group or kind is refused naming the field.
fn forged_reviews(port: u16, namespace: &str) {
    let api = support::api::ApiServer::localhost(port, None);
    let markers = scratch_dir(&format!("{namespace}-markers"));
    let payloads = payloads(&markers);
    let objects: Vec<Value> = payloads
        .iter()
        .enumerate()
        .map(|(i, payload)| {
            json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
                   "metadata": {"name": format!("p{i}"), "namespace": namespace, "labels": {"payload": payload}},
                   "spec": {"size": payload}})
        })
        .collect();
    let review = |desired: &str, objects: &[Value]| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "request": {"uid": "forged", "desiredAPIVersion": desired, "objects": objects}})
    };
    let path = format!("/convert/{GROUP}/{KIND}");
    let reply =
        api.request_with_body("POST", &path, None, Some(&review(&format!("{GROUP}/v1beta1"), &objects)));
    let response = &reply.body["response"];
    assert_eq!(response["uid"], "forged", "{}", reply.body);
    assert_eq!(response["result"]["status"], "Success", "{}", reply.body);
    let converted = response["convertedObjects"].as_array().expect("converted objects");
    assert_eq!(converted.len(), payloads.len());
    for (object, payload) in converted.iter().zip(&payloads) {
        assert_eq!(object["spec"], json!({"replicas": payload}), "converted as written");
        assert_eq!(object["metadata"]["labels"]["payload"], json!(payload));
        assert_eq!(object["apiVersion"], format!("{GROUP}/v1beta1"));
    }
    assert_eq!(std::fs::read_dir(&markers).map(|d| d.count()).unwrap_or(0), 0, "a payload ran");

    let refusals = [
        (
            format!("/convert/{GROUP}/{KIND}"),
            review("apps/v1", &objects[..1]),
            "request.desiredAPIVersion \"apps/v1\"",
        ),
        (
            format!("/convert/{GROUP}/Secret"),
            review(&format!("{GROUP}/v1beta1"), &objects[..1]),
            "no convert playbook for Secret",
        ),
        (
            format!("/convert/{GROUP}/{KIND}"),
            review(
                &format!("{GROUP}/v1beta1"),
                &[json!({"apiVersion": "v1", "kind": KIND, "metadata": {"name": "x"}})],
            ),
            "request.objects[0].apiVersion \"v1\"",
        ),
    ];
    for (path, review, expected) in refusals {
        let reply = api.request_with_body("POST", &path, None, Some(&review));
        let result = &reply.body["response"]["result"];
        assert_eq!(result["status"], "Failure", "{path}: {}", reply.body);
        assert!(result["message"].as_str().unwrap_or_default().contains(expected), "{path}: {}", reply.body);
    }
}
