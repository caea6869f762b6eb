//! One reconcile of one CR (upstream §6.2), as named steps: (with `--startup-resync=due`, the first
//! look at a converged CR schedules its resync instead) → wait for one of the watch's slots → pass
//! (a paused CR stops here: its `Paused` condition, nothing counted or recorded) → pass
//! the resync bucket and wait for the run budget → read the CR →
//! plan (pure) → admit (finalizer, `Running`) → run (hosts, precheck, main) → judge (pure) →
//! conclude (`decide::after` and the one status write of the result), noted in the journal as it
//! goes.

mod admit;
pub mod annotations;
pub mod backoff;
mod conclude;
mod context;
mod cr;
pub mod decide;
pub mod inputs;
mod journal;
mod judge;
pub mod memory;
mod pace;
mod pause;
mod paused_crs;
mod plan;
mod plan_run;
mod progress;
mod run;
pub mod schedule;
mod series;
mod slots;
mod spec;

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::Instrument;

use crate::cached::Cached;
use crate::go_duration;
use crate::history::trigger::Scheduled;
use crate::logging::error_chain;
use crate::metrics::ReconcileOutcome;
use crate::run::{Permit, Priority};
use admit::Admission;
use context::Next;
pub use context::{Context, Error, Settings};
pub use cr::key_of;
use cr::{StatusTarget, api_for};
use journal::Journal;
pub use journal::forget_reads;
use judge::Verdict;
pub use pace::Pacer;
pub use paused_crs::PausedCrs;
use plan::{Flags, Step};
pub use plan_run::{Planned, Planner};
use schedule::{Startup, StartupResync};
use series::cr_ref;
pub use slots::Slots;
pub use spec::new_ident;
pub use spec::{
    Inputs, check_reserved, plan_args, run_spec, runner_dir, trusts_cr_variables, unsafe_strings,
};

/// Reconciles one CR, as the controller's cache has it. Called by the controller, at most once at a
/// time per CR.
pub async fn reconcile(cached: Arc<Cached>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&*cached);
    let ident = new_ident();
    let span = tracing::info_span!(
        "reconcile",
        gvk = %ctx.watch.gvk,
        namespace = cached.namespace().unwrap_or_default(),
        name = cached.name_any(),
        job = %ident,
    );
    crate::telemetry::continue_trace(&span, cached.annotations());
    // Taken first: a reconcile that stops before it runs gives the slot back.
    let held = ctx.slots.take_held(&key);
    if let Some(membership) = ctx.settings.sharding.as_ref().filter(|m| m.draining(cached.labels())) {
        return hand_over(&cached, &ctx, membership).instrument(span).await;
    }
    let first_look = ctx.seen.first(&key);
    // Before the start-up deferral, so a CR resumed after a restart runs at once.
    let paused = plan::paused(&*cached, &ctx.watch);
    pause::note(&ctx, &key, paused);
    if paused {
        return pause::pause(&cached, &ctx, &key).instrument(span).await.map(Action::from);
    }
    if let Some(next) = span.in_scope(|| defer_at_startup(&cached, &ctx, first_look)) {
        return Ok(next.into());
    }
    let paced = is_resync(&ctx, &cached, first_look);
    let priority = priority(&cached);
    let target = || {
        let target = ObjectRef::new_with(&cached.name_any(), ctx.kind.clone());
        match cached.namespace() {
            Some(namespace) => target.within(&namespace),
            None => target,
        }
    };
    let slot = match held.or_else(|| ctx.slots.admit(&key, priority, paced, target)) {
        Some(slot) => slot,
        None => {
            span.in_scope(|| tracing::debug!("every slot is taken: in line for one"));
            return Ok(Action::await_change());
        }
    };
    let admitted = Admitted { paced: paced || slot.paced, priority };
    Box::pin(reconcile_admitted(&cached, &ctx, &key, admitted, ident, span)).await
}

/// How a reconcile that got its slot goes on: whether it passes the resync bucket, and its place
/// in the run budget.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    /// A resync (see [`is_resync`]).
    paced: bool,
    /// See [`priority`].
    priority: Priority,
}

