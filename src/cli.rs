//! Command-line interface: upstream's `ansible-operator` subcommands and flags, with their defaults.
//!
//! Flag names, defaults and Go-style boolean syntax (`--flag`, `--flag=false`) follow the upstream
//! binary so existing Deployments work unchanged. Every flag can also be set by an environment
//! variable; where upstream already reads one (`ANSIBLE_ROLES_PATH`), that one is used.

use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::go_duration;
use crate::logging::LogArgs;
use crate::runner::LogEvents;

/// `ansible-operator`: run Ansible playbooks and roles as a Kubernetes operator.
#[derive(Debug, Parser)]
#[command(name = "ansible-operator", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands, as upstream.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator on a watches file.
    // A flag given twice takes its last value, as upstream's (pflag) does.
    #[command(args_override_self = true)]
    Run(Box<RunArgs>),
    /// Write the input directory of a CR's run (extra vars, inventory, command line, environment
    /// without secrets) and print how to run it with ansible-runner; `--execute` runs it once.
    Replay(Box<ReplayArgs>),
    /// Print the version.
    Version,
    /// Ask a running operator what a CR change would do (check mode, server-side dry run).
    Plan(PlanArgs),
    /// Render the RBAC the operator and each kind's declared `permissions` need, as kustomize files.
    Rbac(RbacArgs),
    /// Run scenarios (apply, assert, idempotent, ...) against the current kubeconfig's cluster,
    /// with the operator in this process: no image, no Deployment.
    Test(Box<TestArgs>),
}

/// Flags of `ansible-operator test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Scenario files, or directories of them (`*.yaml`, `*.yml`). Default: `tests/scenarios`
    /// beside the watches file.
    pub paths: Vec<std::path::PathBuf>,

    /// Path to the watches file the operator runs on (as `run`'s).
    #[arg(long, env = "ANSIBLE_OPERATOR_WATCHES_FILE", default_value = "./watches.yaml")]
    pub watches_file: std::path::PathBuf,

    /// A molecule scenario directory (`molecule/default`) whose `verify.yml` runs against the
    /// operator in this process, as molecule would run it against a deployed manager. Repeatable;
    /// with it, no scenario files run unless they are given too.
    #[arg(long)]
    pub molecule: Vec<std::path::PathBuf>,

    /// With `--molecule`: deploy the manager with this image in each molecule scenario's namespace,
    /// from the project's `config/testing` (else `config/default`) as the scenario's converge
    /// would, so that every task runs, those that read the manager's Pod too.
    #[arg(long, requires = "molecule")]
    pub image: Option<String>,

    /// CRD files, or directories of them, applied once before the scenarios. Default:
    /// `config/crd/bases` beside the watches file (the scaffold's), else `deploy/crds`.
    #[arg(long, value_delimiter = ',')]
    pub crds: Vec<std::path::PathBuf>,

    /// Scenarios run at once, each in its own namespace.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel: u16,

    /// Keep the namespace of a failed scenario, and the operator's log and runner directory.
    #[arg(long)]
    pub keep: bool,

    /// After each scenario, write its CRs and the objects their runs wrote, as they are then,
    /// beside it (`<scenario>.recorded.yaml`; a molecule scenario's `recorded.yaml`): an `assert`
    /// step to review, trim and keep as the expected objects.
    #[arg(long)]
    pub record: bool,

    /// After the first run, keep watching the scenario files and the project's roles and
    /// playbooks; each change runs again the scenarios it touches (until interrupted).
    #[arg(long)]
    pub watch: bool,

    /// Write the results as JUnit XML to this file.
    #[arg(long)]
    pub junit: Option<std::path::PathBuf>,

    /// Where the operator's log and runner directory go. Default: a new directory under the
    /// system's temporary one, removed when every scenario passed.
    #[arg(long)]
    pub work_dir: Option<std::path::PathBuf>,

    /// Flags for the operator, as `run` takes them, after `--` (e.g. `-- --max-concurrent-reconciles=4`).
    #[arg(last = true)]
    pub operator_args: Vec<String>,
}

