//! The record of one run, and the `AnsibleRun` object that stores it: which CR, why, on which
//! executor, when, how it ended, its tasks and the objects it wrote. Never extra vars, task
//! arguments or results: they may hold secrets. Failure messages are kept as Ansible reports them
//! (`no_log` already hides what it must).

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::trigger::Trigger;
use crate::outcome::{Stats, TaskResult};

/// API group of the run records.
pub const GROUP: &str = "ansible-operator.dev";
/// Version of the run records.
pub const VERSION: &str = "v1alpha1";
/// Kind of the run records.
pub const KIND: &str = "AnsibleRun";
/// Plural of the run records.
pub const PLURAL: &str = "ansibleruns";
/// Label with the owning CR's uid (selects a CR's records).
pub const OWNER_UID: &str = "ansible-operator.dev/owner-uid";
/// Label with the owning CR's kind.
pub const OWNER_KIND: &str = "ansible-operator.dev/owner-kind";
/// Label with the owning CR's name (left out when longer than a label value may be).
pub const OWNER_NAME: &str = "ansible-operator.dev/owner-name";
/// Label with the run's result.
pub const RESULT: &str = "ansible-operator.dev/result";
/// Label on the records of plans (absent on runs), which are kept apart from a CR's run history.
pub const PLAN: &str = "ansible-operator.dev/plan";

/// An object a run wrote through the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touched {
    /// `create`, `update`, `patch` or `delete`.
    pub verb: &'static str,
    /// The object's kind when the request or the answer names it, else its resource (plural).
    pub kind: String,
    /// API group ("" for the core group).
    pub group: String,
    /// Namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RunResult {
    /// No task failed.
    Successful,
    /// A task failed, or the run could not run or finish.
    Failure,
    /// The run took longer than its timeout and was stopped.
    TimedOut,
}

/// The CR a run was for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    /// `group/version` of its kind.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace, when namespaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// The generation the run saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

/// The first failed task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedTask {
    /// Task name.
    pub task: String,
    /// Host.
    pub host: String,
    /// Ansible's message.
    pub message: String,
}

/// One run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The run's ansible-runner ident.
    pub ident: String,
    /// The CR.
    pub owner: OwnerRef,
    /// Why it ran.
    pub trigger: Trigger,
    /// `warm` or `cold`.
    pub executor: &'static str,
    /// When it started.
    pub started: Timestamp,
    /// When it ended.
    pub finished: Timestamp,
    /// How it ended.
    pub result: RunResult,
    /// The play recap's counters, when the play finished.
    pub stats: Option<Stats>,
    /// The first failed task.
    pub failed_task: Option<FailedTask>,
    /// Why the run failed when no task did (it could not start or did not finish).
    pub message: Option<String>,
    /// Task results, in the order they ended.
    pub tasks: Vec<TaskResult>,
    /// Task results beyond those kept.
    pub tasks_omitted: usize,
    /// Objects written through the proxy.
    pub objects: Vec<Touched>,
    /// The run's output, while its artifacts exist.
    pub log: Option<String>,
    /// With `--sharding`: the shard (replica) that ran it.
    pub shard: Option<String>,
    /// A plan (check mode, nothing written), not a run: `spec.kind: Plan`, labelled [`PLAN`], and
    /// never the CR's latest run.
    pub plan: bool,
}

impl RunRecord {
    /// The run's duration in seconds (millisecond precision).
    pub fn duration_seconds(&self) -> f64 {
        let millis = self.finished.duration_since(self.started).as_millis();
        millis as f64 / 1000.0
    }

    /// The record's object name: the CR's name and the run's ident.
    pub fn object_name(&self) -> String {
        let prefix: String = self.owner.name.chars().take(253 - 1 - self.ident.len()).collect();
        format!("{prefix}-{}", self.ident)
    }

    /// Labels that select a CR's records.
    pub fn labels(&self) -> serde_json::Map<String, Value> {
        let mut labels = serde_json::Map::new();
        labels.insert(OWNER_UID.into(), json!(self.owner.uid));
        if is_label_value(&self.owner.kind) {
            labels.insert(OWNER_KIND.into(), json!(self.owner.kind));
        }
        if is_label_value(&self.owner.name) {
            labels.insert(OWNER_NAME.into(), json!(self.owner.name));
        }
        labels.insert(RESULT.into(), json!(result_name(self.result)));
        if self.plan {
            labels.insert(PLAN.into(), json!("true"));
        }
        labels
    }