/// A reconcile that holds one of the watch's slots: its steps, its journal, its metrics.
async fn reconcile_admitted(
    cached: &Cached,
    ctx: &Context,
    key: &str,
    admitted: Admitted,
    ident: String,
    span: tracing::Span,
) -> Result<Action, Error> {
    let timer = ctx.metrics.reconcile_started(&ctx.gvk_label, &ctx.controller_label);
    let mut journal = Journal::default();
    // The cached CR's metadata: the steps read the CR itself once they pass the run budget.
    let object = &cached.to_object(&ctx.resource);
    let result = reconcile_inner(object, ctx, key, admitted, ident.clone(), &mut journal)
        .instrument(span.clone())
        .await;
    journal::finish(ctx, object, &ident, journal, &result).instrument(span.clone()).await;
    let _entered = span.enter();
    match result {
        Ok(next) => {
            ctx.backoff.reset(key);
            tracing::debug!(?next, "reconcile done");
            timer.finish(ReconcileOutcome::Succeeded { requeue_after: next != Next::AwaitChange });
            Ok(next.into())
        }
        Err(error) => {
            tracing::error!(error = %error_chain(&error), "reconcile failed");
            timer.finish(ReconcileOutcome::Failed);
            Err(error)
        }
    }
}

/// The sharder asked this replica to let the CR go: no run of it is in flight here (the controller
/// runs one reconcile per CR at a time, and this is one), so drop its shard and drain labels. The
/// CR then leaves this replica's watch, and the sharder gives it to its new shard.
async fn hand_over(
    object: &Cached,
    ctx: &Context,
    membership: &crate::sharding::Membership,
) -> Result<Action, Error> {
    let api = api_for(ctx, object);
    match crate::sharding::acknowledge_drain(&api, object, membership).await {
        Ok(()) => {
            tracing::info!(shard = %membership.shard, "handed the CR over to another shard");
            ctx.backoff.reset(&key_of(object));
            Ok(Action::await_change())
        }
        // The cached copy is older than the CR: the watch brings the newer one, and its labels decide.
        Err(error) if error.is_conflict() => Ok(Action::requeue(Duration::from_millis(200))),
        Err(error) => Err(Error::HandOver(error)),
    }
}

/// With `--startup-resync=due`, the first look at a converged CR since the operator started: nothing
/// runs (no reconcile is counted, no record or Event written), its resync is scheduled at its last
/// confirmation plus its period with jitter. An overdue one runs now, as a resync.
fn defer_at_startup(object: &Cached, ctx: &Context, first_look: bool) -> Option<Next> {
    if ctx.settings.startup_resync == StartupResync::All || !first_look {
        return None;
    }
    // An annotation that is not a duration: the run says so.
    let period = plan::period(object, &ctx.watch, Flags::of(&ctx.settings))?;
    let draw = ctx.settings.resync_jitter.draw();
    let startup = schedule::at_startup(object, period, draw, jiff::Timestamp::now());
    // Its coming run is the resync it was due for (so it passes the resync bucket).
    let resync_scheduled = || ctx.settings.ledger.scheduled(journal::cr_key(ctx, object), Scheduled::Resync);
    let next = match startup {
        Startup::Run => return None,
        Startup::Overdue => {
            resync_scheduled();
            return None;
        }
        Startup::Later(wait) => {
            resync_scheduled();
            Next::Requeue(wait)
        }
        Startup::OnChange => Next::AwaitChange,
    };
    tracing::debug!(?next, "converged at start-up: resync scheduled, nothing runs now");
    Some(next)
}

/// Forgets a deleted CR: its first look, its place among the paused CRs, its per-CR series, what
/// its last run read.
pub fn forget<K: Resource>(ctx: &Context, object: &K) {
    let key = key_of(object);
    ctx.slots.forget(&key);
    ctx.seen.forget(&key);
    // With sharding, a CR that moves to another shard leaves this replica's watch as if deleted:
    // its confirmation stays (an entry of a CR that is really gone stays too).
    if let (Some(confirmations), None) = (&ctx.confirmations, &ctx.settings.sharding) {
        confirmations.forget(object.meta());
    }
    pause::note(ctx, &key, false);
    ctx.metrics.forget_cr(&cr_ref(ctx, object));
    ctx.settings.ledger.forget(&journal::cr_key(ctx, object));
    journal::forget_reads(ctx, object);
}

/// The controller's error policy: retry with per-CR exponential backoff.
pub fn error_policy(object: Arc<Cached>, _error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&*object);
    let delay = ctx.backoff.failed(&key);
    journal::retry_scheduled(&ctx, &*object, ctx.backoff.count(&key));
    Action::requeue(delay)
}

