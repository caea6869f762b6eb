//! The Ansible settings the project's manager Deployment gives its container, so that the
//! operator in the command's process runs playbooks as the deployed manager does: upstream's
//! scaffold sets `ANSIBLE_GATHERING=explicit` there (role runs skip fact gathering), and so does
//! this repository's `deploy/`. Only `ANSIBLE_*` variables with a literal value are taken, and not
//! those whose value names a path: a path is the image's, not this machine's. A variable set in the
//! command's own environment wins.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

/// Where the manager's manifest is: the scaffold's, else this repository's layout.
const MANIFESTS: [&str; 2] = ["config/manager/manager.yaml", "deploy/manager/manager.yaml"];

/// Environment variables: name, value.
pub(super) type Settings = Vec<(String, String)>;

/// The manager's Ansible settings from the first manifest of [`MANIFESTS`] in
/// `project`, less those the environment sets; none when there is no manifest.
pub(super) fn ansible_settings(
    project: &Path,
    is_set: impl Fn(&str) -> bool,
) -> anyhow::Result<(Option<PathBuf>, Settings)> {
    let Some(file) = MANIFESTS.iter().map(|name| project.join(name)).find(|file| file.is_file()) else {
        return Ok((None, Vec::new()));
    };
    let text = std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
    let documents: Vec<Value> =
        serde_saphyr::from_str_multiple(&text).with_context(|| format!("parse {}", file.display()))?;
    let settings = from_documents(&documents).into_iter().filter(|(name, _)| !is_set(name)).collect();
    Ok((Some(file), settings))
}

/// The settings of the Deployment's container named `manager` (the scaffold's), else its first.
fn from_documents(documents: &[Value]) -> Settings {
    let Some(deployment) = documents.iter().find(|document| document["kind"] == "Deployment") else {
        return Vec::new();
    };
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array();
    let container = containers.and_then(|containers| {
        containers.iter().find(|container| container["name"] == "manager").or_else(|| containers.first())
    });
    let env =
        container.and_then(|container| container["env"].as_array()).map(Vec::as_slice).unwrap_or_default();
    env.iter()
        .filter_map(|var| Some((var["name"].as_str()?, var["value"].as_str()?)))
        .filter(|(name, value)| name.starts_with("ANSIBLE_") && !value.contains('/'))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCAFFOLD: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: controller-manager}
spec:
  template:
    spec:
      containers:
        - name: kube-rbac-proxy
          env: [{name: ANSIBLE_VERBOSITY, value: "4"}]
        - name: manager
          env:
            - {name: ANSIBLE_GATHERING, value: explicit}
            - {name: ANSIBLE_DEBUG_LOGS, value: "False"}
            - {name: ANSIBLE_ROLES_PATH, value: /opt/ansible/roles}
            - {name: WATCH_NAMESPACE, value: ""}
            - name: ANSIBLE_FROM_A_SECRET
              valueFrom: {secretKeyRef: {name: s, key: k}}
"#;

    #[test]
    fn the_manager_containers_literal_ansible_settings_without_paths() {
        let documents: Vec<Value> = serde_saphyr::from_str_multiple(SCAFFOLD).unwrap();
        assert_eq!(
            from_documents(&documents),
            [
                ("ANSIBLE_GATHERING".to_string(), "explicit".to_string()),
                ("ANSIBLE_DEBUG_LOGS".into(), "False".into())
            ]
        );
    }

    #[test]
    fn the_environment_wins_and_no_manifest_means_no_settings() {
        let dir = std::env::temp_dir().join(format!("manager-env-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("config/manager")).unwrap();
        assert_eq!(ansible_settings(&dir, |_| false).unwrap(), (None, Vec::new()));
        let file = dir.join("config/manager/manager.yaml");
        std::fs::write(&file, SCAFFOLD).unwrap();
        let (found, settings) = ansible_settings(&dir, |name| name == "ANSIBLE_GATHERING").unwrap();
        assert_eq!(found, Some(file));
        assert_eq!(settings, [("ANSIBLE_DEBUG_LOGS".to_string(), "False".to_string())]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
