//! What a reconcile did, noted as it goes, and turned into the run's history record and Event when
//! it ends (after the status is written), plus what the operator remembers for the next run's
//! trigger.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};

use super::annotations;
use super::context::{Context, Error, Next};
use crate::executor_mode::Executor;
use crate::history::events;
use crate::history::ledger::{CrKey, Seen};
use crate::history::record::{FailedTask, OwnerRef, Read, RunInput, RunRecord, RunResult, Touched};
use crate::history::trigger::{self, Facts, Scheduled, Trigger};
use crate::history::{History, Latest};
use crate::logging::error_chain;
use crate::runner;
use crate::status;

/// Notes of one reconcile.
#[derive(Debug, Default)]
pub struct Journal {
    /// Why it ran; `None` while no run is certain (then nothing is recorded).
    pub trigger: Option<Trigger>,
    /// The CR's latest record before this run.
    latest: Option<Latest>,
    /// When the run started.
    started: Option<Timestamp>,
    /// The generation it saw.
    generation: Option<i64>,
    /// The generation the last run saw, which the trigger was decided against.
    observed: Option<i64>,
    /// The executor of the main run.
    pub executor: Option<Executor>,
    /// The main run's report.
    pub report: Option<runner::Report>,
    /// Objects the runs wrote through the proxy.
    pub writes: Vec<Touched>,
    /// Objects the runs read through the proxy and do not own.
    pub reads: Vec<Read>,
    /// The main run's output file.
    pub log: Option<String>,
    /// The CR as the main run saw it, to replay the run.
    pub input: Option<RunInput>,
    /// The notes of a plan, not of a run.
    plan: bool,
}

/// The CR as the ledger keys it.
pub fn cr_key<K: Resource>(ctx: &Context, object: &K) -> CrKey {
    (ctx.watch.gvk.group.clone(), ctx.watch.gvk.kind.clone(), object.namespace(), object.name_any())
}

impl Journal {
    /// Notes of a plan `by` someone of the CR at `generation`: recorded as asked for, marked as a plan.
    pub fn plan(by: &str, generation: Option<i64>) -> Self {
        Journal {
            trigger: Some(Trigger::Manual { by: by.to_string() }),
            started: Some(Timestamp::now()),
            generation,
            plan: true,
            ..Journal::default()
        }
    }

    /// Decides why the coming run happens, from the CR before its `Running` write (which moves the
    /// conditions' `observedGeneration`), its latest record and the ledger.
    pub async fn start(&mut self, ctx: &Context, current: &DynamicObject, finalizing: bool) {
        let namespace = current.namespace();
        let latest =
            match ctx.settings.history.latest(&current.uid().unwrap_or_default(), namespace.as_deref()).await
            {
                Ok(latest) => latest,
                Err(error) => {
                    tracing::debug!(error = %error_chain(&error), "could not read the latest run record");
                    None
                }
            };
        let key = cr_key(ctx, current);
        let (dependent, scheduled) = ctx.settings.ledger.take(&key);
        let now = seen(current);
        let before = ctx.settings.ledger.saw(key.clone(), now);
        let request = annotations::reconcile_request(current.annotations());
        // A request no run saw yet. The last record's start decides only after a restart: a run
        // that started after the request was made may not have seen it.
        let manual = request.as_ref().filter(|r| {
            ctx.settings
                .ledger
                .serve_request(key.clone(), &r.at)
                .unwrap_or_else(|| is_newer(&r.at, latest.as_ref().map(|l| l.started.as_str())))
        });
        let observed = status::conditions_of(current)
            .iter()
            .filter(|c| {
                c["type"] == status::conditions::SUCCESSFUL || c["type"] == status::conditions::FAILURE
            })
            .filter_map(|c| c["observedGeneration"].as_i64())
            .chain(latest.as_ref().and_then(|l| l.generation))
            .max();
        let generation = current.metadata.generation;
        self.trigger = Some(trigger::decide(Facts {
            finalizing,
            manual: manual.map(|r| r.by.as_str()),
            generation,
            observed_generation: observed,
            recorded: latest.is_some(),
            annotations_changed: ctx.watch.watch_annotations_changes
                && before.is_some_and(|before| before.annotations != now.annotations),
            object_changed: generation.is_none()
                && before.is_some_and(|before| before.content != now.content),
            dependent,
            scheduled,
        }));
        tracing::debug!(trigger = ?self.trigger, "run triggered");
        self.latest = latest;
        self.started = Some(Timestamp::now());
        self.generation = generation;
        self.observed = observed;
    }