/// Flags of `ansible-operator rbac`.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// Path to the watches file (as `run`'s).
    #[arg(long, env = "ANSIBLE_OPERATOR_WATCHES_FILE", default_value = "./watches.yaml")]
    pub watches_file: std::path::PathBuf,

    /// Ansible roles path, for role lookup (as `run`'s).
    #[arg(long, env = "ANSIBLE_ROLES_PATH")]
    pub ansible_roles_path: Option<String>,

    /// Ansible collections path, for role lookup (as `run`'s).
    #[arg(long, env = "ANSIBLE_COLLECTIONS_PATH")]
    pub ansible_collections_path: Option<String>,

    /// Write the files (`kustomization.yaml` and what it lists) into this directory, replacing
    /// those an earlier render wrote there. Default: print them to stdout as one YAML stream.
    #[arg(long)]
    pub output_dir: Option<std::path::PathBuf>,

    /// The namespaces the operator watches (comma list): rules that hold in a CR's own namespace
    /// become a Role in each. Default: `WATCH_NAMESPACE`; empty: a ClusterRole.
    #[arg(long, env = "WATCH_NAMESPACE", value_delimiter = ',')]
    pub namespace: Vec<String>,

    /// The operator's namespace: its ServiceAccount, the leader-election Lease, the kind accounts.
    #[arg(long, env = "ANSIBLE_OPERATOR_NAMESPACE", default_value = "ansible-operator-system")]
    pub operator_namespace: String,

    /// The operator's ServiceAccount; the Roles are named after it.
    #[arg(long, env = "ANSIBLE_OPERATOR_SERVICE_ACCOUNT", default_value = "ansible-operator")]
    pub service_account: String,

    /// Bind each kind's permissions to a ServiceAccount of its own (`run-<kind>.<group>`) that
    /// the operator may impersonate, instead of to the operator.
    #[arg(long, env = "ANSIBLE_OPERATOR_KIND_IDENTITIES", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub kind_identities: bool,

    /// A directory of CRD files to take the kinds' plurals and scopes from. Without it (or for a
    /// kind it lacks) the plural is kube's guess and the kind is taken to be namespaced.
    #[arg(long)]
    pub crds: Option<std::path::PathBuf>,

    /// Instead of rendering RBAC, propose each kind's `permissions:` from the requests its runs
    /// made, as kept in their run records (`AnsibleRun`) in the `--namespace` namespaces (all when
    /// none) and the operator's; printed as YAML to paste under each watch. Uses the current
    /// kubeconfig.
    #[arg(long)]
    pub from_history: bool,

    /// `run`'s `--webhook-configuration-name`: the one configuration the operator may patch.
    #[arg(
        long,
        env = "ANSIBLE_OPERATOR_WEBHOOK_CONFIGURATION_NAME",
        default_value = "ansible-operator-validate"
    )]
    pub webhook_configuration_name: String,

    /// `run`'s `--run-history-limit`: 0 (and no watch's `runHistoryLimit` above 0) grants no
    /// `ansibleruns`.
    #[arg(long, env = "ANSIBLE_OPERATOR_RUN_HISTORY_LIMIT", default_value_t = 10)]
    pub run_history_limit: usize,

    /// `run`'s `--inject-owner-ref`: false grants no dependent watches.
    #[arg(long, env = "ANSIBLE_OPERATOR_INJECT_OWNER_REF", default_value = "true", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub inject_owner_ref: bool,
}

/// Flags of `ansible-operator plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The proposed CR (YAML or JSON), as `kubectl apply -f` would take it.
    #[arg(short = 'f', long = "filename")]
    pub filename: std::path::PathBuf,

    /// The operator's API (`--api-bind-address`).
    #[arg(long, env = "ANSIBLE_OPERATOR_API", default_value = "https://localhost:8082")]
    pub api: String,

    /// A bearer token the API server accepts (e.g. `kubectl create token`); wins over `--kubeconfig`.
    #[arg(long, env = "ANSIBLE_OPERATOR_TOKEN")]
    pub token: Option<String>,

    /// A kubeconfig whose current user has a token.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// The CA certificate (PEM) to verify the API's certificate with.
    #[arg(long)]
    pub cacert: Option<std::path::PathBuf>,

    /// Do not verify the API's certificate (its self-signed one).
    #[arg(long, short = 'k')]
    pub insecure_skip_tls_verify: bool,
}

/// Flags of `ansible-operator replay`. Those that shape a run are the operator's own, with its
/// environment variables, so a replay in the operator's environment composes the same run.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The CR: `NAMESPACE/NAME`, or `NAME` when its kind is cluster-scoped.
    pub cr: String,

    /// The watch entry's kind, when the watches file has more than one.
    #[arg(long)]
    pub kind: Option<String>,

    /// The watch entry's group, when kinds alone do not pick one.
    #[arg(long)]
    pub group: Option<String>,

    /// The watch entry's version, when kind and group do not pick one.
    #[arg(long)]
    pub version: Option<String>,

    /// Replay this recorded run (its `AnsibleRun` name, or its ident) with the CR as that run saw
    /// it. Default: the CR as it is now.
    #[arg(long)]
    pub run: Option<String>,

    /// Where to write the input directory (default: `./replay-<name>`). Replaced if it exists.
    #[arg(long)]
    pub output: Option<std::path::PathBuf>,

    /// Run it once with ansible-runner, with your kubeconfig, printing the play as ansible-playbook
    /// does; exits with ansible-runner's code.
    #[arg(long)]
    pub execute: bool,

    /// The flags that shape a run, as `run`'s.
    #[command(flatten)]
    pub shape: RunShape,
}

