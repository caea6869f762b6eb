//! A CR author attacks through the inventory and the key Secret (issue 31, routes 2 and 4), against
//! the real operator, ansible-runner and the SSH test hosts: a CR string never becomes an Ansible
//! template or inventory structure, and a Secret a CR names is used only when it opts in for the
//! CR's kind. The kubeconfig check of the KubernetesCluster sample (route 3) is shown at the level of
//! its module: tests/collection/test_member_kubeconfig.py.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::hosts::{self, ALLOW_KINDS};
use support::operator::{Operator, OperatorConfig};
use support::setup::Test;

const GROUP: &str = "security.test.example.com";
const WAIT: Duration = Duration::from_secs(180);

const INVENTORY: &str = hosts::MARKER_INVENTORY;

fn watch(kind: &str) -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  playbook: {{fixtures}}/playbooks/ssh_marker.yml\n{INVENTORY}"
    )
}

struct Setup {
    client: Client,
    ns: support::TestNamespace,
    operator: Operator,
    api: Api<DynamicObject>,
    kind: &'static str,
}

async fn setup(prefix: &str, kind: &'static str) -> Setup {
    hosts::hosts();
    let Test { client, ns, api } = Test::setup(prefix).kind(GROUP, kind).build().await;
    let operator = OperatorConfig::new(&watch(kind), &ns.name).start();
    Setup { client, ns, operator, api, kind }
}

/// Creates CR `name` on host1 with the key Secret `secret` and host1's `field` set to `value`.
async fn create(setup: &Setup, name: &str, secret: &str, field: &str, value: Value) {
    let mut host = hosts::hosts()[0].spec();
    host[field] = value;
    let spec = json!({"keySecret": secret, "hosts": [host]});
    support::create_cr(&setup.api, GROUP, setup.kind, name, spec).await;
}

/// A key Secret every kind may use.
async fn keys(setup: &Setup) {
    let key = hosts::client_key();
    hosts::create_ssh_secret(&setup.client, &setup.ns.name, "keys", &key, Some(&hosts::known_hosts())).await;
}

/// A `touch` of a file in the operator's scratch directory, as Ansible would template it.
fn touch(setup: &Setup, name: &str) -> (PathBuf, String) {
    let marker = setup.operator.dir.join(name);
    let template = format!("{{{{ lookup('pipe', 'touch {}') }}}}", marker.display());
    (marker, template)
}

/// Waits for a `Failure` condition with `reason`; returns its message.
async fn failure(api: &Api<DynamicObject>, name: &str, reason: &str) -> String {
    support::wait_for(&format!("{name} to fail with {reason}"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let failure = support::condition(&object, "Failure").cloned().unwrap_or_default();
        Ok(if failure["status"] == "True" && failure["reason"] == reason {
            Ok(failure["message"].as_str().unwrap_or_default().to_string())
        } else {
            Err(format!("status {}", object.data["status"]))
        })
    })
    .await
}

fn marker_on(host: &hosts::Host, namespace: &str, name: &str) -> PathBuf {
    host.file(&format!("markers/{namespace}-{name}"))
}

#[tokio::test]
async fn a_template_in_a_cr_string_is_never_run_on_the_operator_host() {
    let setup = setup("sec-template", "Templated").await;
    keys(&setup).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());

    // In a host variable the run uses: the run succeeds and the host gets the text as written.
    let (in_message, template) = touch(&setup, "from-message");
    create(&setup, "message", "keys", "message", json!(template)).await;
    support::wait_for_condition(&setup.api, "message", "Successful", "True", WAIT).await;
    let written = std::fs::read_to_string(marker_on(&all[0], ns, "message")).unwrap();
    assert_eq!(written, format!("{template}\n"), "the host got the CR's text, not its result");
    assert!(!in_message.exists(), "the lookup ran on the operator host");

    // In the address: no host by that name, the run fails; nothing ran.
    let (in_address, template) = touch(&setup, "from-address");
    create(&setup, "address", "keys", "address", json!(template)).await;
    let message = failure(&setup.api, "address", "Failed").await;
    assert!(message.contains("host host1 unreachable"), "{message}");
    assert!(!in_address.exists(), "the lookup ran on the operator host");
    // A retry after the failure rewrites the inventory; read it between two writes.
    let path = setup.operator.runner_dir(GROUP, "Templated", ns, "address").join("inventory/hosts.yml");
    let inventory = support::wait_for("the address CR's inventory", WAIT, || async {
        Ok(std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display())))
    })
    .await;
    assert!(inventory.contains("ansible_host: !unsafe \"{{ lookup('pipe', 'touch "), "{inventory}");
}

