//! The outcome of one Ansible run: a pure fold of its job events (upstream §4.2, §6.3).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::go_duration;
use crate::job_event::JobEvent;

/// Message upstream uses when a failed task has no `msg`.
const UNKNOWN_FAILURE: &str = "unknown playbook failure";

/// Task results kept per run (for the run history); later ones are only counted.
pub const MAX_TASKS: usize = 200;

/// How one task ended on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// Ran without changing anything.
    Ok,
    /// Changed something.
    Changed,
    /// Failed (ignored and rescued failures included: the task did fail).
    Failed,
    /// Skipped by a condition.
    Skipped,
    /// The host could not be reached.
    Unreachable,
}

impl TaskStatus {
    /// The name used in run records.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Ok => "ok",
            TaskStatus::Changed => "changed",
            TaskStatus::Failed => "failed",
            TaskStatus::Skipped => "skipped",
            TaskStatus::Unreachable => "unreachable",
        }
    }
}

/// One task's result on one host.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    /// Task name.
    pub name: String,
    /// The module or action, e.g. `kubernetes.core.k8s`.
    pub action: String,
    /// Host.
    pub host: String,
    /// How it ended.
    pub status: TaskStatus,
    /// Seconds it took, as ansible-runner measured it.
    pub duration: f64,
}

/// Counters from the `playbook_on_stats` event, shaped as the status `ansibleResult`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Tasks that were ok.
    pub ok: i64,
    /// Tasks that changed something.
    pub changed: i64,
    /// Tasks that were skipped.
    pub skipped: i64,
    /// Tasks that failed.
    pub failures: i64,
    /// When the play ended, formatted as upstream (`2026-01-02T03:04:05.123456+00:00`).
    pub completion: String,
}

/// One host's counters from the `playbook_on_stats` event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCounts {
    /// Tasks that were ok (changed ones included, as Ansible counts).
    pub ok: i64,
    /// Tasks that changed something.
    pub changed: i64,
    /// Tasks that failed.
    pub failed: i64,
    /// Times the host could not be reached.
    pub unreachable: i64,
}

/// A failed or unreachable task that makes the run fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Host the task ran against.
    pub host: String,
    /// Task name.
    pub task: String,
    /// The task's message, or upstream's "unknown playbook failure".
    pub message: String,
    /// True when the host could not be reached.
    pub unreachable: bool,
}

/// Everything the operator learns from a run's events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Final counters; `None` when the run produced no `playbook_on_stats` event.
    pub stats: Option<Stats>,
    /// Failures that count (not ignored, not rescued), in event order.
    pub failures: Vec<Failure>,
    /// Period asked for by `operator_sdk.util.requeue_after`.
    pub requeue_after: Option<Duration>,
    /// A `requeue_after` result whose period could not be parsed.
    pub bad_requeue_period: Option<String>,
    /// Counters per host, from the `playbook_on_stats` event.
    pub hosts: BTreeMap<String, HostCounts>,
    /// The first [`MAX_TASKS`] task results, in the order they ended.
    pub tasks: Vec<TaskResult>,
    /// Task results beyond [`MAX_TASKS`].
    pub tasks_omitted: usize,
    /// The task (or handler) that started last: what the run was doing if it had to be stopped.
    pub last_task_started: Option<String>,
    /// Tasks and handlers started so far.
    pub tasks_started: usize,
    /// What the run's `set_stats` tasks set for the whole run (the stats event's `artifact_data`),
    /// when they set anything: a conversion playbook's answer.
    pub stats_data: Option<Map<String, Value>>,
}

impl Outcome {
    /// Folds one event into the outcome.
    pub fn observe(&mut self, event: &JobEvent) {
        match event.event.as_str() {
            "playbook_on_stats" => {
                self.stats = Some(stats(event));
                self.hosts = host_counts(event);
                self.stats_data = event
                    .event_data
                    .get("artifact_data")
                    .and_then(Value::as_object)
                    .filter(|data| !data.is_empty())
                    .cloned();
            }
            "runner_on_failed" if counts_as_failure(event) => self.failures.push(failure(event, false)),
            "runner_on_unreachable" => self.failures.push(failure(event, true)),
            "playbook_on_task_start" | "playbook_on_handler_task_start" => {
                self.last_task_started = event.data_str("task").map(str::to_string);
                self.tasks_started += 1;
            }
            _ => {}
        }
        if let Some(task) = task_result(event) {
            if self.tasks.len() < MAX_TASKS {
                self.tasks.push(task);
            } else {
                self.tasks_omitted += 1;
            }
        }
        if is_requeue_after(event)
            && let Some(period) = event.result().and_then(|res| res.get("period")).and_then(Value::as_str)
        {
            match go_duration::parse(period) {
                Ok(period) => self.requeue_after = Some(period),
                Err(_) => self.bad_requeue_period = Some(period.to_string()),
            }
        }
    }

