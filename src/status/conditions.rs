//! The `Running`/`Successful`/`Failure` conditions (and our `Paused`): a pure function from the current list and a
//! transition to the next list (upstream §5.1–5.3). Conditions of other types (for example written
//! by `operator_sdk.util.k8s_status`) are kept untouched, fields and order included.

use serde_json::{Map, Value, json};

use crate::outcome::Stats;

/// Condition type set while a run is in flight, and kept after success as upstream does.
pub const RUNNING: &str = "Running";
/// Condition type for the last run having succeeded.
pub const SUCCESSFUL: &str = "Successful";
/// Condition type for the last run having failed.
pub const FAILURE: &str = "Failure";
/// Condition type (ours) for a CR paused by its annotation: `True` while paused, `False` once the
/// first run after it resumed writes its status.
pub const PAUSED: &str = "Paused";

/// Reasons, as upstream.
pub mod reason {
    /// A run is in flight.
    pub const RUNNING: &str = "Running";
    /// The last run succeeded.
    pub const SUCCESSFUL: &str = "Successful";
    /// The last run failed.
    pub const FAILED: &str = "Failed";
    /// The CR is paused (ours).
    pub const PAUSED: &str = "Paused";
    /// The CR was paused and runs again (ours).
    pub const RESUMED: &str = "Resumed";
}

/// Messages, as upstream.
pub mod message {
    /// While a run is in flight.
    pub const RUNNING: &str = "Running reconciliation";
    /// On the `Running` condition after a successful run.
    pub const AWAITING: &str = "Awaiting next reconciliation";
    /// On the `Successful` condition.
    pub const SUCCEEDED: &str = "Last reconciliation succeeded";
    /// On the `Paused` condition while paused (the annotation is `reconcile::annotations::PAUSED`).
    pub const PAUSED: &str =
        "Reconciliation paused by the annotation ansible.sdk.operatorframework.io/paused: \"true\"";
    /// On the `Paused` condition once the CR runs again.
    pub const RESUMED: &str = "Reconciliation resumed";
}

/// What happened to the CR, in terms of its conditions.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// A run starts.
    Running,
    /// The CR is paused: nothing runs (ours; the other conditions stay as they are).
    Paused,
    /// The run succeeded with these counters.
    Succeeded(Stats),
    /// The run failed (with counters when Ansible got as far as its stats), or could not run at all.
    Failed {
        /// Reason (upstream: always `Failed`; ours adds e.g. `PrecheckFailed`).
        reason: String,
        /// Failure messages, joined with newlines.
        message: String,
        /// Counters, when the run produced them.
        stats: Option<Stats>,
    },
}

impl Transition {
    /// A failure with upstream's `Failed` reason.
    pub fn failed(message: impl Into<String>, stats: Option<Stats>) -> Self {
        Transition::Failed { reason: reason::FAILED.to_string(), message: message.into(), stats }
    }
}

/// One of our conditions before it is merged.
struct Desired<'a> {
    kind: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
    stats: Option<&'a Stats>,
}

/// Computes the next `status.conditions` list.
///
/// `now` is an RFC 3339 timestamp with second precision; `generation` is the CR generation the run
/// saw, written as `observedGeneration` on our conditions.
pub fn next(current: &[Value], transition: &Transition, now: &str, generation: Option<i64>) -> Vec<Value> {
    let mut conditions = current.to_vec();
    let list = &mut conditions;
    let desired = |kind, status, reason, message, stats| Desired { kind, status, reason, message, stats };
    if *transition != Transition::Paused {
        resume(list, now, generation);
    }
    match transition {
        Transition::Paused => {
            let paused = desired(PAUSED, "True", reason::PAUSED, message::PAUSED, None);
            set_condition(list, &paused, now, generation);
        }
        Transition::Running => {
            flip_to_false(list, SUCCESSFUL, now, generation);
            let running = desired(RUNNING, "True", reason::RUNNING, message::RUNNING, None);
            set_condition(list, &running, now, generation);
        }
        Transition::Succeeded(stats) => {
            let running = desired(RUNNING, "True", reason::SUCCESSFUL, message::AWAITING, Some(stats));
            set_condition(list, &running, now, generation);
            let successful = desired(SUCCESSFUL, "True", reason::SUCCESSFUL, message::SUCCEEDED, None);
            set_condition(list, &successful, now, generation);
            set_condition(list, &desired(FAILURE, "False", "", "", None), now, generation);
        }
        Transition::Failed { reason, message, stats } => {
            flip_to_false(list, RUNNING, now, generation);
            let failure = desired(FAILURE, "True", reason, message, stats.as_ref());
            set_condition(list, &failure, now, generation);
            if stats.is_some() {
                set_condition(list, &desired(SUCCESSFUL, "False", "", "", None), now, generation);
            } else {
                flip_to_false(list, SUCCESSFUL, now, generation);
            }
        }
    }
    conditions
}

