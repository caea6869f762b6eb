//! Variables a CR may not set: Ansible's own. A spec key becomes an extra var, the highest
//! precedence Ansible has, so `spec.ansibleConnection: ssh` with `spec.ansibleSshCommonArgs` holding
//! a `ProxyCommand` would run a command on the operator's host. A CR chooses the values of the
//! playbook's variables, never Ansible's.

use serde_json::{Map, Value};

use super::{META_KEY, VarsInput, object_key, to_snake};

/// Every variable Ansible reads for a connection, become method, interpreter or module default
/// starts with this (`ansible_connection`, `ansible_ssh_common_args`, `ansible_become_exe`,
/// `ansible_python_interpreter`, `ansible_shell_executable`, `ansible_facts`, ...).
pub const ANSIBLE_PREFIX: &str = "ansible_";

/// The magic variables Ansible sets itself that do not start with `ansible_`, from ansible-core
/// 2.18.19 (the pinned toolchain): `ansible.constants.INTERNAL_STATIC_VARS` without its `ansible_*`
/// names, plus `environment` and `vars`, which `VariableManager.get_vars` (`ansible/vars/manager.py`)
/// sets for every task.
///
/// `ansible.vars.reserved._RESERVED_NAMES` is not used whole: besides `environment` and `vars` it
/// holds play keywords (`name`, `hosts`, `port`, `namespace`, `timeout`, `tags`, ...) and Jinja
/// globals (`lookup`, `query`, `now`, ...). A variable of such a name changes nothing Ansible does
/// (Ansible only warns; a CR's JSON value is never callable), and upstream operators take spec keys
/// such as `hosts`, `name` and `port` (our EtcdCluster does).
pub const MAGIC_VARIABLES: [&str; 16] = [
    "environment",
    "group_names",
    "groups",
    "hostvars",
    "inventory_dir",
    "inventory_file",
    "inventory_hostname",
    "inventory_hostname_short",
    "omit",
    "play_hosts",
    "playbook_dir",
    "role_name",
    "role_names",
    "role_path",
    "role_uuid",
    "vars",
];

/// Whether `name` is a variable Ansible itself reads or sets.
#[must_use]
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(ANSIBLE_PREFIX) || MAGIC_VARIABLES.contains(&name)
}

/// One spec key that would set one of Ansible's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// The spec key as the CR writes it.
    pub key: String,
    /// The variable it becomes.
    pub variable: String,
}

/// A CR whose spec would set Ansible's own variables: it is not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}, which a CR may not set (watch trustCRVariables: true allows it)", describe(.0))]
pub struct ReservedVariables(pub Vec<Reserved>);

fn describe(found: &[Reserved]) -> String {
    let each: Vec<String> = found
        .iter()
        .map(|r| format!("spec.{} would set the Ansible variable {}", r.key, r.variable))
        .collect();
    each.join("; ")
}

