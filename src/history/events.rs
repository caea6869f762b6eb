//! The Event of each recorded run on its CR, so `kubectl describe` tells the story:
//! `Normal ReconcileSucceeded` with the counts, `Warning ReconcileFailed` with the task and message,
//! `Warning RunTimedOut`. Written as core Events by [`crate::recorder`], which folds repeats of one
//! message into one Event with a count: a message names the trigger and no run, so repeats are runs
//! of one kind (the periodic resyncs, the retries of one failure). Which runs get one is
//! `--run-events` ([`worth_an_event`]): upstream writes none, and a real operator's RBAC often
//! lacks `events`.

use crate::recorder::{EventType, Note};

use super::record::{RunRecord, RunResult};

/// `--run-events`: which runs get an Event on their CR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RunEvents {
    /// Failed and timed-out runs of the operator's own kinds (those a CRD serves).
    #[default]
    Failures,
    /// Every run of every watched kind, successes included.
    All,
    /// None, as upstream.
    None,
}

/// Whether a run that ended with `result`, of a kind in API group `group`, gets an Event.
#[must_use]
pub fn worth_an_event(policy: RunEvents, result: RunResult, group: &str) -> bool {
    match policy {
        RunEvents::None => false,
        RunEvents::All => true,
        RunEvents::Failures => result != RunResult::Successful && is_own_kind(group),
    }
}

/// Whether a kind in `group` is the operator's own, served by a CRD, rather than Kubernetes' (a
/// Secret, a Namespace, a Deployment watched as a primary): a CRD's group has a dot, and the
/// `*.k8s.io` groups are Kubernetes' own (a CRD there needs the API reviewers' approval).
pub fn is_own_kind(group: &str) -> bool {
    group.contains('.') && !group.ends_with(".k8s.io")
}

/// An Event's message is at most 1 KiB.
const NOTE_LIMIT: usize = 1024;

/// The Event of a run.
pub fn note(record: &RunRecord) -> Note {
    let trigger = record.trigger.reason();
    let (type_, reason, note) = match record.result {
        RunResult::Successful => {
            let counts = record
                .stats
                .as_ref()
                .map(|s| format!("ok={} changed={} skipped={}", s.ok, s.changed, s.skipped))
                .unwrap_or_default();
            (EventType::Normal, "ReconcileSucceeded", format!("{trigger} run: {counts}"))
        }
        RunResult::Failure => {
            let what = match (&record.failed_task, &record.message) {
                (Some(failed), _) => format!("task {:?} on {}: {}", failed.task, failed.host, failed.message),
                (None, Some(message)) => message.clone(),
                (None, None) => "failed".into(),
            };
            (EventType::Warning, "ReconcileFailed", format!("{trigger} run: {what}"))
        }
        RunResult::TimedOut => {
            let what = record.message.as_deref().unwrap_or("timed out");
            (EventType::Warning, "RunTimedOut", format!("{trigger} run: {what}"))
        }
    };
    Note { type_, reason: reason.into(), message: cut(note) }
}

/// The Warning Event on a CR the operator could not decode and so skips (`error` says why).
pub fn undecodable(error: &str) -> Note {
    let message = format!("the operator cannot decode this CR and skips it (other CRs go on): {error}");
    Note { type_: EventType::Warning, reason: "Undecodable".into(), message: cut(message) }
}

fn cut(mut note: String) -> String {
    if note.len() > NOTE_LIMIT {
        let mut end = NOTE_LIMIT - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::record::tests::record;

    #[test]
    fn failures_are_warnings_naming_the_task_and_successes_give_the_counts() {
        let failed = note(&record());
        assert_eq!((failed.type_, failed.reason.as_str()), (EventType::Warning, "ReconcileFailed"));
        assert_eq!(failed.message, "SpecChanged run: task \"t\" on localhost: boom");
        let mut ok = record();
        ok.result = RunResult::Successful;
        let succeeded = note(&ok);
        assert_eq!(succeeded.reason, "ReconcileSucceeded");
        assert_eq!(succeeded.message, "SpecChanged run: ok=2 changed=1 skipped=0");
        assert_eq!(cut("é".repeat(600)).len(), 1023);
    }

    #[test]
    fn by_default_only_failures_of_the_operator_s_own_kinds_get_an_event() {
        let own = "cache.example.com";
        for foreign in ["", "apps", "batch", "networking.k8s.io"] {
            assert!(!is_own_kind(foreign), "{foreign:?}");
            assert!(!worth_an_event(RunEvents::Failures, RunResult::Failure, foreign), "{foreign:?}");
            assert!(worth_an_event(RunEvents::All, RunResult::Successful, foreign), "{foreign:?}");
        }
        assert!(!worth_an_event(RunEvents::Failures, RunResult::Successful, own), "upstream is quiet");
        assert!(worth_an_event(RunEvents::Failures, RunResult::Failure, own));
        assert!(worth_an_event(RunEvents::Failures, RunResult::TimedOut, own));
        assert!(worth_an_event(RunEvents::All, RunResult::Successful, own));
        for result in [RunResult::Successful, RunResult::Failure, RunResult::TimedOut] {
            assert!(!worth_an_event(RunEvents::None, result, own));
        }
    }

    #[test]
    fn a_timed_out_run_is_a_warning_with_its_own_reason_and_message() {
        let mut timed_out = record();
        timed_out.result = RunResult::TimedOut;
        timed_out.failed_task = None;
        timed_out.message = Some("run timed out after 3s while running task \"hang\"".into());
        let event = note(&timed_out);
        assert_eq!((event.type_, event.reason.as_str()), (EventType::Warning, "RunTimedOut"));
        assert_eq!(event.message, "SpecChanged run: run timed out after 3s while running task \"hang\"");
    }
}
