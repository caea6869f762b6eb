//! What a plan found: a pure fold of the job events of a run in check mode with `--diff` into a
//! [`Plan`]: per task and host, whether it would change something and the diff, the tasks check
//! mode cannot see (their module has no check mode, as `command` and `shell`), and failures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::job_event::JobEvent;
use crate::outcome;

/// Metadata the API server sets on every write: a change there says nothing about the plan.
const BOOKKEEPING: [&str; 5] = [
    "metadata.managedFields",
    "metadata.resourceVersion",
    "metadata.generation",
    "metadata.creationTimestamp",
    "metadata.uid",
];

/// What a Secret's values are shown as in a plan.
pub const HIDDEN: &str = "(hidden)";

/// Modules that have no check mode: a skip of theirs in a plan means "not checked".
const NO_CHECK_MODE: [&str; 4] = ["command", "shell", "raw", "script"];

/// What a change to a CR would do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Every task result, in the order they ended.
    pub tasks: Vec<PlannedTask>,
    /// How many tasks would change something, were not checked, failed.
    pub summary: Summary,
}

/// Counts of a plan's task results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Would change something.
    pub changed: usize,
    /// Would change nothing.
    pub ok: usize,
    /// Could not be checked.
    pub not_checked: usize,
    /// Skipped by a condition.
    pub skipped: usize,
    /// Failed (or the host could not be reached).
    pub failed: usize,
}

/// One task on one host, as the plan sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedTask {
    /// Task name.
    pub name: String,
    /// The module or action, e.g. `kubernetes.core.k8s`.
    pub action: String,
    /// Host.
    pub host: String,
    /// What the task would do.
    pub verdict: Verdict,
    /// The Kubernetes object the task is about (`Deployment ns/name`), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// What it would change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<Diff>,
    /// Why it failed or was not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a task would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// It would change something.
    Changed,
    /// It would change nothing.
    Ok,
    /// Check mode cannot tell: its module has no check mode and did not run.
    NotChecked,
    /// Skipped by a condition.
    Skipped,
    /// It failed.
    Failed,
    /// Its host could not be reached.
    Unreachable,
}

impl Verdict {
    /// The name shown to people.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Changed => "changed",
            Verdict::Ok => "ok",
            Verdict::NotChecked => "not checked",
            Verdict::Skipped => "skipped",
            Verdict::Failed => "failed",
            Verdict::Unreachable => "unreachable",
        }
    }
}

/// One change a task would make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Diff {
    /// A field of an object (a Kubernetes object's dry-run answer against the live one).
    Field {
        /// Dotted path, `spec.replicas`.
        path: String,
        /// Its value now (`None`: absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<Value>,
        /// Its value after (`None`: removed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<Value>,
    },
    /// A text (a file or template) before and after.
    Text {
        /// What the text is, usually a file's path.
        header: String,
        /// Now.
        before: String,
        /// After.
        after: String,
    },
}

/// The plan the events of a check-mode run tell.
pub fn from_events<'a>(events: impl IntoIterator<Item = &'a JobEvent>) -> Plan {
    let mut plan = Plan::default();
    for event in events {
        let Some(task) = planned_task(event) else { continue };
        let count = match task.verdict {
            Verdict::Changed => &mut plan.summary.changed,
            Verdict::Ok => &mut plan.summary.ok,
            Verdict::NotChecked => &mut plan.summary.not_checked,
            Verdict::Skipped => &mut plan.summary.skipped,
            Verdict::Failed | Verdict::Unreachable => &mut plan.summary.failed,
        };
        *count += 1;
        plan.tasks.push(task);
    }
    plan
}

