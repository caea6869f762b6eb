//! `ansible-operator` benchmark against the local control plane and the real Ansible toolchain.
//!
//! Scenarios: (1) the floor, a bare `ansible-runner run`; (2) single-CR latency through the
//! operator; (3) bursts of CRs at several `--max-concurrent-reconciles`; (4) CRs at rest at one or
//! more sizes, and after a restart; the restart scenario (converged CRs, the operator restarted, a
//! new CR 2 s later); (5) sharding over several operator processes. Scenarios 2–4 and restart run
//! for each flavor: our binary with the `warm` and the `cold` executor, and optionally a baseline
//! binary, alternating. Timing comes from a watch with
//! client-side timestamps; memory and CPU from `/proc`. Prints a Markdown report and writes it,
//! with every raw sample, to `bench/results/<time>/`.

mod admission;
mod cluster;
mod operator;
mod phases;
mod procfs;
mod report;
mod restart;
mod scenarios;
mod sharding;
mod stats;
mod test_command;
mod watch;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};

use operator::{Executor, Flavor};
use scenarios::{Ctx, Scale, ScalePlaybook, ScaleRunner};

/// Unix time in seconds (this machine's clock, shared with file mtimes and ansible's event times).
pub fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    Floor,
    Single,
    Burst,
    Scale,
    Restart,
    Sharding,
    Admission,
    /// `ansible-operator test` on the sample memcached scenario (needs the node).
    Test,
}