/// Checks the variables the CR's spec keys become in [`super::extra_vars`] with the same `input`:
/// the name Ansible sees (after snake_case), unless one of ours replaces it (`ansible_operator_meta`,
/// `_<group>_<kind>`, `_<group>_<kind>_spec`, the watch's and finalizer's `vars`), since then the
/// CR's value never reaches Ansible.
pub fn check(input: &VarsInput) -> Result<(), ReservedVariables> {
    let Some(Value::Object(spec)) = input.object.get("spec") else { return Ok(()) };
    let object_key = object_key(input.group, input.kind);
    let spec_key = format!("{object_key}_spec");
    let ours = |name: &str| {
        name == META_KEY
            || name == object_key
            || name == spec_key
            || input.watch_vars.contains_key(name)
            || input.finalizer_vars.is_some_and(|vars: &Map<String, Value>| vars.contains_key(name))
    };
    let found: Vec<Reserved> = spec
        .keys()
        .map(|key| {
            let variable = if input.snake_case_parameters { to_snake(key) } else { key.clone() };
            Reserved { key: key.clone(), variable }
        })
        .filter(|r| is_reserved(&r.variable) && !ours(&r.variable))
        .collect();
    if found.is_empty() { Ok(()) } else { Err(ReservedVariables(found)) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::vars::UnsafeStrings;

    fn check_spec(
        spec: Value,
        snake_case_parameters: bool,
        watch_vars: Value,
    ) -> Result<(), ReservedVariables> {
        let object = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": spec});
        let Value::Object(watch_vars) = watch_vars else { panic!("watch vars must be a map") };
        check(&VarsInput {
            object: &object,
            group: "etcd.example.com",
            kind: "EtcdCluster",
            snake_case_parameters,
            unsafe_strings: UnsafeStrings::All,
            watch_vars: &watch_vars,
            finalizer_vars: None,
        })
    }

    fn refused(spec: Value) -> Vec<(String, String)> {
        match check_spec(spec, true, json!({})) {
            Ok(()) => vec![],
            Err(ReservedVariables(found)) => found.into_iter().map(|r| (r.key, r.variable)).collect(),
        }
    }

    fn pair(key: &str, variable: &str) -> (String, String) {
        (key.to_string(), variable.to_string())
    }

    #[test]
    fn a_spec_key_that_becomes_a_connection_variable_is_refused_naming_key_and_variable() {
        let error = check_spec(json!({"ansibleConnection": "ssh", "size": 3}), true, json!({})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.ansibleConnection would set the Ansible variable ansible_connection, which a CR may not \
             set (watch trustCRVariables: true allows it)"
        );
    }

    #[test]
    fn every_key_that_would_set_an_ansible_variable_is_named() {
        let spec = json!({
            "ansibleConnection": "ssh",
            "ansibleSshCommonArgs": "-o ProxyCommand=x",
            "ansible_python_interpreter": "/bin/sh",
            "ansibleBecomeExe": "x",
            "ansibleShellExecutable": "x",
            "size": 1
        });
        assert_eq!(
            refused(spec),
            vec![
                pair("ansibleBecomeExe", "ansible_become_exe"),
                pair("ansibleConnection", "ansible_connection"),
                pair("ansibleShellExecutable", "ansible_shell_executable"),
                pair("ansibleSshCommonArgs", "ansible_ssh_common_args"),
                pair("ansible_python_interpreter", "ansible_python_interpreter"),
            ]
        );
    }

    #[test]
    fn magic_variables_are_refused_under_any_spelling_that_becomes_them() {
        for (key, variable) in [
            ("hostvars", "hostvars"),
            ("groups", "groups"),
            ("groupNames", "group_names"),
            ("inventoryHostname", "inventory_hostname"),
            ("inventoryHostnameShort", "inventory_hostname_short"),
            ("inventoryDir", "inventory_dir"),
            ("inventoryFile", "inventory_file"),
            ("playbookDir", "playbook_dir"),
            ("rolePath", "role_path"),
            ("roleName", "role_name"),
            ("omit", "omit"),
            ("environment", "environment"),
            ("playHosts", "play_hosts"),
            ("vars", "vars"),
            ("ansiblePlayHosts", "ansible_play_hosts"),
        ] {
            assert_eq!(refused(json!({key: 1})), vec![pair(key, variable)], "{key}");
        }
    }

    #[test]
    fn the_check_is_on_the_name_after_snake_case() {
        // snake_case turns these into ansible_connection: refused.
        for key in ["ansible-connection", "ansible connection", " ansibleConnection ", "ansible_Connection"] {
            assert_eq!(refused(json!({key: "ssh"})), vec![pair(key, "ansible_connection")], "{key:?}");
        }
        // A leading capital gives a leading underscore: `_ansible_connection` is nobody's variable,
        // and `ansible.connection` is no variable name at all.
        for key in ["AnsibleConnection", "ANSIBLE_connection", "ansible.connection"] {
            assert_ne!(to_snake(key), "ansible_connection", "{key:?}");
            assert_eq!(refused(json!({key: "ssh"})), vec![], "{key:?}");
        }
    }

    #[test]
    fn without_snake_case_the_key_itself_is_the_variable() {
        let spec = json!({"ansible_connection": "ssh", "ansibleConnection": "ssh"});
        let error = check_spec(spec, false, json!({})).unwrap_err();
        assert_eq!(
            error.0,
            vec![Reserved { key: "ansible_connection".into(), variable: "ansible_connection".into() }]
        );
    }

    #[test]
    fn the_playbooks_own_variables_and_play_keywords_stay_the_crs() {
        let spec = json!({
            "size": 3, "hosts": [], "port": 22, "name": "x", "version": "3.5", "image": "memcached",
            "ansible": "word", "myAnsibleConnection": "x", "state": "present", "etcdctl": "x"
        });
        assert_eq!(refused(spec), vec![]);
    }

    #[test]
    fn variables_that_ours_replace_are_not_the_crs_and_not_checked() {
        // ansible_operator_meta and _<group>_<kind>[_spec] are set after the spec keys.
        let spec = json!({"ansibleOperatorMeta": 1, "_etcd_example_com_etcdcluster": 2});
        assert_eq!(refused(spec), vec![]);
        // A watch var of the same name replaces the CR's value.
        let spec = json!({"ansibleConnection": "ssh"});
        assert_eq!(check_spec(spec, true, json!({"ansible_connection": "local"})), Ok(()));
    }

    #[test]
    fn a_missing_or_non_map_spec_sets_no_variable() {
        for spec in [json!(null), json!("ansible_connection"), json!(["ansible_connection"])] {
            assert_eq!(check_spec(spec, true, json!({})), Ok(()));
        }
    }
}
