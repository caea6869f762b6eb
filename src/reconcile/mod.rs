//! One reconcile of one CR (upstream §6.2): decide, mark Running, build the vars, run Ansible, fold
//! the events, handle the finalizer, write the outcome to status, and choose when to come back.

pub mod annotations;
pub mod backoff;
pub mod budget;
pub mod decide;
mod journal;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::go_duration;
use crate::kubeapi::{self, with_timeout};
use crate::logging::error_chain;
use crate::metrics::{Metrics, ReconcileOutcome};
use crate::outcome::Outcome;
use crate::proxy::Proxy;
use crate::proxy::credentials::{Grant, Issued};
use crate::proxy::owner::Owner;
use crate::remote::{self, Remote};
use crate::runner::{self, Inventory, RunSpec};
use crate::status::{self, Transition};
use crate::vars::{self, VarsInput};
use crate::watches::Watch;
use annotations::Bounded;
use budget::{Budget, Priority};
use decide::{After, Before};
use journal::Journal;

/// How soon a CR that started terminating during a run is looked at again (as upstream).
const FINALIZER_REQUEUE: Duration = Duration::from_secs(5);

/// Reason of the `Failure` condition when the precheck fails.
const PRECHECK_FAILED: &str = "PrecheckFailed";

/// Reason of the `Failure` condition when a run took longer than its timeout.
const RUN_TIMED_OUT: &str = "RunTimedOut";

/// Reason of the `Failure` condition when the spec would set Ansible's own variables.
const RESERVED_VARIABLE: &str = "ReservedVariable";

/// Upstream's status message when the run could not start.
const UNABLE_TO_RUN: &str = "Unable to run reconciliation";

/// Settings shared by every reconcile of the process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--reconcile-period`.
    pub reconcile_period: Duration,
    /// `--ansible-run-timeout` (zero: no limit; a watch's `runTimeout` wins).
    pub run_timeout: Duration,
    /// Runner settings (program, logging).
    pub runner: runner::Settings,
    /// Where the per-CR data directories live.
    pub runner_dir: PathBuf,
    /// `--ansible-args`.
    pub ansible_args: String,
    /// Inventory for every run.
    pub inventory: Inventory,
    /// `ANSIBLE_GATHERING=explicit`: skip facts in role mode.
    pub role_skip_facts: bool,
    /// Further environment for playbooks (`--ansible-roles-path`, `--ansible-collections-path`).
    pub playbook_env: Vec<(String, String)>,
    /// The global run budget (`--max-concurrent-runs`).
    pub budget: Arc<Budget>,
    /// Where run records go (`None` with `--run-history-limit=0`).
    pub history: Option<Arc<crate::history::History>>,
    /// Events on the CRs about their runs.
    pub events: Option<Arc<crate::recorder::Recorder>>,
    /// What the operator remembers between runs, to tell why a run happens.
    pub ledger: Arc<crate::history::Ledger>,
    /// Run records kept per CR (`--run-history-limit`; a watch's `runHistoryLimit` wins).
    pub run_history_limit: usize,
    /// The runs in flight and their output, for the API.
    pub live: Arc<crate::history::LiveRuns>,
    /// `--trust-cr-templates`: Jinja in CR strings is evaluated (a watch's `trustCRTemplates` wins).
    pub trust_cr_templates: bool,
    /// `--trust-cr-variables`: spec keys may set Ansible's own variables (a watch's
    /// `trustCRVariables` wins).
    pub trust_cr_variables: bool,
    /// With `--sharding`: this replica's ring and shard.
    pub sharding: Option<crate::sharding::Membership>,
}

/// Everything a reconcile of one watched kind needs.
pub struct Context {
    /// Client with the operator's credentials.
    pub client: Client,
    /// The watch entry.
    pub watch: Watch,
    /// The kind's API resource, from discovery.
    pub resource: ApiResource,
    /// Whether the kind is namespaced.
    pub namespaced: bool,
    /// Process-wide settings.
    pub settings: Arc<Settings>,
    /// Failure counts for the retry backoff.
    pub backoff: backoff::Backoff,
    /// The API proxy playbooks reach the cluster through.
    pub proxy: Arc<Proxy>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// This kind's `GVK` metric label.
    pub gvk_label: String,
    /// This kind's `controller` metric label.
    pub controller_label: String,
}

