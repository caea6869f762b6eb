//! What a playbook receives as extra vars, observed from inside a real Ansible run: the playbook
//! records the variables it sees in a ConfigMap and the tests compare keys and values.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "core.test.example.com";
const KIND: &str = "VarsProbe";
const WAIT: Duration = Duration::from_secs(180);
const OBJECT_VAR: &str = "_core_test_example_com_varsprobe";
const SPEC_VAR: &str = "_core_test_example_com_varsprobe_spec";
const UNDEFINED: &str = "<undefined>";

/// A watch on the vars-recording playbook, asking it to record `names`; `fields` are further
/// lines of the entry and `vars` further lines of its `vars`.
fn watches(names: &[&str], fields: &str, vars: &str) -> String {
    let names = serde_json::to_string(names).unwrap();
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/dump_vars.yml\n{fields}  vars:\n    probe_names: {names}\n{vars}"
    )
}

/// Starts an operator on `watches`, creates one CR with `spec` and returns the vars its run saw.
async fn vars_seen(prefix: &str, watches: &str, spec: Value) -> (Value, String) {
    let Test { client, ns, api } = Test::setup(prefix).kind(GROUP, KIND).build().await;
    let _operator = OperatorConfig::new(watches, &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "probe", spec).await;
    support::wait_for_condition(&api, "probe", "Successful", "True", WAIT).await;
    let data = support::configmaps::wait_for(&client, &ns.name, "probe-vars", WAIT).await;
    let vars = serde_json::from_str(&data["vars"]).expect("the playbook wrote JSON");
    (vars, ns.name.clone())
}

#[tokio::test]
async fn spec_keys_arrive_snake_cased_beside_meta_the_full_object_and_the_raw_spec() {
    let spec = json!({
        "sizeK8sBuckets": 3,
        "ThisShouldHaveUnderscores": "keepMeCamel",
        "nestedMap": {"innerKey": {"deepKey": 1}, "otherKey": [1, 2]},
        "listOfMaps": [{"itemKey": "aValue"}, {"IPsAllowed": ["10.0.0.1"]}],
        "ansibleOperatorMeta": "from the spec",
        "overriddenByWatch": "from the spec",
    });
    let names = [
        "size_k8s_buckets",
        "_this_should_have_underscores",
        "nested_map",
        "list_of_maps",
        "ansible_operator_meta",
        "overridden_by_watch",
        "sizeK8sBuckets",
        "nestedMap",
        OBJECT_VAR,
        SPEC_VAR,
    ];
    let watches = watches(&names, "", "    overridden_by_watch: from the watch\n");
    let (vars, namespace) = vars_seen("vars-snake", &watches, spec.clone()).await;

    assert_eq!(vars["size_k8s_buckets"], 3);
    assert_eq!(vars["_this_should_have_underscores"], "keepMeCamel");
    assert_eq!(vars["nested_map"], json!({"inner_key": {"deep_key": 1}, "other_key": [1, 2]}));
    assert_eq!(vars["list_of_maps"], json!([{"item_key": "aValue"}, {"_ips_allowed": ["10.0.0.1"]}]));
    assert_eq!(
        vars["ansible_operator_meta"],
        json!({"name": "probe", "namespace": namespace}),
        "meta is merged after the spec keys, so it wins"
    );
    assert_eq!(vars["overridden_by_watch"], "from the watch", "watch vars are merged last");
    assert_eq!(vars["sizeK8sBuckets"], UNDEFINED);
    assert_eq!(vars["nestedMap"], UNDEFINED);

    let object = &vars[OBJECT_VAR];
    assert_eq!(object["apiVersion"], format!("{GROUP}/v1alpha1"));
    assert_eq!(object["kind"], KIND);
    assert_eq!(object["metadata"]["name"], "probe");
    assert_eq!(object["metadata"]["namespace"], namespace);
    assert_eq!(object["spec"], spec, "the full object carries the raw spec");
    assert_eq!(vars[SPEC_VAR], spec, "the spec var is not converted");
}

#[tokio::test]
async fn spec_keys_arrive_unconverted_when_snake_case_parameters_is_false() {
    let spec = json!({"sizeK8sBuckets": 3, "nestedMap": {"innerKey": [{"deepKey": 1}]}});
    let names = ["sizeK8sBuckets", "nestedMap", "size_k8s_buckets", "nested_map", SPEC_VAR];
    let watches = watches(&names, "  snakeCaseParameters: false\n", "");
    let (vars, _) = vars_seen("vars-verbatim", &watches, spec.clone()).await;

    assert_eq!(vars["sizeK8sBuckets"], 3);
    assert_eq!(vars["nestedMap"], json!({"innerKey": [{"deepKey": 1}]}));
    assert_eq!(vars["size_k8s_buckets"], UNDEFINED);
    assert_eq!(vars["nested_map"], UNDEFINED);
    assert_eq!(vars[SPEC_VAR], spec);
}

#[tokio::test]
async fn mark_unsafe_delivers_jinja_in_the_spec_literally() {
    let spec = json!({"templateMe": "{{ 1 + 1 }}", "nested": {"deep": ["{{ 2 + 2 }}"]}, "size": 3});
    let names = ["template_me", "nested", "size", SPEC_VAR];
    let watches = watches(&names, "  markUnsafe: true\n", "");
    let (vars, _) = vars_seen("vars-unsafe", &watches, spec.clone()).await;

    assert_eq!(vars["template_me"], "{{ 1 + 1 }}");
    assert_eq!(vars["nested"], json!({"deep": ["{{ 2 + 2 }}"]}));
    assert_eq!(vars["size"], 3, "non-strings are not wrapped");
    assert_eq!(vars[SPEC_VAR]["templateMe"], "{{ 1 + 1 }}");
}

#[tokio::test]
async fn by_default_a_cr_cannot_make_the_operator_run_code() {
    let attack = "{{ lookup('pipe', 'id -un') }}";
    let spec = json!({"message": attack, "nested": {"list": ["{% if true %}x{% endif %}", "plain"]}, "plain": "a { b }"});
    let names = ["message", "nested", "plain", SPEC_VAR, OBJECT_VAR];
    let (vars, _) = vars_seen("vars-inert", &watches(&names, "", ""), spec).await;

    assert_eq!(vars["message"], attack, "the lookup stayed text");
    assert_eq!(vars["nested"], json!({"list": ["{% if true %}x{% endif %}", "plain"]}));
    assert_eq!(vars["plain"], "a { b }", "strings without a delimiter are passed as before");
    assert_eq!(vars[SPEC_VAR]["message"], attack);
    assert_eq!(vars[OBJECT_VAR]["spec"]["message"], attack);
}

#[tokio::test]
async fn trusted_cr_templates_are_evaluated_as_upstream_does() {
    let spec = json!({"templateMe": "{{ 1 + 1 }}", "who": "{{ lookup('pipe', 'id -un') }}"});
    let watches = watches(&["template_me", "who"], "  trustCRTemplates: true\n", "");
    let (vars, _) = vars_seen("vars-trusted", &watches, spec).await;

    let value = &vars["template_me"];
    assert!(value == 2 || value == "2", "templated to 2, got {value}");
    let user =
        String::from_utf8(std::process::Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    assert_eq!(vars["who"], user.trim(), "the lookup ran on the operator's host");
}