    /// True when the run finished (stats received) without a counted failure.
    pub fn succeeded(&self) -> bool {
        self.stats.is_some() && self.failures.is_empty()
    }

    /// Failure messages joined with newlines, as upstream's `Failure` condition message.
    pub fn failure_message(&self) -> String {
        self.failures.iter().map(Failure::describe).collect::<Vec<_>>().join("\n")
    }

    /// `status.hosts`: each inventory host's counters and, when it failed, its last failure
    /// (`task: message`). A host no play reached has zero counters.
    pub fn host_results(&self, inventory_hosts: &[String]) -> Map<String, Value> {
        inventory_hosts
            .iter()
            .map(|host| {
                let counts = self.hosts.get(host).copied().unwrap_or_default();
                let mut result = json!({
                    "ok": counts.ok,
                    "changed": counts.changed,
                    "failed": counts.failed,
                    "unreachable": counts.unreachable,
                });
                if let Some(failure) = self.failures.iter().rev().find(|f| &f.host == host) {
                    result["lastFailure"] = Value::from(failure.per_host());
                }
                (host.clone(), result)
            })
            .collect()
    }
}

impl Failure {
    /// Upstream shows a failed task's `msg`; an unreachable host is named, since upstream ignores it.
    pub fn describe(&self) -> String {
        if self.unreachable {
            format!("host {} unreachable: {}", self.host, self.message)
        } else {
            self.message.clone()
        }
    }
}

impl Failure {
    /// The failure as shown for its host: `task: message`.
    pub fn per_host(&self) -> String {
        match self.task.as_str() {
            "" => self.message.clone(),
            task => format!("{task}: {}", self.message),
        }
    }
}

/// Upstream ignores failures with `ignore_errors` and those a `rescue` block handled.
fn counts_as_failure(event: &JobEvent) -> bool {
    let ignored = event.event_data.get("ignore_errors").and_then(Value::as_bool) == Some(true);
    let rescued = event
        .event_data
        .get("rescued")
        .and_then(Value::as_object)
        .is_some_and(|hosts| hosts.values().any(|v| v.as_i64() == Some(1)));
    !ignored && !rescued
}

/// A failed task's message: its `msg`, or upstream's "unknown playbook failure".
pub fn failure_message(event: &JobEvent) -> &str {
    event.result().and_then(|res| res.get("msg")).and_then(Value::as_str).unwrap_or(UNKNOWN_FAILURE)
}

fn failure(event: &JobEvent, unreachable: bool) -> Failure {
    let message = failure_message(event);
    Failure {
        host: event.data_str("host").unwrap_or_default().to_string(),
        task: event.data_str("task").unwrap_or_default().to_string(),
        message: message.to_string(),
        unreachable,
    }
}

/// The task result a `runner_on_*` event reports, if it is one.
fn task_result(event: &JobEvent) -> Option<TaskResult> {
    let changed = || event.result().and_then(|r| r.get("changed")).and_then(Value::as_bool) == Some(true);
    let status = match event.event.as_str() {
        "runner_on_ok" if changed() => TaskStatus::Changed,
        "runner_on_ok" => TaskStatus::Ok,
        "runner_on_failed" => TaskStatus::Failed,
        "runner_on_skipped" => TaskStatus::Skipped,
        "runner_on_unreachable" => TaskStatus::Unreachable,
        _ => return None,
    };
    let text = |key: &str| event.data_str(key).unwrap_or_default().to_string();
    Some(TaskResult {
        name: text("task"),
        action: text("task_action"),
        host: text("host"),
        status,
        duration: event.event_data.get("duration").and_then(Value::as_f64).unwrap_or(0.0),
    })
}

/// The module's short name counts only on events that are not failures, as upstream.
fn is_requeue_after(event: &JobEvent) -> bool {
    match event.data_str("task_action") {
        Some("operator_sdk.util.requeue_after") => true,
        Some("requeue_after") => event.event != "runner_on_failed",
        _ => false,
    }
}

/// Sums the per-host counters (upstream reads only `localhost`; with one host it is the same).
fn stats(event: &JobEvent) -> Stats {
    let total = |key: &str| -> i64 {
        event
            .event_data
            .get(key)
            .and_then(Value::as_object)
            .map(|hosts| hosts.values().filter_map(Value::as_i64).sum())
            .unwrap_or(0)
    };
    Stats {
        ok: total("ok"),
        changed: total("changed"),
        skipped: total("skipped"),
        failures: total("failures"),
        completion: completion(&event.created),
    }
}

