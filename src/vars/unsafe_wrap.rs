//! Marking CR strings unsafe so Ansible never templates them, as upstream `markUnsafe` does.

use serde_json::{Map, Value};

/// The key Ansible's JSON extra-vars decoder turns into `AnsibleUnsafeText`.
const UNSAFE_KEY: &str = "__ansible_unsafe";

/// Replaces every string inside `value` with `{"__ansible_unsafe": <string>}`, recursively.
///
/// Map keys, numbers, booleans and nulls are unchanged.
#[must_use]
pub fn mark_unsafe(value: &Value) -> Value {
    match value {
        Value::String(s) => {
            let mut wrapped = Map::new();
            wrapped.insert(UNSAFE_KEY.to_owned(), Value::String(s.clone()));
            Value::Object(wrapped)
        }
        Value::Array(items) => Value::Array(items.iter().map(mark_unsafe).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(key, item)| (key.clone(), mark_unsafe(item))).collect())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
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
    fn non_string_scalars_are_unchanged() {
        for scalar in [json!(null), json!(true), json!(42), json!(1.5)] {
            assert_eq!(mark_unsafe(&scalar), scalar);
        }
    }
}
