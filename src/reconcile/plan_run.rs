//! A plan of a CR change: the CR's playbook or role run with the proposed spec through the steps a
//! real reconcile takes (plan, hosts, precheck, main: the same extra vars, inventory and
//! credentials), but in check mode with `--diff` and a plan-only proxy credential, in a data
//! directory of its own, and kept as a record marked as a plan. The CR's status, finalizers, run
//! history and what the operator remembers of it are left alone.

use std::path::Path;
use std::sync::Arc;

use kube::api::DynamicObject;
use serde::Serialize;
use serde_json::Value;
use tracing::Instrument;

use super::context::{Context, Error, Next};
use super::cr::key_of;
use super::journal::{self, Journal};
use super::judge::{self, Verdict};
use super::plan::{self, Flags, Step};
use super::run;
use super::spec::{new_ident, plan_dir};
use crate::job_event::JobEvent;
use crate::logging::error_chain;
use crate::run::Permit;

/// Runs plans of one watched kind's CRs.
#[derive(Clone)]
pub struct Planner {
    ctx: Arc<Context>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner").field("gvk", &self.ctx.watch.gvk).finish_non_exhaustive()
    }
}

/// A plan's answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Planned {
    /// `Successful` when no task failed, else `Failure`.
    pub result: &'static str,
    /// Why the plan could not run or finish, when no task says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The plan's record (an `AnsibleRun` with `spec.kind: Plan`), when one was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    /// `warm` or `cold`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<&'static str>,
    /// What each task would do.
    #[serde(flatten)]
    pub plan: crate::plan::Plan,
}

impl Planner {
    /// A planner for the kind `ctx` reconciles.
    pub fn new(ctx: Arc<Context>) -> Self {
        Planner { ctx }
    }

    /// Plans `live` with its spec replaced by `spec`, asked for by `by`.
    pub async fn plan(&self, live: &DynamicObject, spec: Value, by: &str) -> Planned {
        let ctx = &*self.ctx;
        let mut proposed = live.clone();
        proposed.data["spec"] = spec;
        let key = key_of(&proposed);
        let ident = new_ident();
        let span = tracing::info_span!(
            "plan",
            gvk = %ctx.watch.gvk,
            namespace = kube::ResourceExt::namespace(&proposed).unwrap_or_default(),
            name = kube::ResourceExt::name_any(&proposed),
            job = %ident,
        );
        async move {
            tracing::info!(by, "plan asked for");
            // A plan waits in a lane of its own, neither behind nor before the reconciles.
            let permit = ctx.settings.door.lanes().plan_permit().await;
            let mut journal = Journal::plan(by, live.metadata.generation);
            let result = self.run(&proposed, &key, ident.clone(), &mut journal, &permit).await;
            let message = match &result {
                Err(error) if journal.report.as_ref().is_none_or(|r| r.outcome.failures.is_empty()) => {
                    Some(error_chain(error))
                }
                _ => None,
            };
            let dir = plan_dir(&ctx.settings, &ident);
            let events = read_events(&dir.join("artifacts").join(&ident).join("job_events"));
            let plan = crate::plan::from_events(&events);
            let executor = journal.executor.map(crate::executor_mode::Executor::as_str);
            let record = journal::finish_plan(ctx, &proposed, &ident, journal, &result).await;
            if let Err(error) = std::fs::remove_dir_all(&dir) {
                tracing::debug!(%error, "could not remove the plan's directory");
            }
            let result = if result.is_ok() { "Successful" } else { "Failure" };
            tracing::info!(result, changed = plan.summary.changed, failed = plan.summary.failed, "plan made");
            Planned { result, message, record, executor, plan }
        }
        .instrument(span)
        .await
    }

    /// The steps of a reconcile that a plan takes: the pure plan (a reserved variable or a bad
    /// annotation stops it as it would stop the run), then the run in check mode.
    async fn run(
        &self,
        proposed: &DynamicObject,
        key: &str,
        ident: String,
        journal: &mut Journal,
        permit: &Permit,
    ) -> Result<Next, Error> {
        let ctx = &*self.ctx;
        let planned = plan::plan(proposed, &ctx.watch, Flags::of(&ctx.settings)).map_err(|f| *f.error)?;
        let Step::Run(run) = planned.step else { return Ok(Next::AwaitChange) };
        if let Some(refusal) = run.refusal {
            return Err(*refusal.error);
        }
        let finished = run::run(ctx, proposed, false, ident, key, journal, permit).await;
        let verdict = match finished {
            Ok(finished) => {
                let verdict = judge::main(&finished.report, finished.inventory_hosts.as_deref(), key);
                journal.report = Some(finished.report);
                verdict
            }
            Err(failure) => Verdict::Failed(failure),
        };
        match verdict {
            Verdict::Ran(ran) if ran.succeeded => Ok(Next::AwaitChange),
            Verdict::Ran(_) => Err(Error::TaskFailed { key: key.into() }),
            Verdict::Failed(failure) => Err(*failure.error),
        }
    }
}

/// The job events ansible-runner wrote in `dir`, in the order they happened (files are named
/// `<counter>-<uuid>.json`); unreadable ones are left out.
fn read_events(dir: &Path) -> Vec<JobEvent> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut numbered: Vec<(u64, JobEvent)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let counter = name.split_once('-')?.0.parse().ok()?;
            let text = std::fs::read(entry.path()).ok()?;
            Some((counter, serde_json::from_slice(&text).ok()?))
        })
        .collect();
    numbered.sort_by_key(|(counter, _)| *counter);
    numbered.into_iter().map(|(_, event)| event).collect()
}
