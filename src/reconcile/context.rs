//! What every reconcile of a kind shares (`Settings`, `Context`), how one fails (`Error`) and when
//! one that succeeded comes back (`Next`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::ApiResource;
use kube::runtime::controller::Action;

use super::backoff;
use super::pace::Pacer;
use super::schedule::{Jitter, Seen, StartupResync};
use super::slots::Slots;
use crate::cached::Kind;
use crate::go_duration;
use crate::kubeapi;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::remote;
use crate::run::Door;
use crate::runner::{self, Inventory};
use crate::status;
use crate::vars;
use crate::watches::Watch;

/// Settings shared by every reconcile of the process.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--reconcile-period`.
    pub reconcile_period: Duration,
    /// `--ansible-run-timeout` (zero: no limit; a watch's `runTimeout` wins).
    pub run_timeout: Duration,
    /// The door every run goes through: its lanes (the global run budget,
    /// `--max-concurrent-runs`), credentials and the runner.
    pub door: Arc<Door>,
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
    /// `--startup-resync`: whether a converged CR runs when the operator starts or when it is due.
    pub startup_resync: StartupResync,
    /// `--resync-jitter`: the spread added to periodic resyncs.
    pub resync_jitter: Jitter,
    /// `--max-resyncs-per-second`: the bucket resyncs of converged CRs pass before the run budget.
    pub resync_pacer: Arc<Pacer>,
    /// `--memory-high-water`: runs wait while the operator's cgroup is near its limit; `None` without
    /// a memory limit or with the flag at 0.
    pub memory_guard: Option<Arc<super::memory::MemoryGuard>>,
    /// Where run records go (none are stored with `--run-history-limit=0`).
    pub history: Arc<crate::history::History>,
    /// Events on the CRs about their runs.
    pub events: Option<Arc<crate::recorder::Recorder>>,
    /// `--run-events`: which runs get an Event.
    pub run_events: crate::history::events::RunEvents,
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
    /// `--ready-conditions`: the kstatus conditions are written (a watch's `readyConditions` wins).
    pub ready_conditions: bool,
    /// `--record-run-inputs`: run records keep the CR their run saw (for `replay --run`).
    pub record_run_inputs: bool,
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
    /// The same, shared by the controller's cache and queue (see [`crate::cached`]).
    pub kind: Kind,
    /// Whether the kind is namespaced.
    pub namespaced: bool,
    /// Process-wide settings.
    pub settings: Arc<Settings>,
    /// Failure counts for the retry backoff.
    pub backoff: backoff::Backoff,
    /// The watch's `maxConcurrentReconciles`, shared by its namespaces: new and changed CRs get a
    /// slot before resyncs of converged ones (so a CR created during a restart's resyncs does not
    /// queue behind them).
    pub slots: Arc<Slots>,
    /// The CRs looked at since the operator started (their first look is the start-up run).
    pub seen: Seen,
    /// With `manageStatus: false` and `--startup-resync=due`: each object's last successful run,
    /// kept in the cluster so that a restart can tell the converged ones.
    pub confirmations: Option<Arc<crate::history::confirmations::Confirmations>>,
    /// The watch's paused CRs.
    pub paused: super::paused_crs::PausedCrs,
    /// The API proxy playbooks reach the cluster through.
    pub proxy: Arc<Proxy>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// This kind's `GVK` metric label.
    pub gvk_label: String,
    /// This kind's `controller` metric label.
    pub controller_label: String,
}

impl Context {
    /// The conditions this kind's status writes keep: the kstatus ones too with `readyConditions`
    /// (else `--ready-conditions`).
    pub fn conditions(&self) -> status::Conditions {
        status::Conditions::with_ready(self.watch.extensions.ready_conditions(self.settings.ready_conditions))
    }
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

/// When a reconcile that succeeded comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
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
