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

#[cfg(test)]
mod fuzz {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::proptest_support::{config, json, text};
    use crate::template;

    /// A group of a valid inventory: hosts, vars and child groups.
    fn group() -> impl Strategy<Value = Value> {
        let hosts = proptest::collection::btree_map(
            "[a-z0-9.-]{1,10}",
            prop_oneof![Just(Value::Null), Just(json!({"ansible_host": "127.0.0.1"}))],
            0..4,
        );
        let leaf = (hosts, any::<bool>()).prop_map(|(hosts, vars)| {
            let mut group = json!({"hosts": Value::Object(hosts.into_iter().collect())});
            if vars {
                group["vars"] = json!({"ansible_user": "x"});
            }
            group
        });
        leaf.prop_recursive(3, 16, 3, |inner| {
            (inner.clone(), proptest::collection::btree_map("[a-z]{1,6}", inner, 1..3)).prop_map(
                |(mut group, children)| {
                    group["children"] = Value::Object(children.into_iter().collect());
                    group
                },
            )
        })
    }

    fn all_hosts(group: &Value, hosts: &mut BTreeSet<String>) {
        if let Some(entries) = group["hosts"].as_object() {
            hosts.extend(entries.keys().cloned());
        }
        if let Some(children) = group["children"].as_object() {
            children.values().for_each(|child| all_hosts(child, hosts));
        }
    }

    /// Paths (`all.db`) of groups and every mapping in `inventory`, to find where a mutation went.
    fn groups(prefix: &str, map: &Map<String, Value>, out: &mut Vec<String>) {
        for (name, group) in map {
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            out.push(path.clone());
            if let Some(children) = group["children"].as_object() {
                groups(&path, children, out);
            }
        }
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn any_text_yields_hosts_or_an_error_saying_what_is_wrong(text in prop_oneof![
            text(),
            json().prop_map(|value| serde_saphyr::to_string(&value).unwrap_or_default()),
        ]) {
            match hosts(&text) {
                Ok(hosts) => prop_assert!(!hosts.is_empty()),
                Err(error) => prop_assert!(error.to_string().starts_with("inventory: "), "{error}"),
            }
        }

        #[test]
        fn valid_inventories_yield_every_host_once(inventory in proptest::collection::btree_map("[a-z]{1,6}", group(), 1..4), block in any::<bool>()) {
            let inventory = Value::Object(inventory.into_iter().collect());
            let text = if block { serde_saphyr::to_string(&inventory).unwrap() } else { inventory.to_string() };
            let mut want = BTreeSet::new();
            inventory.as_object().unwrap().values().for_each(|group| all_hosts(group, &mut want));
            match hosts(&text) {
                Ok(found) => prop_assert_eq!(found, want.into_iter().collect::<Vec<_>>()),
                Err(error) => prop_assert!(want.is_empty() && error.to_string() == "inventory: rendered inventory has no hosts", "{text}: {error}"),
            }
        }

        #[test]
        fn a_wrong_value_in_a_group_is_named_with_the_group(
            inventory in proptest::collection::btree_map("[a-z]{1,6}", group(), 1..4),
            pick in any::<prop::sample::Index>(),
            key in proptest::sample::select(&["hosts", "vars", "children"][..]),
            value in prop_oneof![Just(json!([1, 2])), "[a-z]{1,6}".prop_map(Value::from), any::<i32>().prop_map(Value::from)],
        ) {
            let mut inventory: Map<String, Value> = inventory.into_iter().collect();
            let mut paths = Vec::new();
            groups("", &inventory, &mut paths);
            let path = pick.get(&paths).clone();
            let mut target = &mut inventory[path.split('.').next().unwrap()];
            for name in path.split('.').skip(1) {
                target = &mut target["children"][name];
            }
            target[key] = value.clone();
            let message = hosts(&Value::Object(inventory).to_string()).map_err(|error| error.to_string());
            let message = message.err().unwrap_or_default();
            prop_assert!(message.contains(&format!("group {path:?}")), "{message}");
            prop_assert!(message.contains(&describe(&value)), "{message}");
        }

        #[test]
        fn any_template_and_cr_render_or_fail_naming_the_field(source in text(), object in json()) {
            match template::check("inventory", &source) {
                Ok(()) => {
                    if let Err(error) = template::render("inventory", &source, &object) {
                        prop_assert!(error.to_string().starts_with("inventory: "), "{error}");
                    }
                }
                Err(error) => prop_assert!(error.to_string().starts_with("inventory: "), "{error}"),
            }
        }
    }
}
