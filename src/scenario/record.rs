//! What `ansible-operator test --record` writes after a scenario: the objects it produced (its CRs
//! and what their runs wrote), as they were then, as an `assert` step for the author to review and
//! trim. What the server makes up anew each time (uids, versions, times) is left out, and so is
//! every Secret's data.

use serde_json::{Value, json};

/// Metadata the server sets: different on every run of the scenario.
const SERVER_METADATA: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];
/// Annotations tools set (prefixes).
const TOOL_ANNOTATIONS: [&str; 2] = ["kubectl.kubernetes.io/", "deployment.kubernetes.io/"];
/// Status fields that are times or counters: of the server's, or of whichever run was the last
/// (`ansibleResult`: its task counts and completion).
const STATUS_NOISE: [&str; 7] = [
    "lastTransitionTime",
    "lastUpdateTime",
    "lastHeartbeatTime",
    "lastProbeTime",
    "startTime",
    "observedGeneration",
    "ansibleResult",
];

/// `object` as a scenario would expect it, in the scenario's `namespace`.
pub fn clean(object: &Value, namespace: &str) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for key in SERVER_METADATA {
            metadata.remove(key);
        }
        if metadata.get("namespace").and_then(Value::as_str) == Some(namespace) {
            metadata.remove("namespace");
        }
        if let Some(annotations) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.retain(|key, _| !TOOL_ANNOTATIONS.iter().any(|prefix| key.starts_with(prefix)));
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
        }
        // An owner's uid is new each time: its kind and name say which it is.
        if let Some(owners) = metadata.get_mut("ownerReferences").and_then(Value::as_array_mut) {
            for owner in owners.iter_mut().filter_map(Value::as_object_mut) {
                owner.retain(|key, _| ["apiVersion", "kind", "name"].contains(&key.as_str()));
            }
        }
    }
    if object["kind"] == "Secret"
        && let Some(fields) = object.as_object_mut()
    {
        fields.remove("data");
        fields.remove("stringData");
    }
    if let Some(status) = object.get_mut("status") {
        drop_noise(status);
    }
    object
}

fn drop_noise(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|key, _| !STATUS_NOISE.contains(&key.as_str()));
            fields.values_mut().for_each(drop_noise);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_noise),
        _ => {}
    }
}

/// The file: a comment on where it comes from and what went, then one `assert` step.
pub fn render(scenario: &str, namespace: &str, objects: &[Value], gone: &[String]) -> String {
    let mut text = format!(
        "# Recorded by `ansible-operator test --record` after scenario `{scenario}` (namespace {namespace}):\n\
         # its CRs and the objects their runs wrote, as they were then (no uids, versions or times;\n\
         # no Secret's data). Review them, keep the fields that matter, and use them in an `assert` step.\n"
    );
    if !gone.is_empty() {
        text.push_str(&format!("# Written by its runs and gone by then: {}.\n", gone.join(", ")));
    }
    if objects.is_empty() {
        text.push_str("# Nothing was left.\n");
        return text;
    }
    let scenario = json!({"steps": [{"name": "as recorded", "assert": objects}]});
    text.push_str(&serde_saphyr::to_string(&scenario).unwrap_or_default());
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_server_makes_anew_and_secrets_data_are_left_out() {
        let configmap = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "hello-note", "namespace": "test-note-1", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "2026-11-28T21:00:00Z", "managedFields": [{}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
                "ownerReferences": [{"apiVersion": "x/v1", "kind": "Note", "name": "hello", "uid": "o", "controller": true}]
            },
            "data": {"text": "hello"}
        });
        assert_eq!(
            clean(&configmap, "test-note-1"),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "hello-note", "annotations": {"team": "a"},
                    "ownerReferences": [{"apiVersion": "x/v1", "kind": "Note", "name": "hello"}]},
                "data": {"text": "hello"}
            })
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "other"}, "type": "Opaque", "data": {"k": "c2VjcmV0"}});
        assert_eq!(
            clean(&secret, "test-note-1"),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "other"}, "type": "Opaque"})
        );
        let cr = json!({"kind": "Note", "metadata": {"name": "n"}, "status": {"conditions": [
            {"type": "Successful", "status": "True", "lastTransitionTime": "t", "reason": "Successful",
             "ansibleResult": {"changed": 1, "ok": 2, "completion": "t"}}
        ], "observedGeneration": 2}});
        assert_eq!(
            clean(&cr, "ns")["status"],
            json!({"conditions": [{"type": "Successful", "status": "True", "reason": "Successful"}]})
        );
    }

    #[test]
    fn the_file_is_a_scenario_with_one_assert_step() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"text": "bye"}}),
        ];
        let text = render("note", "test-note-1", &objects, &["ConfigMap/old".into()]);
        assert!(text.starts_with(
            "# Recorded by `ansible-operator test --record` after scenario `note` (namespace test-note-1):\n"
        ));
        assert!(text.contains("# Written by its runs and gone by then: ConfigMap/old.\n"), "{text}");
        let read: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(read, json!({"steps": [{"name": "as recorded", "assert": objects}]}));
        assert!(render("note", "ns", &[], &[]).ends_with("# Nothing was left.\n"));
    }
}
