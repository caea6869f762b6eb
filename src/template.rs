//! Extension templates (DESIGN.md "Extensions"): minijinja, rendered against the CR with strict
//! undefined. A template error names the watch field and the template line; it never panics.

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};

/// A template that does not parse or does not render.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {}{reason}", line.map(|n| format!("template line {n}: ")).unwrap_or_default())]
pub struct Error {
    /// The watch field holding the template (`inventory`, `sshKeySecret`).
    pub field: &'static str,
    /// Line of the template the error is on, counted from 1.
    pub line: Option<usize>,
    /// What went wrong (`undefined value`, `syntax error: unexpected end of input`, ...).
    pub reason: String,
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env
}

fn error(field: &'static str, err: &minijinja::Error) -> Error {
    let reason = match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.kind().to_string(),
    };
    Error { field, line: err.line(), reason }
}

/// Checks that a template parses (at watches load, so a typo stops start-up).
pub fn check(field: &'static str, source: &str) -> Result<(), Error> {
    let env = environment();
    env.template_from_named_str(field, source).map(drop).map_err(|err| error(field, &err))
}

/// Renders a template against a CR: `metadata`, `spec` and `status` (empty mappings when absent),
/// and the whole CR as `object`.
pub fn render(field: &'static str, source: &str, object: &Value) -> Result<String, Error> {
    let part = |key: &str| match &object[key] {
        Value::Null => Value::Object(Map::new()),
        value => value.clone(),
    };
    let context = serde_json::json!({
        "metadata": part("metadata"),
        "spec": part("spec"),
        "status": part("status"),
        "object": object,
    });
    environment()
        .render_named_str(field, source, minijinja::value::Serde(context))
        .map_err(|err| error(field, &err))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cr() -> Value {
        json!({"metadata": {"name": "c1", "namespace": "ns"}, "spec": {"hosts": [{"name": "a"}, {"name": "b"}]}})
    }

    #[test]
    fn renders_spec_metadata_and_object() {
        let text = render(
            "inventory",
            "{% for h in spec.hosts %}{{ h.name }} {% endfor %}{{ metadata.name }} {{ object.metadata.namespace }}",
            &cr(),
        )
        .unwrap();
        assert_eq!(text, "a b c1 ns");
    }

    #[test]
    fn missing_status_is_an_empty_mapping_and_default_works() {
        assert_eq!(render("inventory", "{{ status.members | default([]) | length }}", &cr()).unwrap(), "0");
    }

    #[test]
    fn undefined_value_names_the_field_and_line() {
        let err = render("inventory", "all:\n  hosts:\n    {{ spec.nodes[0] }}:\n", &cr()).unwrap_err();
        assert_eq!(err.field, "inventory");
        assert_eq!(err.line, Some(3));
        assert!(err.to_string().starts_with("inventory: template line 3: undefined value"), "{err}");
    }

    #[test]
    fn syntax_errors_are_found_at_check() {
        let err = check("sshKeySecret", "{{ spec.key ").unwrap_err();
        assert_eq!(err.line, Some(1));
        assert!(err.reason.starts_with("syntax error"), "{err}");
        assert!(check("inventory", "{% for h in spec.hosts %}{{ h }}{% endfor %}").is_ok());
    }

    #[test]
    fn tojson_quotes_values_for_yaml() {
        let object = json!({"spec": {"address": "10.0.0.1: x"}});
        assert_eq!(render("inventory", "{{ spec.address | tojson }}", &object).unwrap(), "\"10.0.0.1: x\"");
    }
}
