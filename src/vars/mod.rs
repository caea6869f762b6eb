//! Extra vars: what a playbook receives, built from the CR exactly as upstream does.

mod reserved;
mod snake_case;
mod unsafe_wrap;

pub use reserved::{Reserved, ReservedVariables, check as check_reserved, is_reserved};
pub use snake_case::{snake_case_keys, to_snake};
pub use unsafe_wrap::{UnsafeStrings, mark_unsafe, wrap};

use serde_json::{Map, Value};

/// The variable holding the CR's name and namespace (called `meta` before upstream v1.0).
pub const META_KEY: &str = "ansible_operator_meta";

/// Everything [`extra_vars`] needs about one CR and its watch entry.
#[derive(Debug, Clone, Copy)]
pub struct VarsInput<'a> {
    /// The full CR as JSON (a serialised `DynamicObject`), the freshest copy available.
    pub object: &'a Value,
    /// The watched API group (`""` for the core group).
    pub group: &'a str,
    /// The watched kind, as written in watches.yaml.
    pub kind: &'a str,
    /// Whether spec keys are converted with [`to_snake`] (watch `snakeCaseParameters`).
    pub snake_case_parameters: bool,
    /// Which CR strings are passed as unsafe text (watch `markUnsafe`, `trustCRTemplates`).
    pub unsafe_strings: UnsafeStrings,
    /// The watch entry's `vars`, passed verbatim.
    pub watch_vars: &'a Map<String, Value>,
    /// The finalizer's `vars`; `Some` only when this run is the finalizer run.
    pub finalizer_vars: Option<&'a Map<String, Value>>,
}

/// Builds the extra vars for one run; later steps overwrite keys set by earlier ones.
///
/// 1. the top-level spec keys, snake_cased unless disabled (a missing or non-map spec is `{}`);
/// 2. `ansible_operator_meta`: `{name, namespace}`, `""` when absent;
/// 3. `_<group>_<kind>`: the full object;
/// 4. `_<group>_<kind>_spec`: the unconverted spec;
/// 5. the watch vars, then the finalizer vars, verbatim.
///
/// The CR's strings in 1 to 4 are wrapped as `unsafe_strings` says: all of them by default (upstream
/// wraps those of 1, 3 and 4 with `markUnsafe`, none otherwise). The name and namespace follow the
/// API's name rules, but they are the CR author's strings too.
///
/// Mirrors upstream `runner.go makeParameters`. Keys come out sorted (this crate uses serde_json
/// without `preserve_order`), the same order Go's `encoding/json` writes a map in.
#[must_use]
pub fn extra_vars(input: &VarsInput) -> Map<String, Value> {
    let empty = Map::new();
    let spec = match input.object.get("spec") {
        Some(Value::Object(spec)) => spec,
        _ => &empty,
    };

    let which = input.unsafe_strings;
    let mut vars =
        if input.snake_case_parameters { snake_case::snake_case_map_keys(spec) } else { spec.clone() };
    vars.values_mut().for_each(|value| *value = wrap(value, which));

    vars.insert(META_KEY.to_owned(), wrap(&meta(input.object), which));

    let object_key = object_key(input.group, input.kind);
    let spec_key = format!("{object_key}_spec");
    vars.insert(object_key, wrap(input.object, which));
    vars.insert(spec_key, wrap(&Value::Object(spec.clone()), which));

    let overrides = input.finalizer_vars.into_iter().flatten();
    for (key, value) in input.watch_vars.iter().chain(overrides) {
        vars.insert(key.clone(), value.clone());
    }
    vars
}

/// The variable name holding the full CR: `_<group>_<lowercased kind>` with `.` and `-` as `_`.
///
/// For example `_cache_example_com_memcached`, or `__secret` for the core group.
#[must_use]
pub fn object_key(group: &str, kind: &str) -> String {
    format!("_{group}_{}", snake_case::go_to_lower(kind)).replace(['.', '-'], "_")
}

