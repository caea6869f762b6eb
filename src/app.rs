//! The program: dispatches subcommands, wires the stages together, and maps failures to upstream's
//! exit codes (1 for every fatal error, 0 after a clean shutdown).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::access::Access;
use crate::cli::{Cli, Command, RunArgs};
use crate::controller::WatchController;
use crate::executor::{Executor, Launcher, Worker, worker};
use crate::health::{self, Readiness};
use crate::history::{History, Ledger};
use crate::leader;
use crate::metrics::{self, Metrics};
use crate::proxy::Proxy;
use crate::proxy::dependents::Dependents;
use crate::reconcile::Settings;
use crate::reconcile::budget::Budget;
use crate::recorder::{Recorder, Reporter};
use crate::runner::{self, Inventory};
use crate::sharding::{self, Membership, sharder::Sharder};
use crate::toolchain;
use crate::watches::{self, Defaults, Environment};
use crate::{api, http_server, tls};

/// The program runs are started with, looked up on `PATH`.
const RUNNER: &str = "ansible-runner";

/// Version string printed by `ansible-operator version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Commit the binary was built from, when the build says (`ANSIBLE_OPERATOR_COMMIT`).
pub const COMMIT: &str = match option_env!("ANSIBLE_OPERATOR_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// Runs the parsed command line and returns the process exit code.
pub fn main(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Version => {
            let toolchain = match toolchain::probe(Path::new(RUNNER)) {
                Ok(toolchain) => toolchain.to_string(),
                Err(error) => format!("ansible: {:?}", error.to_string()),
            };
            println!("ansible-operator version: \"{VERSION}\", commit: \"{COMMIT}\", {toolchain}");
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            crate::logging::init(&args.log);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("error: start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run(*args)) {
                Ok(()) => {
                    tracing::info!("exiting");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    // One plain line on stderr, readable with or without a log collector.
                    eprintln!("error: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `ansible-operator run`: load the watches, start the servers every replica runs (proxy, metrics,
/// probes), then the controllers once this replica leads, and run until a signal.
async fn run(args: RunArgs) -> anyhow::Result<()> {
    let toolchain = log_versions().await;
    runner::input_dir::prepare_root(&args.runner_dir)?;
    let (env, playbook_env) = environment(&args)?;
    let loaded = load_watches(&args, &env)?;
    let (client, proxy_client) = clients().await?;
    let namespaces = watches::watch_namespaces(env.var("WATCH_NAMESPACE"));
    if namespaces.is_empty() {
        tracing::info!("watching all namespaces");
    } else {
        tracing::info!(namespaces = ?namespaces, "watching namespaces");
    }
    let leftovers = runner::leftovers::end_orphans();
    if !leftovers.is_empty() {
        tracing::warn!(pids = ?leftovers, "ended the processes of runs an earlier operator left behind");
    }
    let metrics = Metrics::new(VERSION, COMMIT);
    let launcher = launcher(&args, &loaded.watches, toolchain, &playbook_env, &metrics);
    let ledger = Arc::new(Ledger::default());
    let history = Arc::new(History::new(client.clone(), &namespaces).await);
    let instance = env.var("POD_NAME").or(env.var("HOSTNAME")).map(str::to_string);
    let reporter = Reporter { component: crate::kubeapi::FIELD_MANAGER.into(), instance: instance.clone() };
    let events = Arc::new(Recorder::new(client.clone(), reporter));
    let sharding = sharding_config(&args)?;
    let mut settings = settings(&args, &env, playbook_env, launcher.clone());
    settings.sharding = sharding.as_ref().map(|sharding| sharding.membership.clone());
    settings.history = Some(history.clone());
    settings.events = Some(events);
    settings.ledger = ledger.clone();
    let settings = Arc::new(settings);
    // The worker stops last: warm runs in flight may finish during the graceful shutdown.
    let result: anyhow::Result<()> = async {
        let readiness = Readiness::new();
        let shutdown = CancellationToken::new();
        serve_endpoints(&args, &client, &metrics, &readiness, &shutdown).await?;
        tokio::spawn(history.clone().recheck(shutdown.clone()));

        let dependents = if args.inject_owner_ref {
            let selector = sharding.as_ref().map(|sharding| sharding.membership.selector().to_string());
            Some(Dependents::new(client.clone(), namespaces.clone(), ledger.clone(), selector))
        } else {
            tracing::warn!("injection of owner references and dependent watches is turned off");
            None
        };
        let (proxy, listener) = Proxy::bind(proxy_client, args.proxy_port, dependents.clone()).await?;
        tokio::spawn(proxy.clone().serve(listener, shutdown.clone()));

        let mut controllers = Vec::new();
        for watch in loaded.watches {
            let controller = WatchController::new(
                client.clone(),
                watch,
                settings.clone(),
                proxy.clone(),
                dependents.clone(),
                metrics.clone(),
            )
            .await?;
            controllers.push(controller);
        }
        serve_api(&args, &client, &history, &settings, &controllers, &shutdown).await?;
        if args.max_runner_artifacts_total > 0 {
            tokio::spawn(prune_artifacts(args.runner_dir.clone(), args.max_runner_artifacts_total));
        }

        // The Lease this replica runs under: its shard Lease with sharding, else the leader Lease.
        let membership_stop = CancellationToken::new();
        let mut shard_lease = None;
        let mut leadership = match (&sharding, leader_config(&args)?) {
            (Some(sharding), _) => {
                // A member first: the controllers start only while this replica holds its shard Lease.
                let membership = &sharding.membership;
                readiness.joining(
                    format!("shard {} of ring {}", membership.shard, membership.ring),
                    format!("{}/{}", sharding.lease.namespace, sharding.lease.name),
                );
                let (mut member, task) = leader::spawn(client.clone(), sharding.lease.clone(), membership_stop.clone());
                tokio::select! {
                    held = member.wait_for(|held| *held) => held.context("shard lease campaign stopped")?,
                    _ = shutdown_signal() => {
                        shutdown.cancel();
                        membership_stop.cancel();
                        let _ = task.await;
                        return Ok(());
                    }
                };
                tracing::info!(ring = %membership.ring, shard = %membership.shard, "joined the sharding ring");
                readiness.joined();
                metrics.set_shard(&membership.ring, &membership.shard);
                // The leader Lease only picks the sharder: every replica reconciles its share.
                let (leading, _task) = leader::spawn(client.clone(), sharding.leader.clone(), shutdown.clone());
                let kinds = controllers.iter().map(|controller| controller.sharded_kind(&namespaces)).collect();
                let sharder = Sharder::new(
                    client.clone(),
                    sharding.membership.clone(),
                    sharding.lease.namespace.clone(),
                    kinds,
                );
                tokio::spawn(sharder.run(leading, shutdown.clone()));
                shard_lease = Some(task);
                Some(member)
            }
            (None, Some(config)) => {
                // A standby is ready: it serves the proxy and waits to take over.
                readiness.mark_started();
                let (mut leading, _task) = leader::spawn(client.clone(), config.clone(), shutdown.clone());
                tokio::select! {
                    led = leading.wait_for(|leading| *leading) => led.context("leader election stopped")?,
                    _ = shutdown_signal() => {
                        shutdown.cancel();
                        return Ok(());
                    }
                };
                tokio::spawn(leader::record_leadership(client.clone(), config, instance.clone()));
                Some(leading)
            }
            (None, None) => None,
        };

        let mut tasks = tokio::task::JoinSet::new();
        for controller in controllers {
            let scopes =
                controller.scopes(&namespaces).into_iter().map(|scope| (scope, readiness.register())).collect();
            tasks.spawn(controller.run(scopes, shutdown.clone()));
        }
        readiness.mark_started();

        let lost = async {
            match &mut leadership {
                Some(leading) => {
                    let _ = leading.wait_for(|leading| !*leading).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown_signal() => {}
            _ = lost => {
                // As controller-runtime: a replica that lost its lease stops at once and exits 1.
                // A shard that could not renew its Lease in time may be given away any moment: the
                // same holds, so that a CR is never run here after the sharder moved it.
                let lease = if sharding.is_some() { "shard lease" } else { "leadership" };
                tracing::error!(lease, "lost the lease: stopping at once");
                shutdown.cancel();
                settings.runner.active.terminate_all(Duration::ZERO).await;
                tasks.shutdown().await;
                anyhow::bail!("leader election lost");
            }
        }

        tracing::info!(timeout = ?args.graceful_shutdown_timeout, "shutting down: letting runs in flight finish");
        shutdown.cancel();
        let drained = async { while tasks.join_next().await.is_some() {} };
        tokio::select! {
            _ = drained => {}
            _ = tokio::time::sleep(args.graceful_shutdown_timeout) => {
                tracing::warn!("graceful shutdown timed out");
                settings.runner.active.terminate_all(runner::process::TERMINATION_GRACE).await;
            }
            _ = shutdown_signal() => tracing::warn!("second signal: stopping at once"),
        }
        // Dropping the tasks cancels the reconciles; each run's process tree is killed as it drops.
        tasks.shutdown().await;
        // Only now, with no run left, give the shard up: the sharder hands its CRs on at once.
        membership_stop.cancel();
        if let Some(task) = shard_lease {
            let _ = tokio::time::timeout(args.leader_elect_renew_deadline, task).await;
        }
        Ok(())
    }
    .await;
    launcher.stop().await;
    result
}

/// The environment watches are loaded with, with `--ansible-roles-path` and
/// `--ansible-collections-path` applied, and the same two for playbooks.
fn environment(args: &RunArgs) -> anyhow::Result<(Environment, Vec<(String, String)>)> {
    let mut env = Environment::from_process().context("read the working directory")?;
    let mut playbook_env = Vec::new();
    for (name, value) in [
        ("ANSIBLE_ROLES_PATH", &args.ansible_roles_path),
        ("ANSIBLE_COLLECTIONS_PATH", &args.ansible_collections_path),
    ] {
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
        ansible_verbosity: args.ansible_verbosity,
    };
    let loaded = watches::load(&args.watches_file, &defaults, env)?;
    for warning in &loaded.warnings {
        tracing::warn!(file = %args.watches_file.display(), "{warning}");
    }
    for watch in &loaded.watches {
        if crate::reconcile::unsafe_strings(watch, args.trust_cr_templates)
            == crate::vars::UnsafeStrings::None
        {
            tracing::warn!(
                file = %args.watches_file.display(),
                gvk = %watch.gvk,
                "templates in this kind's CRs are evaluated (trustCRTemplates): whoever may create its CRs can run code as the operator"
            );
        }
        if crate::reconcile::trusts_cr_variables(watch, args.trust_cr_variables) {
            tracing::warn!(
                file = %args.watches_file.display(),
                gvk = %watch.gvk,
                "this kind's CRs may set Ansible's own variables (trustCRVariables): whoever may create its CRs can run code as the operator"
            );
        }
    }
    if loaded.watches.is_empty() {
        tracing::warn!(file = %args.watches_file.display(), "the watches file has no entries: nothing to reconcile");
    }
    Ok(loaded)
}

/// Binds and serves `/metrics`, the user-metrics endpoint and the probes; each can be disabled with `0`.
async fn serve_endpoints(
    args: &RunArgs,
    client: &kube::Client,
    metrics: &Arc<Metrics>,
    readiness: &Arc<Readiness>,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let bind = |address: &str, what: &'static str| {
        let address = address.to_string();
        async move { http_server::bind(&address).await.with_context(|| format!("serve {what} on {address}")) }
    };
    if let Some(listener) = bind(&args.metrics_bind_address, "metrics").await? {
        let secure = match args.metrics_secure {
            true => Some(metrics::Secure {
                tls: tls::server(args.metrics_cert_dir.as_deref(), &certificate_names())
                    .context("the metrics endpoint's TLS certificate")?,
                access: args.metrics_require_rbac.then(|| Arc::new(Access::new(client.clone()))),
            }),
            false => None,
        };
        tokio::spawn(metrics::serve_metrics(listener, metrics.clone(), secure, shutdown.clone()));
    }
    if let Some(listener) = bind(&args.user_metrics_bind_address, "user metrics").await? {
        tokio::spawn(metrics::serve_user_metrics(listener, metrics.clone(), shutdown.clone()));
    }
    if let Some(listener) = bind(&args.health_probe_bind_address, "health probes").await? {
        tokio::spawn(health::serve_health(listener, readiness.clone(), shutdown.clone()));
    }
    Ok(())
}

/// Serves the API and console on `--api-bind-address` (every replica: reads and reconcile requests
/// go through the API server; a standby has no runs in flight to show).
async fn serve_api(
    args: &RunArgs,
    client: &kube::Client,
    history: &Arc<History>,
    settings: &Arc<Settings>,
    controllers: &[WatchController],
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let address = &args.api_bind_address;
    let Some(listener) =
        http_server::bind(address).await.with_context(|| format!("serve the API on {address}"))?
    else {
        return Ok(());
    };
    let tls = tls::server(args.api_cert_dir.as_deref(), &certificate_names())
        .context("the API's TLS certificate")?;
    let state = api::State {
        client: client.clone(),
        access: Access::new(client.clone()),
        history: history.clone(),
        live: settings.live.clone(),
        kinds: controllers.iter().map(WatchController::kind).collect(),
        runner_dir: args.runner_dir.clone(),
    };
    tokio::spawn(api::serve(listener, tls, Arc::new(state), shutdown.clone()));
    Ok(())
}

/// The names a self-signed certificate is made for: localhost and the pod's (or host's) name.
fn certificate_names() -> Vec<String> {
    let hostname = std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty());
    ["localhost".to_string(), "127.0.0.1".to_string()].into_iter().chain(hostname).collect()
}

/// The Lease to campaign for with `--leader-elect`, as upstream: its name from
/// `--leader-election-id` (or `OPERATOR_NAME`), its namespace from `--leader-election-namespace`
/// or, in a cluster, the pod's own.
fn leader_config(args: &RunArgs) -> anyhow::Result<Option<leader::Config>> {
    if !args.leader_elect {
        return Ok(None);
    }
    leader_lease(args, "--leader-elect").map(Some)
}

/// What `--sharding` runs under.
struct ShardingConfig {
    /// This replica's ring and shard.
    membership: Membership,
    /// The leader Lease, which with sharding picks the sharder.
    leader: leader::Config,
    /// This replica's shard Lease.
    lease: leader::Config,
}

/// With `--sharding`: the ring (`--sharding-ring`, else the leader-election ID), this replica's
/// shard (`POD_NAME`, else host name and a random suffix), and the two Leases, both in the
/// leader-election namespace with the leader-election durations. Sharding campaigns for the
/// leader Lease whether `--leader-elect` is set or not: the leader is the sharder.
fn sharding_config(args: &RunArgs) -> anyhow::Result<Option<ShardingConfig>> {
    if !args.sharding {
        return Ok(None);
    }
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
    Ok(Some(ShardingConfig { membership, leader, lease }))
}

/// The leader Lease's config from the `--leader-election-*` flags; `flag` names who needs it.
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

/// How often the global artifact cap is enforced.
const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// Keeps at most `keep` run artifacts across all CRs.
async fn prune_artifacts(root: PathBuf, keep: usize) {
    let mut interval = tokio::time::interval(PRUNE_INTERVAL);
    loop {
        interval.tick().await;
        let root = root.clone();
        match tokio::task::spawn_blocking(move || runner::artifacts::prune(&root, keep)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => tracing::info!(removed, keep, "pruned old run artifacts"),
            Ok(Err(error)) => tracing::warn!(%error, "could not prune run artifacts"),
            Err(error) => tracing::warn!(%error, "artifact pruning panicked"),
        }
    }
}

/// Starts runs warm or cold as the flag and the watches ask; the warm worker is started only when
/// some watch runs warm.
fn launcher(
    args: &RunArgs,
    watches: &[watches::Watch],
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
            };
            Some(Worker::spawn(config, metrics.clone()))
        }
    };
    Arc::new(Launcher::new(args.ansible_executor, worker, metrics.clone()))
}

/// Process-wide reconcile settings from the flags and the environment (upstream §2.2).
fn settings(
    args: &RunArgs,
    env: &Environment,
    playbook_env: Vec<(String, String)>,
    launcher: Arc<Launcher>,
) -> Settings {
    let var = |name: &str| env.var(name).filter(|v| !v.is_empty());
    let inventory = match var("ANSIBLE_INVENTORY") {
        Some(path) => Inventory::Copy(PathBuf::from(path)),
        None => Inventory::Localhost {
            python: var("VIRTUAL_ENV").map(|venv| PathBuf::from(venv).join("bin/python3")),
        },
    };
    Settings {
        reconcile_period: args.reconcile_period,
        run_timeout: args.ansible_run_timeout,
        runner: runner::Settings {
            program: PathBuf::from(RUNNER),
            log_events: args.ansible_log_events,
            log_raw_stdout: var("ANSIBLE_VERBOSITY")
                .and_then(|v| v.parse::<u8>().ok())
                .is_some_and(|v| v > 0),
            debug_logs: var("ANSIBLE_DEBUG_LOGS").is_some_and(parse_go_bool),
            active: Default::default(),
            launcher,
        },
        runner_dir: args.runner_dir.clone(),
        ansible_args: args.ansible_args.clone(),
        inventory,
        role_skip_facts: var("ANSIBLE_GATHERING") == Some("explicit"),
        playbook_env,
        budget: Budget::new(args.max_concurrent_runs),
        history: None,
        events: None,
        ledger: Arc::default(),
        live: Arc::default(),
        trust_cr_templates: args.trust_cr_templates,
        trust_cr_variables: args.trust_cr_variables,
        run_history_limit: args.run_history_limit,
        sharding: None,
    }
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

/// Logs the operator's version and the Ansible toolchain's, as upstream logs its own at start, and
/// returns the toolchain (the warm worker runs on its Python).
async fn log_versions() -> Option<toolchain::Toolchain> {
    let probed = tokio::task::spawn_blocking(|| toolchain::probe(Path::new(RUNNER))).await;
    match probed {
        Ok(Ok(toolchain)) => {
            tracing::info!(
                version = VERSION,
                commit = COMMIT,
                ansible_core = toolchain.ansible_core,
                ansible_runner = toolchain.ansible_runner,
                python = toolchain.python,
                python_path = %toolchain.python_path.display(),
                "version"
            );
            return Some(toolchain);
        }
        Ok(Err(toolchain::Error::NoRunner)) => {
            tracing::info!(version = VERSION, commit = COMMIT, "version");
            tracing::error!("ansible-runner is not on PATH: every reconcile will fail until it is installed");
        }
        Ok(Err(error)) => {
            tracing::info!(version = VERSION, commit = COMMIT, "version");
            tracing::warn!(error = %crate::logging::error_chain(&error), "could not read the Ansible toolchain's versions");
        }
        Err(_) => tracing::info!(version = VERSION, commit = COMMIT, "version"),
    }
    None
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
