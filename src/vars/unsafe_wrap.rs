//! Marking CR strings unsafe so Ansible never templates them: every string (upstream's
//! `markUnsafe`), or, by default, the strings that hold a Jinja delimiter. A CR author may write
//! `{{ lookup('pipe', 'id') }}` into a spec; evaluated, it runs on the operator's host.

use serde_json::{Map, Value};

/// The key Ansible's JSON extra-vars decoder turns into `AnsibleUnsafeText`.
const UNSAFE_KEY: &str = "__ansible_unsafe";

/// What Jinja starts an expression, a statement or a comment with.
const DELIMITERS: [&str; 3] = ["{{", "{%", "{#"];

/// Which strings from the CR reach Ansible as unsafe text (kept literal, never templated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnsafeStrings {
    /// Every string (watch `markUnsafe: true`, upstream's meaning).
    All,
    /// Strings holding `{{`, `{%` or `{#` (the default): everything else is passed as upstream does.
    #[default]
    Templates,
    /// None: templates in CRs are evaluated, as upstream does by default (`trustCRTemplates`).
    None,
}

/// Replaces every string inside `value` with `{"__ansible_unsafe": <string>}`, recursively.
///
/// Map keys, numbers, booleans and nulls are unchanged.
#[must_use]
pub fn mark_unsafe(value: &Value) -> Value {
    wrap(value, UnsafeStrings::All)
}

/// Wraps the strings inside `value` that `which` selects, recursively (map keys are kept).
#[must_use]
pub fn wrap(value: &Value, which: UnsafeStrings) -> Value {
    match value {
        Value::String(s) if selected(s, which) => {
            let mut wrapped = Map::new();
            wrapped.insert(UNSAFE_KEY.to_owned(), Value::String(s.clone()));
            Value::Object(wrapped)
        }
        Value::Array(items) => Value::Array(items.iter().map(|item| wrap(item, which)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(key, item)| (key.clone(), wrap(item, which))).collect())
        }
        Value::String(_) | Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

fn selected(text: &str, which: UnsafeStrings) -> bool {
    match which {
        UnsafeStrings::All => true,
        UnsafeStrings::Templates => DELIMITERS.iter().any(|d| text.contains(d)),
        UnsafeStrings::None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_is_wrapped() {
        assert_eq!(
            mark_unsafe(&json!("{{ lookup('env', 'HOME') }}")),
            json!({"__ansible_unsafe": "{{ lookup('env', 'HOME') }}"})
        );
    }

    #[test]
    fn strings_in_maps_and_lists_are_wrapped_but_keys_are_not() {
        let input = json!({"outerKey": {"inner": "a"}, "list": ["b", 1, {"c": "d"}, []]});
        let want = json!({
            "outerKey": {"inner": {"__ansible_unsafe": "a"}},
            "list": [{"__ansible_unsafe": "b"}, 1, {"c": {"__ansible_unsafe": "d"}}, []]
        });
        assert_eq!(mark_unsafe(&input), want);
    }

    #[test]
    fn by_default_only_strings_with_a_jinja_delimiter_are_wrapped() {
        let input = json!({"message": "{{ lookup('pipe', 'id -un') }}", "loop": "{% for x in y %}",
                           "comment": "{# hi #}", "plain": "a } { b", "json": "{\"a\": {\"b\": 1}}",
                           "list": ["x", "{{ y }}"], "size": 3});
        let want = json!({"message": {"__ansible_unsafe": "{{ lookup('pipe', 'id -un') }}"},
                          "loop": {"__ansible_unsafe": "{% for x in y %}"}, "comment": {"__ansible_unsafe": "{# hi #}"},
                          "plain": "a } { b", "json": "{\"a\": {\"b\": 1}}",
                          "list": ["x", {"__ansible_unsafe": "{{ y }}"}], "size": 3});
        assert_eq!(wrap(&input, UnsafeStrings::Templates), want);
        assert_eq!(wrap(&input, UnsafeStrings::None), input);
    }

    #[test]
    fn non_string_scalars_are_unchanged() {
        for scalar in [json!(null), json!(true), json!(42), json!(1.5)] {
            assert_eq!(mark_unsafe(&scalar), scalar);
        }
    }
}
