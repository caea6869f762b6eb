//! The partial match of `assert`: an object matches when it holds every field the wanted one
//! gives, as kuttl and chainsaw match.
//!
//! - A mapping matches when each of its keys is in the actual mapping with a matching value; other
//!   keys are not looked at. `null` matches a missing field.
//! - A list of mappings matches when each of its items matches a different item of the actual list,
//!   in any order: `status.conditions: [{type: Successful, status: "True"}]` holds whatever other
//!   conditions there are.
//! - Any other list must have the same length, item by item; scalars must be equal (numbers by
//!   value: `1` and `1.0` are equal).

use serde_json::Value;

/// The keys that name an item of a Kubernetes list.
const IDENTITIES: [&str; 2] = ["name", "type"];

/// Where a field differs, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The field: `spec.template.spec.containers[0].image`.
    pub path: String,
    /// The wanted value (JSON).
    pub wanted: String,
    /// What the object has (JSON), or `None` when the field is missing.
    pub actual: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.actual {
            Some(actual) => write!(f, "{}: wanted {}, got {actual}", self.path, self.wanted),
            None => write!(f, "{}: wanted {}, missing", self.path, self.wanted),
        }
    }
}

/// Every field of `wanted` that `actual` does not hold; empty when it matches.
pub fn differences(wanted: &Value, actual: &Value) -> Vec<Difference> {
    let mut found = Vec::new();
    compare(wanted, Some(actual), "", &mut found);
    found
}

fn compare(wanted: &Value, actual: Option<&Value>, path: &str, found: &mut Vec<Difference>) {
    let differ = |found: &mut Vec<Difference>| {
        found.push(Difference {
            path: if path.is_empty() { ".".to_string() } else { path.to_string() },
            wanted: wanted.to_string(),
            actual: actual.map(Value::to_string),
        })
    };
    match (wanted, actual) {
        (Value::Null, None | Some(Value::Null)) => {}
        (_, None) => differ(found),
        (Value::Object(wanted), Some(Value::Object(actual))) => {
            for (key, value) in wanted {
                let path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                compare(value, actual.get(key), &path, found);
            }
        }
        (Value::Array(items), Some(Value::Array(actual)))
            if !items.is_empty() && items.iter().all(Value::is_object) =>
        {
            compare_items(items, actual, path, found)
        }
        (Value::Array(items), Some(Value::Array(actual_items))) if items.len() == actual_items.len() => {
            for (index, (item, actual)) in items.iter().zip(actual_items).enumerate() {
                compare(item, Some(actual), &format!("{path}[{index}]"), found);
            }
        }
        (Value::Number(a), Some(Value::Number(b))) if a.as_f64() == b.as_f64() => {}
        (wanted, Some(actual)) if wanted == actual => {}
        _ => differ(found),
    }
}

/// Each wanted item against a different actual item, first fit; an item that matches none is
/// reported against the free actual item it is closest to.
fn compare_items(items: &[Value], actual: &[Value], path: &str, found: &mut Vec<Difference>) {
    let mut free: Vec<usize> = (0..actual.len()).collect();
    for item in items {
        if let Some(position) = free.iter().position(|&index| differences(item, &actual[index]).is_empty()) {
            free.remove(position);
            continue;
        }
        // Ties go to the item of the same `name` or `type`, the keys Kubernetes lists are merged
        // on (containers, ports, conditions).
        let closest = free.iter().copied().min_by_key(|&index| {
            let another = IDENTITIES
                .iter()
                .any(|key| item.get(key).is_some_and(|value| actual[index].get(key) != Some(value)));
            (another, differences(item, &actual[index]).len())
        });
        match closest {
            Some(index) => compare(item, Some(&actual[index]), &format!("{path}[{index}]"), found),
            None => {
                found.push(Difference { path: format!("{path}[]"), wanted: item.to_string(), actual: None })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shown(wanted: Value, actual: Value) -> Vec<String> {
        differences(&wanted, &actual).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_mapping_matches_on_the_fields_it_gives() {
        let actual = json!({"metadata": {"name": "d", "uid": "x"}, "spec": {"replicas": 2, "paused": false}});
        assert!(shown(json!({"spec": {"replicas": 2}}), actual.clone()).is_empty());
        assert!(shown(json!({"spec": {"replicas": 2.0, "gone": null}}), actual.clone()).is_empty());
        assert_eq!(
            shown(json!({"spec": {"replicas": 3, "strategy": {"type": "Recreate"}}}), actual),
            ["spec.replicas: wanted 3, got 2", "spec.strategy: wanted {\"type\":\"Recreate\"}, missing"]
        );
    }

    #[test]
    fn a_list_of_mappings_matches_items_in_any_order_and_reports_the_closest() {
        let actual = json!({"status": {"conditions": [
            {"type": "Running", "status": "False", "reason": "Successful"},
            {"type": "Successful", "status": "True", "reason": "RunSuccessful"},
        ]}});
        assert!(
            shown(
                json!({"status": {"conditions": [{"type": "Successful", "status": "True"}]}}),
                actual.clone()
            )
            .is_empty()
        );
        assert_eq!(
            shown(
                json!({"status": {"conditions": [{"type": "Successful", "status": "False"}]}}),
                actual.clone()
            ),
            ["status.conditions[1].status: wanted \"False\", got \"True\""]
        );
        // Two wanted items may not both match the same actual one.
        let twice = json!({"status": {"conditions": [{"status": "True"}, {"status": "True"}]}});
        assert_eq!(shown(twice, actual), ["status.conditions[0].status: wanted \"True\", got \"False\""]);
        assert_eq!(
            shown(json!({"items": [{"a": 1}]}), json!({"items": []})),
            ["items[]: wanted {\"a\":1}, missing"]
        );
    }

    #[test]
    fn other_lists_and_scalars_must_be_equal() {
        assert!(shown(json!({"args": ["-v", "2"]}), json!({"args": ["-v", "2"]})).is_empty());
        assert_eq!(
            shown(json!({"args": ["-v"]}), json!({"args": ["-v", "2"]})),
            ["args: wanted [\"-v\"], got [\"-v\",\"2\"]"]
        );
        assert_eq!(
            shown(json!({"args": ["-v", "3"]}), json!({"args": ["-v", "2"]})),
            ["args[1]: wanted \"3\", got \"2\""]
        );
        assert_eq!(shown(json!({"size": "1"}), json!({"size": 1})), ["size: wanted \"1\", got 1"]);
        assert_eq!(shown(json!({"spec": 1}), json!({"spec": {"a": 1}})), ["spec: wanted 1, got {\"a\":1}"]);
    }
}
