//! Checking a rendered inventory the way Ansible's YAML inventory plugin reads it, so a mistake
//! becomes a `Failure` naming where it is instead of a run against "only localhost".

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::watches::describe;

/// Keys a group may have.
const GROUP_KEYS: [&str; 3] = ["hosts", "vars", "children"];

/// Why a rendered inventory is not one Ansible would read as intended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inventory: {0}")]
pub struct Error(String);

/// Parses a rendered YAML inventory and returns its hosts, each once, sorted.
pub fn hosts(text: &str) -> Result<Vec<String>, Error> {
    // The parser's message shows the offending rendered lines.
    let document: Value = serde_saphyr::from_str(text)
        .map_err(|err| Error(format!("rendered text is not valid YAML: {err}")))?;
    let groups = match document {
        Value::Object(groups) => groups,
        Value::Null => return Err(Error("rendered inventory is empty".into())),
        other => {
            return Err(Error(format!(
                "the top level must be a mapping of groups, found {}",
                describe(&other)
            )));
        }
    };
    let mut hosts = BTreeSet::new();
    for (name, group) in &groups {
        read_group(name, group, &mut hosts)?;
    }
    if hosts.is_empty() {
        return Err(Error("rendered inventory has no hosts".into()));
    }
    Ok(hosts.into_iter().collect())
}

fn read_group(path: &str, group: &Value, hosts: &mut BTreeSet<String>) -> Result<(), Error> {
    let group = match group {
        Value::Null => return Ok(()),
        Value::Object(group) => group,
        other => return Err(Error(format!("group {path:?} must be a mapping, found {}", describe(other)))),
    };
    for key in group.keys() {
        if !GROUP_KEYS.contains(&key.as_str()) {
            return Err(Error(format!(
                "group {path:?}: unexpected key {key:?} (a group has hosts, vars, children)"
            )));
        }
    }
    match group.get("hosts") {
        None | Some(Value::Null) => {}
        Some(Value::Object(entries)) => {
            for (host, vars) in entries {
                if !matches!(vars, Value::Null | Value::Object(_)) {
                    return Err(Error(format!(
                        "group {path:?}: host {host:?} must map to its variables or nothing, found {}",
                        describe(vars)
                    )));
                }
                hosts.insert(host.clone());
            }
        }
        Some(other) => {
            return Err(Error(format!(
                "group {path:?}: hosts must be a mapping of host names, found {}",
                describe(other)
            )));
        }
    }
    if let Some(vars) = group.get("vars").filter(|v| !matches!(v, Value::Null | Value::Object(_))) {
        return Err(Error(format!("group {path:?}: vars must be a mapping, found {}", describe(vars))));
    }
    match group.get("children") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(children)) => children_of(path, children, hosts),
        Some(other) => {
            Err(Error(format!("group {path:?}: children must be a mapping, found {}", describe(other))))
        }
    }
}

fn children_of(path: &str, children: &Map<String, Value>, hosts: &mut BTreeSet<String>) -> Result<(), Error> {
    for (name, child) in children {
        read_group(&format!("{path}.{name}"), child, hosts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_come_from_groups_and_children_each_once() {
        let text = "etcd:\n  hosts:\n    a: {ansible_host: 127.0.0.1}\n    b:\n  vars: {x: 1}\nall:\n  children:\n    extra:\n      hosts:\n        c:\n        a:\n";
        assert_eq!(hosts(text).unwrap(), ["a", "b", "c"]);
    }

    #[test]
    fn a_list_of_hosts_is_named_as_the_mistake() {
        let err = hosts("etcd:\n  hosts: [a, b]\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "inventory: group \"etcd\": hosts must be a mapping of host names, found a list"
        );
    }

    #[test]
    fn unknown_group_keys_and_bad_children_are_errors() {
        assert_eq!(
            hosts("etcd:\n  host:\n    a:\n").unwrap_err().to_string(),
            "inventory: group \"etcd\": unexpected key \"host\" (a group has hosts, vars, children)"
        );
        assert_eq!(
            hosts("all:\n  children:\n    db: [x]\n").unwrap_err().to_string(),
            "inventory: group \"all.db\" must be a mapping, found a list"
        );
    }

    #[test]
    fn empty_or_hostless_inventories_are_errors() {
        assert_eq!(hosts("").unwrap_err().to_string(), "inventory: rendered inventory is empty");
        assert_eq!(
            hosts("etcd:\n  hosts:\n").unwrap_err().to_string(),
            "inventory: rendered inventory has no hosts"
        );
    }

    #[test]
    fn yaml_errors_show_the_rendered_line() {
        let err = hosts("etcd:\n  hosts:\n    a: {ansible_host: [\n").unwrap_err().to_string();
        assert!(
            err.starts_with("inventory: rendered text is not valid YAML: error: line 3 column 23"),
            "{err}"
        );
        assert!(err.contains("3 |     a: {ansible_host: ["), "{err}");
    }
}
