//! The CEL expressions of an `assert` step: each must be true of each object the step names, which
//! it reads as `self`, as Kubernetes' validation rules do (`self.status.readyReplicas >= 2`).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// How an object stands against an expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It is true.
    Holds,
    /// Not yet: it is false, or a field it reads is missing (what, for the report).
    NotYet(String),
    /// It is not a condition: it gave this value, not a bool.
    NotBool(String),
}

/// Whether `source` is CEL; else the parser's message (`1:13: Syntax error: …`).
pub fn compile(source: &str) -> Result<(), String> {
    cel::Program::compile(source).map(drop).map_err(|error| {
        let message = error.to_string();
        let first = message.lines().next().unwrap_or_default();
        first.trim_start_matches("ERROR: ").trim_start_matches("<input>:").to_string()
    })
}

/// `source` evaluated with `self` as `object`.
pub fn evaluate(source: &str, object: &Value) -> Verdict {
    let program = match cel::Program::compile(source) {
        Ok(program) => program,
        Err(error) => return Verdict::NotBool(error.to_string()),
    };
    let mut context = cel::Context::default();
    if let Err(error) = context.add_variable("self", Ints(object)) {
        return Verdict::NotBool(format!("the object as CEL: {error}"));
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(true)) => Verdict::Holds,
        Ok(cel::Value::Bool(false)) => Verdict::NotYet(format!("`{source}` is false")),
        Ok(other) => Verdict::NotBool(format!("`{source}` is {other:?}, not true or false")),
        Err(cel::ExecutionError::NoSuchKey(key)) => {
            Verdict::NotYet(format!("`{source}`: the object has no field `{key}`"))
        }
        Err(error) => Verdict::NotYet(format!("`{source}`: {error}")),
    }
}

/// A JSON value whose integers are CEL's `int`, as Kubernetes reads them (serialized as they are,
/// those that fit no `int` would be `uint`, and `self.spec.size + 1` would not add).
struct Ints<'a>(&'a Value);

impl Serialize for Ints<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Number(number) if number.as_i64().is_some() => {
                serializer.serialize_i64(number.as_i64().unwrap_or_default())
            }
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                items.iter().try_for_each(|item| seq.serialize_element(&Ints(item)))?;
                seq.end()
            }
            Value::Object(fields) => {
                let mut map = serializer.serialize_map(Some(fields.len()))?;
                fields.iter().try_for_each(|(key, value)| map.serialize_entry(key, &Ints(value)))?;
                map.end()
            }
            other => other.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_expression_reads_the_object_as_self() {
        let deployment = json!({
            "spec": {"template": {"spec": {"containers": [{"image": "localhost/memcached:1.6.18"}]}}},
            "status": {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]},
        });
        for holds in [
            "self.status.readyReplicas >= 2",
            "self.spec.template.spec.containers.all(c, c.image.startsWith('localhost/'))",
            "self.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')",
            "!has(self.status.unavailableReplicas)",
            "self.status.readyReplicas + 1 == 3",
        ] {
            assert_eq!(evaluate(holds, &deployment), Verdict::Holds, "{holds}");
        }
        assert_eq!(
            evaluate("self.status.readyReplicas > 2", &deployment),
            Verdict::NotYet("`self.status.readyReplicas > 2` is false".into())
        );
        assert_eq!(
            evaluate("self.status.observedGeneration == 1", &deployment),
            Verdict::NotYet(
                "`self.status.observedGeneration == 1`: the object has no field `observedGeneration`".into()
            )
        );
        assert_eq!(
            evaluate("self.status.readyReplicas", &deployment),
            Verdict::NotBool("`self.status.readyReplicas` is Int(2), not true or false".into())
        );
    }

    #[test]
    fn what_is_not_cel_is_said_with_its_place() {
        assert_eq!(compile("self.status.readyReplicas >= 1"), Ok(()));
        let error = compile("self.status.(").unwrap_err();
        assert!(error.starts_with("1:13: Syntax error"), "{error}");
    }
}
