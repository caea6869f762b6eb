//! Kubernetes Events on the CR for each recorded run, through kube's recorder (which folds repeats
//! into a series), so `kubectl describe` tells the story: `Normal ReconcileSucceeded` with the
//! counts, `Warning ReconcileFailed` with the task and message.
//!
//! kube's recorder folds Events by type, reason and action, not by note, and a series keeps its
//! first note: the action is the trigger, and the note names no run, so a series is repeats of one
//! kind of run (e.g. the periodic resyncs) and never shows one run's ident for another's.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::record::{RunRecord, RunResult};

/// An Event's note is at most 1 KiB.
const NOTE_LIMIT: usize = 1024;

/// Publishes the runs' Events.
pub struct Events {
    recorder: Recorder,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported by `ansible-operator` from this replica (`instance`, e.g. the pod's name).
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: crate::kubeapi::FIELD_MANAGER.into(), instance };
        Events { recorder: Recorder::new(client, reporter) }
    }

    /// The Event for a run; a failure to publish is logged, not returned (the run happened).
    pub async fn publish(&self, record: &RunRecord, reference: &ObjectReference) {
        let event = event(record);
        if let Err(error) = self.recorder.publish(&event, reference).await {
            tracing::warn!(%error, reason = event.reason, "could not publish the run's Event");
        }
    }
}

impl Events {
    /// A Warning Event on a CR the operator could not decode and so skips (`error` says why).
    pub async fn undecodable(&self, reference: &ObjectReference, error: &str) {
        let note = format!("the operator cannot decode this CR and skips it (other CRs go on): {error}");
        let event = Event {
            type_: EventType::Warning,
            reason: "Undecodable".into(),
            note: Some(cut(note)),
            action: "Decode".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, reference).await {
            tracing::warn!(%error, reason = event.reason, "could not publish the Event of an undecodable CR");
        }
    }
}

/// The Event of a run.
pub fn event(record: &RunRecord) -> Event {
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
    Event { type_, reason: reason.into(), note: Some(cut(note)), action: trigger.into(), secondary: None }
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
        let failed = event(&record());
        assert_eq!((failed.type_, failed.reason.as_str()), (EventType::Warning, "ReconcileFailed"));
        assert_eq!(failed.note.as_deref(), Some("SpecChanged run: task \"t\" on localhost: boom"));
        let mut ok = record();
        ok.result = RunResult::Successful;
        let succeeded = event(&ok);
        assert_eq!(succeeded.reason, "ReconcileSucceeded");
        assert_eq!(succeeded.action, "SpecChanged", "runs of one trigger fold into a series");
        assert_eq!(succeeded.note.as_deref(), Some("SpecChanged run: ok=2 changed=1 skipped=0"));
        assert_eq!(cut("é".repeat(600)).len(), 1023);
    }

    #[test]
    fn a_timed_out_run_is_a_warning_with_its_own_reason_and_message() {
        let mut timed_out = record();
        timed_out.result = RunResult::TimedOut;
        timed_out.failed_task = None;
        timed_out.message = Some("run timed out after 3s while running task \"hang\"".into());
        let event = event(&timed_out);
        assert_eq!((event.type_, event.reason.as_str()), (EventType::Warning, "RunTimedOut"));
        assert_eq!(
            event.note.as_deref(),
            Some("SpecChanged run: run timed out after 3s while running task \"hang\"")
        );
    }
}
