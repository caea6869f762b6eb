//! The API's JSON: what a CR, a run and a kind look like to its readers. Pure functions of the
//! objects read from the cluster.

use serde_json::{Map, Value, json};

use super::Kind;
use crate::history::availability::{self, Store};
use crate::history::live::LiveRun;
use crate::reconcile::annotations::PAUSED;
use crate::status::conditions;

/// A CR's state, for its badge: what its conditions say, unless a run is in flight right now.
pub fn state(object: &Value, running: bool) -> &'static str {
    if object["metadata"]["deletionTimestamp"].is_string() {
        return "Deleting";
    }
    if running {
        return "Running";
    }
    let empty = Vec::new();
    let conditions = object["status"]["conditions"].as_array().unwrap_or(&empty);
    let is_true = |kind: &str| conditions.iter().any(|c| c["type"] == kind && c["status"] == "True");
    // `Running` stays true after a run, with the reason of how it ended (as upstream).
    let in_flight = conditions.iter().any(|c| {
        c["type"] == conditions::RUNNING
            && c["status"] == "True"
            && c["reason"] == conditions::reason::RUNNING
    });
    if in_flight {
        "Running"
    } else if is_true(conditions::FAILURE) {
        "Failure"
    } else if is_true(conditions::SUCCESSFUL) {
        "Successful"
    } else {
        "Pending"
    }
}

/// A watched kind.
pub fn kind(kind: &Kind) -> Value {
    let resource = &kind.resource;
    json!({
        "group": resource.group, "version": resource.version, "kind": resource.kind,
        "plural": resource.plural, "namespaced": kind.namespaced,
        "path": format!("/api/v1/kinds/{}/{}", path_group(&resource.group), resource.plural),
    })
}

/// Where the run history is: `{"stored": "cluster"}`, or in memory with what is missing and how
/// to install it (a scaffolded project without the `deploy/history` component).
pub fn history(store: &Store) -> Value {
    match store {
        Store::Cluster => json!({"stored": "cluster"}),
        Store::Memory(missing) => json!({
            "stored": "memory", "missing": missing.to_string(), "install": availability::INSTALL,
        }),
    }
}

/// The group as it appears in paths (`core` for the core group).
pub fn path_group(group: &str) -> &str {
    if group.is_empty() { "core" } else { group }
}

/// One CR in a list: name, state, the message of its latest condition, and its latest run.
pub fn cr_summary(object: &Value, latest: Option<&Value>, live: Option<&LiveRun>) -> Value {
    let metadata = &object["metadata"];
    let message = latest_condition(object).map(|c| c["message"].clone()).unwrap_or(Value::Null);
    json!({
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "generation": metadata["generation"],
        "created": metadata["creationTimestamp"],
        "state": state(object, live.is_some()),
        "paused": metadata["annotations"][PAUSED] == "true",
        "message": message,
        "ansibleResult": object["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find_map(|c| c.get("ansibleResult")))
            .cloned()
            .unwrap_or(Value::Null),
        "lastRun": latest.map(run_summary).unwrap_or(Value::Null),
        "inFlight": live.map(live_run).unwrap_or(Value::Null),
    })
}

/// One CR in full: its summary, conditions, the rest of its status, its spec (to plan a change
/// of), and its runs (newest first).
pub fn cr_detail(object: &Value, runs: &[Value], live: Option<&LiveRun>) -> Value {
    let mut detail = cr_summary(object, runs.first(), live);
    let mut status = object["status"].as_object().cloned().unwrap_or_default();
    detail["conditions"] = status.remove("conditions").unwrap_or_else(|| json!([]));
    detail["status"] = Value::Object(status);
    detail["apiVersion"] = object["apiVersion"].clone();
    detail["kind"] = object["kind"].clone();
    detail["spec"] = object["spec"].clone();
    detail["runs"] = runs.iter().map(run_summary).collect();
    detail
}

/// The condition that changed last.
fn latest_condition(object: &Value) -> Option<&Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .filter(|c| c["status"] == "True")
        .max_by_key(|c| c["lastTransitionTime"].as_str().unwrap_or_default().to_string())
}

/// A run record without its tasks, objects and reads (their counts instead).
pub fn run_summary(record: &Value) -> Value {
    let mut run = run_detail(record);
    if let Some(run) = run.as_object_mut() {
        let tasks = run.remove("tasks").and_then(|t| t.as_array().map(Vec::len)).unwrap_or(0);
        let objects = run.remove("objects").and_then(|o| o.as_array().map(Vec::len)).unwrap_or(0);
        run.insert(
            "taskCount".into(),
            json!(tasks + run.get("tasksOmitted").and_then(Value::as_u64).unwrap_or(0) as usize),
        );
        run.insert("objectCount".into(), json!(objects));
        let reads = run.remove("reads").and_then(|r| r.as_array().map(Vec::len)).unwrap_or(0);
        run.insert("readCount".into(), json!(reads));
    }
    run
}

