//! Ending a reconcile: the one place its result reaches the CR's status. A failure writes its
//! `Failure` condition (unless `manageStatus` gates it and is off); a run that finished is weighed
//! against the CR as it is now (`decide::after`: drop our finalizer, or come back soon to run it)
//! before its conditions are written.

use std::time::Duration;

use kube::api::{DynamicObject, ObjectMeta};
use serde_json::{Map, Value};

use super::context::{Context, Error, Next};
use super::cr::{StatusTarget, get, set_finalizer};
use super::decide::{self, After};
use super::judge::{Failure, Ran, Verdict};
use super::schedule::Jitter;
use super::series;
use crate::go_duration;
use crate::status::{self, Transition};

/// The zap logger of these lines: `reconcile`, as before they moved into this file.
const TARGET: &str = "ansible_operator::reconcile";

/// How soon a CR that started terminating during a run is looked at again (as upstream).
const FINALIZER_REQUEUE: Duration = Duration::from_secs(5);

/// A status write: the transition, and `status.hosts` when the run had an inventory.
type Write = (Transition, Option<Map<String, Value>>);

/// Ends a reconcile that failed: its condition, then its error.
pub async fn fail(ctx: &Context, target: &StatusTarget<'_>, failure: Failure) -> Result<Next, Error> {
    let write = failure.is_written(ctx.watch.manage_status).then(|| failure.transition());
    finish(ctx, target, write.map(|transition| (transition, failure.hosts)), Err(*failure.error), None).await
}

/// Ends a reconcile from its verdict; `finalizing` when the finalizer ran, `period` the requeue
/// period after success.
pub async fn conclude(
    ctx: &Context,
    target: &StatusTarget<'_>,
    finalizing: bool,
    period: Duration,
    verdict: Verdict,
) -> Result<Next, Error> {
    let ran = match verdict {
        Verdict::Failed(failure) => return fail(ctx, target, failure).await,
        Verdict::Ran(ran) => ran,
    };
    let Some((next, after_run)) = after(ctx, target, finalizing, period, &ran).await? else {
        return Ok(Next::AwaitChange);
    };
    if let (true, false, Some(confirmations)) = (ran.succeeded, finalizing, &ctx.confirmations) {
        // The version the run saw: a change made while it ran is still to run.
        let seen = ObjectMeta {
            generation: target.generation,
            resource_version: target.resource_version.clone(),
            ..after_run.metadata.clone()
        };
        confirmations.confirmed(&seen, jiff::Timestamp::now());
    }
    let result = if ran.succeeded { Ok(next) } else { Err(Error::TaskFailed { key: target.key.into() }) };
    let write = ctx.watch.manage_status.then_some((ran.transition, ran.hosts));
    finish(ctx, target, write, result, Some(after_run)).await
}

/// What follows a run that finished, from the CR as re-read (returned with it): `None` when it is
/// gone or its finalizer came off (so the deletion completes), else when to come back.
async fn after(
    ctx: &Context,
    target: &StatusTarget<'_>,
    finalizing: bool,
    period: Duration,
    ran: &Ran,
) -> Result<Option<(Next, DynamicObject)>, Error> {
    if let Some(period) = &ran.bad_requeue_period {
        tracing::warn!(
            target: TARGET,
            period = %period, "requeue_after returned a period that is not a duration"
        );
    }
    let Some(after_run) = get(target.api, target.name, target.key).await? else {
        return Ok(None);
    };
    let finalizer = ctx.watch.finalizer.as_ref().map(|f| f.name.as_str());
    let next = requeue(ran.requeue_after, period, ctx.settings.resync_jitter);
    match decide::after(&after_run.metadata, finalizer, finalizing, ran.succeeded) {
        After::RemoveFinalizer => {
            if let Some(finalizer) = finalizer {
                set_finalizer(target.api, &after_run, finalizer, false, target.key).await?;
            }
            Ok(None)
        }
        After::RunFinalizerSoon => Ok(Some((Next::Requeue(FINALIZER_REQUEUE), after_run))),
        After::Nothing => Ok(Some((next, after_run))),
    }
}

/// Writes the status (when there is a write; on `fresh`, the CR just read, when there is one) and
/// counts the run in the CR's series (unless the CR is gone, so a deleted CR's series stay gone),
/// then returns `result`.
async fn finish(
    ctx: &Context,
    target: &StatusTarget<'_>,
    write: Option<Write>,
    result: Result<Next, Error>,
    fresh: Option<DynamicObject>,
) -> Result<Next, Error> {
    if let Some((transition, hosts)) = write {
        let (api, name, generation) = (target.api, target.name, target.generation);
        let conditions = ctx.conditions();
        let written =
            status::write_with_hosts(api, name, conditions, &transition, generation, hosts.as_ref(), fresh)
                .await?;
        let Some(written) = written else {
            return result;
        };
        series::conditions(ctx, &written);
    }
    series::concluded(ctx, &target.cr, result.is_ok());
    result
}

/// After success: the `requeue_after` module's period exactly, else the configured one with
/// `jitter` (0 = wait for a change).
fn requeue(requeue_after: Option<Duration>, period: Duration, jitter: Jitter) -> Next {
    match requeue_after.unwrap_or(period) {
        Duration::ZERO => Next::AwaitChange,
        period if requeue_after.is_some() => {
            tracing::info!(
                target: TARGET,
                period = %go_duration::format(period), "set the reconciliation to occur after"
            );
            Next::Requeue(period)
        }
        period => Next::Requeue(jitter.stretch(period)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn the_configured_period_gets_jitter_and_requeue_after_stays_exact() {
        let jitter = Jitter::new(0.5).unwrap();
        let periods: Vec<Duration> = (0..50)
            .map(|_| match requeue(None, MINUTE, jitter) {
                Next::Requeue(period) => period,
                Next::AwaitChange => panic!("a period"),
            })
            .collect();
        assert!(periods.iter().all(|p| *p >= MINUTE && *p <= MINUTE.mul_f64(1.5)), "{periods:?}");
        assert!(periods.iter().any(|p| *p != periods[0]), "spread, not lockstep");
        assert_eq!(requeue(Some(MINUTE), 10 * MINUTE, jitter), Next::Requeue(MINUTE));
        assert_eq!(requeue(None, Duration::ZERO, jitter), Next::AwaitChange);
        assert_eq!(requeue(None, MINUTE, Jitter::NONE), Next::Requeue(MINUTE));
    }
}
