//! Wiring: every part of a run built once from the flags and the environment (reconcile `Settings`,
//! clients, metrics, the launcher, the Lease to campaign for), in upstream's start-up order.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use super::version::{self, COMMIT, RUNNER, VERSION};
use crate::cli::RunArgs;
use crate::controller::WatchController;
use crate::executor::{Launcher, Worker, worker};
use crate::executor_mode::Executor;
use crate::health::Readiness;
use crate::history::{History, Ledger};
use crate::leader;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::proxy::dependents::Dependents;
use crate::proxy::rights::Rights;
use crate::reconcile::{Pacer, Settings};
use crate::recorder::{Recorder, Reporter};
use crate::run::Kinds;
use crate::run::{Door, Limits};
use crate::runner::{self, Inventory};
use crate::sharding::{self, Membership};
use crate::toolchain;
use crate::watches::{self, Defaults, Environment, Watch};

/// The zap logger of these lines: `app`, as before they moved into this file.
const TARGET: &str = "ansible_operator::app";

/// The parts of a run, each built once; the steps after wiring share them by reference.
pub(super) struct Wiring {
    /// The operator's own API client.
    pub client: kube::Client,
    /// The proxy's API client, which forwards the playbooks' requests as they are.
    pub proxy_client: kube::Client,
    /// `WATCH_NAMESPACE`: the namespaces watched (empty: all).
    pub namespaces: Vec<String>,
    /// This replica in Events and the leadership Event (`POD_NAME`, else `HOSTNAME`).
    pub instance: Option<String>,
    /// The operator's metrics.
    pub metrics: Arc<Metrics>,
    /// Starts runs warm or cold; stopped last.
    pub launcher: Arc<Launcher>,
    /// Run records.
    pub history: Arc<History>,
    /// What the operator remembers between runs, shared by reconcile and the dependent watches.
    pub ledger: Arc<Ledger>,
    /// The Lease this replica runs under.
    pub campaign: Campaign,
    /// Process-wide reconcile settings.
    pub settings: Arc<Settings>,
    /// What `/readyz` reports.
    pub readiness: Arc<Readiness>,
    /// Cancelled when the replica stops: every server and controller ends with it.
    pub shutdown: CancellationToken,
    /// Cancelled to stop the replica as SIGTERM does (`ansible-operator test` stops its operator so).
    pub stop: CancellationToken,
}

/// The Lease a replica runs under.
pub(super) enum Campaign {
    /// `--sharding`: a member of a ring, reconciling its share while it holds its shard Lease.
    Shard(ShardingConfig),
    /// `--leader-elect`: a standby until it holds the leader Lease.
    Leader(leader::Config),
    /// Neither: this replica reconciles every CR at once.
    None,
}

/// What `--sharding` runs under.
pub(super) struct ShardingConfig {
    /// This replica's ring and shard.
    pub membership: Membership,
    /// The leader Lease, which with sharding picks the sharder.
    pub leader: leader::Config,
    /// This replica's shard Lease.
    pub lease: leader::Config,
}

/// Builds the parts of a run and returns them with the watches to build controllers from. The
/// steps log as they go, in the order upstream's operator does (version first).
pub(super) async fn wire(args: &RunArgs) -> anyhow::Result<(Wiring, Vec<Watch>)> {
    wire_with(args, &[], &[]).await
}