/// A run record in full: its spec, its name, and its confirmations. The log's path stays inside.
pub fn run_detail(record: &Value) -> Value {
    let mut run: Map<String, Value> = record["spec"].as_object().cloned().unwrap_or_default();
    run.remove("log");
    run.insert("name".into(), record["metadata"]["name"].clone());
    run.insert("inFlight".into(), json!(false));
    for field in ["confirmations", "lastConfirmed"] {
        if let Some(value) = record["status"].get(field) {
            run.insert(field.into(), value.clone());
        }
    }
    Value::Object(run)
}

/// A run in flight: its record does not exist yet.
pub fn live_run(run: &LiveRun) -> Value {
    json!({
        "name": run.ident, "ident": run.ident, "inFlight": true,
        "trigger": run.trigger, "startTime": run.started.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(conditions: Value) -> Value {
        json!({"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
               "metadata": {"name": "a", "namespace": "ns", "uid": "u", "generation": 2},
               "status": {"conditions": conditions, "readyReplicas": 2}})
    }

    fn record(name: &str) -> Value {
        json!({"metadata": {"name": name},
               "spec": {"ident": "1", "result": "Successful", "log": "/secret/path/stdout",
                        "tasks": [{"name": "t"}, {"name": "u"}], "tasksOmitted": 3, "objects": [{"verb": "create"}]},
               "status": {"confirmations": 4}})
    }

    #[test]
    fn the_state_follows_the_conditions_unless_a_run_is_in_flight_or_the_cr_goes() {
        let successful =
            json!([{"type": "Successful", "status": "True"}, {"type": "Running", "status": "False"}]);
        assert_eq!(state(&cr(successful.clone()), false), "Successful");
        assert_eq!(state(&cr(successful.clone()), true), "Running");
        assert_eq!(state(&cr(json!([{"type": "Failure", "status": "True"}])), false), "Failure");
        let running = json!([{"type": "Running", "status": "True", "reason": "Running"}, {"type": "Failure", "status": "True"}]);
        assert_eq!(state(&cr(running), false), "Running", "a new run after a failure");
        let after = json!([{"type": "Running", "status": "True", "reason": "Successful"}, {"type": "Successful", "status": "True"}]);
        assert_eq!(state(&cr(after), false), "Successful", "Running stays true after a run");
        assert_eq!(state(&cr(json!([])), false), "Pending");
        let mut deleting = cr(successful);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-23T10:00:00Z");
        assert_eq!(state(&deleting, false), "Deleting");
    }

    #[test]
    fn a_cr_detail_has_its_conditions_status_and_runs_and_no_log_paths() {
        let conditions = json!([
            {"type": "Running", "status": "False", "lastTransitionTime": "2026-11-23T10:00:02Z"},
            {"type": "Successful", "status": "True", "message": "done", "lastTransitionTime": "2026-11-23T10:00:01Z",
             "ansibleResult": {"changed": 1}},
        ]);
        let detail = cr_detail(&cr(conditions), &[record("a-2"), record("a-1")], None);
        assert_eq!(detail["state"], "Successful");
        assert_eq!(detail["message"], "done");
        assert_eq!(detail["ansibleResult"]["changed"], 1);
        assert_eq!(detail["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(detail["status"], json!({"readyReplicas": 2}));
        assert_eq!(detail["lastRun"]["name"], "a-2");
        assert_eq!(detail["runs"][1]["name"], "a-1");
        assert_eq!(detail["runs"][0]["taskCount"], 5);
        assert_eq!(detail["runs"][0]["objectCount"], 1);
        assert_eq!(detail["runs"][0]["confirmations"], 4);
        assert!(!detail.to_string().contains("/secret/path"), "{detail}");
    }

    #[test]
    fn a_run_detail_keeps_tasks_objects_and_reads_and_a_summary_counts_them() {
        let mut with_reads = record("a-1");
        with_reads["spec"]["reads"] = json!([{"verb": "get", "resource": "configmaps", "name": "settings"}]);
        assert_eq!(run_detail(&with_reads)["reads"][0]["name"], "settings");
        let summary = run_summary(&with_reads);
        assert_eq!(summary["readCount"], 1);
        assert!(summary.get("reads").is_none());
        let run = run_detail(&record("a-1"));
        assert_eq!(run["tasks"].as_array().unwrap().len(), 2);
        assert_eq!(run["objects"][0]["verb"], "create");
        assert_eq!(run["inFlight"], false);
        assert!(run.get("log").is_none());
    }

    #[test]
    fn the_history_says_where_it_is_and_without_its_crd_how_to_install_it() {
        assert_eq!(history(&Store::Cluster), json!({"stored": "cluster"}));
        let missing = history(&Store::Memory(availability::Missing::Crd));
        assert_eq!(missing["stored"], "memory");
        assert_eq!(missing["missing"], "the CRD ansibleruns.ansible-operator.dev is not served");
        assert!(missing["install"].as_str().unwrap().contains("deploy/history"), "{missing}");
    }
}