/// The flags that shape a run, the same for `run` and `replay` (names, env vars, defaults).
#[derive(Debug, Args)]
pub struct RunShape {
    /// Path to the watches file.
    #[arg(long, env = "ANSIBLE_OPERATOR_WATCHES_FILE", default_value = "./watches.yaml")]
    pub watches_file: std::path::PathBuf,

    /// Default Ansible verbosity (0-7) for every kind; `ANSIBLE_VERBOSITY_<KIND>_<GROUP>` overrides it.
    #[arg(long, env = "ANSIBLE_OPERATOR_ANSIBLE_VERBOSITY", default_value_t = 2,
          value_parser = clap::value_parser!(u8).range(0..=7))]
    pub ansible_verbosity: u8,

    /// Ansible roles path; sets `ANSIBLE_ROLES_PATH` for role lookup and for playbooks.
    #[arg(long, env = "ANSIBLE_ROLES_PATH")]
    pub ansible_roles_path: Option<String>,

    /// Ansible collections path; sets `ANSIBLE_COLLECTIONS_PATH` for role lookup and for playbooks.
    #[arg(long, env = "ANSIBLE_COLLECTIONS_PATH")]
    pub ansible_collections_path: Option<String>,

    /// Extra arguments for ansible-playbook, written to the runner's `env/cmdline`.
    #[arg(long, env = "ANSIBLE_OPERATOR_ANSIBLE_ARGS", default_value = "")]
    pub ansible_args: String,

    /// Evaluate Jinja templates in CR strings, as upstream does (by default every CR string reaches
    /// Ansible as unsafe text, as with upstream's `markUnsafe: true`). A watch's `trustCRTemplates` wins.
    #[arg(long, env = "ANSIBLE_OPERATOR_TRUST_CR_TEMPLATES", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub trust_cr_templates: bool,

    /// Let spec keys set Ansible's own variables (`ansible_*` such as `ansible_connection`, and
    /// magic names such as `hostvars`), as upstream does. Unsafe: whoever may create a CR then
    /// chooses how and where Ansible runs commands. By default such a CR gets `Failure` and does not
    /// run. A watch's `trustCRVariables` wins.
    #[arg(long, env = "ANSIBLE_OPERATOR_TRUST_CR_VARIABLES", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub trust_cr_variables: bool,
}

