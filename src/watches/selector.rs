//! The `selector` field: a label selector read from YAML and checked as Kubernetes would check it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::{Map, Value};

use super::error::{EntryRef, Error};
use super::fields::{Fields, describe};

const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

/// Reads `selector` (its path inside the entry is `prefix`) and validates it as upstream's
/// `LabelSelectorAsSelector` does at controller setup: known operators, values only where the
/// operator takes them, and well-formed label keys and values. Unknown keys are appended to `unknown`.
pub(super) fn parse(
    map: Map<String, Value>,
    at: &EntryRef,
    unknown: &mut Vec<String>,
) -> Result<LabelSelector, Error> {
    let (mut fields, extra) = Fields::split(map, &["matchLabels", "matchExpressions"], "selector.");
    unknown.extend(extra);
    let mut selector = LabelSelector::default();

    if let Some(labels) = fields.mapping("matchLabels").map_err(|e| e.at(at))? {
        let mut match_labels = BTreeMap::new();
        for (key, value) in labels {
            let field = format!("selector.matchLabels.{key}");
            let Value::String(value) = value else {
                return Err(Error::FieldType {
                    at: at.boxed(),
                    field,
                    expected: "a string",
                    found: describe(&value),
                });
            };
            check_key(&key)
                .and_then(|()| check_value(&value))
                .map_err(|problem| invalid(at, &field, problem))?;
            match_labels.insert(key, value);
        }
        selector.match_labels = Some(match_labels).filter(|labels| !labels.is_empty());
    }

    if let Some(items) = fields.list("matchExpressions").map_err(|e| e.at(at))? {
        let mut expressions = Vec::with_capacity(items.len());
        for (index, item) in items.into_iter().enumerate() {
            let prefix = format!("selector.matchExpressions[{index}].");
            expressions.push(requirement(item, &prefix, at, unknown)?);
        }
        selector.match_expressions = Some(expressions).filter(|expressions| !expressions.is_empty());
    }
    Ok(selector)
}

fn requirement(
    item: Value,
    prefix: &str,
    at: &EntryRef,
    unknown: &mut Vec<String>,
) -> Result<LabelSelectorRequirement, Error> {
    let mut fields = Fields::split_item(item, &["key", "operator", "values"], prefix, at, unknown)?;
    let key = fields.string("key").map_err(|e| e.at(at))?.unwrap_or_default();
    check_key(&key).map_err(|problem| invalid(at, &fields.path("key"), problem))?;
    let operator = fields.string("operator").map_err(|e| e.at(at))?.unwrap_or_default();
    if !OPERATORS.contains(&operator.as_str()) {
        let problem = format!(
            "{operator:?} is not a valid label selector operator (use In, NotIn, Exists or DoesNotExist)"
        );
        return Err(invalid(at, &fields.path("operator"), problem));
    }
    let values = match fields.list("values").map_err(|e| e.at(at))? {
        None => None,
        Some(items) => {
            let mut values = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                let field = format!("{}[{index}]", fields.path("values"));
                let Value::String(value) = item else {
                    return Err(Error::FieldType {
                        at: at.boxed(),
                        field,
                        expected: "a string",
                        found: describe(&item),
                    });
                };
                check_value(&value).map_err(|problem| invalid(at, &field, problem))?;
                values.push(value);
            }
            Some(values)
        }
    };
    let count = values.as_ref().map_or(0, Vec::len);
    match operator.as_str() {
        "In" | "NotIn" if count == 0 => {
            let problem = format!("operator {operator:?} needs at least one value");
            return Err(invalid(at, &fields.path("values"), problem));
        }
        "Exists" | "DoesNotExist" if count != 0 => {
            let problem = format!("operator {operator:?} takes no values");
            return Err(invalid(at, &fields.path("values"), problem));
        }
        _ => {}
    }
    Ok(LabelSelectorRequirement { key, operator, values })
}

fn invalid(at: &EntryRef, field: &str, problem: String) -> Error {
    Error::Selector { at: at.boxed(), field: field.to_string(), problem }
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63 characters.
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!(
            "label key {key:?} is invalid: the prefix must be a lowercase DNS subdomain of at most 253 characters"
        ));
    }
    if !is_label_name(name) {
        return Err(format!(
            "label key {key:?} is invalid: the name must be 1 to 63 characters of letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A label value: empty, or a label name.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "label value {value:?} is invalid: it must be empty or 1 to 63 characters of letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit"
        ))
    }
}

