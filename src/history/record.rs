//! The record of one run, and the `AnsibleRun` object that stores it: which CR, why, on which
//! executor, when, how it ended, its tasks, the objects it wrote and those it read, and the CR as
//! the run saw it (what `ansible-operator replay --run` rebuilds the run's inputs from; a CR is no
//! Secret, and whoever may read the record's CR may read it). Never extra vars, task arguments or
//! results: they may hold secrets. Failure messages are kept as Ansible reports them (`no_log`
//! already hides what it must).

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::trigger::Trigger;
use crate::ident::Ident;
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

/// An object (a GET) or a set of objects (a LIST) a run read through the proxy and does not own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Read {
    /// API group ("" for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural), e.g. `configmaps`.
    pub resource: String,
    /// The kind, when the answer named it (a GET that found the object).
    pub kind: Option<String>,
    /// Namespace; `None` for cluster-scoped objects or a LIST across all namespaces.
    pub namespace: Option<String>,
    /// The object's name; `None` for a LIST.
    pub name: Option<String>,
    /// A LIST's `labelSelector`.
    pub label_selector: Option<String>,
    /// A LIST's `fieldSelector`.
    pub field_selector: Option<String>,
}

impl Read {
    /// The read as the run record and the API show it.
    pub fn manifest(&self) -> Value {
        let verb = if self.name.is_some() { "get" } else { "list" };
        let mut read = json!({"verb": verb, "resource": self.resource, "version": self.version});
        let optional = [
            ("group", Some(&self.group).filter(|g| !g.is_empty())),
            ("kind", self.kind.as_ref()),
            ("namespace", self.namespace.as_ref()),
            ("name", self.name.as_ref()),
            ("labelSelector", self.label_selector.as_ref()),
            ("fieldSelector", self.field_selector.as_ref()),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                read[key] = json!(value);
            }
        }
        read
    }
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

/// Largest CR a record keeps (serialised JSON): a record stays far below etcd's 1.5 MiB object
/// limit, with its tasks beside it.
pub const MAX_INPUT_BYTES: usize = 256 * 1024;

/// What a run's inputs are rebuilt from: the CR as the run saw it, and whether it finalized.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInput {
    /// The CR, as serialised for the run's extra vars.
    pub object: Value,
    /// The run was the finalizer's.
    pub finalizing: bool,
}

/// A record whose `spec.ident` is not one the operator makes: anyone who may write `AnsibleRun`s in
/// a namespace can write such a record, and nothing is done with its ident.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the run record {record} has an ident the operator does not make (its idents are decimal digits): it is not used"
)]
pub struct ForeignIdent {
    /// The record's name.
    pub record: String,
}

/// The record's `spec.ident`, when it is in the operator's format: the only way a record's ident
/// reaches a path or a URL.
pub fn ident_of(record: &Value) -> Result<Ident, ForeignIdent> {
    let text = record["spec"]["ident"].as_str().unwrap_or_default();
    Ident::parse(text).map_err(|_| ForeignIdent {
        record: record["metadata"]["name"].as_str().unwrap_or_default().chars().take(253).collect(),
    })
}

/// Why a record holds no input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoInput {
    /// The record was written before records kept inputs, or by a run that did not reach its main
    /// target (a failed precheck, a refusal).
    #[error(
        "the run record {0} holds no inputs (its run did not start its playbook, or it was recorded before records kept them)"
    )]
    Missing(String),
    /// The CR was too large to keep.
    #[error("the run record {record} holds no inputs: {reason}")]
    Omitted {
        /// The record's name.
        record: String,
        /// Why.
        reason: String,
    },
}