fn host_counts(event: &JobEvent) -> BTreeMap<String, HostCounts> {
    let per_host = |key: &str| event.event_data.get(key).and_then(Value::as_object);
    let count = |key: &str, host: &str| per_host(key).and_then(|m| m.get(host)).and_then(Value::as_i64);
    let keys = ["ok", "changed", "failures", "dark"];
    let hosts = keys.iter().filter_map(|key| per_host(key)).flat_map(|m| m.keys());
    hosts
        .map(|host| {
            let counts = HostCounts {
                ok: count("ok", host).unwrap_or(0),
                changed: count("changed", host).unwrap_or(0),
                failed: count("failures", host).unwrap_or(0),
                unreachable: count("dark", host).unwrap_or(0),
            };
            (host.clone(), counts)
        })
        .collect()
}

/// Re-emits runner's `created` time as upstream does: fractional seconds without trailing zeros.
fn completion(created: &str) -> String {
    let Some((base, fraction)) = created.strip_suffix("+00:00").and_then(|t| t.split_once('.')) else {
        return created.to_string();
    };
    let digits: String = fraction.chars().take(9).collect();
    let digits = digits.trim_end_matches('0');
    if digits.is_empty() { format!("{base}+00:00") } else { format!("{base}.{digits}+00:00") }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(value: Value) -> JobEvent {
        serde_json::from_value(value).unwrap()
    }

    fn fold(events: &[Value]) -> Outcome {
        let mut outcome = Outcome::default();
        for e in events {
            outcome.observe(&event(e.clone()));
        }
        outcome
    }

    fn stats_event() -> Value {
        json!({"event": "playbook_on_stats", "created": "2026-11-21T05:20:01.123400+00:00",
               "event_data": {"ok": {"localhost": 3}, "changed": {"localhost": 1},
                              "skipped": {"localhost": 2}, "failures": {}}})
    }

    #[test]
    fn stats_event_gives_the_counters_and_completion_time() {
        let outcome = fold(&[stats_event()]);
        assert!(outcome.succeeded());
        assert_eq!(
            outcome.stats,
            Some(Stats {
                ok: 3,
                changed: 1,
                skipped: 2,
                failures: 0,
                completion: "2026-11-21T05:20:01.1234+00:00".into()
            })
        );
    }

    #[test]
    fn what_set_stats_set_for_the_run_is_kept_when_it_set_anything() {
        let mut event = stats_event();
        event["event_data"]["artifact_data"] = json!({"objects": [{"a": 1}]});
        assert_eq!(
            fold(&[event]).stats_data,
            Some(json!({"objects": [{"a": 1}]}).as_object().cloned().unwrap())
        );
        let mut empty = stats_event();
        empty["event_data"]["artifact_data"] = json!({});
        assert_eq!(fold(&[empty]).stats_data, None);
        assert_eq!(fold(&[stats_event()]).stats_data, None);
    }

    #[test]
    fn a_run_without_stats_did_not_succeed() {
        assert!(!fold(&[json!({"event": "verbose", "stdout": "ERROR!"})]).succeeded());
    }

    #[test]
    fn failed_task_message_becomes_the_failure_message() {
        let outcome = fold(&[
            json!({"event": "runner_on_failed", "event_data": {"host": "localhost", "task": "boom", "res": {"msg": "it broke"}}}),
            json!({"event": "runner_on_failed", "event_data": {"host": "localhost", "task": "boom2", "res": {"rc": 1}}}),
            stats_event(),
        ]);
        assert!(!outcome.succeeded());
        assert_eq!(outcome.failure_message(), "it broke\nunknown playbook failure");
    }

    #[test]
    fn task_results_are_kept_in_order_up_to_the_limit() {
        let task = |event: &str, name: &str, changed: bool| {
            json!({"event": event, "event_data": {"task": name, "task_action": "ansible.builtin.debug",
                   "host": "localhost", "duration": 0.25, "res": {"changed": changed}}})
        };
        let outcome = fold(&[
            json!({"event": "runner_on_start", "event_data": {"task": "a"}}),
            task("runner_on_ok", "a", false),
            task("runner_on_ok", "b", true),
            task("runner_on_skipped", "c", false),
            task("runner_on_failed", "d", false),
        ]);
        let seen: Vec<(&str, TaskStatus)> =
            outcome.tasks.iter().map(|t| (t.name.as_str(), t.status)).collect();
        assert_eq!(
            seen,
            [
                ("a", TaskStatus::Ok),
                ("b", TaskStatus::Changed),
                ("c", TaskStatus::Skipped),
                ("d", TaskStatus::Failed)
            ]
        );
        assert_eq!(outcome.tasks[0].duration, 0.25);
        assert_eq!(outcome.tasks[0].action, "ansible.builtin.debug");

        let many: Vec<Value> =
            (0..MAX_TASKS + 3).map(|i| task("runner_on_ok", &i.to_string(), false)).collect();
        let outcome = fold(&many);
        assert_eq!((outcome.tasks.len(), outcome.tasks_omitted), (MAX_TASKS, 3));
    }

    #[test]
    fn the_task_that_started_last_is_remembered() {
        let start = |event: &str, task: &str| json!({"event": event, "event_data": {"task": task}});
        assert_eq!(fold(&[json!({"event": "playbook_on_start"})]).last_task_started, None);
        let outcome = fold(&[
            start("playbook_on_task_start", "Gathering Facts"),
            json!({"event": "runner_on_ok", "event_data": {"task": "Gathering Facts"}}),
            start("playbook_on_task_start", "wait for the database"),
            json!({"event": "runner_on_start", "event_data": {"task": "wait for the database"}}),
        ]);
        assert_eq!(outcome.last_task_started.as_deref(), Some("wait for the database"));
        let outcome = fold(&[
            start("playbook_on_task_start", "change config"),
            start("playbook_on_handler_task_start", "restart service"),
        ]);
        assert_eq!(outcome.last_task_started.as_deref(), Some("restart service"));
    }

    #[test]
    fn ignored_and_rescued_failures_do_not_count() {
        let outcome = fold(&[
            json!({"event": "runner_on_failed", "event_data": {"ignore_errors": true, "res": {"msg": "x"}}}),
            json!({"event": "runner_on_failed", "event_data": {"rescued": {"localhost": 1}, "res": {"msg": "y"}}}),
            stats_event(),
        ]);
        assert!(outcome.succeeded(), "{outcome:?}");
    }

    #[test]
    fn unreachable_host_fails_the_run_and_is_named() {
        let outcome = fold(&[
            json!({"event": "runner_on_unreachable", "event_data": {"host": "node-1", "res": {"msg": "ssh: connect refused"}}}),
            stats_event(),
        ]);
        assert!(!outcome.succeeded());
        assert_eq!(outcome.failure_message(), "host node-1 unreachable: ssh: connect refused");
    }

    #[test]
    fn host_results_cover_every_inventory_host_with_its_last_failure() {
        let outcome = fold(&[
            json!({"event": "runner_on_failed", "event_data": {"host": "b", "task": "install", "res": {"msg": "no space"}}}),
            json!({"event": "runner_on_unreachable", "event_data": {"host": "c", "task": "ping", "res": {"msg": "Permission denied (publickey)."}}}),
            json!({"event": "playbook_on_stats", "created": "", "event_data": {
                "ok": {"a": 3, "b": 1, "localhost": 2}, "changed": {"a": 1}, "failures": {"b": 1}, "dark": {"c": 1}}}),
        ]);
        let hosts: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        assert_eq!(
            Value::Object(outcome.host_results(&hosts)),
            json!({
                "a": {"ok": 3, "changed": 1, "failed": 0, "unreachable": 0},
                "b": {"ok": 1, "changed": 0, "failed": 1, "unreachable": 0, "lastFailure": "install: no space"},
                "c": {"ok": 0, "changed": 0, "failed": 0, "unreachable": 1, "lastFailure": "ping: Permission denied (publickey)."},
                "d": {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0},
            })
        );
    }

    #[test]
    fn requeue_after_result_sets_the_period() {
        let outcome = fold(&[
            json!({"event": "runner_on_ok", "event_data": {"task_action": "operator_sdk.util.requeue_after", "res": {"period": "1m30s"}}}),
            stats_event(),
        ]);
        assert_eq!(outcome.requeue_after, Some(Duration::from_secs(90)));
    }

    #[test]
    fn short_requeue_after_name_is_ignored_on_failed_events() {
        let outcome = fold(&[json!({"event": "runner_on_failed",
            "event_data": {"task_action": "requeue_after", "res": {"period": "5s", "msg": "bad"}}})]);
        assert_eq!(outcome.requeue_after, None);
    }

    #[test]
    fn completion_trims_trailing_zeros() {
        assert_eq!(completion("2026-01-01T00:00:00.500000+00:00"), "2026-01-01T00:00:00.5+00:00");
        assert_eq!(completion("2026-01-01T00:00:00.000000+00:00"), "2026-01-01T00:00:00+00:00");
        assert_eq!(completion("garbage"), "garbage");
    }
}