/// A valid label name part or non-empty label value: 1 to 63 of letters, digits, `-`, `_`, `.`,
/// starting and ending with a letter or digit.
pub(crate) fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns_subdomain(text: &str) -> bool {
    let is_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    text.len() <= 253
        && text.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    is_alnum(first) && is_alnum(last) && bytes.iter().all(|b| is_alnum(b) || *b == b'-')
                }
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;

    fn at() -> EntryRef {
        EntryRef { file: PathBuf::from("watches.yaml"), number: 1, gvk: None }
    }

    fn run(value: Value) -> Result<(LabelSelector, Vec<String>), Error> {
        let Value::Object(map) = value else { panic!("test input must be a mapping") };
        let mut unknown = Vec::new();
        parse(map, &at(), &mut unknown).map(|selector| (selector, unknown))
    }

    fn problem(value: Value) -> String {
        run(value).expect_err("selector should be rejected").to_string()
    }

    #[test]
    fn match_labels_and_expressions_are_read() {
        let (selector, unknown) = run(json!({
            "matchLabels": { "app.kubernetes.io/name": "memcached" },
            "MatchExpressions": [{ "key": "tier", "Operator": "In", "values": ["a", "b"] },
                                 { "key": "canary", "operator": "DoesNotExist" }],
        }))
        .expect("valid selector");
        assert!(unknown.is_empty());
        assert_eq!(selector.match_labels.expect("labels")["app.kubernetes.io/name"], "memcached");
        let expressions = selector.match_expressions.expect("expressions");
        assert_eq!(expressions[0].values, Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(expressions[1].operator, "DoesNotExist");
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert_eq!(run(json!({})).expect("valid").0, LabelSelector::default());
        assert_eq!(
            run(json!({"matchLabels": {}, "matchExpressions": []})).expect("valid").0,
            LabelSelector::default()
        );
    }

    #[test]
    fn operators_are_case_sensitive_and_limited_to_the_four_kubernetes_ones() {
        for operator in ["in", "Gt", "Equals", ""] {
            let message =
                problem(json!({"matchExpressions": [{"key": "a", "operator": operator, "values": ["1"]}]}));
            assert!(message.contains("is not a valid label selector operator"), "{message}");
            assert!(message.contains("selector.matchExpressions[0].operator"), "{message}");
        }
    }

    #[test]
    fn in_and_not_in_need_values() {
        for operator in ["In", "NotIn"] {
            let message = problem(json!({"matchExpressions": [{"key": "a", "operator": operator}]}));
            assert!(message.contains("needs at least one value"), "{message}");
        }
    }

    #[test]
    fn exists_and_does_not_exist_take_no_values() {
        for operator in ["Exists", "DoesNotExist"] {
            let message =
                problem(json!({"matchExpressions": [{"key": "a", "operator": operator, "values": ["x"]}]}));
            assert!(message.contains("takes no values"), "{message}");
        }
    }

    #[test]
    fn malformed_label_keys_and_values_are_rejected() {
        assert!(problem(json!({"matchLabels": {"-bad": "x"}})).contains("label key \"-bad\""));
        assert!(problem(json!({"matchLabels": {"Bad_Prefix/x": "x"}})).contains("prefix"));
        assert!(problem(json!({"matchLabels": {"a": "has space"}})).contains("label value \"has space\""));
        assert!(problem(json!({"matchLabels": {"a": "x".repeat(64)}})).contains("label value"));
        assert!(problem(json!({"matchExpressions": [{"operator": "Exists"}]})).contains("label key \"\""));
    }

    #[test]
    fn empty_label_value_is_allowed() {
        assert!(run(json!({"matchLabels": {"a": ""}})).is_ok());
    }

    #[test]
    fn non_string_label_value_is_a_type_error() {
        let message = problem(json!({"matchLabels": {"replicas": 3}}));
        assert!(
            message.contains("field \"selector.matchLabels.replicas\": expected a string, found 3"),
            "{message}"
        );
    }

    #[test]
    fn unknown_selector_keys_are_reported() {
        let (_, unknown) = run(json!({"matchLabel": {"a": "b"}, "matchExpressions": [{"key": "a", "operator": "Exists", "op": 1}]}))
            .expect("valid");
        assert_eq!(unknown, ["selector.matchLabel", "selector.matchExpressions[0].op"]);
    }
}