/// `{"name": .., "namespace": ..}`; a missing or non-string field is `""`.
fn meta(object: &Value) -> Value {
    let field = |name: &str| {
        let value = object.pointer(&format!("/metadata/{name}")).and_then(Value::as_str).unwrap_or_default();
        Value::String(value.to_owned())
    };
    let mut meta = Map::new();
    meta.insert("name".to_owned(), field("name"));
    meta.insert("namespace".to_owned(), field("namespace"));
    Value::Object(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A test fixture: a Memcached CR and the watch settings to build its vars with.
    struct Fixture {
        object: Value,
        group: &'static str,
        kind: &'static str,
        snake_case_parameters: bool,
        unsafe_strings: UnsafeStrings,
        watch_vars: Map<String, Value>,
        finalizer_vars: Option<Map<String, Value>>,
    }

    impl Fixture {
        fn memcached() -> Self {
            Self {
                object: json!({
                    "apiVersion": "cache.example.com/v1alpha1",
                    "kind": "Memcached",
                    "metadata": {"name": "sample", "namespace": "ns1"},
                    "spec": {"size": 3, "fooBar": "{{ x }}", "nestedMap": {"innerKey": ["a"]}},
                    "status": {"conditions": []}
                }),
                group: "cache.example.com",
                kind: "Memcached",
                snake_case_parameters: true,
                unsafe_strings: UnsafeStrings::None,
                watch_vars: Map::new(),
                finalizer_vars: None,
            }
        }

        fn unsafe_marked(mut self) -> Self {
            self.unsafe_strings = UnsafeStrings::All;
            self
        }

        fn verbatim_keys(mut self) -> Self {
            self.snake_case_parameters = false;
            self
        }

        fn spec(mut self, spec: Value) -> Self {
            self.object["spec"] = spec;
            self
        }

        fn watch_vars(mut self, vars: Value) -> Self {
            self.watch_vars = as_map(vars);
            self
        }

        fn finalizer_vars(mut self, vars: Value) -> Self {
            self.finalizer_vars = Some(as_map(vars));
            self
        }

        fn vars(&self) -> Value {
            Value::Object(extra_vars(&VarsInput {
                object: &self.object,
                group: self.group,
                kind: self.kind,
                snake_case_parameters: self.snake_case_parameters,
                unsafe_strings: self.unsafe_strings,
                watch_vars: &self.watch_vars,
                finalizer_vars: self.finalizer_vars.as_ref(),
            }))
        }
    }

    fn as_map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not a map: {other}"),
        }
    }

    fn unsafe_str(s: &str) -> Value {
        json!({"__ansible_unsafe": s})
    }

    #[test]
    fn object_key_joins_group_and_lowercased_kind_with_underscores() {
        assert_eq!(object_key("cache.example.com", "Memcached"), "_cache_example_com_memcached");
        assert_eq!(object_key("", "Secret"), "__secret");
        assert_eq!(object_key("cert-manager.k8s.io", "Foo"), "_cert_manager_k8s_io_foo");
    }

    #[test]
    fn spec_keys_meta_object_and_raw_spec_are_all_present() {
        let fixture = Fixture::memcached();
        let want = json!({
            "size": 3,
            "foo_bar": "{{ x }}",
            "nested_map": {"inner_key": ["a"]},
            "ansible_operator_meta": {"name": "sample", "namespace": "ns1"},
            "_cache_example_com_memcached": fixture.object.clone(),
            "_cache_example_com_memcached_spec":
                {"size": 3, "fooBar": "{{ x }}", "nestedMap": {"innerKey": ["a"]}}
        });
        assert_eq!(fixture.vars(), want);
    }

    #[test]
    fn spec_keys_are_copied_verbatim_when_snake_case_is_off() {
        let vars = Fixture::memcached().verbatim_keys().vars();
        assert_eq!(vars["fooBar"], json!("{{ x }}"));
        assert_eq!(vars["nestedMap"], json!({"innerKey": ["a"]}));
        assert!(vars.get("foo_bar").is_none());
    }

    #[test]
    fn missing_or_non_map_spec_is_treated_as_empty() {
        for spec in [json!(null), json!("text"), json!([1, 2])] {
            let vars = Fixture::memcached().spec(spec).vars();
            assert_eq!(vars["_cache_example_com_memcached_spec"], json!({}));
            assert_eq!(vars.as_object().map(Map::len), Some(3));
        }
        let mut fixture = Fixture::memcached();
        fixture.object.as_object_mut().map(|cr| cr.remove("spec"));
        assert_eq!(fixture.vars()["_cache_example_com_memcached_spec"], json!({}));
    }

    #[test]
    fn meta_namespace_is_empty_for_cluster_scoped_cr() {
        let mut fixture = Fixture::memcached();
        fixture.object["metadata"] = json!({"name": "cluster-wide"});
        assert_eq!(fixture.vars()[META_KEY], json!({"name": "cluster-wide", "namespace": ""}));
    }

    #[test]
    fn mark_unsafe_wraps_spec_values_meta_object_and_raw_spec() {
        let fixture = Fixture::memcached().unsafe_marked();
        let vars = fixture.vars();
        assert_eq!(vars["foo_bar"], unsafe_str("{{ x }}"));
        assert_eq!(vars["size"], json!(3));
        assert_eq!(vars["nested_map"], json!({"inner_key": [unsafe_str("a")]}));
        assert_eq!(vars[META_KEY], json!({"name": unsafe_str("sample"), "namespace": unsafe_str("ns1")}));
        assert_eq!(vars["_cache_example_com_memcached"]["metadata"]["name"], unsafe_str("sample"));
        assert_eq!(vars["_cache_example_com_memcached_spec"]["fooBar"], unsafe_str("{{ x }}"));
    }

    #[test]
    fn by_default_every_cr_string_is_unsafe() {
        let mut fixture = Fixture::memcached();
        fixture.unsafe_strings = UnsafeStrings::default();
        assert_eq!(fixture.vars(), Fixture::memcached().unsafe_marked().vars());
    }

    #[test]
    fn mark_unsafe_leaves_watch_and_finalizer_vars_alone() {
        let vars = Fixture::memcached()
            .unsafe_marked()
            .watch_vars(json!({"from_watch": "{{ a }}"}))
            .finalizer_vars(json!({"from_finalizer": "{{ b }}"}))
            .vars();
        assert_eq!(vars["from_watch"], json!("{{ a }}"));
        assert_eq!(vars["from_finalizer"], json!("{{ b }}"));
    }

    #[test]
    fn watch_vars_override_spec_keys_meta_and_object_keys() {
        let vars = Fixture::memcached()
            .watch_vars(json!({
                "size": 1,
                "ansible_operator_meta": "overridden",
                "_cache_example_com_memcached_spec": false
            }))
            .vars();
        assert_eq!(vars["size"], json!(1));
        assert_eq!(vars[META_KEY], json!("overridden"));
        assert_eq!(vars["_cache_example_com_memcached_spec"], json!(false));
    }

    #[test]
    fn finalizer_vars_override_watch_vars() {
        let vars = Fixture::memcached()
            .watch_vars(json!({"state": "present", "keep": 1}))
            .finalizer_vars(json!({"state": "absent"}))
            .vars();
        assert_eq!(vars["state"], json!("absent"));
        assert_eq!(vars["keep"], json!(1));
    }

    #[test]
    fn meta_and_object_keys_override_colliding_spec_keys() {
        let vars =
            Fixture::memcached().spec(json!({"ansibleOperatorMeta": 1, "ansible_operator_meta": 2})).vars();
        assert_eq!(vars[META_KEY], json!({"name": "sample", "namespace": "ns1"}));
    }

    #[test]
    fn empty_spec_key_becomes_empty_variable_name() {
        let vars = Fixture::memcached().spec(json!({"": "v"})).vars();
        assert_eq!(vars[""], json!("v"));
    }
}

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::proptest_support::{config, json, json_map, text};

    /// A CR: arbitrary metadata and spec (sometimes not a mapping at all), plus other top-level keys.
    fn object() -> impl Strategy<Value = Value> {
        let metadata = prop_oneof![
            3 => (text(), text()).prop_map(|(name, namespace)| json!({"name": name, "namespace": namespace})),
            1 => json(),
        ];
        let spec = prop_oneof![3 => json_map().prop_map(Value::Object), 1 => json()];
        (metadata, spec, json_map()).prop_map(|(metadata, spec, mut rest)| {
            rest.insert("metadata".into(), metadata);
            rest.insert("spec".into(), spec);
            Value::Object(rest)
        })
    }

    fn unsafe_strings() -> impl Strategy<Value = UnsafeStrings> {
        prop_oneof![Just(UnsafeStrings::All), Just(UnsafeStrings::None)]
    }

    /// Strings in `value` that Ansible would template: not inside `{"__ansible_unsafe": ...}`.
    fn bare_strings(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::String(text) => found.push(text.clone()),
            Value::Object(map) if map.len() == 1 && map.contains_key("__ansible_unsafe") => {}
            Value::Object(map) => map.values().for_each(|item| bare_strings(item, found)),
            Value::Array(items) => items.iter().for_each(|item| bare_strings(item, found)),
            _ => {}
        }
    }

    /// `value` with every `{"__ansible_unsafe": s}` replaced by `s` again.
    fn unwrap(value: &Value) -> Value {
        match value {
            Value::Object(map)
                if map.len() == 1 && map.get("__ansible_unsafe").is_some_and(Value::is_string) =>
            {
                map["__ansible_unsafe"].clone()
            }
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), unwrap(v))).collect()),
            Value::Array(items) => Value::Array(items.iter().map(unwrap).collect()),
            other => other.clone(),
        }
    }

    /// Whether `value` itself holds a map shaped like a wrapped string (then unwrapping is ambiguous).
    fn holds_wrapper(value: &Value) -> bool {
        match value {
            Value::Object(map) => map.contains_key("__ansible_unsafe") || map.values().any(holds_wrapper),
            Value::Array(items) => items.iter().any(holds_wrapper),
            _ => false,
        }
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn the_documented_keys_are_always_there_and_templates_never_reach_ansible_bare(
            object in object(),
            group in "[a-z.-]{0,12}",
            kind in "[A-Za-z]{1,10}",
            snake_case_parameters in any::<bool>(),
            which in unsafe_strings(),
            watch_vars in proptest::collection::btree_map("[a-z]{1,8}", json(), 0..4),
            finalizer_vars in proptest::option::of(proptest::collection::btree_map("[a-z]{1,8}", json(), 0..4)),
        ) {
            let watch_vars: Map<String, Value> = watch_vars.into_iter().collect();
            let finalizer_vars: Option<Map<String, Value>> = finalizer_vars.map(|vars| vars.into_iter().collect());
            let vars = extra_vars(&VarsInput {
                object: &object,
                group: &group,
                kind: &kind,
                snake_case_parameters,
                unsafe_strings: which,
                watch_vars: &watch_vars,
                finalizer_vars: finalizer_vars.as_ref(),
            });

            let field = |name: &str| object["metadata"][name].as_str().unwrap_or_default().to_string();
            let meta = json!({"name": field("name"), "namespace": field("namespace")});
            prop_assert_eq!(&vars[META_KEY], &wrap(&meta, which));
            let object_key = object_key(&group, &kind);
            let spec = object["spec"].as_object().cloned().unwrap_or_default();
            let spec_key = format!("{object_key}_spec");
            prop_assert!(vars.contains_key(&object_key) && vars.contains_key(&spec_key));
            for (key, value) in watch_vars.iter().chain(finalizer_vars.iter().flatten()) {
                let last = finalizer_vars.as_ref().and_then(|vars| vars.get(key)).unwrap_or(value);
                prop_assert_eq!(&vars[key], last);
            }

            // Everything taken from the CR: the spec keys, the meta, the object and the raw spec.
            let from_cr: Vec<&Value> = vars
                .iter()
                .filter(|(key, _)| !watch_vars.contains_key(*key)
                    && !finalizer_vars.as_ref().is_some_and(|vars| vars.contains_key(*key)))
                .map(|(_, value)| value)
                .collect();
            let mut bare = Vec::new();
            if which == UnsafeStrings::All {
                from_cr.iter().for_each(|value| bare_strings(value, &mut bare));
            }
            prop_assert!(bare.is_empty(), "strings Ansible would template: {bare:?}");

            if !holds_wrapper(&object) {
                prop_assert_eq!(unwrap(&vars[&object_key]), object.clone());
                prop_assert_eq!(unwrap(&vars[&spec_key]), Value::Object(spec.clone()));
                if which == UnsafeStrings::None {
                    prop_assert_eq!(&vars[&object_key], &object);
                }
            }
            for (key, value) in &spec {
                let name = if snake_case_parameters { to_snake(key) } else { key.clone() };
                prop_assert!(vars.contains_key(&name), "spec key {key:?} is missing as {name:?}");
                if !snake_case_parameters && !holds_wrapper(value) && ![META_KEY, &object_key, &spec_key].contains(&name.as_str())
                    && !watch_vars.contains_key(&name) && !finalizer_vars.as_ref().is_some_and(|vars| vars.contains_key(&name))
                {
                    prop_assert_eq!(&unwrap(&vars[&name]), value);
                }
            }
        }
    }
}