    /// The run gets a newer copy of the CR than the trigger was decided on (the spec changed while
    /// the reconcile got ready): unless it finalizes or was asked for, it runs for that change.
    pub fn run_on(&mut self, generation: Option<i64>) {
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        let asked = matches!(self.trigger, Some(Trigger::Finalizer | Trigger::Manual { .. }));
        if let (false, Some(_), Some(from), Some(to)) = (asked, &self.trigger, self.observed, generation)
            && from != to
        {
            self.trigger = Some(Trigger::SpecChanged { from, to });
        }
    }
}

/// What a run sees of its CR, to tell the next run whether the CR changed since: its annotations,
/// and its content as a dependent's change is judged (everything but status, resourceVersion and
/// managedFields).
fn seen(object: &DynamicObject) -> Seen {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    object.annotations().hash(&mut hasher);
    Seen { annotations: hasher.finish(), content: crate::proxy::dependents::significant_hash(object) }
}

/// Whether the request time `at` is after the last run started (`None`: there was none).
fn is_newer(at: &str, last_started: Option<&str>) -> bool {
    let Some(last) = last_started else { return true };
    match (at.parse::<Timestamp>(), last.parse::<Timestamp>()) {
        (Ok(at), Ok(last)) => at > last,
        _ => false,
    }
}

/// After a reconcile: its record and Event, and what to remember for the next run's trigger.
pub async fn finish(
    ctx: &Context,
    object: &DynamicObject,
    ident: &str,
    journal: Journal,
    result: &Result<Next, Error>,
) {
    let key = cr_key(ctx, object);
    let uses_requeue_after = journal.report.as_ref().is_some_and(|r| r.outcome.requeue_after.is_some());
    match result {
        Ok(Next::Requeue(_)) if uses_requeue_after => {
            ctx.settings.ledger.scheduled(key, Scheduled::RequeueAfter)
        }
        Ok(Next::Requeue(_)) => ctx.settings.ledger.scheduled(key, Scheduled::Resync),
        Ok(Next::AwaitChange) | Err(_) => {}
    }
    let (Some(trigger), Some(started)) = (journal.trigger.clone(), journal.started) else { return };
    follow_reads(ctx, object, &trigger, &journal.reads);
    let record = record(ctx, object, ident, trigger, started, &journal, result);
    write(&ctx.settings.history, ctx, &record, journal.latest.as_ref()).await;
    let worth = events::worth_an_event(ctx.settings.run_events, record.result, &ctx.watch.gvk.group);
    if let Some(events) = ctx.settings.events.as_ref().filter(|_| worth) {
        // With the resourceVersion, as client-go's reference to an object.
        let reference = ObjectReference {
            resource_version: object.metadata.resource_version.clone(),
            ..object.object_ref(&ctx.resource)
        };
        events.record(&reference, &events::note(&record)).await;
    }
}

/// With `watchReadResources`: what this run read replaces what the CR's last run read, so that a
/// change to it re-runs the CR. A finalizer run's reads are not followed: the CR is going.
fn follow_reads(ctx: &Context, object: &DynamicObject, trigger: &Trigger, reads: &[Read]) {
    let Some(read_watches) = ctx.proxy.read_watches() else { return };
    if !ctx.watch.extensions.watch_read_resources || *trigger == Trigger::Finalizer {
        return;
    }
    read_watches.replace(cr_key(ctx, object), object.uid().unwrap_or_default(), reads.to_vec());
}

