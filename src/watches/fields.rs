//! Reading one YAML mapping the way upstream's Go decoding does: keys matched case-insensitively,
//! null treated as absent, values checked against the field's type.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::error::{EntryRef, Error};

/// The known keys of one mapping, taken out by their canonical spelling.
pub(super) struct Fields {
    prefix: String,
    values: HashMap<&'static str, Value>,
}

/// A field whose value has the wrong type; becomes [`Error::FieldType`] once the entry is known.
#[derive(Debug)]
pub(super) struct TypeMismatch {
    field: String,
    expected: &'static str,
    found: String,
}

impl TypeMismatch {
    /// Attaches the entry the field belongs to.
    pub(super) fn at(self, at: &EntryRef) -> Error {
        Error::FieldType { at: at.boxed(), field: self.field, expected: self.expected, found: self.found }
    }
}

impl Fields {
    /// Splits `map` into the `known` keys (matched ignoring ASCII case, later spellings winning as in
    /// Go's `encoding/json`) and the paths of the unknown ones. `prefix` is the mapping's path inside
    /// the entry (`""`, `finalizer.`, `blacklist[0].`), used in messages.
    pub(super) fn split(
        map: Map<String, Value>,
        known: &[&'static str],
        prefix: &str,
    ) -> (Self, Vec<String>) {
        let mut values = HashMap::new();
        let mut unknown = Vec::new();
        for (key, value) in map {
            match known.iter().find(|name| name.eq_ignore_ascii_case(&key)) {
                Some(name) => {
                    values.insert(*name, value);
                }
                None => unknown.push(format!("{prefix}{key}")),
            }
        }
        (Self { prefix: prefix.to_string(), values }, unknown)
    }

    /// [`Fields::split`] for one item of a list of mappings (`blacklist[0]`, a selector
    /// requirement): an item that is not a mapping is an error naming it; unknown keys are added
    /// to `unknown`.
    pub(super) fn split_item(
        item: Value,
        known: &[&'static str],
        prefix: &str,
        at: &EntryRef,
        unknown: &mut Vec<String>,
    ) -> Result<Self, Error> {
        let Value::Object(map) = item else {
            return Err(Error::FieldType {
                at: at.boxed(),
                field: prefix.trim_end_matches('.').to_string(),
                expected: "a mapping",
                found: describe(&item),
            });
        };
        let (fields, extra) = Self::split(map, known, prefix);
        unknown.extend(extra);
        Ok(fields)
    }

    /// The path of `key` inside the entry, for messages.
    pub(super) fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Takes a field's value as written; `None` when absent or null.
    pub(super) fn raw(&mut self, key: &str) -> Option<Value> {
        self.values.remove(key).filter(|value| !value.is_null())
    }

    /// Takes a string field.
    pub(super) fn string(&mut self, key: &str) -> Result<Option<String>, TypeMismatch> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.mismatch(key, "a string", &other)),
        }
    }

    /// Takes a boolean field; YAML 1.1 spellings (`yes`, `True`, `off`) arrive here already as booleans.
    pub(super) fn boolean(&mut self, key: &str) -> Result<Option<bool>, TypeMismatch> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(flag)),
            Some(other) => Err(self.mismatch(key, "a boolean", &other)),
        }
    }

    /// Takes a non-negative integer field that fits in a `u32`.
    pub(super) fn count(&mut self, key: &str) -> Result<Option<u32>, TypeMismatch> {
        match self.raw(key) {
            None => Ok(None),
            Some(value) => match value.as_u64().and_then(|number| u32::try_from(number).ok()) {
                Some(number) => Ok(Some(number)),
                None => Err(self.mismatch(key, "a non-negative integer", &value)),
            },
        }
    }

    /// Takes a mapping field.
    pub(super) fn mapping(&mut self, key: &str) -> Result<Option<Map<String, Value>>, TypeMismatch> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.mismatch(key, "a mapping", &other)),
        }
    }

    /// Takes a list field.
    pub(super) fn list(&mut self, key: &str) -> Result<Option<Vec<Value>>, TypeMismatch> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.mismatch(key, "a list", &other)),
        }
    }

    /// A type error for `key`, which held `found`.
    pub(super) fn mismatch(&self, key: &str, expected: &'static str, found: &Value) -> TypeMismatch {
        TypeMismatch { field: self.path(key), expected, found: describe(found) }
    }
}

/// A short description of a YAML value for messages: scalars as written, collections by kind.
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::String(text) => format!("{text:?}"),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "a mapping".to_string(),
        scalar => scalar.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(value: Value) -> (Fields, Vec<String>) {
        let Value::Object(map) = value else { panic!("test input must be a mapping") };
        Fields::split(map, &["manageStatus", "name", "count"], "finalizer.")
    }

    #[test]
    fn keys_match_ignoring_case() {
        for key in ["manageStatus", "ManageStatus", "managestatus", "MANAGESTATUS"] {
            let (mut fields, unknown) = fields(json!({ key: false }));
            assert_eq!(fields.boolean("manageStatus").map_err(|e| e.field).ok(), Some(Some(false)), "{key}");
            assert!(unknown.is_empty());
        }
    }

    #[test]
    fn unknown_keys_are_returned_with_their_path() {
        let (_, unknown) = fields(json!({ "nmae": "x", "name": "y" }));
        assert_eq!(unknown, ["finalizer.nmae"]);
    }

    #[test]
    fn null_counts_as_absent() {
        let (mut fields, _) = fields(json!({ "name": null }));
        assert!(matches!(fields.string("name"), Ok(None)));
    }

    #[test]
    fn wrong_type_names_the_field_path_and_the_value() {
        let (mut fields, _) = fields(json!({ "name": 5 }));
        let mismatch = fields.string("name").expect_err("a number is not a string");
        assert_eq!(
            (mismatch.field.as_str(), mismatch.expected, mismatch.found.as_str()),
            ("finalizer.name", "a string", "5")
        );
    }

    #[test]
    fn count_rejects_negative_and_fractional_numbers() {
        for value in [json!(-1), json!(1.5), json!("3")] {
            let (mut fields, _) = fields(json!({ "count": value }));
            assert!(fields.count("count").is_err(), "{value}");
        }
    }

    #[test]
    fn quoted_boolean_is_a_string_not_a_boolean() {
        let (mut fields, _) = fields(json!({ "manageStatus": "yes" }));
        assert!(fields.boolean("manageStatus").is_err());
    }
}
