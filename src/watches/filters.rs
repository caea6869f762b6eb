//! Watch filters on the primary kind: `watchFields` (only a change in these fields triggers a run,
//! as shell-operator's `jqFilter`) and `fieldSelector` (which objects are watched at all, beside
//! upstream's label `selector`).

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;
use serde_json_path::JsonPath;

use super::error::{EntryRef, Error};
use super::fields::{Fields, describe};

/// `watchFields`: JSONPath queries (RFC 9535) over the whole object; a new version of an object
/// triggers a run only when what they select differs from the version before.
#[derive(Debug, Clone)]
pub struct WatchFields {
    queries: Vec<(String, JsonPath)>,
}

/// Equal when written the same.
impl PartialEq for WatchFields {
    fn eq(&self, other: &Self) -> bool {
        self.texts().eq(other.texts())
    }
}

/// What changes on every write whatever the writer meant, so never a change of a watched field.
const VOLATILE_METADATA: [&str; 2] = ["resourceVersion", "managedFields"];

impl WatchFields {
    /// The queries as written.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.queries.iter().map(|(text, _)| text.as_str())
    }

    /// A digest of what the queries select in `object` (its metadata less `resourceVersion` and
    /// `managedFields`; without `status.conditions` when `ours_conditions`, the operator's own
    /// writes, which would run it again after every run): equal digests, no change in a watched field.
    pub fn digest(&self, mut object: Value, ours_conditions: bool) -> u64 {
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in VOLATILE_METADATA {
                metadata.remove(key);
            }
        }
        if let (true, Some(status)) =
            (ours_conditions, object.get_mut("status").and_then(Value::as_object_mut))
        {
            status.remove("conditions");
        }
        let mut hasher = DefaultHasher::new();
        for (_, query) in &self.queries {
            let nodes = query.query(&object).all();
            nodes.len().hash(&mut hasher);
            for node in nodes {
                // serde_json's maps are sorted by key, so equal values print the same.
                node.to_string().hash(&mut hasher);
            }
        }
        hasher.finish()
    }

    /// Parses `queries` as `watchFields` does (tests).
    #[cfg(test)]
    pub fn from_queries(queries: &[&str]) -> Self {
        let parsed = queries.iter().map(|text| (text.to_string(), parse(text).expect("a valid query")));
        WatchFields { queries: parsed.collect() }
    }
}

/// One query; `.spec.x` is taken as `$.spec.x`, as jq and kubectl write paths.
fn parse(text: &str) -> Result<JsonPath, String> {
    let query = if text.starts_with('.') { format!("${text}") } else { text.to_string() };
    JsonPath::parse(&query).map_err(|error| error.to_string())
}

/// Reads `watchFields`: a non-empty list of JSONPath queries.
pub(super) fn watch_fields(fields: &mut Fields, at: &EntryRef) -> Result<Option<WatchFields>, Error> {
    let Some(items) = fields.list("watchFields").map_err(|e| e.at(at))? else { return Ok(None) };
    if items.is_empty() {
        return Err(filter_error(at, "watchFields", "[]", "list at least one field (or leave the key out)"));
    }
    let mut queries = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let field = format!("watchFields[{index}]");
        let Value::String(text) = item else {
            return Err(Error::FieldType {
                at: at.boxed(),
                field,
                expected: "a string",
                found: describe(&item),
            });
        };
        let query = parse(&text).map_err(|reason| {
            filter_error(
                at,
                &field,
                &format!("{text:?}"),
                &format!("not a JSONPath query (RFC 9535): {reason}"),
            )
        })?;
        queries.push((text, query));
    }
    Ok(Some(WatchFields { queries }))
}

/// Reads `fieldSelector`: terms `field=value`, `field==value` or `field!=value`, comma-separated, as
/// the API server takes them (which fields a kind supports is the API server's to say).
pub(super) fn field_selector(fields: &mut Fields, at: &EntryRef) -> Result<Option<String>, Error> {
    let Some(text) = fields.string("fieldSelector").map_err(|e| e.at(at))? else { return Ok(None) };
    let well_formed = |term: &str| {
        let field =
            ["!=", "==", "="].iter().find_map(|op| term.split_once(op)).map(|(field, _)| field.trim());
        field.is_some_and(|field| !field.is_empty() && !field.contains(['=', '!']))
    };
    if text.trim().is_empty() || !text.split(',').all(well_formed) {
        return Err(filter_error(
            at,
            "fieldSelector",
            &format!("{text:?}"),
            "expected terms field=value, field==value or field!=value, separated by commas",
        ));
    }
    Ok(Some(text))
}

fn filter_error(at: &EntryRef, field: &str, value: &str, reason: &str) -> Error {
    Error::Filter {
        at: at.boxed(),
        field: field.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_the_watched_fields_change_the_digest() {
        let fields = WatchFields::from_queries(&["$.spec.taints", ".metadata.labels"]);
        let node = |heartbeat: &str, taints: Value, labels: Value| {
            json!({"metadata": {"name": "n", "labels": labels, "resourceVersion": heartbeat},
                   "spec": {"taints": taints}, "status": {"heartbeat": heartbeat}})
        };
        let base = fields.digest(node("1", json!([]), json!({"a": "1"})), false);
        assert_eq!(base, fields.digest(node("2", json!([]), json!({"a": "1"})), false), "a heartbeat");
        assert_ne!(
            base,
            fields.digest(node("3", json!([{"key": "k"}]), json!({"a": "1"})), false),
            "a taint"
        );
        assert_ne!(base, fields.digest(node("4", json!([]), json!({"a": "2"})), false), "a label");
    }

    #[test]
    fn whole_metadata_ignores_what_every_write_changes() {
        let fields = WatchFields::from_queries(&["$.metadata"]);
        let object = |version: &str, manager: &str| {
            json!({"metadata": {"name": "n", "resourceVersion": version,
                                "managedFields": [{"manager": manager}]}})
        };
        assert_eq!(fields.digest(object("1", "a"), false), fields.digest(object("2", "b"), false));
    }

    #[test]
    fn a_field_that_appears_or_goes_is_a_change() {
        let fields = WatchFields::from_queries(&["$.spec.size"]);
        let with = fields.digest(json!({"spec": {"size": 1}}), false);
        assert_ne!(with, fields.digest(json!({"spec": {}}), false));
        assert_ne!(
            fields.digest(json!({"spec": {"size": null}}), false),
            fields.digest(json!({"spec": {}}), false)
        );
    }

    #[test]
    fn the_operators_own_conditions_are_left_out_when_the_status_is_its() {
        let fields = WatchFields::from_queries(&["$.status"]);
        let object = |message: &str| json!({"status": {"phase": "Up", "conditions": [{"message": message}]}});
        assert_eq!(fields.digest(object("Running"), true), fields.digest(object("Successful"), true));
        assert_ne!(fields.digest(object("Running"), false), fields.digest(object("Successful"), false));
    }

    #[test]
    fn queries_compare_by_their_text() {
        assert_eq!(WatchFields::from_queries(&["$.a"]), WatchFields::from_queries(&["$.a"]));
        assert_ne!(WatchFields::from_queries(&["$.a"]), WatchFields::from_queries(&["$.b"]));
    }
}