/// A deleted CR's reads are no longer followed.
pub fn forget_reads<K: Resource>(ctx: &Context, object: &K) {
    if let Some(read_watches) = ctx.proxy.read_watches() {
        read_watches.forget(&cr_key(ctx, object));
    }
}

/// After a plan: its record, kept apart from the CR's runs (no Event, nothing remembered for the
/// CR's next run). Returns the record's name.
pub async fn finish_plan(
    ctx: &Context,
    object: &DynamicObject,
    ident: &str,
    journal: Journal,
    result: &Result<Next, Error>,
) -> Option<String> {
    let (Some(trigger), Some(started)) = (journal.trigger.clone(), journal.started) else { return None };
    let record = record(ctx, object, ident, trigger, started, &journal, result);
    let limit = ctx.watch.extensions.run_history_limit.unwrap_or(ctx.settings.run_history_limit);
    if limit == 0 {
        return None;
    }
    match ctx.settings.history.record(&record, limit).await {
        Ok(()) => Some(record.object_name()),
        Err(error) => {
            tracing::warn!(error = %error_chain(&error), "could not write the plan's record");
            None
        }
    }
}

/// Stores the record, or confirms the latest one when a resync changed nothing.
async fn write(history: &History, ctx: &Context, record: &RunRecord, latest: Option<&Latest>) {
    let limit = ctx.watch.extensions.run_history_limit.unwrap_or(ctx.settings.run_history_limit);
    if limit == 0 {
        return;
    }
    let unchanged = record.stats.as_ref().is_some_and(|s| s.changed == 0);
    let confirms = record.result == RunResult::Successful && unchanged && record.trigger.confirms();
    let namespace = record.owner.namespace.as_deref();
    let written = match latest.filter(|_| confirms) {
        Some(latest) => history.confirm(latest, &record.owner.uid, namespace).await,
        None => history.record(record, limit).await,
    };
    if let Err(error) = written {
        if error.is_namespace_terminating() {
            tracing::debug!(error = %error_chain(&error), "no run record: the namespace is being deleted");
            return;
        }
        tracing::warn!(error = %error_chain(&error), "could not write the run record");
    }
}

fn record(
    ctx: &Context,
    object: &DynamicObject,
    ident: &str,
    trigger: Trigger,
    started: Timestamp,
    journal: &Journal,
    result: &Result<Next, Error>,
) -> RunRecord {
    let outcome = journal.report.as_ref().map(|r| &r.outcome);
    let failed_task = outcome.and_then(|o| o.failures.first()).map(|f| FailedTask {
        task: f.task.clone(),
        host: f.host.clone(),
        message: f.describe(),
    });
    let message = match result {
        Err(Error::TimedOut { message, .. } | Error::PlaybookKilled { message, .. }) => Some(message.clone()),
        Err(error) if failed_task.is_none() => Some(error_chain(error)),
        _ => None,
    };
    RunRecord {
        ident: ident.to_string(),
        owner: OwnerRef {
            api_version: ctx.watch.gvk.api_version(),
            kind: ctx.watch.gvk.kind.clone(),
            namespace: object.namespace(),
            name: object.name_any(),
            uid: object.uid().unwrap_or_default(),
            generation: journal.generation,
        },
        trigger,
        executor: journal.executor.unwrap_or(Executor::Cold).as_str(),
        started,
        finished: Timestamp::now(),
        result: match result {
            Ok(_) => RunResult::Successful,
            Err(Error::TimedOut { .. }) => RunResult::TimedOut,
            Err(_) => RunResult::Failure,
        },
        stats: outcome.and_then(|o| o.stats.clone()),
        failed_task,
        message,
        tasks: outcome.map(|o| o.tasks.clone()).unwrap_or_default(),
        tasks_omitted: outcome.map_or(0, |o| o.tasks_omitted),
        objects: journal.writes.clone(),
        reads: journal.reads.clone(),
        log: journal.log.clone(),
        input: journal.input.clone(),
        shard: ctx.settings.sharding.as_ref().map(|membership| membership.shard.clone()),
        plan: journal.plan,
    }
}

