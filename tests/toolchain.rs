//! The Ansible toolchain: `version` reports the versions in use, and playbooks written for
//! upstream's base image (ansible-core 2.18) behave as there on the default toolchain. The newer
//! toolchain's slice runs only the version test (2.19 rejects those playbooks by design).

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::operator::{OperatorConfig, command, venv};
use support::setup::Test;

const GROUP: &str = "toolchain.test.example.com";
const KIND: &str = "Habit";

/// What the venv's own interpreter says of a distribution's version.
fn installed(distribution: &str) -> String {
    let output = std::process::Command::new(venv().join("bin/python"))
        .args(["-c", &format!("import importlib.metadata as m; print(m.version({distribution:?}))")])
        .output()
        .expect("run the venv's python");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[test]
fn version_reports_the_ansible_core_and_runner_of_the_venv_in_use() {
    let output = command(support::repo()).arg("version").output().expect("run ansible-operator version");
    assert!(output.status.success());
    let line = String::from_utf8(output.stdout).unwrap();
    let core = installed("ansible-core");
    assert!(line.starts_with("ansible-operator version: \""), "upstream's first field: {line}");
    assert!(line.contains(&format!("ansible-core: \"{core}\"")), "{line}");
    assert!(line.contains(&format!("ansible-runner: \"{}\"", installed("ansible-runner"))), "{line}");
    assert!(line.contains("python: \"3."), "{line}");
}

#[test]
fn the_default_toolchain_is_upstreams_base_image_line() {
    assert!(installed("ansible-core").starts_with("2.18."), "ansible-core {}", installed("ansible-core"));
    assert_eq!(installed("kubernetes"), "33.1.0");
    assert_eq!(installed("ansible-runner"), "2.4.3");
}

#[tokio::test]
async fn a_number_as_condition_and_a_one_expression_value_work_as_on_upstreams_image() {
    let Test { client, ns, api } = Test::setup("toolchain-habits").kind(GROUP, KIND).build().await;
    let watches = support::playbook_watch(GROUP, KIND, "upstream_image_habits.yml");
    let _operator = OperatorConfig::new(&watches, &ns.name).start();
    support::create_cr(&api, GROUP, KIND, "habits", json!({})).await;
    support::wait_for_condition(&api, "habits", "Successful", "True", Duration::from_secs(180)).await;
    let data = support::configmaps::data(&client, &ns.name, "habits-count").await.expect("ConfigMap written");
    assert_eq!(data["count"], "3", "the count is the string \"3\"");
}