/// [`wire`], with environment variables set over the process's: `overrides` for the operator
/// (`ansible-operator test` sets `WATCH_NAMESPACE` to its scenarios' namespaces so), `run_settings` for
/// the operator and its runs (the test command's Ansible settings of the project's manager).
pub(super) async fn wire_with(
    args: &RunArgs,
    overrides: &[(&str, String)],
    run_settings: &[(String, String)],
) -> anyhow::Result<(Wiring, Vec<Watch>)> {
    let toolchain = version::log_versions().await;
    runner::input_dir::prepare_root(&args.runner_dir)?;
    let (mut env, mut playbook_env) = environment(args)?;
    for (name, value) in overrides {
        env = env.with_var(*name, value.clone());
    }
    for (name, value) in run_settings {
        env = env.with_var(name.clone(), value.clone());
        playbook_env.push((name.clone(), value.clone()));
    }
    let loaded = load_watches(args, &env)?;
    let (client, proxy_client) = clients().await?;
    let namespaces = watch_namespaces(&env);
    end_orphans();
    let metrics = Metrics::with_cr_metrics(VERSION, COMMIT, args.cr_metrics);
    let launcher = launcher(args, &loaded.watches, toolchain, &playbook_env, &metrics);
    let ledger = Arc::new(Ledger::default());
    let home = records_home(&env, &namespaces);
    let rights = rights(args, &loaded.watches, &home);
    let history = Arc::new(History::new(client.clone(), &namespaces, home).await);
    let instance = env.var("POD_NAME").or(env.var("HOSTNAME")).map(str::to_string);
    let reporter = Reporter { component: crate::kubeapi::FIELD_MANAGER.into(), instance: instance.clone() };
    let events = Arc::new(Recorder::new(client.clone(), reporter));
    let campaign = campaign(args)?;
    let shared = Shared {
        playbook_env,
        launcher: launcher.clone(),
        history: history.clone(),
        events,
        ledger: ledger.clone(),
        membership: match &campaign {
            Campaign::Shard(sharding) => Some(sharding.membership.clone()),
            Campaign::Leader(_) | Campaign::None => None,
        },
    };
    let settings = Arc::new(settings(args, &env, shared, rights));
    let wiring = Wiring {
        client,
        proxy_client,
        namespaces,
        instance,
        metrics,
        launcher,
        history,
        ledger,
        campaign,
        settings,
        readiness: Readiness::new(),
        shutdown: CancellationToken::new(),
        stop: CancellationToken::new(),
    };
    Ok((wiring, loaded.watches))
}

/// The registry of dependent watches, or `None` with `--inject-owner-ref=false`; with sharding
/// its watches see only this shard's children.
pub(super) fn dependents(args: &RunArgs, wired: &Wiring) -> Option<Arc<Dependents>> {
    if !args.inject_owner_ref {
        tracing::warn!(target: TARGET, "injection of owner references and dependent watches is turned off");
        return None;
    }
    let selector = match &wired.campaign {
        Campaign::Shard(sharding) => Some(sharding.membership.selector().to_string()),
        Campaign::Leader(_) | Campaign::None => None,
    };
    Some(Dependents::new(wired.client.clone(), wired.namespaces.clone(), wired.ledger.clone(), selector))
}

/// One controller per watch, in the watches file's order; of entries for several versions of one
/// kind, only the newest version's reconciles (see [`crate::watches::one_per_kind`]).
pub(super) async fn controllers(
    wired: &Wiring,
    watches: Vec<Watch>,
    proxy: &Arc<Proxy>,
    dependents: &Option<Arc<Dependents>>,
) -> anyhow::Result<Vec<WatchController>> {
    let (watches, others) = crate::watches::one_per_kind(watches);
    for (watch, version) in others {
        tracing::info!(
            target: TARGET,
            kind = %watch.gvk, reconciled_as = %version,
            "this entry does not reconcile: its kind's objects are reconciled once, by the entry of its newest version"
        );
    }
    let mut controllers = Vec::new();
    for watch in watches {
        let controller = WatchController::new(
            wired.client.clone(),
            watch,
            wired.settings.clone(),
            proxy.clone(),
            dependents.clone(),
            wired.metrics.clone(),
        )
        .await?;
        controllers.push(controller);
    }
    Ok(controllers)
}

/// The environment watches are loaded with, with `--ansible-roles-path` and
/// `--ansible-collections-path` applied, and the same two for playbooks; playbooks also get
/// `--user-metrics-bind-address` (unless disabled), where `osdk_metric` posts by default.
fn environment(args: &RunArgs) -> anyhow::Result<(Environment, Vec<(String, String)>)> {
    let (env, mut playbook_env) =
        paths_environment(&args.shape.ansible_roles_path, &args.shape.ansible_collections_path)?;
    if args.user_metrics_bind_address != "0" {
        let address = args.user_metrics_bind_address.clone();
        playbook_env.push(("ANSIBLE_OPERATOR_USER_METRICS_BIND_ADDRESS".into(), address));
    }
    Ok((env, playbook_env))
}

/// [`environment`] from the two paths (`run`'s and `replay`'s flags).
pub(super) fn paths_environment(
    roles_path: &Option<String>,
    collections_path: &Option<String>,
) -> anyhow::Result<(Environment, Vec<(String, String)>)> {
    let mut env = Environment::from_process().context("read the working directory")?;
    let mut playbook_env = Vec::new();
    for (name, value) in [("ANSIBLE_ROLES_PATH", roles_path), ("ANSIBLE_COLLECTIONS_PATH", collections_path)]
    {
        if let Some(value) = value {
            env = env.with_var(name, value.clone());
            playbook_env.push((name.to_string(), value.clone()));
        }
    }
    Ok((env, playbook_env))
}