/// The plan as people read it: one line per task and host (`changed`, `ok`, `not checked`,
/// `skipped`, `failed`), its diffs indented below it, then the counts.
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    for task in &plan.tasks {
        let object = task.object.as_deref().map(|o| format!(" ({o})")).unwrap_or_default();
        out.push_str(&format!("{:<12} {} [{}]{object}\n", task.verdict.as_str(), task.name, task.host));
        if let Some(message) = &task.message {
            out.push_str(&format!("    {message}\n"));
        }
        for diff in &task.diff {
            match diff {
                Diff::Field { path, before, after } => {
                    let show =
                        |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), Value::to_string);
                    out.push_str(&format!("    {path}: {} -> {}\n", show(before), show(after)));
                }
                Diff::Text { header, before, after } => {
                    out.push_str(&format!("    --- {header}\n"));
                    before.lines().for_each(|line| out.push_str(&format!("    -{line}\n")));
                    out.push_str(&format!("    +++ {header}\n"));
                    after.lines().for_each(|line| out.push_str(&format!("    +{line}\n")));
                }
            }
        }
    }
    let s = plan.summary;
    out.push_str(&format!(
        "{} changed, {} ok, {} not checked, {} skipped, {} failed\n",
        s.changed, s.ok, s.not_checked, s.skipped, s.failed
    ));
    out
}

fn planned_task(event: &JobEvent) -> Option<PlannedTask> {
    let result = result_of(event);
    let changed = result.as_ref().and_then(|r| r.get("changed")).and_then(Value::as_bool) == Some(true);
    let action = event.data_str("task_action").unwrap_or_default().to_string();
    let message = || result.as_ref().and_then(|r| r.get("msg")).and_then(Value::as_str).map(str::to_string);
    let (verdict, message) = match event.event.as_str() {
        "runner_on_ok" if changed => (Verdict::Changed, None),
        "runner_on_ok" => (Verdict::Ok, None),
        "runner_on_failed" => (Verdict::Failed, Some(outcome::failure_message(event).to_string())),
        "runner_on_unreachable" => (Verdict::Unreachable, Some(outcome::failure_message(event).to_string())),
        "runner_on_skipped" if skipped_by_condition(result.as_ref(), &action) => (Verdict::Skipped, None),
        "runner_on_skipped" => {
            (Verdict::NotChecked, Some(message().unwrap_or_else(|| "its module has no check mode".into())))
        }
        _ => return None,
    };
    let secret = result.as_ref().is_some_and(is_secret);
    let diff = result.as_ref().map(|r| diffs(r, secret)).unwrap_or_default();
    let object = result.as_ref().and_then(object_of);
    let text = |key: &str| event.data_str(key).unwrap_or_default().to_string();
    Some(PlannedTask { name: text("task"), action, host: text("host"), verdict, object, diff, message })
}

/// The task's result: `event_data.res`, or (ansible-runner leaves it out of skip events) the JSON
/// the verbose stdout shows after `=>`.
fn result_of(event: &JobEvent) -> Option<Map<String, Value>> {
    if let Some(result) = event.result() {
        return Some(result.clone());
    }
    let text = crate::runner::strip_ansi(&event.stdout);
    let (_, json) = text.split_once("=> ")?;
    serde_json::from_str(json.trim()).ok()
}

/// A skip by `when` says so; a module that has no check mode says it would have run. Without the
/// result (verbosity 0), a skipped module that has no check mode is taken as not checked. A `meta`
/// task (`end_play`, `end_host`, ...) is Ansible's own: skipped, it was by its condition.
fn skipped_by_condition(result: Option<&Map<String, Value>>, action: &str) -> bool {
    let module = action.rsplit('.').next().unwrap_or(action);
    if module == "meta" {
        return true;
    }
    match result {
        Some(result) if result.contains_key("false_condition") => true,
        Some(result)
            if result.get("skip_reason").and_then(Value::as_str) == Some("Conditional result was False") =>
        {
            true
        }
        Some(result) if result.contains_key("msg") => false,
        _ => !NO_CHECK_MODE.contains(&module),
    }
}

/// The diffs in a result (`diff`, or each loop item's): a before/after pair of objects becomes
/// its changed fields, of texts a text diff.
fn diffs(result: &Map<String, Value>, secret: bool) -> Vec<Diff> {
    let mut found = Vec::new();
    let mut add = |diff: &Value| match diff {
        Value::Array(items) => items.iter().for_each(|d| found.extend(one_diff(d, secret))),
        other => found.extend(one_diff(other, secret)),
    };
    if let Some(diff) = result.get("diff") {
        add(diff);
    }
    for item in result.get("results").and_then(Value::as_array).into_iter().flatten() {
        if let Some(diff) = item.get("diff") {
            add(diff);
        }
    }
    found
}

