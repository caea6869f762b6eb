//! Both ways of naming what to run, a playbook or a role (by absolute path or found through
//! `ANSIBLE_ROLES_PATH`), reconcile a CR to Successful.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::operator::{OperatorConfig, fixtures};
use support::setup::Test;

const GROUP: &str = "core.test.example.com";
const KIND: &str = "ModeProbe";
const WAIT: Duration = Duration::from_secs(180);

fn watches(target: &str) -> String {
    format!("- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  {target}\n")
}

/// Creates a CR under an operator started from `config`, waits for Successful and returns the
/// `source` the marker ConfigMap recorded.
async fn marker_source(prefix: &str, target: &str, env: Option<(&str, String)>) -> String {
    let Test { client, ns, api } = Test::setup(prefix).kind(GROUP, KIND).build().await;
    let watches = watches(target);
    let mut config = OperatorConfig::new(&watches, &ns.name);
    if let Some((name, value)) = env {
        config = config.env(name, value);
    }
    let _operator = config.start();

    support::create_cr(&api, GROUP, KIND, "mode", json!({})).await;
    let done = support::wait_for_condition(&api, "mode", "Successful", "True", WAIT).await;
    assert_eq!(support::condition(&done, "Running").unwrap()["reason"], "Successful");
    let data = support::configmaps::wait_for(&client, &ns.name, "mode-marker", WAIT).await;
    data["source"].clone()
}

#[tokio::test]
async fn playbook_mode_reaches_successful() {
    let source = marker_source("mode-playbook", "playbook: {fixtures}/playbooks/marker.yml", None).await;
    assert_eq!(source, "playbook");
}

#[tokio::test]
async fn role_given_by_absolute_path_reaches_successful_with_its_defaults() {
    let source = marker_source("mode-role-path", "role: {fixtures}/roles/marker", None).await;
    assert_eq!(source, "role-defaults");
}

#[tokio::test]
async fn role_found_through_ansible_roles_path_reaches_successful() {
    let roles = fixtures().join("roles").display().to_string();
    let source = marker_source("mode-role-search", "role: marker", Some(("ANSIBLE_ROLES_PATH", roles))).await;
    assert_eq!(source, "role-defaults");
}