/// Flags of `ansible-operator run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The flags that shape a run (shared with `replay`).
    #[command(flatten)]
    pub shape: RunShape,

    /// Inject owner references into objects playbooks create, and watch those kinds.
    #[arg(long, env = "ANSIBLE_OPERATOR_INJECT_OWNER_REF", default_value = "true", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub inject_owner_ref: bool,

    /// Default requeue period after a successful run (Go duration); `0s` disables periodic runs.
    #[arg(long, env = "ANSIBLE_OPERATOR_RECONCILE_PERIOD", default_value = "10h",
          value_parser = go_duration::parse)]
    pub reconcile_period: Duration,

    /// Longest a single ansible-runner run may take (Go duration; `0s`: no limit). A run that
    /// takes longer has its process tree ended and its CR gets `Failure` with reason
    /// `RunTimedOut`, then is retried with backoff. A watch's `runTimeout` wins.
    #[arg(long, env = "ANSIBLE_OPERATOR_ANSIBLE_RUN_TIMEOUT", default_value = "0s",
          value_parser = go_duration::parse)]
    pub ansible_run_timeout: Duration,

    /// Reconciles that may run at once for each kind; `MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>`
    /// overrides it per kind. Default: the number of CPUs.
    #[arg(long, env = "ANSIBLE_OPERATOR_MAX_CONCURRENT_RECONCILES")]
    pub max_concurrent_reconciles: Option<usize>,

    /// Address of the Prometheus metrics endpoint (`0` disables it).
    #[arg(
        long,
        alias = "metrics-addr",
        env = "ANSIBLE_OPERATOR_METRICS_BIND_ADDRESS",
        default_value = ":8443"
    )]
    pub metrics_bind_address: String,

    /// Address of the user-metrics endpoint `operator_sdk.util.osdk_metric` posts to (`0` disables it).
    #[arg(long, env = "ANSIBLE_OPERATOR_USER_METRICS_BIND_ADDRESS", default_value = "127.0.0.1:5050")]
    pub user_metrics_bind_address: String,

    /// Address of the `/healthz` and `/readyz` probes (`0` disables them).
    #[arg(long, env = "ANSIBLE_OPERATOR_HEALTH_PROBE_BIND_ADDRESS", default_value = ":6789")]
    pub health_probe_bind_address: String,

    /// Run only while holding the leader-election Lease.
    #[arg(long, alias = "enable-leader-election", env = "ANSIBLE_OPERATOR_LEADER_ELECT",
          default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = ArgAction::Set)]
    pub leader_elect: bool,

    /// Name of the leader-election Lease (falls back to `OPERATOR_NAME`).
    #[arg(long, env = "ANSIBLE_OPERATOR_LEADER_ELECTION_ID")]
    pub leader_election_id: Option<String>,

    /// Namespace of the leader-election Lease (in a cluster: the pod's namespace).
    #[arg(long, env = "ANSIBLE_OPERATOR_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Accepted for compatibility and ignored: the lock is always a Lease.
    #[arg(long, env = "ANSIBLE_OPERATOR_LEADER_ELECT_RESOURCE_LOCK", default_value = "leases", hide = true)]
    pub leader_elect_resource_lock: String,

    /// How long a leader's Lease is valid.
    #[arg(long, env = "ANSIBLE_OPERATOR_LEADER_ELECT_LEASE_DURATION", default_value = "15s",
          value_parser = go_duration::parse)]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps trying to renew before it gives up leadership.
    #[arg(long, env = "ANSIBLE_OPERATOR_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s",
          value_parser = go_duration::parse)]
    pub leader_elect_renew_deadline: Duration,

    /// Scale out: every replica reconciles its share of the CRs, assigned through shard Leases and
    /// the `ansible-operator.dev/shard-<ring>` label by the replica holding the leader Lease
    /// (which needs `--leader-election-id`; with sharding it picks the sharder, it never idles a
    /// replica). Off: one replica (or the leader) reconciles every CR, nothing is labelled.
    #[arg(long, env = "ANSIBLE_OPERATOR_SHARDING", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub sharding: bool,

    /// Name of the sharding ring: replicas sharing it split the CRs (default: the leader-election
    /// ID). Part of the label key, so at most 57 characters.
    #[arg(long, env = "ANSIBLE_OPERATOR_SHARDING_RING")]
    pub sharding_ring: Option<String>,

    /// How long runs in flight may finish after SIGTERM before they are killed.
    #[arg(long, env = "ANSIBLE_OPERATOR_GRACEFUL_SHUTDOWN_TIMEOUT", default_value = "30s",
          value_parser = go_duration::parse)]
    pub graceful_shutdown_timeout: Duration,

    /// Ansible events to log: Nothing, Tasks or Everything (case-insensitive).
    #[arg(long, env = "ANSIBLE_OPERATOR_ANSIBLE_LOG_EVENTS", default_value = "Tasks", ignore_case = true)]
    pub ansible_log_events: LogEvents,

    /// Port of the local API proxy that playbooks use.
    #[arg(long, env = "ANSIBLE_OPERATOR_PROXY_PORT", default_value_t = 8888)]
    pub proxy_port: u16,

    /// Requests per second one run may send through the proxy (0: no limit). A request over the
    /// limit waits for its turn, at most `--proxy-max-wait`, then gets 429 with Retry-After.
    #[arg(long, env = "ANSIBLE_OPERATOR_PROXY_QPS_PER_RUN", default_value_t = 0.0, value_parser = per_second)]
    pub proxy_qps_per_run: f64,

    /// Requests one run may send at once above `--proxy-qps-per-run` (0: the rate, rounded up).
    #[arg(long, env = "ANSIBLE_OPERATOR_PROXY_BURST_PER_RUN", default_value_t = 0)]
    pub proxy_burst_per_run: u32,

    /// Requests per second all runs together may send through the proxy (0: no limit).
    #[arg(long, env = "ANSIBLE_OPERATOR_PROXY_QPS", default_value_t = 0.0, value_parser = per_second)]
    pub proxy_qps: f64,

    /// Requests all runs may send at once above `--proxy-qps` (0: the rate, rounded up).
    #[arg(long, env = "ANSIBLE_OPERATOR_PROXY_BURST", default_value_t = 0)]
    pub proxy_burst: u32,

    /// Longest a request waits for the proxy's rate limits before it is answered 429.
    #[arg(long, env = "ANSIBLE_OPERATOR_PROXY_MAX_WAIT", default_value = "10s", value_parser = go_duration::parse)]
    pub proxy_max_wait: Duration,

    /// Allow HTTP/2 on the metrics server.
    #[arg(long, env = "ANSIBLE_OPERATOR_ENABLE_HTTP2", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub enable_http2: bool,

    /// Serve metrics over HTTPS.
    #[arg(long, env = "ANSIBLE_OPERATOR_METRICS_SECURE", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub metrics_secure: bool,

    /// Require an authorized caller for `/metrics` (needs `--metrics-secure`).
    #[arg(long, env = "ANSIBLE_OPERATOR_METRICS_REQUIRE_RBAC", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set,
          requires_if("true", "metrics_secure"))]
    pub metrics_require_rbac: bool,

    /// Directory with the metrics endpoint's certificate and key (`tls.crt`, `tls.key`; re-read when
    /// they change) for `--metrics-secure`. Without it a self-signed certificate is made at start.
    #[arg(long, env = "ANSIBLE_OPERATOR_METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<std::path::PathBuf>,

    /// ansible-runner processes that may run at once across all kinds (0: no limit beyond the
    /// per-kind `--max-concurrent-reconciles`). New CRs and spec changes go before resyncs.
    #[arg(long, env = "ANSIBLE_OPERATOR_MAX_CONCURRENT_RUNS", default_value_t = 0)]
    pub max_concurrent_runs: usize,

    /// Plans (`POST …/plan`) that may run at once; more wait. They are apart from the runs'
    /// budget, so a plan neither waits behind nor goes before a reconcile.
    #[arg(long, env = "ANSIBLE_OPERATOR_MAX_CONCURRENT_PLANS", default_value_t = 2)]
    pub max_concurrent_plans: usize,

    /// Admission validations that may run at once; a review beyond them is denied at once, saying
    /// so (the webhook answers whoever reaches the API port, and the API server waits).
    #[arg(long, env = "ANSIBLE_OPERATOR_MAX_CONCURRENT_VALIDATIONS", default_value_t = 4)]
    pub max_concurrent_validations: usize,

    /// What a start does with converged CRs (their last run succeeded for their generation):
    /// `all` runs every CR once, as upstream; `due` runs them when their reconcile period comes
    /// due, counted from their last run, and runs at once only what is new, changed, failed, being
    /// deleted or asked for.
    #[arg(long, env = "ANSIBLE_OPERATOR_STARTUP_RESYNC", default_value = "all", ignore_case = true)]
    pub startup_resync: crate::reconcile::schedule::StartupResync,

    /// Jitter of periodic resyncs, as a fraction of the period: a resync comes after
    /// `period × (1 + U[0, fraction])` (0: exactly at the period). A playbook's `requeue_after`
    /// stays exact.
    #[arg(long, env = "ANSIBLE_OPERATOR_RESYNC_JITTER", default_value = "0.1")]
    pub resync_jitter: crate::reconcile::schedule::Jitter,

    /// Resyncs of converged CRs that may start per second across all kinds (0: no limit): periodic
    /// ones, and each converged CR's run at start. New CRs, spec changes, failures, finalizers and
    /// manual requests never wait on it.
    #[arg(long, env = "ANSIBLE_OPERATOR_MAX_RESYNCS_PER_SECOND", default_value_t = 0.0,
          value_parser = per_second)]
    pub max_resyncs_per_second: f64,

    /// Share of the operator's cgroup memory limit that runs may fill: a reconcile's run waits while
    /// the cgroup's working set plus one run's estimate would pass it (0: off; no limit: off).
    #[arg(long, env = "ANSIBLE_OPERATOR_MEMORY_HIGH_WATER", default_value_t = 0.9, value_parser = share)]
    pub memory_high_water: f64,

    /// Memory one run is taken to need, in bytes or with Ki, Mi, Gi (0: measured from the runs).
    #[arg(long, env = "ANSIBLE_OPERATOR_RUN_MEMORY_ESTIMATE", default_value = "0", value_parser = bytes)]
    pub run_memory_estimate: u64,

    /// Run artifacts kept across all CRs, oldest removed first (0: only each CR's own
    /// `maxRunnerArtifacts` applies).
    #[arg(long, env = "ANSIBLE_OPERATOR_MAX_RUNNER_ARTIFACTS_TOTAL", default_value_t = 0)]
    pub max_runner_artifacts_total: usize,

    /// How Ansible runs: `warm` forks each run from a worker that has Ansible imported already
    /// (falling back to `cold` per run when a run cannot be made identical), `cold` starts
    /// `ansible-runner` anew for every run. A watch may choose with its `executor` key.
    #[arg(long, env = "ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR", default_value = "warm", ignore_case = true)]
    pub ansible_executor: crate::executor_mode::Executor,

    /// How long the warm worker may go without a run before it stops, giving its memory back (some
    /// 90 MiB with the runs' own processes gone); the next run starts it again and waits for it
    /// (one to two seconds). `0s` keeps it running.
    #[arg(long, env = "ANSIBLE_OPERATOR_WARM_WORKER_IDLE", default_value = "15m",
          value_parser = go_duration::parse)]
    pub warm_worker_idle: Duration,

    /// Write the kstatus conditions `Ready`, `Reconciling` and `Stalled` (with `observedGeneration`)
    /// beside upstream's, so `kubectl wait --for=condition=Ready` and Argo CD understand a CR. A
    /// watch's `readyConditions` wins. Off by default: the status stays upstream's.
    #[arg(long, env = "ANSIBLE_OPERATOR_READY_CONDITIONS", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub ready_conditions: bool,

    /// The proxy impersonates a ServiceAccount per kind (`run-<kind>.<group>` in the operator's
    /// namespace) for its runs' requests, so that the API server's own RBAC holds each kind to its
    /// grant and its audit log names the kind. The operator then needs `impersonate` on those
    /// accounts (`ansible-operator rbac --kind-identities` writes it).
    #[arg(long, env = "ANSIBLE_OPERATOR_KIND_IDENTITIES", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub kind_identities: bool,

    /// Keep in each run record the CR as its run saw it (`spec.input`), so that `replay --run` and
    /// the API's run inputs can rebuild that run. Off by default: a CR's spec may hold values
    /// (a password a `no_log` task uses) that must not reach whoever may read run records.
    #[arg(long, env = "ANSIBLE_OPERATOR_RECORD_RUN_INPUTS", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub record_run_inputs: bool,

    /// Expose the per-CR series (`ansible_operator_cr_condition`, `..._cr_last_success_timestamp_seconds`,
    /// `..._cr_consecutive_failures`): one series per CR and condition type, plus two per CR. Turn
    /// off for very large installations.
    #[arg(long, env = "ANSIBLE_OPERATOR_CR_METRICS", default_value = "true", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub cr_metrics: bool,

    /// Address of the HTTPS API and web console (`0` disables them).
    #[arg(long, env = "ANSIBLE_OPERATOR_API_BIND_ADDRESS", default_value = ":8082")]
    pub api_bind_address: String,

    /// Directory with the API's certificate and key (`tls.crt`, `tls.key`; re-read when they
    /// change). Without it the API makes a self-signed certificate at start and logs its fingerprint.
    #[arg(long, env = "ANSIBLE_OPERATOR_API_CERT_DIR")]
    pub api_cert_dir: Option<std::path::PathBuf>,

    /// Name of the `ValidatingWebhookConfiguration` applied at start for the watches with
    /// `validate` (one webhook per kind).
    #[arg(
        long,
        env = "ANSIBLE_OPERATOR_WEBHOOK_CONFIGURATION_NAME",
        default_value = "ansible-operator-validate"
    )]
    pub webhook_configuration_name: String,

    /// Host the API server calls the validating webhooks at (`https://<host>:<API port>/validate/...`),
    /// for an operator outside the cluster; without it, the Service named by
    /// `--webhook-service-name` is called.
    #[arg(long, env = "ANSIBLE_OPERATOR_WEBHOOK_HOST")]
    pub webhook_host: Option<String>,

    /// A CA (PEM) whose client certificates the webhook requires: `POST /validate/...` then answers
    /// only a caller presenting a certificate signed by it (the API server's, from the webhook
    /// kubeconfig of its AdmissionConfiguration); others are denied before the body is read.
    #[arg(long, env = "ANSIBLE_OPERATOR_WEBHOOK_CLIENT_CA")]
    pub webhook_client_ca: Option<std::path::PathBuf>,

    /// Reviews a client without such a certificate may send per second to the webhook (per client
    /// address; bursts of twice as many). Beyond it a review is denied at once. 0: no limit.
    #[arg(long, env = "ANSIBLE_OPERATOR_WEBHOOK_CLIENT_RATE", default_value_t = 50)]
    pub webhook_client_rate: u32,

    /// Service in front of the operator's API port that the API server calls the validating
    /// webhooks through (in a cluster).
    #[arg(long, env = "ANSIBLE_OPERATOR_WEBHOOK_SERVICE_NAME", default_value = "ansible-operator-api")]
    pub webhook_service_name: String,

    /// Namespace of `--webhook-service-name` (default: the pod's namespace, from the service account).
    #[arg(long, env = "ANSIBLE_OPERATOR_WEBHOOK_SERVICE_NAMESPACE")]
    pub webhook_service_namespace: Option<String>,

    /// Port of `--webhook-service-name`.
    #[arg(long, env = "ANSIBLE_OPERATOR_WEBHOOK_SERVICE_PORT", default_value_t = 8082)]
    pub webhook_service_port: u16,

    /// Which runs get an Event on their CR: `failures` (failed and timed-out runs of the
    /// operator's own kinds, those a CRD serves), `all` (every run of every watched kind, a
    /// `ReconcileSucceeded` for each success), or `none` (as upstream, which writes Events only
    /// when a playbook calls `k8s_event`).
    #[arg(long, env = "ANSIBLE_OPERATOR_RUN_EVENTS", default_value = "failures", ignore_case = true)]
    pub run_events: crate::history::events::RunEvents,

    /// Run records (`AnsibleRun` objects) kept per CR; 0 keeps none. A watch's `runHistoryLimit`
    /// wins.
    #[arg(long, env = "ANSIBLE_OPERATOR_RUN_HISTORY_LIMIT", default_value_t = 10)]
    pub run_history_limit: usize,

    /// Directory holding each CR's ansible-runner data directory and artifacts.
    #[arg(long, env = "ANSIBLE_OPERATOR_RUNNER_DIR", default_value = "/tmp/ansible-operator/runner")]
    pub runner_dir: std::path::PathBuf,

    /// Logging flags, named as controller-runtime's zap flags.
    #[command(flatten)]
    pub log: LogArgs,
}

