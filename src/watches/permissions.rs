//! `permissions`: the RBAC rules a kind's runs act with. Each rule is an RBAC `PolicyRule`
//! (`apiGroups`, `resources`, `verbs`, optional `resourceNames`) with where it holds: the CR's own
//! namespace (the default; for a cluster-scoped CR, the cluster), named `namespaces`, or
//! `scope: cluster`. The proxy refuses a run's request no rule allows (`crate::proxy::rights`), and
//! `ansible-operator rbac` writes the Roles that grant exactly these rules.

use serde_json::Value;

use super::Gvk;
use super::error::{EntryRef, Error};
use super::fields::{Fields, describe};

/// The verbs a request through the proxy is one of (as the API server names them), and `*`.
pub const VERBS: [&str; 9] =
    ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"];

const RULE_KEYS: [&str; 6] = ["apiGroups", "resources", "verbs", "resourceNames", "scope", "namespaces"];

/// Where a rule holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Scope {
    /// The CR's own namespace; for a cluster-scoped CR, the cluster.
    #[default]
    Own,
    /// These namespaces.
    Namespaces(Vec<String>),
    /// Every namespace, and cluster-scoped resources.
    Cluster,
}

/// One declared rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// API groups (`""` for the core group, `*` for any).
    pub api_groups: Vec<String>,
    /// Resources, `resource/subresource`, `*` or `*/subresource`.
    pub resources: Vec<String>,
    /// Verbs among [`VERBS`].
    pub verbs: Vec<String>,
    /// Object names; empty for any.
    pub resource_names: Vec<String>,
    /// Where it holds.
    pub scope: Scope,
}

/// The ServiceAccount (in the operator's namespace) a kind's runs act as with `--kind-identities`:
/// `run-<kind>.<group>`, lowercased (`run-memcached.cache.example.com`).
pub fn kind_account(gvk: &Gvk) -> String {
    let kind = gvk.kind.to_lowercase();
    if gvk.group.is_empty() {
        format!("run-{kind}")
    } else {
        format!("run-{kind}.{}", gvk.group.to_lowercase())
    }
}

/// Reads `permissions`: absent is `None` (the runs act with the operator's whole identity, as
/// upstream's); a list, even empty, is what the runs may do besides reading and updating their own
/// CR.
pub(super) fn read(fields: &mut Fields, at: &EntryRef) -> Result<Option<Vec<Rule>>, Error> {
    let Some(items) = fields.list("permissions").map_err(|e| e.at(at))? else {
        return Ok(None);
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| rule(item, index, at))
        .collect::<Result<_, _>>()
        .map(Some)
}

fn rule(item: Value, index: usize, at: &EntryRef) -> Result<Rule, Error> {
    let field = |key: &str| format!("permissions[{index}].{key}");
    let bad = |field: String, reason: String| Error::Permissions { at: at.boxed(), field, reason };
    let Value::Object(mut map) = item else {
        return Err(bad(format!("permissions[{index}]"), format!("{} is not a mapping", describe(&item))));
    };
    if let Some(unknown) = map.keys().find(|key| !RULE_KEYS.contains(&key.as_str())) {
        let known = RULE_KEYS.join(", ");
        return Err(bad(field(unknown), format!("is not a rule's key (known: {known})")));
    }
    let mut strings = |key: &str, required: bool| -> Result<Vec<String>, Error> {
        let values = match map.remove(key) {
            None if required => return Err(bad(field(key), "is required".into())),
            None => return Ok(Vec::new()),
            Some(Value::Array(values)) => values,
            Some(other) => {
                return Err(bad(field(key), format!("{} is not a list of strings", describe(&other))));
            }
        };
        let values: Vec<String> = values
            .into_iter()
            .map(|value| match value {
                Value::String(text) => Ok(text),
                other => Err(bad(field(key), format!("{} is not a string", describe(&other)))),
            })
            .collect::<Result<_, _>>()?;
        if required && values.is_empty() {
            return Err(bad(field(key), "is empty: the rule would allow nothing".into()));
        }
        Ok(values)
    };
    let api_groups = strings("apiGroups", true)?;
    let resources = strings("resources", true)?;
    let verbs = strings("verbs", true)?;
    let resource_names = strings("resourceNames", false)?;
    let namespaces = strings("namespaces", false)?;
    if let Some(verb) = verbs.iter().find(|verb| !VERBS.contains(&verb.as_str())) {
        return Err(bad(field("verbs"), format!("{verb:?} is not one of {}", VERBS.join(", "))));
    }
    if let Some(resource) = resources.iter().find(|r| r.is_empty() || r.split('/').count() > 2) {
        return Err(bad(
            field("resources"),
            format!("{resource:?} is not a resource or resource/subresource"),
        ));
    }
    let scope = match (map.remove("scope"), namespaces.is_empty()) {
        (None, true) => Scope::Own,
        (None, false) => Scope::Namespaces(namespaces),
        (Some(Value::String(scope)), true) if scope == "namespace" => Scope::Own,
        (Some(Value::String(scope)), true) if scope == "cluster" => Scope::Cluster,
        (Some(_), false) => {
            return Err(bad(
                field("scope"),
                "is given with namespaces: a rule holds in one or the other".into(),
            ));
        }
        (Some(other), true) => {
            return Err(bad(
                field("scope"),
                format!("{} is not one of \"namespace\" (the CR's own), \"cluster\"", describe(&other)),
            ));
        }
    };
    Ok(Rule { api_groups, resources, verbs, resource_names, scope })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> Result<Option<Vec<Rule>>, String> {
        let at = EntryRef { file: PathBuf::from("watches.yaml"), number: 1, gvk: None };
        let Value::Object(map) = json!({ "permissions": value }) else { unreachable!() };
        let (mut fields, _) = Fields::split(map, &["permissions"], "");
        read(&mut fields, &at).map_err(|e| e.to_string())
    }

    #[test]
    fn rules_read_with_their_scope() {
        let rules = parse(json!([
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "namespaces": ["shared"],
             "resourceNames": ["settings"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"], "scope": "cluster"},
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(rules[0].scope, Scope::Own);
        assert_eq!(rules[1].scope, Scope::Namespaces(vec!["shared".into()]));
        assert_eq!(rules[1].resource_names, ["settings"]);
        assert_eq!(rules[2].scope, Scope::Cluster);
        assert_eq!(parse(json!([])).unwrap(), Some(Vec::new()));
    }

    #[test]
    fn a_broken_rule_is_named_with_its_field_and_value() {
        let cases = [
            (json!([{"resources": ["pods"], "verbs": ["get"]}]), "permissions[0].apiGroups\": is required"),
            (
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["crate"]}]),
                "\"crate\" is not one of get",
            ),
            (json!([{"apiGroups": [""], "resources": ["pods"], "verbs": []}]), "is empty"),
            (
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "scope": "world"}]),
                "\"world\"",
            ),
            (
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "scope": "cluster", "namespaces": ["a"]}]),
                "one or the other",
            ),
            (
                json!([{"apiGroups": [""], "resources": ["pods"], "verb": ["get"]}]),
                "permissions[0].verb\": is not a rule's key",
            ),
            (json!([{"apiGroups": [""], "resources": ["a/b/c"], "verbs": ["get"]}]), "\"a/b/c\""),
            (json!("all"), "permissions"),
        ];
        for (value, expected) in cases {
            let error = parse(value.clone()).expect_err(&value.to_string());
            assert!(error.contains(expected), "{value}: {error}");
            assert!(error.starts_with("watches.yaml"), "{error}");
        }
    }
}