fn one_diff(diff: &Value, secret: bool) -> Vec<Diff> {
    match (diff.get("before"), diff.get("after")) {
        (Some(Value::String(before)), Some(Value::String(after))) => {
            let header = diff.get("after_header").or(diff.get("before_header"));
            let header = header.and_then(Value::as_str).unwrap_or_default().to_string();
            vec![Diff::Text { header, before: before.clone(), after: after.clone() }]
        }
        (before, after) if before.is_some_and(Value::is_object) || after.is_some_and(Value::is_object) => {
            let mut flat_before = BTreeMap::new();
            let mut flat_after = BTreeMap::new();
            flatten("", before.unwrap_or(&Value::Null), &mut flat_before);
            flatten("", after.unwrap_or(&Value::Null), &mut flat_after);
            let paths: std::collections::BTreeSet<&String> =
                flat_before.keys().chain(flat_after.keys()).collect();
            paths
                .into_iter()
                .filter(|path| !BOOKKEEPING.iter().any(|b| path == b || path.starts_with(&format!("{b}."))))
                .filter(|path| flat_before.get(*path) != flat_after.get(*path))
                .map(|path| {
                    let hide = |value: Option<&Value>| {
                        value
                            .cloned()
                            .map(|v| if secret && is_secret_value(path) { Value::from(HIDDEN) } else { v })
                    };
                    Diff::Field {
                        path: path.clone(),
                        before: hide(flat_before.get(path)),
                        after: hide(flat_after.get(path)),
                    }
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Leaves of `value` by dotted path; lists are leaves (a changed list shows whole).
fn flatten(prefix: &str, value: &Value, into: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, value) in map {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                flatten(&path, value, into);
            }
        }
        Value::Null if prefix.is_empty() => {}
        leaf => {
            into.insert(prefix.to_string(), leaf.clone());
        }
    }
}

/// Whether the result is about a Secret (its values never leave the run).
fn is_secret(result: &Map<String, Value>) -> bool {
    let kind = |v: Option<&Value>| v.and_then(|o| o.get("kind")).and_then(Value::as_str) == Some("Secret");
    kind(result.get("result"))
        || kind(result.get("invocation").and_then(|i| i.get("module_args")))
        || result.get("invocation").and_then(|i| i.pointer("/module_args/kind")).and_then(Value::as_str)
            == Some("Secret")
        || result
            .get("invocation")
            .and_then(|i| i.pointer("/module_args/definition/kind"))
            .and_then(Value::as_str)
            == Some("Secret")
}

fn is_secret_value(path: &str) -> bool {
    ["data", "stringData"].iter().any(|field| path == *field || path.starts_with(&format!("{field}.")))
}

/// `Kind namespace/name` of the object a Kubernetes module answered with.
fn object_of(result: &Map<String, Value>) -> Option<String> {
    let object = result.get("result")?;
    let kind = object.get("kind")?.as_str()?;
    let name = object.pointer("/metadata/name")?.as_str()?;
    Some(match object.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn events(jsonl: &str) -> Vec<JobEvent> {
        jsonl.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    fn task<'p>(plan: &'p Plan, name: &str) -> &'p PlannedTask {
        plan.tasks.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no task {name}: {plan:?}"))
    }

    #[test]
    fn a_scaled_deployment_shows_its_replicas_and_a_file_its_text() {
        let plan = from_events(&events(include_str!("../tests/fixtures/plan/check-size-3.jsonl")));
        let deployment = task(&plan, "apply deployment");
        assert_eq!(deployment.verdict, Verdict::Changed);
        assert_eq!(deployment.object.as_deref(), Some("Deployment plan-rec/rec"));
        assert_eq!(
            deployment.diff,
            [Diff::Field { path: "spec.replicas".into(), before: Some(json!(2)), after: Some(json!(3)) }],
            "generation and managed fields are left out"
        );
        let file = task(&plan, "write a file");
        assert_eq!(file.verdict, Verdict::Changed);
        assert_eq!(
            file.diff,
            [Diff::Text {
                header: "/tmp/plan-rec/out.txt".into(),
                before: "size 2\n".into(),
                after: "size 3\n".into()
            }]
        );
    }

    #[test]
    fn command_and_shell_are_not_checked_and_a_skip_by_condition_is_a_skip() {
        let plan = from_events(&events(include_str!("../tests/fixtures/plan/check-size-3.jsonl")));
        for name in ["run a command", "run a shell"] {
            let command = task(&plan, name);
            assert_eq!(command.verdict, Verdict::NotChecked);
            assert_eq!(command.message.as_deref(), Some("Command would have run if not in check mode"));
        }
        assert_eq!(task(&plan, "fail when too big").verdict, Verdict::Skipped);
        assert_eq!(plan.summary, Summary { changed: 2, ok: 0, not_checked: 2, skipped: 1, failed: 0 });
    }

    #[test]
    fn a_failed_task_is_reported_with_its_message() {
        let plan = from_events(&events(include_str!("../tests/fixtures/plan/check-size-9-fails.jsonl")));
        let failed = task(&plan, "fail when too big");
        assert_eq!(failed.verdict, Verdict::Failed);
        assert_eq!(failed.message.as_deref(), Some("size 9 is too big"));
        assert_eq!(plan.summary.failed, 1);
    }

    #[test]
    fn without_the_result_a_skipped_command_is_not_checked_and_another_module_skipped() {
        let skipped = |action: &str| JobEvent {
            event: "runner_on_skipped".into(),
            event_data: json!({"task": "t", "task_action": action, "host": "h"}).as_object().unwrap().clone(),
            stdout: "skipping: [h]".into(),
            ..JobEvent::default()
        };
        let plan = from_events(&[skipped("ansible.builtin.command"), skipped("ansible.builtin.debug")]);
        assert_eq!(plan.tasks[0].verdict, Verdict::NotChecked);
        assert_eq!(plan.tasks[1].verdict, Verdict::Skipped);
    }

    #[test]
    fn a_meta_task_skipped_by_its_condition_is_a_skip_whatever_its_result_says() {
        let end_play = JobEvent {
            event: "runner_on_skipped".into(),
            event_data: json!({"task": "t", "task_action": "ansible.builtin.meta", "host": "h"})
                .as_object()
                .unwrap()
                .clone(),
            stdout: "skipping: [h] => {\"msg\": \"end_play\", \"skipped\": true}".into(),
            ..JobEvent::default()
        };
        assert_eq!(from_events(&[end_play]).tasks[0].verdict, Verdict::Skipped);
    }

    #[test]
    fn a_secrets_values_never_show_in_a_plan() {
        let ok = JobEvent {
            event: "runner_on_ok".into(),
            event_data: json!({"task": "t", "task_action": "kubernetes.core.k8s", "host": "h", "res": {
                "changed": true,
                "result": {"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}},
                "diff": {"before": {"data": {"password": "b2xk"}}, "after": {"data": {"password": "bmV3"}, "metadata": {"labels": {"a": "b"}}}},
            }})
            .as_object()
            .unwrap()
            .clone(),
            ..JobEvent::default()
        };
        let plan = from_events(&[ok]);
        assert_eq!(
            plan.tasks[0].diff,
            [
                Diff::Field {
                    path: "data.password".into(),
                    before: Some(json!(HIDDEN)),
                    after: Some(json!(HIDDEN))
                },
                Diff::Field { path: "metadata.labels.a".into(), before: None, after: Some(json!("b")) },
            ]
        );
    }

    #[test]
    fn a_plan_reads_as_one_line_per_task_with_its_diffs_below() {
        let plan = from_events(&events(include_str!("../tests/fixtures/plan/check-size-3.jsonl")));
        let text = render(&plan);
        assert!(text.starts_with("changed      apply deployment [localhost] (Deployment plan-rec/rec)\n    spec.replicas: 2 -> 3\n"), "{text}");
        assert!(
            text.contains(
                "not checked  run a command [localhost]\n    Command would have run if not in check mode\n"
            ),
            "{text}"
        );
        assert!(text.contains("    -size 2\n"), "{text}");
        assert!(text.ends_with("2 changed, 0 ok, 2 not checked, 1 skipped, 0 failed\n"), "{text}");
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(serde_json::from_value::<Plan>(json).unwrap(), plan, "the CLI reads what the API writes");
    }

    #[test]
    fn events_that_are_no_task_result_are_left_out() {
        let start = JobEvent { event: "playbook_on_task_start".into(), ..JobEvent::default() };
        assert_eq!(from_events(&[start]), Plan::default());
    }
}