fn load_watches(args: &RunArgs, env: &Environment) -> anyhow::Result<watches::Loaded> {
    let defaults = Defaults {
        max_concurrent_reconciles: args
            .max_concurrent_reconciles
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)),
        ansible_verbosity: args.shape.ansible_verbosity,
    };
    let loaded = watches::load(&args.shape.watches_file, &defaults, env)?;
    for warning in &loaded.warnings {
        tracing::warn!(target: TARGET, file = %args.shape.watches_file.display(), "{warning}");
    }
    for watch in &loaded.watches {
        if crate::reconcile::unsafe_strings(watch, args.shape.trust_cr_templates)
            == crate::vars::UnsafeStrings::None
        {
            tracing::warn!(
                target: TARGET,
                file = %args.shape.watches_file.display(),
                gvk = %watch.gvk,
                "templates in this kind's CRs are evaluated (trustCRTemplates): whoever may create its CRs can run code as the operator"
            );
        }
        if crate::reconcile::trusts_cr_variables(watch, args.shape.trust_cr_variables) {
            tracing::warn!(
                target: TARGET,
                file = %args.shape.watches_file.display(),
                gvk = %watch.gvk,
                "this kind's CRs may set Ansible's own variables (trustCRVariables): whoever may create its CRs can run code as the operator"
            );
        }
    }
    if loaded.watches.is_empty() {
        tracing::warn!(
            target: TARGET,
            file = %args.shape.watches_file.display(), "the watches file has no entries: nothing to reconcile"
        );
    }
    Ok(loaded)
}

/// What each kind's runs act with: its `permissions`, and with `--kind-identities` its own
/// ServiceAccount in the operator's namespace `home`. A kind without `permissions` is said once.
fn rights(args: &RunArgs, watches: &[Watch], home: &str) -> Kinds {
    let file = args.shape.watches_file.display();
    watches
        .iter()
        .map(|watch| {
            let identity = args.kind_identities.then(|| {
                let account = watches::permissions::kind_account(&watch.gvk);
                format!("system:serviceaccount:{home}:{account}")
            });
            match &watch.extensions.permissions {
                Some(rules) => tracing::info!(
                    target: TARGET, %file, gvk = %watch.gvk, rules = rules.len(), identity = identity.as_deref(),
                    "this kind's runs may do only what its permissions declare"
                ),
                None => tracing::info!(
                    target: TARGET, %file, gvk = %watch.gvk, identity = identity.as_deref(),
                    "this kind has no permissions: its runs act with all of the operator's rights, as upstream's"
                ),
            }
            let rights = Rights { rules: watch.extensions.permissions.clone(), identity };
            (watch.gvk.clone(), Arc::new(rights))
        })
        .collect()
}

/// `WATCH_NAMESPACE` as a list, logged.
fn watch_namespaces(env: &Environment) -> Vec<String> {
    let namespaces = watches::watch_namespaces(env.var("WATCH_NAMESPACE"));
    if namespaces.is_empty() {
        tracing::info!(target: TARGET, "watching all namespaces");
    } else {
        tracing::info!(target: TARGET, namespaces = ?namespaces, "watching namespaces");
    }
    namespaces
}

/// Where the run records of cluster-scoped CRs go: the operator's own namespace (`POD_NAMESPACE`,
/// else the service account's), said once so that a user finds them.
fn records_home(env: &Environment, namespaces: &[String]) -> String {
    let service_account = leader::in_cluster_namespace();
    let (home, source) =
        crate::history::home::decide(env.var("POD_NAMESPACE"), service_account.as_deref(), namespaces);
    tracing::info!(target: TARGET, namespace = %home, from = ?source, "run records of cluster-scoped CRs go to this namespace");
    home
}

/// Ends the process trees of runs an earlier operator left behind.
fn end_orphans() {
    let leftovers = runner::leftovers::end_orphans();
    if !leftovers.is_empty() {
        tracing::warn!(
            target: TARGET,
            pids = ?leftovers, "ended the processes of runs an earlier operator left behind"
        );
    }
}