/// Upstream's SetCondition: an unchanged condition (same status and reason, and not `Failure`) stays
/// where it is with its timestamp; a changed one moves to the end of the list.
fn set_condition(conditions: &mut Vec<Value>, desired: &Desired, now: &str, generation: Option<i64>) {
    let position = conditions.iter().position(|c| c["type"] == desired.kind);
    if let Some(index) = position {
        let existing = &mut conditions[index];
        let unchanged = existing["status"] == desired.status && existing["reason"] == desired.reason;
        if unchanged && desired.kind != FAILURE {
            set_generation(existing, generation);
            return;
        }
    }
    let transition_time = position
        .map(|index| conditions.remove(index))
        .filter(|existing| existing["status"] == desired.status)
        .and_then(|existing| existing.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| Value::from(now));
    let mut condition = Map::new();
    condition.insert("type".into(), desired.kind.into());
    condition.insert("status".into(), desired.status.into());
    condition.insert("lastTransitionTime".into(), transition_time);
    if let Some(stats) = desired.stats {
        condition.insert("ansibleResult".into(), ansible_result(stats));
    }
    condition.insert("reason".into(), desired.reason.into());
    condition.insert("message".into(), desired.message.into());
    let mut condition = Value::Object(condition);
    set_generation(&mut condition, generation);
    conditions.push(condition);
}

/// Sets an existing condition to `False`, keeping its reason and message as upstream does (but,
/// unlike upstream, with a new transition time, since its status did change).
fn flip_to_false(conditions: &mut Vec<Value>, kind: &str, now: &str, generation: Option<i64>) {
    let Some(existing) = conditions.iter().find(|c| c["type"] == kind) else {
        return;
    };
    let reason = existing["reason"].as_str().unwrap_or_default().to_string();
    let message = existing["message"].as_str().unwrap_or_default().to_string();
    if existing["status"] == "False" {
        return;
    }
    let desired = Desired { kind, status: "False", reason: &reason, message: &message, stats: None };
    set_condition(conditions, &desired, now, generation);
}

/// A `Paused` condition that is `True` turns `False` (reason `Resumed`) with the first write of a
/// run after the CR resumed; none is added to a CR that was never paused.
fn resume(conditions: &mut Vec<Value>, now: &str, generation: Option<i64>) {
    if conditions.iter().any(|c| c["type"] == PAUSED && c["status"] == "True") {
        let resumed = Desired {
            kind: PAUSED,
            status: "False",
            reason: reason::RESUMED,
            message: message::RESUMED,
            stats: None,
        };
        set_condition(conditions, &resumed, now, generation);
    }
}

fn set_generation(condition: &mut Value, generation: Option<i64>) {
    if let (Some(generation), Some(map)) = (generation, condition.as_object_mut()) {
        map.insert("observedGeneration".into(), generation.into());
    }
}