    /// The `AnsibleRun` object: owned by the CR, so it goes when the CR goes.
    pub fn manifest(&self) -> Value {
        let tasks: Vec<Value> = self
            .tasks
            .iter()
            .map(|t| {
                json!({"name": t.name, "action": t.action, "host": t.host, "status": t.status.as_str(),
                       "durationSeconds": (t.duration * 1000.0).round() / 1000.0})
            })
            .collect();
        let objects: Vec<Value> = self
            .objects
            .iter()
            .map(|o| {
                let mut object = json!({"verb": o.verb, "kind": o.kind, "name": o.name});
                if !o.group.is_empty() {
                    object["group"] = json!(o.group);
                }
                if let Some(namespace) = &o.namespace {
                    object["namespace"] = json!(namespace);
                }
                object
            })
            .collect();
        let mut spec = json!({
            "owner": self.owner,
            "ident": self.ident,
            "trigger": self.trigger,
            "executor": self.executor,
            "startTime": self.started.to_string(),
            "completionTime": self.finished.to_string(),
            "durationSeconds": self.duration_seconds(),
            "result": result_name(self.result),
            "tasks": tasks,
            "objects": objects,
        });
        if let Some(stats) = &self.stats {
            spec["ansibleResult"] = json!({"ok": stats.ok, "changed": stats.changed, "skipped": stats.skipped, "failures": stats.failures});
        }
        if let Some(failed) = &self.failed_task {
            spec["failedTask"] = json!(failed);
        }
        if let Some(message) = &self.message {
            spec["message"] = json!(message);
        }
        if self.tasks_omitted > 0 {
            spec["tasksOmitted"] = json!(self.tasks_omitted);
        }
        if let Some(log) = &self.log {
            spec["log"] = json!(log);
        }
        if let Some(shard) = &self.shard {
            spec["shard"] = json!(shard);
        }
        if self.plan {
            spec["kind"] = json!("Plan");
        }
        let mut metadata = json!({
            "name": self.object_name(),
            "labels": self.labels(),
            "ownerReferences": [{
                "apiVersion": self.owner.api_version, "kind": self.owner.kind,
                "name": self.owner.name, "uid": self.owner.uid,
            }],
        });
        if let Some(namespace) = &self.owner.namespace {
            metadata["namespace"] = json!(namespace);
        }
        json!({"apiVersion": format!("{GROUP}/{VERSION}"), "kind": KIND, "metadata": metadata, "spec": spec})
    }
}

fn result_name(result: RunResult) -> &'static str {
    match result {
        RunResult::Successful => "Successful",
        RunResult::Failure => "Failure",
        RunResult::TimedOut => "TimedOut",
    }
}

/// A valid label value: empty, or a label name's syntax.
fn is_label_value(value: &str) -> bool {
    value.is_empty() || crate::watches::selector::is_label_name(value)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::outcome::TaskStatus;

    pub(crate) fn record() -> RunRecord {
        RunRecord {
            ident: "123".into(),
            owner: OwnerRef {
                api_version: "cache.example.com/v1alpha1".into(),
                kind: "Memcached".into(),
                namespace: Some("ns".into()),
                name: "cache".into(),
                uid: "u-1".into(),
                generation: Some(2),
            },
            trigger: Trigger::SpecChanged { from: 1, to: 2 },
            executor: "warm",
            started: "2026-11-23T10:00:00Z".parse().unwrap(),
            finished: "2026-11-23T10:00:01.25Z".parse().unwrap(),
            result: RunResult::Failure,
            stats: Some(Stats { ok: 2, changed: 1, skipped: 0, failures: 1, completion: String::new() }),
            failed_task: Some(FailedTask {
                task: "t".into(),
                host: "localhost".into(),
                message: "boom".into(),
            }),
            message: None,
            tasks: vec![TaskResult {
                name: "t".into(),
                action: "ansible.builtin.command".into(),
                host: "localhost".into(),
                status: TaskStatus::Failed,
                duration: 0.1234,
            }],
            tasks_omitted: 0,
            objects: vec![Touched {
                verb: "create",
                kind: "ConfigMap".into(),
                group: String::new(),
                namespace: Some("ns".into()),
                name: "c".into(),
            }],
            log: Some("/r/artifacts/123/stdout".into()),
            shard: None,
            plan: false,
        }
    }

    #[test]
    fn a_plan_is_marked_as_a_plan_and_a_run_is_not() {
        let run = record().manifest();
        assert!(run["spec"].get("kind").is_none());
        assert!(run["metadata"]["labels"].get(PLAN).is_none());
        let plan = RunRecord { plan: true, ..record() }.manifest();
        assert_eq!(plan["spec"]["kind"], "Plan");
        assert_eq!(plan["metadata"]["labels"][PLAN], "true");
    }

    #[test]
    fn a_sharded_run_names_its_shard_and_an_unsharded_one_does_not() {
        assert!(record().manifest()["spec"].get("shard").is_none());
        let sharded = RunRecord { shard: Some("pod-a".into()), ..record() };
        assert_eq!(sharded.manifest()["spec"]["shard"], "pod-a");
    }

    #[test]
    fn the_manifest_is_owned_by_the_cr_and_labelled_for_selection() {
        let manifest = record().manifest();
        assert_eq!(manifest["metadata"]["name"], "cache-123");
        assert_eq!(manifest["metadata"]["namespace"], "ns");
        assert_eq!(manifest["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(manifest["metadata"]["labels"][OWNER_UID], "u-1");
        assert_eq!(manifest["metadata"]["labels"][RESULT], "Failure");
        let spec = &manifest["spec"];
        assert_eq!(spec["trigger"], json!({"reason": "SpecChanged", "fromGeneration": 1, "toGeneration": 2}));
        assert_eq!(spec["durationSeconds"], 1.25);
        assert_eq!(spec["ansibleResult"], json!({"ok": 2, "changed": 1, "skipped": 0, "failures": 1}));
        assert_eq!(spec["failedTask"]["message"], "boom");
        assert_eq!(
            spec["tasks"][0],
            json!({"name": "t", "action": "ansible.builtin.command", "host": "localhost",
                                             "status": "failed", "durationSeconds": 0.123})
        );
        assert_eq!(
            spec["objects"][0],
            json!({"verb": "create", "kind": "ConfigMap", "namespace": "ns", "name": "c"})
        );
    }

    #[test]
    fn long_names_are_cut_and_left_out_of_labels() {
        let mut long = record();
        long.owner.name = "n".repeat(250);
        assert_eq!(long.object_name().len(), 253);
        assert!(long.labels().get(OWNER_NAME).is_none());
        assert!(
            is_label_value("memcached-sample") && !is_label_value("-x") && !is_label_value(&"a".repeat(64))
        );
    }
}