/// The Lease this replica runs under, from `--sharding` or `--leader-elect`.
fn campaign(args: &RunArgs) -> anyhow::Result<Campaign> {
    if args.sharding {
        return sharding_config(args).map(Campaign::Shard);
    }
    if args.leader_elect {
        return leader_lease(args, "--leader-elect").map(Campaign::Leader);
    }
    Ok(Campaign::None)
}

/// With `--sharding`: the ring (`--sharding-ring`, else the leader-election ID), this replica's
/// shard (`POD_NAME`, else host name and a random suffix), and the two Leases, both in the
/// leader-election namespace with the leader-election durations. Sharding campaigns for the
/// leader Lease whether `--leader-elect` is set or not: the leader is the sharder.
fn sharding_config(args: &RunArgs) -> anyhow::Result<ShardingConfig> {
    let leader = leader_lease(args, "--sharding")?;
    let ring =
        args.sharding_ring.clone().filter(|ring| !ring.is_empty()).unwrap_or_else(|| leader.name.clone());
    let pod = std::env::var("POD_NAME").ok();
    let suffix: String = leader::random_suffix().chars().take(8).collect();
    let shard = sharding::shard_name(pod.as_deref(), &leader::hostname(), &suffix);
    let membership = Membership::new(ring, &shard)?;
    let lease = sharding::lease::config(
        &membership,
        &leader.namespace,
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
    );
    let leader = leader::Config { identity: membership.shard.clone(), ..leader };
    Ok(ShardingConfig { membership, leader, lease })
}

/// The leader Lease's config from the `--leader-election-*` flags, as upstream: its name from
/// `--leader-election-id` (or `OPERATOR_NAME`), its namespace from `--leader-election-namespace`
/// or, in a cluster, the pod's own; `flag` names who needs it.
fn leader_lease(args: &RunArgs, flag: &str) -> anyhow::Result<leader::Config> {
    let name = args
        .leader_election_id
        .clone()
        .or_else(|| std::env::var("OPERATOR_NAME").ok())
        .filter(|name| !name.is_empty())
        .with_context(|| format!("{flag} needs --leader-election-id"))?;
    let namespace = args
        .leader_election_namespace
        .clone()
        .or_else(leader::in_cluster_namespace)
        .with_context(|| format!("{flag} outside a cluster needs --leader-election-namespace"))?;
    let config = leader::Config::new(
        namespace,
        name,
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
    );
    config.validate().context("leader election flags")?;
    Ok(config)
}

/// Starts runs warm or cold as the flag and the watches ask; the warm worker is started only when
/// some watch runs warm.
fn launcher(
    args: &RunArgs,
    watches: &[Watch],
    toolchain: Option<toolchain::Toolchain>,
    playbook_env: &[(String, String)],
    metrics: &Arc<Metrics>,
) -> Arc<Launcher> {
    let warm =
        watches.iter().any(|w| w.extensions.executor.unwrap_or(args.ansible_executor) == Executor::Warm);
    let worker = match (warm, toolchain) {
        (false, _) => None,
        (true, None) => {
            tracing::warn!(
                target: TARGET,
                "the Ansible toolchain could not be read: the warm executor is off, every run starts cold"
            );
            None
        }
        (true, Some(toolchain)) => {
            let env = runner::run_environment().into_iter();
            let config = worker::Config {
                python: toolchain.python_path,
                env: env.chain(playbook_env.iter().cloned()).collect(),
                cwd: args.runner_dir.clone(),
                idle: Some(args.warm_worker_idle).filter(|idle| !idle.is_zero()),
            };
            Some(Worker::spawn(config, metrics.clone()))
        }
    };
    Arc::new(Launcher::new(args.ansible_executor, worker, metrics.clone()))
}

/// The parts reconcile shares with the rest of the run.
struct Shared {
    /// `--ansible-roles-path` and `--ansible-collections-path` for playbooks.
    playbook_env: Vec<(String, String)>,
    launcher: Arc<Launcher>,
    history: Arc<History>,
    events: Arc<Recorder>,
    ledger: Arc<Ledger>,
    /// With `--sharding`: this replica's ring and shard.
    membership: Option<Membership>,
}