#[tokio::test]
async fn a_port_or_a_name_that_injects_host_variables_fails_naming_the_host() {
    let setup = setup("sec-inject", "Injected").await;
    keys(&setup).await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    // What would run if ansible_connection: local got in: the marker playbook on this machine.
    let local_marker =
        |name: &str| PathBuf::from(std::env::var("HOME").unwrap()).join(format!("markers/{ns}-{name}"));

    create(&setup, "port", "keys", "port", json!("1, ansible_connection: local")).await;
    let message = failure(&setup.api, "port", "InventoryError").await;
    assert_eq!(
        message,
        "inventory: group \"targets\": host \"host1\": ansible_port \"1, ansible_connection: local\" is not a port (a number from 1 to 65535)"
    );

    create(&setup, "name", "keys", "name", json!("host1: {ansible_connection: local}\n    other")).await;
    let message = failure(&setup.api, "name", "InventoryError").await;
    assert_eq!(
        message,
        "inventory: group \"targets\": host \"host1: {ansible_connection: local}\\n    other\" has a space, line break or control character"
    );

    for name in ["port", "name"] {
        assert!(!local_marker(name).exists(), "{name}: the playbook ran on the operator host");
        assert!(!marker_on(&all[0], ns, name).exists(), "{name}: nothing ran");
    }
    // The same CR with a port and a name: it runs.
    create(&setup, "fine", "keys", "port", json!(all[0].port)).await;
    support::wait_for_condition(&setup.api, "fine", "Successful", "True", WAIT).await;
    assert!(marker_on(&all[0], ns, "fine").exists());
}

#[tokio::test]
async fn a_key_secret_is_used_only_when_it_opts_in_for_the_kind() {
    let setup = setup("sec-optin", "Guarded").await;
    let (ns, all) = (&setup.ns.name, hosts::hosts());
    let key = hosts::client_key();
    hosts::create_ssh_secret_for(&setup.client, ns, "theirs", &key, Some(&hosts::known_hosts()), None).await;
    hosts::create_ssh_secret_for(
        &setup.client,
        ns,
        "other",
        &key,
        Some(&hosts::known_hosts()),
        Some("EtcdCluster"),
    )
    .await;

    for secret in ["theirs", "other"] {
        create(&setup, secret, secret, "port", json!(all[0].port)).await;
        let message = failure(&setup.api, secret, "SSHKeySecretNotAllowed").await;
        assert_eq!(
            message,
            format!(
                "sshKeySecret: Secret {ns}/{secret} is not allowed for kind Guarded: annotate it {ALLOW_KINDS}: \"Guarded\" (a comma-separated list of kinds) to let CRs of that kind use it"
            )
        );
        assert!(!marker_on(&all[0], ns, secret).exists(), "{secret}: nothing ran");
    }

    // The Secret's owner opts in: the retry runs, without a change to the CR.
    let secrets: Api<Secret> = Api::namespaced(setup.client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {ALLOW_KINDS: "EtcdCluster, Guarded"}}});
    secrets.patch("other", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    support::wait_for_condition(&setup.api, "other", "Successful", "True", WAIT).await;
    assert!(marker_on(&all[0], ns, "other").exists());
    let object: Value = serde_json::to_value(setup.api.get("theirs").await.unwrap()).unwrap();
    assert!(!marker_on(&all[0], ns, "theirs").exists(), "still refused: {}", object["status"]);
}