/// A failed reconcile will be retried: the retry is attempt `failures + 1`.
pub fn retry_scheduled<K: Resource>(ctx: &Context, object: &K, failures: u32) {
    ctx.settings.ledger.scheduled(cr_key(ctx, object), Scheduled::Retry { attempt: failures + 1 });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decided(trigger: Trigger, generation: i64, observed: i64) -> Journal {
        Journal {
            trigger: Some(trigger),
            generation: Some(generation),
            observed: Some(observed),
            ..Journal::default()
        }
    }

    #[test]
    fn a_run_that_gets_a_newer_spec_than_its_trigger_saw_runs_for_the_spec_change() {
        let mut retry = decided(Trigger::Retry { attempt: 3 }, 3, 3);
        retry.run_on(Some(4));
        assert_eq!(retry.trigger, Some(Trigger::SpecChanged { from: 3, to: 4 }));
        assert_eq!(retry.generation, Some(4));

        let mut changed = decided(Trigger::SpecChanged { from: 1, to: 2 }, 2, 1);
        changed.run_on(Some(3));
        assert_eq!(changed.trigger, Some(Trigger::SpecChanged { from: 1, to: 3 }));

        let mut same = decided(Trigger::Resync, 2, 2);
        same.run_on(Some(2));
        assert_eq!(same.trigger, Some(Trigger::Resync));

        for asked in [Trigger::Finalizer, Trigger::Manual { by: "someone".to_string() }] {
            let mut journal = decided(asked.clone(), 2, 2);
            journal.run_on(Some(3));
            assert_eq!(journal.trigger, Some(asked));
            assert_eq!(journal.generation, Some(3));
        }
    }

    fn object(metadata: serde_json::Value, data: serde_json::Value) -> DynamicObject {
        let mut object: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata}))
                .unwrap();
        object.data = data;
        object
    }

    #[test]
    fn what_a_run_sees_changes_with_annotations_and_content_but_not_with_status_or_resource_version() {
        let base = object(
            json!({"name": "s", "resourceVersion": "1", "annotations": {"a": "1"}}),
            json!({"data": {"k": "dg=="}}),
        );
        let moved = object(
            json!({"name": "s", "resourceVersion": "2", "annotations": {"a": "1"}}),
            json!({"data": {"k": "dg=="}, "status": {"phase": "x"}}),
        );
        assert_eq!(
            seen(&base),
            seen(&moved),
            "status and resourceVersion are the operator's and the server's"
        );
        let annotated =
            object(json!({"name": "s", "annotations": {"a": "2"}}), json!({"data": {"k": "dg=="}}));
        assert_ne!(seen(&base).annotations, seen(&annotated).annotations);
        assert_ne!(seen(&base).content, seen(&annotated).content);
        let edited = object(json!({"name": "s", "annotations": {"a": "1"}}), json!({"data": {"k": "dw=="}}));
        assert_eq!(seen(&base).annotations, seen(&edited).annotations);
        assert_ne!(seen(&base).content, seen(&edited).content);
        let labelled = object(
            json!({"name": "s", "annotations": {"a": "1"}, "labels": {"l": "1"}}),
            json!({"data": {"k": "dg=="}}),
        );
        assert_ne!(seen(&base).content, seen(&labelled).content);
    }

    #[test]
    fn a_request_counts_when_it_is_newer_than_the_last_run() {
        assert!(is_newer("2026-11-23T10:00:01Z", Some("2026-11-23T10:00:00.5Z")));
        assert!(!is_newer("2026-11-23T10:00:00Z", Some("2026-11-23T10:00:00.5Z")));
        assert!(is_newer("2026-11-23T10:00:00Z", None), "no run yet");
        assert!(!is_newer("soon", Some("2026-11-23T10:00:00Z")));
    }
}
