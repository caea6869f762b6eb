//! One loaded watch: the settings of a GVK with defaults applied and paths resolved.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

use super::{Gvk, WatchFields};

/// What ansible-runner runs for a watch: a playbook file or a role directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Absolute path of a playbook.
    Playbook(PathBuf),
    /// Absolute path of a role directory (found through the collections path, roles path or `./roles`).
    Role(PathBuf),
}

impl Target {
    /// The playbook file or role directory.
    pub fn path(&self) -> &Path {
        match self {
            Target::Playbook(path) | Target::Role(path) => path,
        }
    }
}

/// The `finalizer` block: what to run when a CR carrying this finalizer is deleted.
#[derive(Debug, Clone, PartialEq)]
pub struct Finalizer {
    /// The finalizer name added to CRs, e.g. `cache.example.com/finalizer`.
    pub name: String,
    /// The finalizer's own playbook or role; `None` re-runs the watch's target with `vars`.
    pub target: Option<Target>,
    /// Extra vars added last, for finalizer runs only (typically `state: absent`).
    pub vars: Map<String, Value>,
}

/// Keys this project reads beyond upstream's (upstream ignores them, so files stay portable): running
/// against hosts over SSH, which executor runs Ansible, and how much run history is kept.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Extensions {
    /// `inventory`: a minijinja template rendered from the CR into a YAML inventory.
    pub inventory: Option<String>,
    /// `sshKeySecret`: a template naming the `kubernetes.io/ssh-auth` Secret in the CR's namespace.
    pub ssh_key_secret: Option<String>,
    /// `hostKeyChecking`: what SSH does with host keys it does not know.
    pub host_key_checking: HostKeyChecking,
    /// `precheck`: a playbook or role run before the main target against the same inventory.
    pub precheck: Option<Target>,
    /// `validate`: an admission playbook run in check mode on each CREATE and UPDATE of this kind.
    pub validate: Option<Validate>,
    /// `convert`: a conversion playbook run in check mode for each `ConversionReview` of this
    /// group and kind (one entry of a kind at most has one).
    pub convert: Option<Target>,
    /// `executor`: `warm` or `cold` for this kind; `None` follows `--ansible-executor`.
    pub executor: Option<crate::executor_mode::Executor>,
    /// `runHistoryLimit`: run records kept per CR of this kind (0: none); `None` follows
    /// `--run-history-limit`.
    pub run_history_limit: Option<usize>,
    /// `trustCRTemplates`: Jinja in CR strings is evaluated, as upstream does; `None` follows
    /// `--trust-cr-templates`.
    pub trust_cr_templates: Option<bool>,
    /// `trustCRVariables`: spec keys may set Ansible's own variables (`ansible_*`, magic names), as
    /// upstream allows; `None` follows `--trust-cr-variables`.
    pub trust_cr_variables: Option<bool>,
    /// `runTimeout`: longest one run of this kind may take (`Some(ZERO)`: no limit); `None`
    /// follows `--ansible-run-timeout`.
    pub run_timeout: Option<Duration>,
    /// `readyConditions`: the kstatus conditions `Ready`, `Reconciling` and `Stalled` are written
    /// beside upstream's; `None` follows `--ready-conditions`.
    pub ready_conditions: Option<bool>,
    /// `watchReadResources`: a CR re-runs when an object its last run read through the proxy (and
    /// does not own) changes. Off by default, as upstream's contract has it.
    pub watch_read_resources: bool,
    /// `permissions`: the rules this kind's runs act with, enforced by the proxy; `None`: the
    /// operator's whole identity, as upstream's.
    pub permissions: Option<Vec<super::permissions::Rule>>,
    /// `watchFields`: only a change in these fields of an object triggers a run; `None`: upstream's
    /// trigger (its generation, or any change for kinds without one).
    pub watch_fields: Option<WatchFields>,
    /// `fieldSelector`: only objects matching it are watched, beside the label `selector`.
    pub field_selector: Option<String>,
    /// `statusProgress`: while a run is in flight, the `Running` condition's message names the
    /// task it is at (with `manageStatus`). Off by default, as upstream's status has it.
    pub status_progress: bool,
}

impl Extensions {
    /// Whether this kind's status carries the kstatus conditions, given the `--ready-conditions` flag.
    pub fn ready_conditions(&self, flag: bool) -> bool {
        self.ready_conditions.unwrap_or(flag)
    }

