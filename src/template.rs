//! Extension templates (DESIGN.md "Extensions"): minijinja, rendered against the CR with strict
//! undefined. A template error names the watch field and the template line; it never panics.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior};
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

/// What a template sees of a CR: `metadata`, `spec` and `status` (empty mappings when absent),
/// and the whole CR as `object`.
fn context(object: &Value) -> minijinja::value::Serde<Value> {
    let part = |key: &str| match &object[key] {
        Value::Null => Value::Object(Map::new()),
        value => value.clone(),
    };
    minijinja::value::Serde(serde_json::json!({
        "metadata": part("metadata"),
        "spec": part("spec"),
        "status": part("status"),
        "object": object,
    }))
}

/// Renders a template against a CR (see [`context`]).
pub fn render(field: &'static str, source: &str, object: &Value) -> Result<String, Error> {
    environment().render_named_str(field, source, context(object)).map_err(|err| error(field, &err))
}

/// A template rendered with every `{{ … }}` value held back: the text has a marker where each
/// value goes, and the values are returned beside it, for the caller to put in as data.
#[derive(Debug, Clone, PartialEq)]
pub struct Marked {
    /// The rendered text, with [`Marked::marker`] for each value.
    pub text: String,
    /// The values, in the order of their markers.
    pub values: Vec<Value>,
    /// Letters and digits that start every marker, unique to this rendering, so neither the
    /// template nor a value can write one: a marker is `<nonce>v<index>z`.
    pub nonce: String,
}

impl Marked {
    /// The marker of value `index`.
    pub fn marker(&self, index: usize) -> String {
        format!("{}v{index}z", self.nonce)
    }
}

/// Renders a template against a CR (see [`context`]) holding back every value an expression
/// outputs. Text the template author marked `| safe` is written as it is (the way to build
/// structure on purpose), and so is the output of macros and `{% set %}` blocks, whose own
/// values are held back. `tojson` returns its value unchanged: the caller writes values as data.
pub fn render_marked(field: &'static str, source: &str, object: &Value) -> Result<Marked, Error> {
    let nonce = nonce();
    let values = Arc::new(Mutex::new(Vec::new()));
    let mut env = environment();
    // Custom auto-escape routes every output through the formatter and makes captured blocks
    // (`{% set %}`, macros) safe text, already marked inside.
    env.set_auto_escape_callback(|_| AutoEscape::Custom("marked".into()));
    env.add_filter("tojson", |value: minijinja::Value, _: minijinja::value::Rest<minijinja::Value>| value);
    let (held, prefix) = (Arc::clone(&values), nonce.clone());
    env.set_formatter(move |out, _state, value| {
        if value.is_safe() {
            return out.write_str(value.as_str().unwrap_or_default()).map_err(minijinja::Error::from);
        }
        if value.is_undefined() {
            // `{{ x if y }}` with y false: Jinja prints nothing.
            return Ok(());
        }
        let data = serde_json::to_value(value).map_err(|err| {
            minijinja::Error::new(ErrorKind::BadSerialization, "a value that is not data").with_source(err)
        })?;
        let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
        held.push(data);
        write!(out, "{prefix}v{}z", held.len() - 1).map_err(minijinja::Error::from)
    });
    let text = env.render_named_str(field, source, context(object)).map_err(|err| error(field, &err))?;
    drop(env);
    let values = Arc::try_unwrap(values)
        .map(|held| held.into_inner().unwrap_or_else(PoisonError::into_inner))
        .unwrap_or_else(|shared| shared.lock().unwrap_or_else(PoisonError::into_inner).clone());
    Ok(Marked { text, values, nonce })
}

/// `ao` and 24 random hex digits.
fn nonce() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 12];
    // The system RNG does not fail on Linux; a fixed nonce would still only come from a template.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    bytes.iter().fold(String::from("ao"), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
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
