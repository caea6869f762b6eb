//! Marking CR strings unsafe so Ansible never templates them. A CR author may write
//! `{{ lookup('pipe', 'id') }}` into a spec, or hide it behind a `#jinja2:` header that changes the
//! delimiters; evaluated, it runs on the operator's host. So every string is wrapped, whatever it
//! holds: looking for delimiters is a list of bad shapes, and Ansible keeps adding shapes.

use serde_json::{Map, Value};

/// The key Ansible's JSON extra-vars decoder turns into `AnsibleUnsafeText`.
const UNSAFE_KEY: &str = "__ansible_unsafe";

/// Which strings from the CR reach Ansible as unsafe text (kept literal, never templated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnsafeStrings {
    /// Every string: the default, and upstream's `markUnsafe: true`.
    #[default]
    All,
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
        Value::String(s) if which == UnsafeStrings::All => {
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
    fn by_default_every_string_is_wrapped_whatever_it_holds() {
        let header =
            "#jinja2:variable_start_string:'[[', variable_end_string:']]'\n[[ lookup('pipe', 'id') ]]";
        let input = json!({"header": header, "plain": "a } { b", "list": ["x"], "size": 3});
        let want = json!({"header": {"__ansible_unsafe": header}, "plain": {"__ansible_unsafe": "a } { b"},
                          "list": [{"__ansible_unsafe": "x"}], "size": 3});
        assert_eq!(wrap(&input, UnsafeStrings::default()), want);
        assert_eq!(wrap(&input, UnsafeStrings::None), input);
    }

    #[test]
    fn non_string_scalars_are_unchanged() {
        for scalar in [json!(null), json!(true), json!(42), json!(1.5)] {
            assert_eq!(mark_unsafe(&scalar), scalar);
        }
    }
}