    /// The run timeout of this kind given the `--ansible-run-timeout` flag; `None`: no limit.
    pub fn run_timeout(&self, flag: Duration) -> Option<Duration> {
        Some(self.run_timeout.unwrap_or(flag)).filter(|timeout| !timeout.is_zero())
    }

    /// Whether runs reach hosts over SSH set up by the operator (an inventory or a key is given).
    pub fn uses_ssh(&self) -> bool {
        self.inventory.is_some() || self.ssh_key_secret.is_some()
    }
}

/// The `validate` key and its settings: what the operator's validating webhook runs for a kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Validate {
    /// The playbook or role run in check mode with the incoming object.
    pub target: Target,
    /// `validateFailurePolicy`: what the API server does when the operator does not answer.
    pub failure_policy: FailurePolicy,
    /// `validateTimeout`: longest one validation may take (default 5s, at most 30s).
    pub timeout: Duration,
}

/// `validateFailurePolicy`: the webhook's `failurePolicy`, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// The API server refuses the request when the webhook does not answer.
    #[default]
    Fail,
    /// The API server lets the request through when the webhook does not answer.
    Ignore,
}

impl FailurePolicy {
    /// The value in a `ValidatingWebhookConfiguration`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// `hostKeyChecking`: host keys are always checked; `accept-new` only lets SSH learn unknown ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostKeyChecking {
    /// Only keys in the Secret's `known_hosts` (or the operator's own known_hosts files) are accepted.
    #[default]
    Strict,
    /// A host seen for the first time is trusted and remembered for the CR; a changed key still fails.
    AcceptNew,
}

/// One watches.yaml entry with upstream's defaults applied, paths resolved and env overrides read.
#[derive(Debug, Clone, PartialEq)]
pub struct Watch {
    /// The kind this watch reconciles.
    pub gvk: Gvk,
    /// The playbook or role run for each reconcile.
    pub target: Target,
    /// Extra vars added after the CR's spec and meta (`vars`).
    pub vars: Map<String, Value>,
    /// Requeue period after a successful run; `None` (absent or `0s`) means `--reconcile-period`.
    pub reconcile_period: Option<Duration>,
    /// Whether the operator writes the CR's status conditions (`manageStatus`, default true).
    pub manage_status: bool,
    /// Whether objects created by the playbook are watched (`watchDependentResources`, default true).
    pub watch_dependent_resources: bool,
    /// Whether cluster-scoped dependents are watched too (`watchClusterScopedResources`, default false).
    pub watch_cluster_scoped_resources: bool,
    /// Whether annotation changes on the CR trigger a reconcile (`watchAnnotationsChanges`, default false).
    pub watch_annotations_changes: bool,
    /// Whether spec keys are snake_cased into extra vars (`snakeCaseParameters`, default true).
    pub snake_case_parameters: bool,
    /// Whether spec values are marked unsafe for Jinja (`markUnsafe`, default false).
    pub mark_unsafe: bool,
    /// How many runner artifact directories to keep (`maxRunnerArtifacts`; 0 or absent means 20).
    pub max_runner_artifacts: u32,
    /// Dependent kinds that are neither watched nor cached (`blacklist`).
    pub blacklist: Vec<Gvk>,
    /// Label selector filtering the CRs reconciled (`selector`); empty matches all.
    pub selector: LabelSelector,
    /// The `finalizer` block, if any.
    pub finalizer: Option<Finalizer>,
    /// Reconciles of this kind run at once: `--max-concurrent-reconciles` or the per-kind env var.
    pub max_concurrent_reconciles: usize,
    /// The `-v` count for ansible-runner: `--ansible-verbosity` or the per-kind env var.
    pub ansible_verbosity: u8,
    /// Keys this project adds beyond upstream.
    pub extensions: Extensions,
}

/// Settings that come from command-line flags and apply to every watch unless the env overrides them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// `--max-concurrent-reconciles`.
    pub max_concurrent_reconciles: usize,
    /// `--ansible-verbosity`.
    pub ansible_verbosity: u8,
}

/// The result of loading a watches file: the watches in file order, and what deserves a warning.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// One per entry, in file order.
    pub watches: Vec<Watch>,
    /// Human-readable warnings (unknown keys, deprecated or invalid env overrides), each naming the
    /// file, entry and GVK.
    pub warnings: Vec<String>,
}
