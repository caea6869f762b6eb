//! Admission playbooks against the real API server and real Ansible: a watch with `validate:` makes
//! the operator apply a ValidatingWebhookConfiguration that calls it on 127.0.0.1; `kubectl apply`
//! of a CR its playbook fails is refused with the playbook's message, a valid one is created; with
//! the operator stopped, `validateFailurePolicy: Fail` refuses and `Ignore` lets a CR through.

use crate::support;

use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::Api;
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "admission.test.example.com";
const KIND: &str = "Cluster";
const WAIT: Duration = Duration::from_secs(120);

/// Deletes the cluster-wide configuration when the test ends, passed or not: it would refuse the
/// test group's CRs for anyone after it.
struct Configuration(String);

impl Drop for Configuration {
    fn drop(&mut self) {
        support::kubectl(["delete", "validatingwebhookconfiguration", &self.0, "--ignore-not-found"]);
    }
}

fn watches(policy: &str) -> String {
    format!(
        "{}  validate: {{fixtures}}/playbooks/admission_masters.yml\n  validateFailurePolicy: {policy}\n  validateTimeout: 20s\n",
        support::playbook_watch(GROUP, KIND, "validate.yml")
    )
}

fn start(policy: &str, namespace: &str, configuration: &str) -> Operator {
    OperatorConfig::new(&watches(policy), namespace)
        .arg("--api-bind-address=127.0.0.1:0")
        .arg("--webhook-host=127.0.0.1")
        .arg(format!("--webhook-configuration-name={configuration}"))
        .start()
}

/// Waits until the operator has applied the configuration with `policy`.
async fn wait_for_configuration(
    api: &Api<ValidatingWebhookConfiguration>,
    name: &str,
    policy: &str,
    operator: &Operator,
) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Ok(Some(config)) = api.get_opt(name).await {
            let webhooks = config.webhooks.unwrap_or_default();
            if webhooks.first().and_then(|w| w.failure_policy.as_deref()) == Some(policy) {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no configuration {name} with {policy}; log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl apply` of a cluster with `masters` in `namespace`.
fn apply(namespace: &str, name: &str, masters: u32) -> Output {
    let dir = scratch_dir(&format!("{namespace}-{name}"));
    let file = dir.join("cr.json");
    let cr = serde_json::json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
        "metadata": {"name": name, "namespace": namespace}, "spec": {"masters": masters, "size": 1}});
    std::fs::write(&file, cr.to_string()).expect("write the CR");
    support::kubectl(["apply", "-f", file.to_str().expect("a UTF-8 path")])
}

#[tokio::test]
async fn a_validate_playbook_refuses_an_invalid_cr_with_its_message_and_the_failure_policy_applies_when_the_operator_is_down()
 {
    let Test { client, ns, api: _ } = Test::setup("admission").kind(GROUP, KIND).build().await;
    let configuration = Configuration(format!("{}-validate", ns.name));
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone());

    let mut operator = start("Fail", &ns.name, &configuration.0);
    wait_for_configuration(&webhooks, &configuration.0, "Fail", &operator).await;

    let refused = apply(&ns.name, "even", 2);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "an even cluster was admitted: {}\n{}",
        support::describe_output(&refused),
        operator.log()
    );
    assert!(
        stderr.contains("denied the request: spec.masters must be odd for etcd quorum, got 2"),
        "{}\nlog:\n{}",
        support::describe_output(&refused),
        operator.log()
    );

    let admitted = apply(&ns.name, "odd", 3);
    assert!(admitted.status.success(), "{}\nlog:\n{}", support::describe_output(&admitted), operator.log());
    let updated = apply(&ns.name, "odd", 4);
    assert!(
        !updated.status.success(),
        "an UPDATE to an even cluster was admitted: {}",
        support::describe_output(&updated)
    );
    assert!(
        String::from_utf8_lossy(&updated.stderr).contains("spec.masters must be odd for etcd quorum, got 4")
    );

    operator.kill();
    let down = apply(&ns.name, "down-fail", 2);
    assert!(
        !down.status.success(),
        "Fail let a CR through with the operator down: {}",
        support::describe_output(&down)
    );
    assert!(
        String::from_utf8_lossy(&down.stderr).contains("failed calling webhook"),
        "{}",
        support::describe_output(&down)
    );

    let mut operator = start("Ignore", &ns.name, &configuration.0);
    wait_for_configuration(&webhooks, &configuration.0, "Ignore", &operator).await;
    operator.kill();
    let ignored = apply(&ns.name, "down-ignore", 2);
    assert!(
        ignored.status.success(),
        "Ignore refused a CR with the operator down: {}",
        support::describe_output(&ignored)
    );
}