/// The steps of one reconcile.
async fn reconcile_inner(
    object: &DynamicObject,
    ctx: &Context,
    key: &str,
    admitted: Admitted,
    ident: String,
    journal: &mut Journal,
) -> Result<Next, Error> {
    let api = api_for(ctx, object);
    let name = object.name_any();
    // Wait for the run budget before reading the CR: everything below (the spec the run gets, the
    // generation its status names) comes from one read made after the wait.
    let (permit, _memory) = wait_for_budget(ctx, admitted).await;
    let Some(mut current) = cr::get(&api, &name, key).await? else {
        return Ok(Next::AwaitChange);
    };
    let target = |current: &DynamicObject| StatusTarget {
        api: &api,
        name: &name,
        key,
        generation: current.metadata.generation,
        resource_version: current.metadata.resource_version.clone(),
        cr: cr_ref(ctx, current),
    };

    let plan = match plan::plan(&current, &ctx.watch, Flags::of(&ctx.settings)) {
        Ok(plan) => plan,
        Err(failure) => return conclude::fail(ctx, &target(&current), failure).await,
    };
    if let Some(asked) = plan.period_asked {
        tracing::warn!(
            annotation = annotations::RECONCILE_PERIOD,
            asked = %go_duration::format(asked),
            period = %go_duration::format(plan.period),
            "reconcile period annotation below the minimum: using the minimum"
        );
    }
    let run = match plan.step {
        Step::Run(run) => run,
        Step::Skip => {
            tracing::info!("resource is terminated, skipping reconciliation");
            return Ok(Next::AwaitChange);
        }
        // Paused since the controller handed the CR over: the change brings it back to `pause`.
        Step::Paused => return Ok(Next::AwaitChange),
    };
    let finalizing = run.finalizing;

    match admit::admit(ctx, &api, key, &mut current, run, journal).await? {
        Admission::Gone => return Ok(Next::AwaitChange),
        Admission::Refused(failure) => return conclude::fail(ctx, &target(&current), failure).await,
        Admission::Admitted => {}
    }
    let target = target(&current);

    let running = run::run(ctx, &current, finalizing, ident, key, journal, &permit);
    let verdict = match progress::alongside(ctx, &api, &current, running).await {
        Ok(finished) => {
            let verdict = judge::main(&finished.report, finished.inventory_hosts.as_deref(), key);
            journal.report = Some(finished.report);
            verdict
        }
        Err(failure) => Verdict::Failed(failure),
    };
    conclude::conclude(ctx, &target, finalizing, plan.period, verdict).await
}

/// Passes the resync bucket (`--max-resyncs-per-second`) when `paced` (see [`is_resync`]), then
/// for room under the memory guard's mark (`--memory-high-water`), then for a slot of the run budget
/// (`--max-concurrent-runs`), counted as waiting meanwhile.
async fn wait_for_budget(ctx: &Context, admitted: Admitted) -> (Permit, Option<memory::Admitted>) {
    let periodic = if admitted.paced { Priority::Resync } else { Priority::Urgent };
    ctx.settings.resync_pacer.pass(periodic, || ctx.metrics.resync_waiting()).await;
    // Before the budget: a run held for memory holds no slot of the budget meanwhile.
    let memory = match &ctx.settings.memory_guard {
        Some(guard) => Some(guard.room(|| ctx.metrics.memory_waiting()).await),
        None => None,
    };
    let _waiting = ctx.metrics.waiting();
    (ctx.settings.door.lanes().reconcile_permit(admitted.priority).await, memory)
}

/// Converged CRs (their generation already succeeded) wait behind new work for the run budget.
fn priority(object: &Cached) -> Priority {
    if schedule::converged(object) { Priority::Resync } else { Priority::Urgent }
}

/// Whether this run is a resync, which the resync bucket paces: the CR is still as its last run
/// left it, and this is its start-up run (every such CR with the default `--startup-resync=all`, so
/// a restart is paced too) or its periodic resync (not a dependent change, a manual request, a
/// retry or `requeue_after`).
fn is_resync(ctx: &Context, object: &Cached, first_look: bool) -> bool {
    schedule::settled(object).is_some()
        && (first_look || ctx.settings.ledger.resync_scheduled(&journal::cr_key(ctx, object)))
}