/// Process-wide reconcile settings from the flags and the environment (upstream §2.2).
fn settings(args: &RunArgs, env: &Environment, shared: Shared, rights: Kinds) -> Settings {
    let var = |name: &str| env.var(name).filter(|v| !v.is_empty());
    Settings {
        reconcile_period: args.reconcile_period,
        run_timeout: args.ansible_run_timeout,
        door: Arc::new(Door::new(
            runner::Settings {
                program: PathBuf::from(RUNNER),
                log_events: args.ansible_log_events,
                log_raw_stdout: var("ANSIBLE_VERBOSITY")
                    .and_then(|v| v.parse::<u8>().ok())
                    .is_some_and(|v| v > 0),
                debug_logs: var("ANSIBLE_DEBUG_LOGS").is_some_and(parse_go_bool),
                active: Default::default(),
                launcher: shared.launcher,
            },
            Limits {
                runs: args.max_concurrent_runs,
                plans: args.max_concurrent_plans,
                validations: args.max_concurrent_validations,
            },
            rights,
        )),
        runner_dir: args.runner_dir.clone(),
        ansible_args: args.shape.ansible_args.clone(),
        inventory: inventory(env),
        role_skip_facts: role_skip_facts(env),
        playbook_env: shared.playbook_env,
        startup_resync: args.startup_resync,
        resync_jitter: args.resync_jitter,
        resync_pacer: Arc::new(Pacer::new(args.max_resyncs_per_second)),
        memory_guard: memory_guard(args),
        history: shared.history,
        events: Some(shared.events),
        run_events: args.run_events,
        ledger: shared.ledger,
        live: Arc::default(),
        trust_cr_templates: args.shape.trust_cr_templates,
        trust_cr_variables: args.shape.trust_cr_variables,
        ready_conditions: args.ready_conditions,
        record_run_inputs: args.record_run_inputs,
        run_history_limit: args.run_history_limit,
        sharding: shared.membership,
    }
}

/// The inventory of every run: `ANSIBLE_INVENTORY`'s, else localhost with the virtualenv's Python.
pub(super) fn inventory(env: &Environment) -> Inventory {
    let var = |name: &str| env.var(name).filter(|v| !v.is_empty());
    match var("ANSIBLE_INVENTORY") {
        Some(path) => Inventory::Copy(PathBuf::from(path)),
        None => Inventory::Localhost {
            python: var("VIRTUAL_ENV").map(|venv| PathBuf::from(venv).join("bin/python3")),
        },
    }
}

/// `ANSIBLE_GATHERING=explicit`: role runs skip facts.
pub(super) fn role_skip_facts(env: &Environment) -> bool {
    env.var("ANSIBLE_GATHERING") == Some("explicit")
}

/// The memory guard of `--memory-high-water`, when the operator's cgroup has a memory limit.
fn memory_guard(args: &RunArgs) -> Option<Arc<crate::reconcile::memory::MemoryGuard>> {
    use crate::reconcile::memory::MemoryGuard;
    let Some(cgroup) = crate::cgroup::MemoryCgroup::of_self().filter(|cgroup| cgroup.limit().is_some())
    else {
        tracing::info!(target: TARGET, "no memory limit on the operator's cgroup: runs are not held for memory");
        return None;
    };
    let estimate = Some(args.run_memory_estimate).filter(|bytes| *bytes > 0);
    let guard = MemoryGuard::start(cgroup.clone(), args.memory_high_water, estimate)?;
    tracing::info!(
        target: TARGET,
        limit_mib = cgroup.limit().unwrap_or_default() >> 20,
        high_water = args.memory_high_water,
        run_estimate_mib = estimate.map(|bytes| bytes >> 20),
        "runs wait while the operator's cgroup is near its memory limit"
    );
    Some(guard)
}

/// The operator's own client, whose writes carry the user agent (and so the field manager)
/// `ansible-operator` even where kube sets no field manager (its event recorder); and the proxy's,
/// which forwards the playbooks' requests as they are, user agent included.
async fn clients() -> anyhow::Result<(kube::Client, kube::Client)> {
    let config = kube::Config::infer().await.context("get the cluster config")?;
    let mut own = config.clone();
    let agent = format!("{}/{VERSION}", crate::kubeapi::FIELD_MANAGER);
    own.headers.push((http::header::USER_AGENT, http::HeaderValue::from_str(&agent).context("user agent")?));
    let own = kube::Client::try_from(own).context("build the API client")?;
    let proxy = kube::Client::try_from(config).context("build the proxy's API client")?;
    Ok((own, proxy))
}

/// Go's `strconv.ParseBool` true values.
fn parse_go_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}