/// `--max-resyncs-per-second`, `--proxy-qps`: a rate, 0 (no limit) or at least one per 1000 s.
fn per_second(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if rate == 0.0 || (rate.is_finite() && rate >= 0.001) => Ok(rate),
        _ => Err(format!("must be a number per second, 0 (no limit) or from 0.001, got {text}")),
    }
}

/// `--memory-high-water`: a share, from 0 to 1.
fn share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("must be a share of the memory limit from 0 to 1 (0: off), got {text}")),
    }
}

/// `--run-memory-estimate`: bytes, or a number with `Ki`, `Mi` or `Gi`.
fn bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(format!("must be bytes, or a number with Ki, Mi or Gi (e.g. 300Mi), got {text}")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|number| number.checked_mul(1 << shift))
        .ok_or_else(|| format!("must be bytes, or a number with Ki, Mi or Gi (e.g. 300Mi), got {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> RunArgs {
        let mut argv = vec!["ansible-operator", "run"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).expect("flags parse").command {
            Command::Run(run) => *run,
            _ => panic!("expected run"),
        }
    }

    #[test]
    fn defaults_match_upstream() {
        let args = run(&[]);
        assert_eq!(args.shape.watches_file, std::path::PathBuf::from("./watches.yaml"));
        assert!(args.inject_owner_ref);
        assert_eq!(args.shape.ansible_verbosity, 2);
        assert_eq!(args.reconcile_period, Duration::from_secs(10 * 3600));
        assert_eq!(args.proxy_port, 8888);
        assert_eq!(args.metrics_bind_address, ":8443");
        assert_eq!(args.health_probe_bind_address, ":6789");
        assert!(!args.leader_elect);
        assert_eq!(args.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(args.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(args.graceful_shutdown_timeout, Duration::from_secs(30));
        assert_eq!(args.ansible_log_events, LogEvents::Tasks);
        assert_eq!(args.ansible_executor, crate::executor_mode::Executor::Warm);
        assert_eq!(args.ansible_run_timeout, Duration::ZERO, "no run timeout");
        assert!(!args.sharding, "sharding is off by default");
        assert_eq!(args.sharding_ring, None);
        assert_eq!(args.startup_resync, crate::reconcile::schedule::StartupResync::All, "upstream's start");
        assert_eq!(args.resync_jitter, "0.1".parse().unwrap());
        assert_eq!(args.max_resyncs_per_second, 0.0, "no resync limit");
        assert_eq!((args.proxy_qps_per_run, args.proxy_burst_per_run), (0.0, 0), "no proxy limit per run");
        assert_eq!((args.proxy_qps, args.proxy_burst), (0.0, 0), "no proxy limit");
        assert_eq!(args.proxy_max_wait, Duration::from_secs(10));
        assert_eq!(
            (args.memory_high_water, args.run_memory_estimate),
            (0.9, 0),
            "guard on, estimate measured"
        );
    }

    #[test]
    fn memory_flags_take_a_share_and_a_size() {
        let args = run(&["--memory-high-water=0.5", "--run-memory-estimate=300Mi"]);
        assert_eq!((args.memory_high_water, args.run_memory_estimate), (0.5, 300 << 20));
        assert_eq!(bytes("2Gi"), Ok(2 << 30));
        assert_eq!(bytes("4096"), Ok(4096));
        for bad in ["1.5", "-1", "nan"] {
            assert!(share(bad).is_err(), "{bad}");
        }
        for bad in ["300MB", "Mi", "", "1.5Gi", "99999999999Gi"] {
            assert!(bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn proxy_rate_flags_parse_and_reject_what_is_not_a_rate() {
        let args = run(&[
            "--proxy-qps-per-run=2.5",
            "--proxy-burst-per-run=5",
            "--proxy-qps=50",
            "--proxy-max-wait=2s",
        ]);
        assert_eq!((args.proxy_qps_per_run, args.proxy_burst_per_run, args.proxy_qps), (2.5, 5, 50.0));
        assert_eq!(args.proxy_max_wait, Duration::from_secs(2));
        for value in ["-1", "fast", "inf", "1e-300"] {
            let error = Cli::try_parse_from(["ansible-operator", "run", &format!("--proxy-qps={value}")])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(error.contains("--proxy-qps") && error.contains(value), "{value}: {error}");
        }
    }

    #[test]
    fn resync_flags_reject_values_out_of_range_naming_the_flag_and_value() {
        use crate::reconcile::schedule::StartupResync;
        assert_eq!(run(&["--startup-resync=due"]).startup_resync, StartupResync::Due);
        assert_eq!(run(&["--resync-jitter=0"]).resync_jitter, crate::reconcile::schedule::Jitter::NONE);
        assert_eq!(run(&["--max-resyncs-per-second=2.5"]).max_resyncs_per_second, 2.5);
        for (flag, value) in [
            ("--resync-jitter", "1.5"),
            ("--resync-jitter", "-0.1"),
            ("--max-resyncs-per-second", "-1"),
            ("--startup-resync", "some"),
        ] {
            let argv = ["ansible-operator".to_string(), "run".to_string(), format!("{flag}={value}")];
            let error = Cli::try_parse_from(argv).expect_err(value).to_string();
            assert!(error.contains(flag) && error.contains(value), "{error}");
        }
    }

    #[test]
    fn sharding_is_a_go_style_boolean() {
        assert!(run(&["--sharding"]).sharding);
        assert!(!run(&["--sharding=false"]).sharding);
        assert_eq!(run(&["--sharding-ring=fleet"]).sharding_ring.as_deref(), Some("fleet"));
    }

    #[test]
    fn ready_conditions_are_off_and_per_cr_metrics_on_by_default() {
        let args = run(&[]);
        assert!(!args.ready_conditions);
        assert!(args.cr_metrics);
        assert!(run(&["--ready-conditions"]).ready_conditions);
        assert!(!run(&["--cr-metrics=false"]).cr_metrics);
    }

    #[test]
    fn run_events_are_written_for_failures_unless_asked_for_all_or_none() {
        use crate::history::events::RunEvents;
        assert_eq!(run(&[]).run_events, RunEvents::Failures);
        assert_eq!(run(&["--run-events=all"]).run_events, RunEvents::All);
        assert_eq!(run(&["--run-events", "none"]).run_events, RunEvents::None);
    }

    #[test]
    fn run_records_keep_no_inputs_unless_asked() {
        assert!(!run(&[]).record_run_inputs);
        assert!(run(&["--record-run-inputs"]).record_run_inputs);
    }

    #[test]
    fn run_timeout_is_a_go_duration() {
        assert_eq!(run(&["--ansible-run-timeout=1m30s"]).ansible_run_timeout, Duration::from_secs(90));
        let argv = ["ansible-operator", "run", "--ansible-run-timeout=90"];
        assert!(Cli::try_parse_from(argv).is_err(), "a bare number has no unit");
    }

    #[test]
    fn a_flag_given_twice_takes_its_last_value_as_upstream() {
        let args = run(&["--runner-dir=/a", "--proxy-port=1", "--runner-dir=/b", "--proxy-port=2"]);
        assert_eq!(args.runner_dir, std::path::PathBuf::from("/b"));
        assert_eq!(args.proxy_port, 2);
    }

    #[test]
    fn the_executor_is_warm_or_cold() {
        assert_eq!(run(&["--ansible-executor=cold"]).ansible_executor, crate::executor_mode::Executor::Cold);
        assert_eq!(
            run(&["--ansible-executor", "WARM"]).ansible_executor,
            crate::executor_mode::Executor::Warm
        );
    }

    #[test]
    fn go_style_booleans_are_accepted() {
        assert!(!run(&["--inject-owner-ref=false"]).inject_owner_ref);
        assert!(run(&["--leader-elect"]).leader_elect);
        assert!(run(&["--enable-leader-election"]).leader_elect);
    }

    #[test]
    fn log_events_is_case_insensitive() {
        assert_eq!(run(&["--ansible-log-events=everything"]).ansible_log_events, LogEvents::Everything);
        assert_eq!(run(&["--ansible-log-events", "NOTHING"]).ansible_log_events, LogEvents::Nothing);
    }

    #[test]
    fn deprecated_metrics_alias_sets_the_same_flag() {
        assert_eq!(run(&["--metrics-addr=:9090"]).metrics_bind_address, ":9090");
        let both = run(&["--metrics-addr=:1", "--metrics-bind-address=:2"]);
        assert_eq!(both.metrics_bind_address, ":2", "both name one variable upstream: the last wins");
    }

    #[test]
    fn rbac_takes_the_watched_namespaces_as_a_comma_list_and_defaults_to_the_deploy_identity() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).expect("flags parse").command {
            Command::Rbac(rbac) => rbac,
            _ => panic!("expected rbac"),
        };
        let rbac = parse(&["ansible-operator", "rbac", "--namespace=a,b", "--kind-identities"]);
        assert_eq!(rbac.namespace, ["a", "b"]);
        assert!(rbac.kind_identities && rbac.inject_owner_ref);
        assert_eq!(
            (rbac.operator_namespace.as_str(), rbac.service_account.as_str()),
            ("ansible-operator-system", "ansible-operator")
        );
        assert_eq!(rbac.watches_file, std::path::PathBuf::from("./watches.yaml"));
    }

    #[test]
    fn metrics_rbac_requires_secure() {
        let argv = ["ansible-operator", "run", "--metrics-require-rbac"];
        assert!(Cli::try_parse_from(argv).is_err());
        assert!(run(&["--metrics-require-rbac", "--metrics-secure"]).metrics_require_rbac);
    }

    #[test]
    fn bad_duration_is_rejected() {
        let argv = ["ansible-operator", "run", "--reconcile-period=soon"];
        assert!(Cli::try_parse_from(argv).is_err());
    }
}