/// Why a reconcile failed; each leads to a retry with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or updating the CR failed.
    #[error("{action} {key}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// namespace/name.
        key: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
    /// Writing the status failed.
    #[error(transparent)]
    Status(#[from] status::Error),
    /// The reconcile-period annotation is not a duration.
    #[error("annotation {annotation} of {key}")]
    Annotation {
        /// The annotation.
        annotation: &'static str,
        /// namespace/name.
        key: String,
        /// Cause.
        #[source]
        source: go_duration::Error,
    },
    /// ansible-runner could not run.
    #[error("run ansible-runner for {key}")]
    Runner {
        /// namespace/name.
        key: String,
        /// Cause.
        #[source]
        source: runner::Error,
    },
    /// The run ended without a `playbook_on_stats` event.
    #[error("did not receive playbook_on_stats event for {key}: {output}")]
    NoStats {
        /// namespace/name.
        key: String,
        /// What the runner printed.
        output: String,
    },
    /// A signal ended ansible-playbook.
    #[error("{message} ({key})")]
    PlaybookKilled {
        /// namespace/name.
        key: String,
        /// What the CR's `Failure` condition says.
        message: String,
    },
    /// The host setup (inventory, SSH key Secret) failed.
    #[error("prepare the hosts of {key}")]
    Remote {
        /// namespace/name.
        key: String,
        /// Cause.
        #[source]
        source: remote::Error,
    },
    /// The precheck failed, so the main playbook did not run.
    #[error("precheck failed for {key}")]
    PrecheckFailed {
        /// namespace/name.
        key: String,
    },
    /// The run took longer than its timeout and was stopped.
    #[error("{key}: {message}")]
    TimedOut {
        /// namespace/name.
        key: String,
        /// The timeout and the task that was running.
        message: String,
    },
    /// The spec would set Ansible's own variables, so nothing ran.
    #[error("not running {key}")]
    ReservedVariables {
        /// namespace/name.
        key: String,
        /// The spec keys and the variables they would set.
        #[source]
        source: vars::ReservedVariables,
    },
    /// A task failed.
    #[error("event runner on failed for {key}")]
    TaskFailed {
        /// namespace/name.
        key: String,
    },
    /// Letting a CR go to another shard failed.
    #[error("hand the CR over to another shard")]
    HandOver(#[source] crate::sharding::Error),
}

/// Reconciles one CR. Called by the controller, at most once at a time per CR.
pub async fn reconcile(object: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = key_of(&object);
    let ident = new_ident();
    let span = tracing::info_span!(
        "reconcile",
        gvk = %ctx.watch.gvk,
        namespace = object.namespace().unwrap_or_default(),
        name = object.name_any(),
        job = %ident,
    );
    if let Some(membership) = ctx.settings.sharding.as_ref().filter(|m| m.draining(object.labels())) {
        return hand_over(&object, &ctx, membership).instrument(span).await;
    }
    let timer = ctx.metrics.reconcile_started(&ctx.gvk_label, &ctx.controller_label);
    let mut journal = Journal::default();
    let result =
        reconcile_inner(&object, &ctx, &key, ident.clone(), &mut journal).instrument(span.clone()).await;
    journal::finish(&ctx, &object, &ident, journal, &result).instrument(span.clone()).await;
    let _entered = span.enter();
    match result {
        Ok(next) => {
            ctx.backoff.reset(&key);
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
    object: &DynamicObject,
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

/// When a reconcile that succeeded comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Only when the CR (or a dependent) changes.
    AwaitChange,
    /// After this long.
    Requeue(Duration),
}

impl From<Next> for Action {
    fn from(next: Next) -> Self {
        match next {
            Next::AwaitChange => Action::await_change(),
            Next::Requeue(after) => Action::requeue(after),
        }
    }
}

/// The controller's error policy: retry with per-CR exponential backoff.
pub fn error_policy(object: Arc<DynamicObject>, _error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&object);
    let delay = ctx.backoff.failed(&key);
    journal::retry_scheduled(&ctx, &object, ctx.backoff.count(&key));
    Action::requeue(delay)
}

async fn reconcile_inner(
    object: &DynamicObject,
    ctx: &Context,
    key: &str,
    ident: String,
    journal: &mut Journal,
) -> Result<Next, Error> {
    let api = api_for(ctx, object);
    let name = object.name_any();
    // Wait for the run budget before reading the CR: everything below (the spec the run gets, the
    // generation its status names) comes from one read made after the wait.
    let waiting = ctx.metrics.waiting();
    let _permit = ctx.settings.budget.acquire(priority(object)).await;
    drop(waiting);
    let Some(mut current) = get(&api, &name, key).await? else {
        return Ok(Next::AwaitChange);
    };
    let watch = &ctx.watch;
    let finalizer = watch.finalizer.as_ref().map(|f| f.name.as_str());

    let period = match annotations::reconcile_period(current.annotations()) {
        Ok(period) => {
            if let Some(Bounded { value, asked: Some(asked) }) = period {
                tracing::warn!(
                    annotation = annotations::RECONCILE_PERIOD,
                    asked = %go_duration::format(asked),
                    period = %go_duration::format(value),
                    "reconcile period annotation below the minimum: using the minimum"
                );
            }
            period.map_or(watch.reconcile_period.unwrap_or(ctx.settings.reconcile_period), |p| p.value)
        }
        Err(source) => {
            let message = format!("Unable to parse reconcile period annotation: {source}");
            status::write(&api, &name, &Transition::failed(message, None), current.metadata.generation)
                .await?;
            return Err(Error::Annotation {
                annotation: annotations::RECONCILE_PERIOD,
                key: key.into(),
                source,
            });
        }
    };

    let finalizing = match decide::before(&current.metadata, finalizer) {
        Before::SkipTerminating => {
            tracing::info!("resource is terminated, skipping reconciliation");
            return Ok(Next::AwaitChange);
        }
        Before::Finalize => true,
        Before::Run { add_finalizer } => {
            if let (true, Some(finalizer)) = (add_finalizer, finalizer) {
                match set_finalizer(&api, &current, finalizer, true, key).await? {
                    Some(updated) => current = updated,
                    None => return Ok(Next::AwaitChange),
                }
            }
            false
        }
    };
    let mut generation = current.metadata.generation;
    journal.start(ctx, &current, finalizing).await;
    admit_variables(ctx, &api, &current, finalizing, key).await?;

    if watch.manage_status {
        match status::write(&api, &name, &Transition::Running, generation).await? {
            Some(updated) => current = updated,
            None => return Ok(Next::AwaitChange),
        }
        // The spec may have changed since the read above: the run gets this copy, so its status and
        // record name this copy's generation.
        generation = current.metadata.generation;
        journal.run_on(generation);
    }

    let object_json = serde_json::to_value(&current).unwrap_or(Value::Null);
    let target = StatusTarget { api: &api, name: &name, key, generation };
    let remote = prepare_remote(ctx, &target, &object_json, current.namespace().as_deref()).await?;
    let inventory_hosts =
        remote.as_ref().and_then(|r| r.inventory.as_ref()).map(|(_, hosts)| hosts.as_slice());
    if let (false, Some(precheck)) = (finalizing, &watch.extensions.precheck) {
        let mut spec = run_spec(ctx, &current, &object_json, finalizing, new_ident(), remote.as_ref());
        spec.target = precheck.clone();
        run_precheck(ctx, &target, &current, spec, inventory_hosts, journal).await?;
    }

    let spec = run_spec(ctx, &current, &object_json, finalizing, ident, remote.as_ref());
    journal.log = Some(spec.artifact_dir().join("stdout").display().to_string());
    let report = match run_ansible(ctx, &current, spec, journal).await {
        Ok(report) => report,
        Err(source) => return Err(unable_to_run(&target, source).await),
    };
    let report = journal.report.insert(report);
    if let Some(timed_out) = &report.timed_out {
        return Err(timed_out_failure(&target, timed_out).await);
    }
    let outcome = &report.outcome;
    if let Some(killed) = &report.killed {
        let message = killed.message();
        status::write(&api, &name, &Transition::failed(message.clone(), None), generation).await?;
        return Err(Error::PlaybookKilled { key: key.into(), message });
    }
    let Some(stats) = outcome.stats.clone() else {
        let output = report.error_text();
        let message = format!("did not receive playbook_on_stats event: {output}");
        status::write(&api, &name, &Transition::failed(message, None), generation).await?;
        return Err(Error::NoStats { key: key.into(), output });
    };
    if let Some(period) = &outcome.bad_requeue_period {
        tracing::warn!(period = %period, "requeue_after returned a period that is not a duration");
    }

    let Some(after_run) = get(&api, &name, key).await? else {
        return Ok(Next::AwaitChange);
    };
    let mut next = requeue(outcome, period);
    match decide::after(&after_run.metadata, finalizer, finalizing, outcome.succeeded()) {
        After::RemoveFinalizer => {
            if let Some(finalizer) = finalizer {
                set_finalizer(&api, &after_run, finalizer, false, key).await?;
            }
            return Ok(Next::AwaitChange);
        }
        After::RunFinalizerSoon => next = Next::Requeue(FINALIZER_REQUEUE),
        After::Nothing => {}
    }

    if watch.manage_status {
        let transition = if outcome.succeeded() {
            Transition::Succeeded(stats)
        } else {
            Transition::failed(outcome.failure_message(), Some(stats))
        };
        let hosts = inventory_hosts.map(|hosts| outcome.host_results(hosts));
        status::write_with_hosts(&api, &name, &transition, generation, hosts.as_ref()).await?;
    }
    if !outcome.succeeded() {
        return Err(Error::TaskFailed { key: key.into() });
    }
    Ok(next)
}

/// Converged CRs (their generation already succeeded) wait behind new work for the run budget.
fn priority(object: &DynamicObject) -> Priority {
    let finalizing = object.metadata.deletion_timestamp.is_some();
    let converged = status::conditions_of(object).iter().any(|c| {
        c["type"] == status::conditions::SUCCESSFUL
            && c["status"] == "True"
            && c["observedGeneration"].as_i64() == object.metadata.generation
    });
    if converged && !finalizing { Priority::Resync } else { Priority::Urgent }
}

/// After success: the `requeue_after` module's period, else the configured one (0 = wait for a change).
fn requeue(outcome: &Outcome, period: Duration) -> Next {
    match outcome.requeue_after.unwrap_or(period) {
        Duration::ZERO => Next::AwaitChange,
        period => {
            if outcome.requeue_after.is_some() {
                tracing::info!(period = %go_duration::format(period), "set the reconciliation to occur after");
            }
            Next::Requeue(period)
        }
    }
}

fn run_spec(
    ctx: &Context,
    object: &DynamicObject,
    object_json: &Value,
    finalizing: bool,
    ident: String,
    remote: Option<&Remote>,
) -> RunSpec {
    let watch = &ctx.watch;
    let settings = &ctx.settings;
    let finalizer = watch.finalizer.as_ref().filter(|_| finalizing);
    let target = finalizer.and_then(|f| f.target.clone()).unwrap_or_else(|| watch.target.clone());
    if !object_json["spec"].is_object() {
        tracing::debug!("spec was not found for CR");
    }
    let extra_vars = vars::extra_vars(&vars_input(ctx, object_json, finalizing));
    let env_vars: Map<String, Value> = settings
        .playbook_env
        .iter()
        .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
        .collect();
    let annotations = object.annotations();
    RunSpec {
        dir: runner_dir(settings, watch, object),
        target,
        extra_vars,
        env_vars,
        verbosity: bounded(
            annotations::VERBOSITY,
            annotations::verbosity(annotations, watch.ansible_verbosity),
            watch.ansible_verbosity,
        ),
        rotate_artifacts: bounded(
            annotations::MAX_RUNNER_ARTIFACTS,
            annotations::max_runner_artifacts(annotations, watch.max_runner_artifacts),
            watch.max_runner_artifacts,
        ),
        ident,
        ansible_args: settings.ansible_args.clone(),
        inventory: match remote.and_then(|r| r.inventory.as_ref()) {
            Some((text, _)) => Inventory::Rendered(text.clone()),
            None => settings.inventory.clone(),
        },
        role_skip_facts: settings.role_skip_facts,
        ssh: remote.map(|r| r.ssh.clone()),
        executor: watch.extensions.executor,
        timeout: watch.extensions.run_timeout(settings.run_timeout),
    }
}

/// An annotation's value within its bounds, else `default`; a value out of bounds is logged.
fn bounded<T: Copy + std::fmt::Display>(
    annotation: &'static str,
    value: Option<Bounded<T>>,
    default: T,
) -> T {
    let Some(value) = value else { return default };
    if let Some(asked) = value.asked {
        tracing::warn!(annotation, asked = %asked, using = %value.value, "annotation beyond what the watch allows: using the watch's limit");
    }
    value.value
}

/// What the vars of a run of `object_json` are built from.
fn vars_input<'a>(ctx: &'a Context, object_json: &'a Value, finalizing: bool) -> VarsInput<'a> {
    let watch = &ctx.watch;
    let finalizer = watch.finalizer.as_ref().filter(|_| finalizing);
    VarsInput {
        object: object_json,
        group: &watch.gvk.group,
        kind: &watch.gvk.kind,
        snake_case_parameters: watch.snake_case_parameters,
        unsafe_strings: unsafe_strings(watch, ctx.settings.trust_cr_templates),
        watch_vars: &watch.vars,
        finalizer_vars: finalizer.map(|f| &f.vars),
    }
}

/// A CR whose spec would set Ansible's own variables does not run, unless the watch trusts its CRs'
/// variables: `Failure` naming the keys (when the status is managed), and an error, so the journal
/// records the refusal and its Event, and the CR is retried with backoff.
async fn admit_variables(
    ctx: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizing: bool,
    key: &str,
) -> Result<(), Error> {
    if trusts_cr_variables(&ctx.watch, ctx.settings.trust_cr_variables) {
        return Ok(());
    }
    let object_json = serde_json::to_value(object).unwrap_or(Value::Null);
    let Err(source) = vars::check_reserved(&vars_input(ctx, &object_json, finalizing)) else {
        return Ok(());
    };
    if ctx.watch.manage_status {
        let failed =
            Transition::Failed { reason: RESERVED_VARIABLE.into(), message: source.to_string(), stats: None };
        status::write(api, &object.name_any(), &failed, object.metadata.generation).await?;
    }
    Err(Error::ReservedVariables { key: key.into(), source })
}

/// Whether a watch lets its CRs' spec keys set Ansible's own variables (`trustCRVariables`, else
/// the flag), as upstream does.
pub fn trusts_cr_variables(watch: &Watch, trust_by_default: bool) -> bool {
    watch.extensions.trust_cr_variables.unwrap_or(trust_by_default)
}

/// Which CR strings a watch passes as unsafe text: all with `markUnsafe`, none where CR templates
/// are trusted, else those holding a Jinja delimiter.
pub fn unsafe_strings(watch: &Watch, trust_by_default: bool) -> vars::UnsafeStrings {
    if watch.mark_unsafe {
        vars::UnsafeStrings::All
    } else if watch.extensions.trust_cr_templates.unwrap_or(trust_by_default) {
        vars::UnsafeStrings::None
    } else {
        vars::UnsafeStrings::Templates
    }
}

/// Runs ansible-runner once with a proxy credential of its own, revoked when the run ends. The
/// objects it wrote and its executor go to the journal.
async fn run_ansible(
    ctx: &Context,
    object: &DynamicObject,
    mut spec: RunSpec,
    journal: &mut Journal,
) -> Result<runner::Report, runner::Error> {
    let (issued, kubeconfig) = proxy_credential(&ctx.proxy, ctx, object, &mut spec)
        .map_err(|source| runner::Error::WriteInput { dir: spec.dir.clone(), source })?;
    let in_flight = ctx.metrics.run_started();
    let trigger = serde_json::to_value(&journal.trigger).unwrap_or_default();
    let live = ctx.settings.live.start(&object.uid().unwrap_or_default(), &spec.ident, trigger);
    let report = runner::run(&ctx.settings.runner, &spec, Some(&live)).await;
    drop(live);
    drop(in_flight);
    journal.writes.extend(issued.grant.writes());
    drop(issued);
    let _ = std::fs::remove_file(kubeconfig);
    if let Ok(report) = &report {
        journal.executor = Some(report.executor);
    }
    report
}

/// The CR a reconcile writes its status to.
struct StatusTarget<'a> {
    api: &'a Api<DynamicObject>,
    name: &'a str,
    /// namespace/name, for errors.
    key: &'a str,
    /// The generation the run saw.
    generation: Option<i64>,
}

/// Renders the inventory and reads the key Secret; a problem becomes a `Failure` condition with its
/// own reason, and no run.
async fn prepare_remote(
    ctx: &Context,
    target: &StatusTarget<'_>,
    object_json: &Value,
    namespace: Option<&str>,
) -> Result<Option<Remote>, Error> {
    match remote::prepare(&ctx.client, &ctx.watch.extensions, object_json, namespace).await {
        Ok(remote) => Ok(remote),
        Err(source) => {
            if ctx.watch.manage_status {
                let message = source.to_string();
                let failed = Transition::Failed { reason: source.reason().into(), message, stats: None };
                status::write(target.api, target.name, &failed, target.generation).await?;
            }
            Err(Error::Remote { key: target.key.into(), source })
        }
    }
}

/// Runs the watch's precheck; when it fails the CR gets `PrecheckFailed` (with the precheck's
/// per-host results) and the main target does not run.
async fn run_precheck(
    ctx: &Context,
    target: &StatusTarget<'_>,
    object: &DynamicObject,
    spec: RunSpec,
    inventory_hosts: Option<&[String]>,
    journal: &mut Journal,
) -> Result<(), Error> {
    let report = match run_ansible(ctx, object, spec, journal).await {
        Ok(report) => report,
        Err(source) => return Err(unable_to_run(target, source).await),
    };
    if report.outcome.succeeded() {
        return Ok(());
    }
    journal.report = Some(report.clone());
    if let Some(timed_out) = &report.timed_out {
        return Err(timed_out_failure(target, timed_out).await);
    }
    if ctx.watch.manage_status {
        let failed = Transition::Failed {
            reason: PRECHECK_FAILED.into(),
            message: precheck_message(&report),
            stats: None,
        };
        let hosts = inventory_hosts.map(|hosts| report.outcome.host_results(hosts));
        status::write_with_hosts(target.api, target.name, &failed, target.generation, hosts.as_ref()).await?;
    }
    Err(Error::PrecheckFailed { key: target.key.into() })
}

/// Records that a run was stopped at its timeout (`Failure` with reason `RunTimedOut`) and returns
/// the error, so the CR is retried with backoff and a finalizer stays until a run succeeds.
async fn timed_out_failure(target: &StatusTarget<'_>, timed_out: &runner::TimedOut) -> Error {
    let message = timed_out.message();
    let failed = Transition::Failed { reason: RUN_TIMED_OUT.into(), message: message.clone(), stats: None };
    if let Err(error) = status::write(target.api, target.name, &failed, target.generation).await {
        return error.into();
    }
    Error::TimedOut { key: target.key.into(), message }
}

/// Records that ansible-runner could not run (upstream's message) and returns the error.
async fn unable_to_run(target: &StatusTarget<'_>, source: runner::Error) -> Error {
    let message = format!("{UNABLE_TO_RUN}: {}", error_chain(&source));
    let failed = Transition::failed(message, None);
    if let Err(error) = status::write(target.api, target.name, &failed, target.generation).await {
        return error.into();
    }
    Error::Runner { key: target.key.into(), source }
}

/// The `PrecheckFailed` message: each failing host and task, or why the precheck did not finish.
fn precheck_message(report: &runner::Report) -> String {
    let outcome = &report.outcome;
    if outcome.stats.is_none() {
        return format!("precheck did not finish: {}", report.error_text());
    }
    let lines: Vec<String> = outcome
        .failures
        .iter()
        .map(|f| {
            let what = if f.unreachable { "unreachable" } else { "failed" };
            format!("precheck {what} on host {}: task {:?}: {}", f.host, f.task, f.message)
        })
        .collect();
    lines.join("\n")
}

/// Issues the run's proxy credential and writes its kubeconfig (mode 0600) into the runner dir.
/// Returns the credential (revoked when dropped) and the kubeconfig's path.
fn proxy_credential(
    proxy: &Proxy,
    ctx: &Context,
    object: &DynamicObject,
    spec: &mut RunSpec,
) -> std::io::Result<(Issued, PathBuf)> {
    let watch = &ctx.watch;
    let owner = Owner {
        gvk: watch.gvk.clone(),
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
        namespace: object.namespace().filter(|_| ctx.namespaced),
        shard_label: ctx.settings.sharding.as_ref().and_then(|membership| {
            let key = membership.shard_label();
            object.labels().get(&key).map(|shard| (key, shard.clone()))
        }),
    };
    let issued = proxy.credentials().issue(Grant {
        owner,
        watch_dependents: watch.watch_dependent_resources,
        watch_cluster_scoped: watch.watch_cluster_scoped_resources,
        blacklist: watch.blacklist.clone(),
        touched: Default::default(),
    })?;
    crate::runner::fs::create_private_dir(&spec.dir)?;
    let path = spec.dir.join("kubeconfig");
    let text = crate::proxy::kubeconfig::render(proxy.port(), &issued.token, object.namespace().as_deref());
    crate::runner::fs::write_private(&path, text)?;
    let value = Value::from(path.display().to_string());
    spec.env_vars.insert("K8S_AUTH_KUBECONFIG".into(), value.clone());
    spec.env_vars.insert("KUBECONFIG".into(), value);
    Ok((issued, path))
}

/// `<runner dir>/<group>/<version>/<kind>/<namespace>/<name>`, as upstream (no namespace segment
/// for cluster-scoped CRs).
pub fn runner_dir(settings: &Settings, watch: &Watch, object: &DynamicObject) -> PathBuf {
    let gvk = &watch.gvk;
    let mut dir = settings.runner_dir.join(&gvk.group).join(&gvk.version).join(&gvk.kind);
    if let Some(namespace) = object.namespace() {
        dir.push(namespace);
    }
    dir.join(object.name_any())
}

async fn get(api: &Api<DynamicObject>, name: &str, key: &str) -> Result<Option<DynamicObject>, Error> {
    with_timeout(api.get_opt(name)).await.map_err(|source| Error::Api {
        action: "read",
        key: key.into(),
        source,
    })
}

/// Adds or removes our finalizer with a merge patch guarded by the resourceVersion read. Returns the
/// updated CR, or `None` when it is gone.
async fn set_finalizer(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizer: &str,
    present: bool,
    key: &str,
) -> Result<Option<DynamicObject>, Error> {
    let mut finalizers: Vec<String> =
        object.finalizers().iter().filter(|f| *f != finalizer).cloned().collect();
    if present {
        finalizers.push(finalizer.to_string());
    }
    let patch = json!({"metadata": {"resourceVersion": object.resource_version(), "finalizers": finalizers}});
    let action = if present { "add the finalizer to" } else { "remove the finalizer from" };
    match with_timeout(api.patch(&object.name_any(), &kubeapi::patch_params(), &Patch::Merge(&patch))).await {
        Ok(updated) => {
            tracing::info!(finalizer, present, "updated finalizers");
            Ok(Some(updated))
        }
        Err(err) if err.is_not_found() => Ok(None),
        Err(source) => Err(Error::Api { action, key: key.into(), source }),
    }
}

fn api_for(ctx: &Context, object: &DynamicObject) -> Api<DynamicObject> {
    match object.namespace().filter(|_| ctx.namespaced) {
        Some(namespace) => Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.resource),
        None => Api::all_with(ctx.client.clone(), &ctx.resource),
    }
}

/// `namespace/name` (or `name` for cluster-scoped CRs).
pub fn key_of(object: &DynamicObject) -> String {
    match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// A unique run id: decimal, like upstream's non-negative random int63.
fn new_ident() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (hasher.finish() >> 1).to_string()
}