impl RunInput {
    /// The record's `spec.input`, or why there is none. The CR is kept without its `managedFields`
    /// (bookkeeping of the API server that playbooks do not read, and most of a small CR's bytes,
    /// times every record kept), and not at all when larger than [`MAX_INPUT_BYTES`].
    fn manifest(&self) -> Value {
        let mut object = self.object.clone();
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
        }
        let fits = serde_json::to_vec(&object).map_or(usize::MAX, |b| b.len()) <= MAX_INPUT_BYTES;
        match fits {
            true => json!({"object": object, "finalizing": self.finalizing}),
            false => json!({"omitted": format!("the CR is larger than {} KiB", MAX_INPUT_BYTES / 1024)}),
        }
    }

    /// The input an `AnsibleRun` object holds.
    pub fn of_record(record: &Value) -> Result<RunInput, NoInput> {
        let name = record["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let input = &record["spec"]["input"];
        if let Some(reason) = input["omitted"].as_str() {
            return Err(NoInput::Omitted { record: name, reason: reason.to_string() });
        }
        match &input["object"] {
            Value::Object(_) => Ok(RunInput {
                object: input["object"].clone(),
                finalizing: input["finalizing"].as_bool().unwrap_or(false),
            }),
            _ => Err(NoInput::Missing(name)),
        }
    }
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
    /// Objects read through the proxy that the run does not own (its read-set).
    pub reads: Vec<Read>,
    /// The run's output, while its artifacts exist.
    pub log: Option<String>,
    /// The CR as the main run saw it; `None` when no main run started.
    pub input: Option<RunInput>,
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
            "reads": self.reads.iter().map(Read::manifest).collect::<Vec<Value>>(),
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
        if let Some(input) = &self.input {
            spec["input"] = input.manifest();
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

    /// A GET of a core object in namespace `ns`.
    pub(crate) fn read(resource: &str, kind: Option<&str>, name: &str) -> Read {
        Read {
            group: String::new(),
            version: "v1".into(),
            resource: resource.into(),
            kind: kind.map(Into::into),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            label_selector: None,
            field_selector: None,
        }
    }

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
            reads: vec![read("configmaps", Some("ConfigMap"), "settings")],
            log: Some("/r/artifacts/123/stdout".into()),
            input: None,
            shard: None,
            plan: false,
        }
    }

    #[test]
    fn the_manifest_lists_what_the_run_read_with_a_lists_selectors() {
        let mut record = record();
        record.reads.push(Read {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            kind: None,
            namespace: None,
            name: None,
            label_selector: Some("app=web".into()),
            field_selector: Some("metadata.name!=x".into()),
        });
        let reads = &record.manifest()["spec"]["reads"];
        assert_eq!(
            reads[0],
            json!({"verb": "get", "resource": "configmaps", "version": "v1", "kind": "ConfigMap",
                   "namespace": "ns", "name": "settings"})
        );
        assert_eq!(
            reads[1],
            json!({"verb": "list", "resource": "deployments", "version": "v1", "group": "apps",
                   "labelSelector": "app=web", "fieldSelector": "metadata.name!=x"})
        );
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

    #[test]
    fn a_record_keeps_the_cr_its_run_saw_without_managed_fields_and_gives_it_back() {
        let object = json!({"metadata": {"name": "cache", "managedFields": [{"manager": "kubectl"}]},
                            "spec": {"size": 3}});
        let with_input =
            RunRecord { input: Some(RunInput { object: object.clone(), finalizing: true }), ..record() };
        let manifest = with_input.manifest();
        let input = RunInput::of_record(&manifest).expect("an input");
        let kept = json!({"metadata": {"name": "cache"}, "spec": {"size": 3}});
        assert_eq!(input, RunInput { object: kept, finalizing: true }, "all but its managedFields");
        assert_eq!(
            RunInput::of_record(&record().manifest()),
            Err(NoInput::Missing("cache-123".into())),
            "a record without one says so"
        );
    }

    #[test]
    fn a_records_ident_is_used_only_in_the_operators_format() {
        assert_eq!(ident_of(&record().manifest()).map(String::from), Ok("123".to_string()));
        for foreign in [json!("../x"), json!("/tmp/canary"), json!("1/../2"), json!(123), Value::Null] {
            let mut manifest = record().manifest();
            manifest["spec"]["ident"] = foreign.clone();
            let refused = ident_of(&manifest).unwrap_err();
            assert_eq!(refused.record, "cache-123", "{foreign}");
            assert!(refused.to_string().contains("not used"), "{refused}");
        }
    }

    #[test]
    fn a_cr_too_large_is_not_kept() {
        let big = "x".repeat(MAX_INPUT_BYTES);
        let object = json!({"metadata": {"name": "c"}, "spec": {"a": big}});
        let omitted =
            RunRecord { input: Some(RunInput { object, finalizing: false }), ..record() }.manifest();
        assert_eq!(
            RunInput::of_record(&omitted).unwrap_err().to_string(),
            "the run record cache-123 holds no inputs: the CR is larger than 256 KiB"
        );
    }
}