fn ansible_result(stats: &Stats) -> Value {
    json!({
        "ok": stats.ok,
        "changed": stats.changed,
        "skipped": stats.skipped,
        "failures": stats.failures,
        "completion": stats.completion,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:01:00Z";
    const T2: &str = "2026-01-01T00:02:00Z";

    fn stats() -> Stats {
        Stats { ok: 2, changed: 1, skipped: 0, failures: 0, completion: "c".into() }
    }

    fn find<'a>(conditions: &'a [Value], kind: &str) -> &'a Value {
        conditions.iter().find(|c| c["type"] == kind).unwrap_or_else(|| panic!("no {kind} in {conditions:?}"))
    }

    fn types(conditions: &[Value]) -> Vec<&str> {
        conditions.iter().map(|c| c["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn pausing_adds_a_paused_condition_and_leaves_the_others_alone() {
        let done =
            next(&next(&[], &Transition::Running, T0, Some(1)), &Transition::Succeeded(stats()), T1, Some(1));
        let paused = next(&done, &Transition::Paused, T2, Some(2));
        assert_eq!(&paused[..done.len()], &done[..], "upstream's conditions untouched");
        assert_eq!(
            paused.last(),
            Some(&json!({"type": "Paused", "status": "True", "lastTransitionTime": T2, "reason": "Paused",
                         "message": message::PAUSED, "observedGeneration": 2}))
        );
        assert_eq!(next(&paused, &Transition::Paused, T2, Some(2)), paused, "already paused: no change");
    }

    #[test]
    fn the_first_write_after_resuming_turns_paused_false_and_a_cr_never_paused_gets_none() {
        let paused = next(&[], &Transition::Paused, T0, Some(1));
        let running = next(&paused, &Transition::Running, T1, Some(2));
        let condition = find(&running, PAUSED);
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "Resumed");
        assert_eq!(condition["observedGeneration"], 2);
        assert_eq!(condition["lastTransitionTime"], T1);
        let done = next(&running, &Transition::Succeeded(stats()), T2, Some(2));
        assert_eq!(find(&done, PAUSED)["lastTransitionTime"], T1, "stays False, time kept");
        assert!(!types(&next(&[], &Transition::Running, T0, Some(1))).contains(&PAUSED));
    }

    #[test]
    fn first_run_sets_running() {
        let conditions = next(&[], &Transition::Running, T0, Some(1));
        assert_eq!(
            conditions,
            vec![json!({"type": "Running", "status": "True", "lastTransitionTime": T0,
                        "reason": "Running", "message": "Running reconciliation", "observedGeneration": 1})]
        );
    }

    #[test]
    fn success_gives_running_successful_failure_with_ansible_result_on_running() {
        let running = next(&[], &Transition::Running, T0, Some(1));
        let done = next(&running, &Transition::Succeeded(stats()), T1, Some(1));
        assert_eq!(types(&done), ["Running", "Successful", "Failure"]);
        let running = find(&done, RUNNING);
        assert_eq!(running["reason"], "Successful");
        assert_eq!(running["message"], "Awaiting next reconciliation");
        assert_eq!(
            running["ansibleResult"],
            json!({"ok": 2, "changed": 1, "skipped": 0, "failures": 0, "completion": "c"})
        );
        assert_eq!(running["lastTransitionTime"], T0, "status stayed True, so the time is kept");
        assert_eq!(find(&done, SUCCESSFUL)["message"], "Last reconciliation succeeded");
        assert_eq!(find(&done, FAILURE)["status"], "False");
        assert_eq!(find(&done, FAILURE)["reason"], "");
    }

    #[test]
    fn next_run_flips_successful_to_false_keeping_its_reason() {
        let done =
            next(&next(&[], &Transition::Running, T0, Some(1)), &Transition::Succeeded(stats()), T1, Some(1));
        let running = next(&done, &Transition::Running, T2, Some(2));
        let successful = find(&running, SUCCESSFUL);
        assert_eq!(successful["status"], "False");
        assert_eq!(successful["reason"], "Successful");
        assert_eq!(successful["lastTransitionTime"], T2);
        assert_eq!(find(&running, RUNNING)["reason"], "Running");
    }

    #[test]
    fn failure_sets_failure_with_message_and_counters_and_running_false() {
        let running = next(&[], &Transition::Running, T0, Some(1));
        let failed = next(&running, &Transition::failed("it broke", Some(stats())), T1, Some(1));
        let failure = find(&failed, FAILURE);
        assert_eq!(failure["status"], "True");
        assert_eq!(failure["reason"], "Failed");
        assert_eq!(failure["message"], "it broke");
        assert_eq!(failure["ansibleResult"]["ok"], 2);
        assert_eq!(find(&failed, RUNNING)["status"], "False");
        assert_eq!(find(&failed, RUNNING)["reason"], "Running");
        assert_eq!(find(&failed, SUCCESSFUL)["status"], "False");
    }

    #[test]
    fn failure_is_always_rewritten_with_the_latest_message() {
        let first = next(&[], &Transition::failed("one", None), T0, Some(1));
        let second = next(&first, &Transition::failed("two", None), T1, Some(1));
        assert_eq!(find(&second, FAILURE)["message"], "two");
        assert_eq!(find(&second, FAILURE)["lastTransitionTime"], T0, "still True: time kept");
    }

    #[test]
    fn unchanged_successful_keeps_its_place_and_time_but_updates_generation() {
        let done = next(&[], &Transition::Succeeded(stats()), T0, Some(1));
        let again = next(&done, &Transition::Succeeded(stats()), T1, Some(3));
        assert_eq!(find(&again, SUCCESSFUL)["lastTransitionTime"], T0);
        assert_eq!(find(&again, SUCCESSFUL)["observedGeneration"], 3);
    }

    #[test]
    fn custom_conditions_are_kept_whole() {
        let custom = json!({"type": "Ready", "status": "True", "lastHeartbeatTime": T0, "extra": {"a": 1}});
        let conditions = next(std::slice::from_ref(&custom), &Transition::Running, T1, None);
        assert_eq!(conditions[0], custom);
        assert!(conditions[1].get("observedGeneration").is_none());
    }

    #[test]
    fn error_without_counters_flips_successful_and_keeps_its_reason() {
        let done = next(&[], &Transition::Succeeded(stats()), T0, Some(1));
        let failed = next(&done, &Transition::failed("Unable to run reconciliation", None), T1, Some(1));
        assert_eq!(find(&failed, SUCCESSFUL)["status"], "False");
        assert_eq!(find(&failed, SUCCESSFUL)["reason"], "Successful");
        assert!(find(&failed, FAILURE).get("ansibleResult").is_none());
    }
}