/// Benchmark of ansible-operator on the local control plane.
#[derive(Debug, Parser)]
#[command(name = "ansible-operator-bench")]
struct Args {
    /// Scenarios to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "floor,single,burst,scale,restart,sharding,admission,test"
    )]
    only: Vec<Scenario>,
    /// Measured runs for the floor and single-CR latency (each after one warm-up run).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// CRs created at once in the burst scenario (the 300 takes ~10 min on 2 cores).
    #[arg(long, default_value_t = 60)]
    burst: usize,
    /// `--max-concurrent-reconciles` values for the burst scenario.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    burst_concurrency: Vec<usize>,
    /// Dry-run creates timed in the admission scenario (after three warm-up ones).
    #[arg(long, default_value_t = 100)]
    admission_requests: usize,
    /// Runs of `ansible-operator test` on the memcached scenario.
    #[arg(long, default_value_t = 3)]
    test_runs: usize,
    /// Our executors to measure, each as its own flavor (`--ansible-executor`).
    #[arg(long, value_delimiter = ',', default_value = "warm,cold")]
    executors: Vec<Executor>,
    /// Playbook of the burst scenario (`debug`: one debug task; `k8s`: one kubernetes.core.k8s
    /// task; `k8s5`: five Kubernetes tasks).
    #[arg(long, default_value = "debug")]
    burst_playbook: String,
    /// CRs in the scale-at-rest scenario: one size or several (`500,2000`), each a run of its own.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    scale: Vec<usize>,
    /// Playbook of the scale and restart scenarios with `--scale-runner real` (`debug`: one debug
    /// task; `dependents`: three ConfigMaps per CR, owned by it).
    #[arg(long, value_enum, default_value = "debug")]
    scale_playbook: ScalePlaybook,
    /// Converged CRs in the restart scenario (the scale run of that size is reused when there is one).
    #[arg(long, default_value_t = 2000)]
    restart_crs: usize,
    /// Seconds after the restart over which runs, API requests and CPU are counted.
    #[arg(long, default_value_t = 300)]
    restart_window: u64,
    /// Our operator's `--startup-resync` values to restart with, in order (the baseline has only
    /// `all`). The last one is not waited out: its re-runs are left unfinished.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all,due")]
    restart_modes: Vec<restart::Mode>,
    /// Flavors the restart scenario runs for (`warm`, `cold`, `baseline`; default: all).
    #[arg(long, value_delimiter = ',')]
    restart_flavors: Option<Vec<String>>,
    /// How long the restart scenario waits for its new CR after creating it before it reports it
    /// as not yet `Successful`.
    #[arg(long, default_value_t = 600)]
    restart_new_cr_limit: u64,
    /// After converging, the scale scenario restarts the operator and times until all CRs are
    /// `Successful` again (not the run handed to the restart scenario); `false` skips that.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    scale_restart: bool,
    /// Passed to our operator as `--resync-jitter` in the scale and restart scenarios (only when given).
    #[arg(long)]
    resync_jitter: Option<String>,
    /// Passed to our operator as `--max-resyncs-per-second` in the scale and restart scenarios (only
    /// when given).
    #[arg(long)]
    max_resyncs_per_second: Option<String>,
    /// Seconds the converged operator is watched at rest.
    #[arg(long, default_value_t = 60)]
    scale_idle: u64,
    /// `--max-concurrent-reconciles` of the scale scenario.
    #[arg(long, default_value_t = 4)]
    scale_concurrency: usize,
    /// `stub`: a stand-in ansible-runner that prints a successful run's events (measures the
    /// runtime alone; 1,000 real runs take ~8 min on 2 cores); `real`: the real one.
    #[arg(long, value_enum, default_value = "stub")]
    scale_runner: ScaleRunner,
    /// Replicas compared with one in the sharding scenario.
    #[arg(long, default_value_t = 3)]
    sharding_replicas: usize,
    /// CRs of the sharding scenario's stub workload (the runtime alone, `cold`).
    #[arg(long, default_value_t = 300)]
    sharding_stub_crs: usize,
    /// CRs of the sharding scenario's sleep workload (`warm`, one task waiting 2 s).
    #[arg(long, default_value_t = 60)]
    sharding_sleep_crs: usize,
    /// Operator binary to measure; default: `target/release/ansible-operator`, built first.
    #[arg(long)]
    operator_binary: Option<PathBuf>,
    /// Extra flag for our operator (repeatable), e.g. `--operator-arg=--zap-log-level=debug`.
    #[arg(long, allow_hyphen_values = true)]
    operator_arg: Vec<String>,
    /// Extra flag for the baseline operator (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    baseline_arg: Vec<String>,
    /// Another ansible-operator binary (for example upstream's) to run scenarios 2–4 with too.
    #[arg(long)]
    baseline_binary: Option<PathBuf>,
    /// Python venv for the baseline (upstream needs ansible-runner's HTTP event plugin).
    #[arg(long)]
    baseline_venv: Option<PathBuf>,
    /// Proxy port for the baseline: upstream's playbooks always call 8888, whatever its
    /// `--proxy-port` (operator-sdk#5956), so anything else breaks every Kubernetes task.
    #[arg(long, default_value_t = 8888)]
    baseline_proxy_port: u16,
    /// Python venv with ansible-runner and kubernetes.core; default: `<repo>/.venv`.
    #[arg(long)]
    venv: Option<PathBuf>,
    /// Kubeconfig of the cluster; default: `$KUBECONFIG`, else `<repo>/.local/cluster/kubeconfig`.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Keep the scratch directory (runner dirs with every run's artifacts) instead of deleting it.
    #[arg(long)]
    keep_work: bool,
    /// Print the Markdown report of an earlier run's `results.json` and exit (no cluster needed).
    #[arg(long)]
    render: Option<PathBuf>,
    /// Results directory; default: `bench/results/<UTC time>`.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.render {
        let text = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        println!("{}", report::markdown(&serde_json::from_slice(&text)?));
        return Ok(());
    }
    let began = Instant::now();
    let bench = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let repo = bench.parent().context("bench/ has a parent")?.to_path_buf();
    let venv = args.venv.clone().unwrap_or_else(|| repo.join(".venv"));
    let kubeconfig = args
        .kubeconfig
        .clone()
        .or_else(|| std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| repo.join(".local/cluster/kubeconfig"));
    if !venv.join("bin/ansible-runner").is_file() {
        bail!("{} has no ansible-runner: run hack/install-ansible.sh", venv.display());
    }
    if !kubeconfig.is_file() {
        bail!("no kubeconfig at {}: run hack/local-cluster.sh up", kubeconfig.display());
    }
    let (venv, kubeconfig) = (absolute(&venv)?, absolute(&kubeconfig)?);
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string();
    let out = args.out.clone().unwrap_or_else(|| bench.join("results").join(&stamp));

    let binary = match &args.operator_binary {
        Some(binary) => absolute(binary)?,
        None => build_operator(&repo)?,
    };
    let mut executors: Vec<Executor> = Vec::new();
    for executor in &args.executors {
        if !executors.contains(executor) {
            executors.push(*executor);
        }
    }
    let mut all_flavors = executors
        .iter()
        .map(|executor| Flavor::ours(*executor, &binary, &venv, args.operator_arg.clone()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(binary) = &args.baseline_binary {
        let venv = match &args.baseline_venv {
            Some(v) => absolute(v)?,
            None => venv.clone(),
        };
        let binary = absolute(binary)?;
        all_flavors.push(Flavor::baseline(
            &binary,
            &venv,
            args.baseline_proxy_port,
            args.baseline_arg.clone(),
        ));
    }
    if all_flavors.is_empty() {
        bail!("no flavor to measure: --executors is empty and no --baseline-binary");
    }
    let flavors: Vec<&Flavor> = all_flavors.iter().collect();
    let mut ours_args = Vec::new();
    for (flag, value) in
        [("--resync-jitter", &args.resync_jitter), ("--max-resyncs-per-second", &args.max_resyncs_per_second)]
    {
        let Some(value) = value else { continue };
        if let Some(flavor) = flavors.iter().find(|f| f.executor.is_some() && !f.knows(flag)) {
            bail!(
                "{} has no {flag} flag (not in `run --help`): build the operator with it",
                flavor.binary.display()
            );
        }
        ours_args.push(format!("{flag}={value}"));
    }
    std::fs::create_dir_all(&out)?;
    let work = std::env::temp_dir().join(format!("ao-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;

    let client = cluster::client(&kubeconfig).await?;
    cluster::install_crd(&client).await?;
    let machine = procfs::machine();
    let load_start = procfs::loadavg();
    eprintln!(
        "bench: {} CPUs, load {:.2} {:.2} {:.2}; results in {}",
        machine["cpus"],
        load_start[0],
        load_start[1],
        load_start[2],
        out.display()
    );
    let ctx = Ctx {
        client,
        kubeconfig,
        repo: repo.clone(),
        bench: bench.clone(),
        work: work.clone(),
        out: out.clone(),
        venv,
    };
    let wants = |s: Scenario| args.only.contains(&s);
    let playbooks = ["debug", "k8s", "k8s5"];

    let mut results = json!({
        "started": stamp,
        "machine": machine,
        "versions": versions(&repo, &ctx.venv, &flavors),
        "settings": {
            "executors": executors.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
            "runs": args.runs, "burst": args.burst, "burst_concurrency": args.burst_concurrency,
            "burst_playbook": args.burst_playbook, "scale": args.scale, "scale_idle_seconds": args.scale_idle,
            "scale_concurrency": args.scale_concurrency,
            "scale_runner": args.scale_runner.as_str(),
            "scale_playbook": args.scale_playbook.as_str(),
            "scale_reconcile_period": scenarios::SCALE_RECONCILE_PERIOD,
            "admission_requests": args.admission_requests, "restart_crs": args.restart_crs, "restart_window_seconds": args.restart_window,
            "restart_new_cr_limit_seconds": args.restart_new_cr_limit, "scale_restart": args.scale_restart,
            "restart_modes": args.restart_modes.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
            "restart_new_cr_after_seconds": restart::NEW_CR_AFTER.as_secs_f64(),
            "restart_background_seconds": restart::BACKGROUND.as_secs_f64(),
            "ours_resync_args": ours_args,
            "sharding_replicas": args.sharding_replicas,
            "ansible_verbosity": 2, "rotate_artifacts": 20,
        },
    });

    if wants(Scenario::Floor) || wants(Scenario::Single) {
        let mut floor = serde_json::Map::new();
        let mut single = Vec::new();
        let single_flavors: Vec<&Flavor> = if wants(Scenario::Single) { flavors.clone() } else { Vec::new() };
        for playbook in playbooks {
            let (f, s) =
                scenarios::latency(&ctx, playbook, args.runs, wants(Scenario::Floor), &single_flavors).await;
            if !f.is_null() {
                floor.insert(playbook.into(), f);
            }
            single.extend(s);
        }
        if wants(Scenario::Floor) {
            results["floor"] = Value::Object(floor);
        }
        if wants(Scenario::Single) {
            results["single"] = Value::Array(single);
        }
    }
    if wants(Scenario::Single) {
        // From the files ansible-runner writes, which the baseline keeps elsewhere: ours only.
        let mut breakdown = Vec::new();
        for playbook in playbooks {
            for executor in &executors {
                let single = results["single"]
                    .as_array()
                    .and_then(|all| {
                        all.iter().find(|r| r["playbook"] == playbook && r["binary"] == executor.as_str())
                    })
                    .cloned()
                    .unwrap_or_default();
                let mut row = scenarios::breakdown(&single, &results["floor"][playbook]);
                row["playbook"] = json!(playbook);
                row["binary"] = json!(executor.as_str());
                breakdown.push(row);
            }
        }
        results["overhead_breakdown_ms"] = Value::Array(breakdown);
    }
    if wants(Scenario::Burst) {
        let mut burst = Vec::new();
        for concurrency in &args.burst_concurrency {
            for flavor in &flavors {
                burst.push(
                    scenarios::burst(&ctx, flavor, &args.burst_playbook, args.burst, *concurrency).await,
                );
            }
        }
        results["burst"] = Value::Array(burst);
    }
    let spec = |n: usize, idle: Duration| Scale {
        n,
        concurrency: args.scale_concurrency,
        idle,
        restart: args.scale_restart,
        runner: args.scale_runner,
        playbook: args.scale_playbook,
        ours_args: ours_args.clone(),
    };
    let plan = restart::Plan {
        modes: args.restart_modes.clone(),
        window: Duration::from_secs(args.restart_window),
        new_cr_limit: Duration::from_secs(args.restart_new_cr_limit),
    };
    let restarts_for =
        |flavor: &Flavor| args.restart_flavors.as_ref().is_none_or(|labels| labels.contains(&flavor.label));
    // Restart rows, and the flavors that have them: the scale run of size `--restart-crs` hands its
    // converged namespace to the restart scenario.
    let mut restart_rows: Vec<Value> = Vec::new();
    let mut restarted: Vec<String> = Vec::new();
    if wants(Scenario::Scale) {
        let mut scale = Vec::new();
        for &n in &args.scale {
            for flavor in &flavors {
                if let Some(reason) = scenarios::scale_skip(flavor.executor, args.scale_runner) {
                    scale.push(json!({"binary": flavor.label, "n": n, "skipped": reason}));
                    continue;
                }
                let reuse = wants(Scenario::Restart)
                    && n == args.restart_crs
                    && restarts_for(flavor)
                    && !restarted.contains(&flavor.label);
                let spec = spec(n, Duration::from_secs(args.scale_idle));
                let (row, rows) = scenarios::scale(&ctx, flavor, &spec, reuse.then_some(&plan)).await;
                if reuse {
                    restarted.push(flavor.label.clone());
                    restart_rows.extend(restart::rows_for(&flavor.label, &row, rows, "scale"));
                }
                scale.push(row);
            }
        }
        results["scale_growth"] = Value::Array(scenarios::growth(&scale));
        results["scale"] = Value::Array(scale);
    }
    if wants(Scenario::Restart) {
        for flavor in &flavors {
            if restarted.contains(&flavor.label) {
                continue;
            }
            if !restarts_for(flavor) {
                restart_rows.push(json!({"binary": flavor.label, "skipped": "not in --restart-flavors"}));
                continue;
            }
            if let Some(reason) = scenarios::scale_skip(flavor.executor, args.scale_runner) {
                restart_rows.push(json!({"binary": flavor.label, "skipped": reason}));
                continue;
            }
            // Its own namespace: converge, then restart at once (no idle time).
            let (row, rows) =
                scenarios::scale(&ctx, flavor, &spec(args.restart_crs, Duration::ZERO), Some(&plan)).await;
            restart_rows.extend(restart::rows_for(&flavor.label, &row, rows, "restart"));
        }
        results["restart"] = Value::Array(restart_rows);
    }

    if wants(Scenario::Sharding) {
        // The stub only stands in for a cold run (see scale_skip); the sleep playbook runs warm.
        let cold = Flavor::ours(Executor::Cold, &binary, &ctx.venv, args.operator_arg.clone())?;
        let warm = Flavor::ours(Executor::Warm, &binary, &ctx.venv, args.operator_arg.clone())?;
        let workloads = [
            (sharding::Workload::Stub, &cold, args.sharding_stub_crs),
            (sharding::Workload::Sleep, &warm, args.sharding_sleep_crs),
        ];
        let mut rows = Vec::new();
        for (workload, flavor, n) in workloads {
            for replicas in [1, args.sharding_replicas] {
                let concurrency = args.scale_concurrency;
                rows.push(sharding::sharding(&ctx, flavor, workload, n, replicas, concurrency).await);
            }
        }
        results["sharding"] = Value::Array(rows);
    }

    if wants(Scenario::Admission) {
        let mut rows = Vec::new();
        for flavor in flavors.iter().filter(|f| f.executor.is_some()) {
            rows.push(admission::admission(&ctx, flavor, args.admission_requests).await);
        }
        results["admission"] = Value::Array(rows);
    }

    if wants(Scenario::Test) {
        results["test_command"] = test_command::test_command(&ctx, &binary, args.test_runs);
    }

    results["load_end"] = json!(procfs::loadavg());
    results["wall_seconds"] = json!(began.elapsed().as_secs_f64());
    let markdown = report::markdown(&results);
    std::fs::write(out.join("results.json"), serde_json::to_vec_pretty(&results)?)?;
    std::fs::write(out.join("results.md"), &markdown)?;
    if args.keep_work {
        eprintln!("bench: kept the runner directories in {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    println!("{markdown}");
    eprintln!("bench: wrote {} and results.md", out.join("results.json").display());
    Ok(())
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::fs::canonicalize(path).with_context(|| format!("{} does not exist", path.display()))
}

/// `cargo build --release --bin ansible-operator` in the repository; returns the binary.
fn build_operator(repo: &Path) -> anyhow::Result<PathBuf> {
    eprintln!("bench: building target/release/ansible-operator");
    let status = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(repo)
        // Whatever target dir the bench itself was built in, the operator goes where it is looked for.
        .env("CARGO_TARGET_DIR", repo.join("target"))
        .args(["build", "--release", "--bin", "ansible-operator"])
        .status()
        .context("run cargo build")?;
    if !status.success() {
        bail!("cargo build --release --bin ansible-operator failed ({status})");
    }
    Ok(repo.join("target/release/ansible-operator"))
}

fn versions(repo: &Path, venv: &Path, flavors: &[&Flavor]) -> Value {
    let output = |program: &Path, args: &[&str], dir: &Path| {
        std::process::Command::new(program)
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let git = Path::new("git");
    let dirty = !output(git, &["status", "--porcelain", "--untracked-files=no"], repo).is_empty();
    let binaries: Value = flavors
        .iter()
        .map(|f| (f.label.clone(), json!(f.binary.display().to_string())))
        .collect::<serde_json::Map<_, _>>()
        .into();
    json!({
        "git": output(git, &["rev-parse", "--short", "HEAD"], repo),
        "git_dirty": dirty,
        "binaries": binaries,
        "ansible_runner": output(&venv.join("bin/ansible-runner"), &["--version"], repo),
        "ansible_core": output(&venv.join("bin/python3"), &["-c", "import ansible; print(ansible.__version__)"], repo),
    })
}
