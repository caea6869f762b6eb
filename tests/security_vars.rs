//! A CR author chooses the values of the playbook's variables, never Ansible's own: attacks through
//! spec keys named like `ansible_connection` against the real operator, and the switch that gives
//! upstream's behaviour back.

use crate::support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "security.test.example.com";
const KIND: &str = "VarsTarget";
const WAIT: Duration = Duration::from_secs(180);

/// A watch on the vars-recording playbook (ConfigMap `<name>-vars`), recording the connection
/// variables the attacks set; `fields` are further lines of the entry.
fn watches(fields: &str) -> String {
    let names = json!(["ansible_connection", "ansible_ssh_common_args", "size"]);
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/dump_vars.yml\n{fields}  vars:\n    probe_names: {names}\n"
    )
}

/// A spec that, run as upstream runs it, makes OpenSSH run `touch <marker>` on the operator's host.
fn proxy_command_attack(connection: &str, marker: &Path) -> Value {
    json!({
        "ansibleConnection": connection,
        "ansibleSshCommonArgs": format!("-o ProxyCommand=\"sh -c 'touch {}'\"", marker.display()),
        "size": 1,
    })
}

async fn failure_message(api: &Api<kube::api::DynamicObject>, name: &str) -> (String, String) {
    let cr = support::wait_for_condition(api, name, "Failure", "True", WAIT).await;
    let failure = support::condition(&cr, "Failure").expect("a Failure condition");
    let text = |field: &str| failure[field].as_str().unwrap_or_default().to_string();
    (text("reason"), text("message"))
}

/// A namespace with an operator on [`watches`] (`fields` added to the entry) and the kind's API.
struct Setup {
    client: kube::Client,
    ns: support::TestNamespace,
    operator: support::operator::Operator,
    api: Api<kube::api::DynamicObject>,
}

async fn setup(prefix: &str, fields: &str) -> Setup {
    let Test { client, ns, api } = Test::setup(prefix).kind(GROUP, KIND).build().await;
    let operator = OperatorConfig::new(&watches(fields), &ns.name).start();
    Setup { client, ns, operator, api }
}

#[tokio::test]
async fn a_cr_that_names_ansibles_own_variables_fails_naming_the_key_and_nothing_runs() {
    let Setup { client, ns, operator, api } = setup("sec-vars", "").await;
    let scratch = support::operator::scratch_dir("sec-vars-markers");
    let ssh_marker = scratch.join("proxy-command-ran");
    let shell_marker = scratch.join("interpreter-ran");

    support::create_cr(&api, GROUP, KIND, "ssh", proxy_command_attack("ssh", &ssh_marker)).await;
    let interpreter = format!("/bin/sh -c 'touch {}'; ", shell_marker.display());
    support::create_cr(&api, GROUP, KIND, "python", json!({"ansible_python_interpreter": interpreter})).await;
    support::create_cr(&api, GROUP, KIND, "normal", json!({"size": 3})).await;

    let (reason, message) = failure_message(&api, "ssh").await;
    assert_eq!(reason, "ReservedVariable");
    assert!(
        message.contains("spec.ansibleConnection would set the Ansible variable ansible_connection")
            && message
                .contains("spec.ansibleSshCommonArgs would set the Ansible variable ansible_ssh_common_args")
            && message.contains("trustCRVariables: true"),
        "{message}"
    );
    let (_, message) = failure_message(&api, "python").await;
    assert!(
        message.contains(
            "spec.ansible_python_interpreter would set the Ansible variable ansible_python_interpreter"
        ),
        "{message}"
    );

    support::wait_for_condition(&api, "normal", "Successful", "True", WAIT).await;
    let normal = support::configmaps::wait_for(&client, &ns.name, "normal-vars", WAIT).await;
    let seen: Value = serde_json::from_str(&normal["vars"]).unwrap();
    assert_eq!(seen["size"], 3, "a normal CR of the kind still runs");

    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let event = support::wait_for("a ReconcileFailed Event on the attack CR", WAIT, || async {
        let list = events.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let reasons: Vec<Option<String>> = list.items.iter().map(|e| e.reason.clone()).collect();
        Ok(list
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("ssh")
                    && e.reason.as_deref() == Some("ReconcileFailed")
            })
            .ok_or_else(|| format!("reasons {reasons:?}")))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.note.as_deref().unwrap_or_default().contains("spec.ansibleConnection"), "{event:?}");

    for attack in ["ssh", "python"] {
        let recorded = support::configmaps::data(&client, &ns.name, &format!("{attack}-vars")).await;
        assert!(recorded.is_none(), "the playbook ran for the {attack} attack");
    }
    assert!(!ssh_marker.exists(), "the ProxyCommand ran on the operator's host");
    assert!(!shell_marker.exists(), "the interpreter command ran on the operator's host");
    let log = operator.log();
    assert!(!log.contains("touch "), "the operator logged the spec's values");
}

#[tokio::test]
async fn with_trust_cr_variables_the_spec_sets_ansibles_variables_as_upstream_does() {
    let Setup { client, ns, operator: _operator, api } =
        setup("sec-vars-trusted", "  trustCRVariables: true\n").await;
    // `local` keeps the run on this host, so the ProxyCommand the variable holds never runs.
    let marker = support::operator::scratch_dir("sec-vars-trusted").join("proxy-command-ran");
    let spec = proxy_command_attack("local", &marker);
    support::create_cr(&api, GROUP, KIND, "trusted", spec.clone()).await;

    support::wait_for_condition(&api, "trusted", "Successful", "True", WAIT).await;
    let data = support::configmaps::wait_for(&client, &ns.name, "trusted-vars", WAIT).await;
    let seen: Value = serde_json::from_str(&data["vars"]).unwrap();
    assert_eq!(seen["ansible_connection"], "local", "the spec set Ansible's connection variable");
    assert_eq!(seen["ansible_ssh_common_args"], spec["ansibleSshCommonArgs"]);
    assert!(!marker.exists());
}

#[tokio::test]
async fn the_trust_cr_variables_flag_trusts_every_kind_and_a_watch_may_still_refuse() {
    let other = "VarsRefuser";
    let Test { client, ns, api: trusted } =
        Test::setup("sec-vars-flag").kind(GROUP, KIND).kind(GROUP, other).build().await;
    let refusing = watches("  trustCRVariables: false\n").replace(KIND, other);
    let both = format!("{}{refusing}", watches(""));
    let operator = OperatorConfig::new(&both, &ns.name).arg("--trust-cr-variables").start();
    let marker = support::operator::scratch_dir("sec-vars-flag").join("proxy-command-ran");

    support::create_cr(&trusted, GROUP, KIND, "trusted", proxy_command_attack("local", &marker)).await;
    let refused = support::cr_api(&client, GROUP, other, &ns.name);
    support::create_cr(&refused, GROUP, other, "refused", proxy_command_attack("local", &marker)).await;

    support::wait_for_condition(&trusted, "trusted", "Successful", "True", WAIT).await;
    let (reason, _) = failure_message(&refused, "refused").await;
    assert_eq!(reason, "ReservedVariable");
    let log = operator.log();
    assert!(
        log.contains("this kind's CRs may set Ansible's own variables (trustCRVariables)"),
        "the operator warns at start for the trusted kind:\n{log}"
    );
}
