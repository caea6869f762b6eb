//! The four scenarios. Each returns its results as JSON; failures inside a scenario are recorded in
//! the JSON (`error`) rather than ending the benchmark.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kube::Client;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::cluster::{self, GROUP, KIND, VERSION};
use crate::now;
use crate::operator::{Executor, Flavor, Launch, Operator};
use crate::phases;
use crate::procfs::{self, Sampler, TreeCpu, TreeMemory};
use crate::restart;
use crate::stats::Summary;
use crate::watch::Tracker;

/// Everything the scenarios share.
pub struct Ctx {
    /// Cluster client.
    pub client: Client,
    /// The cluster's kubeconfig.
    pub kubeconfig: PathBuf,
    /// Repository root.
    pub repo: PathBuf,
    /// `bench/`.
    pub bench: PathBuf,
    /// Scratch space (runner dirs), removed at the end.
    pub work: PathBuf,
    /// Results directory (operator logs go to `logs/`).
    pub out: PathBuf,
    /// The venv for bare ansible-runner runs.
    pub venv: PathBuf,
}

impl Ctx {
    /// `bench/playbooks/<name>.yml`.
    pub fn playbook(&self, name: &str) -> PathBuf {
        self.bench.join("playbooks").join(format!("{name}.yml"))
    }

    pub fn scratch(&self, label: &str) -> PathBuf {
        self.work.join(label)
    }

    pub fn keep_log(&self, operator: &Operator, label: &str) {
        let logs = self.out.join("logs");
        let _ = std::fs::create_dir_all(&logs);
        let _ = std::fs::copy(&operator.log, logs.join(format!("{label}.log")));
    }
}

/// The CR's runner data directory under an operator's runner dir.
fn cr_runner_dir(root: &Path, namespace: &str, name: &str) -> PathBuf {
    root.join(GROUP).join(VERSION).join(KIND).join(namespace).join(name)
}

/// Waits until every CR of `names` is `Successful` at or after `since`, failing when one of the
/// `operators` exits or nothing progresses for `stall`. Returns how many finished.
pub async fn await_all(
    tracker: &Tracker,
    names: &[String],
    since: f64,
    operators: &mut [Operator],
    stall: Duration,
) -> anyhow::Result<usize> {
    let mut last = (0, tokio::time::Instant::now());
    loop {
        let done = tracker.wait_successful(names, since, Duration::from_millis(500)).await;
        if done == names.len() {
            return Ok(done);
        }
        for operator in operators.iter_mut() {
            operator.check_alive()?;
        }
        if done > last.0 {
            last = (done, tokio::time::Instant::now());
        } else if last.1.elapsed() > stall {
            let failed = tracker.count_failed(names, since);
            bail!("stalled at {done}/{} Successful for {stall:?} ({failed} with Failure)", names.len());
        }
    }
}

/// Runs `scenario` in a new namespace named after `prefix`, deleted afterwards; a failure becomes
/// the result `{"error": …}`.
pub async fn in_namespace(
    ctx: &Ctx,
    prefix: &str,
    scenario: impl AsyncFnOnce(&str) -> anyhow::Result<Value>,
) -> Value {
    let namespace = match cluster::create_namespace(&ctx.client, prefix).await {
        Ok(ns) => ns,
        Err(error) => return json!({"error": format!("{error:#}")}),
    };
    let result = scenario(&namespace).await;
    cluster::delete_namespace(&ctx.client, &namespace, Duration::from_secs(120)).await;
    result.unwrap_or_else(|error| json!({"error": format!("{error:#}")}))
}

/// `<prefix>-0000`, `<prefix>-0001`, … (`n` names).
pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Floor and 2. single-CR latency, interleaved

/// How long the single-CR operators are left alone after their last run before their memory is
/// read "at rest".
const AT_REST_AFTER: Duration = Duration::from_secs(2);

/// Scenarios 1 and 2 for one playbook, interleaved so that load drifting on the machine hits both
/// alike: one warm-up each, then for every `i` a bare ansible-runner run (when `floor`), then one CR
/// for each flavor (each operator has its own namespace and `--max-concurrent-reconciles=1`; each
/// CR waits for `Successful` before the next step). After the last runs, [`AT_REST_AFTER`], then
/// each operator's tree memory (for `warm`: the operator and its worker). Returns the floor (or
/// `Null`) and one result per flavor.
pub async fn latency(
    ctx: &Ctx,
    playbook: &str,
    runs: usize,
    floor: bool,
    flavors: &[&Flavor],
) -> (Value, Vec<Value>) {
    let mut floor_state = None;
    let mut floor_error = None;
    if floor {
        match Floor::new(ctx, playbook).await {
            Ok(state) => floor_state = Some(state),
            Err(error) => floor_error = Some(format!("{error:#}")),
        }
    }
    let mut singles = Vec::new();
    for flavor in flavors {
        singles.push(Single::new(ctx, flavor, playbook).await);
    }
    for i in 0..=runs {
        if let Some(state) = floor_state.as_mut().filter(|state| state.error.is_none())
            && let Err(error) = state.run(ctx, i).await
        {
            state.error = Some(format!("{error:#}"));
        }
        for single in singles.iter_mut().filter(|single| single.error.is_none()) {
            if let Err(error) = single.run(i).await {
                single.error = Some(format!("{error:#}"));
            }
        }
    }
    if singles.iter().any(|single| single.operator.is_some()) {
        tokio::time::sleep(AT_REST_AFTER).await;
        for single in &mut singles {
            single.at_rest = single.operator.as_ref().and_then(|o| TreeMemory::read(o.pid(), true));
        }
    }
    let floor_value = match (floor_state, floor_error) {
        (Some(state), _) => state.finish(ctx, playbook).await,
        (None, Some(error)) => json!({"playbook": playbook, "error": error}),
        (None, None) => Value::Null,
    };
    let mut values = Vec::new();
    for (single, flavor) in singles.into_iter().zip(flavors) {
        let mut value = single.finish(ctx).await;
        value["playbook"] = json!(playbook);
        value["binary"] = json!(flavor.label);
        values.push(value);
    }
    (floor_value, values)
}

/// Bare `ansible-runner run` of a playbook with the operator's command line, inventory and extra
/// vars shape.
struct Floor {
    namespace: String,
    api: kube::Api<kube::api::DynamicObject>,
    dir: PathBuf,
    path: std::ffi::OsString,
    playbook: PathBuf,
    walls: Vec<f64>,
    records: Vec<Value>,
    error: Option<String>,
}

impl Floor {
    async fn new(ctx: &Ctx, playbook: &str) -> anyhow::Result<Self> {
        let namespace = cluster::create_namespace(&ctx.client, &format!("bench-floor-{playbook}")).await?;
        let dir = ctx.scratch(&format!("floor-{playbook}"));
        std::fs::create_dir_all(dir.join("env"))?;
        std::fs::create_dir_all(dir.join("inventory"))?;
        let python = ctx.venv.join("bin/python3");
        std::fs::write(
            dir.join("inventory/hosts"),
            format!("localhost ansible_connection=local ansible_python_interpreter={}\n", python.display()),
        )?;
        let path = std::env::join_paths(
            [ctx.venv.join("bin")]
                .into_iter()
                .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )?;
        let playbook = ctx.playbook(playbook);
        let api = cluster::crs(&ctx.client, &namespace);
        Ok(Self { namespace, api, dir, path, playbook, walls: Vec::new(), records: Vec::new(), error: None })
    }

    /// Run `i` (0 is the warm-up).
    async fn run(&mut self, ctx: &Ctx, i: usize) -> anyhow::Result<()> {
        let dir = &self.dir;
        let name = format!("floor-{i:04}");
        let ident = format!("run{i}");
        let extra = json!({"ansible_operator_meta": {"name": name, "namespace": self.namespace}});
        std::fs::write(dir.join("env/extravars"), serde_json::to_vec(&extra)?)?;
        // The CR the run is "for" exists, as in an operator's run (`k8s5` writes its status); no
        // operator watches this namespace.
        cluster::create_cr(&self.api, &name, i).await?;
        let start = now();
        let mut child = tokio::process::Command::new(ctx.venv.join("bin/ansible-runner"))
            .arg("run")
            .arg(dir)
            .args(["--rotate-artifacts", "20", "-p"])
            .arg(&self.playbook)
            .args(["-i", &ident, "-j", "-vv"])
            .env("PATH", &self.path)
            .env("VIRTUAL_ENV", &ctx.venv)
            .env("KUBECONFIG", &ctx.kubeconfig)
            .env("K8S_AUTH_KUBECONFIG", &ctx.kubeconfig)
            .env("PYTHONUNBUFFERED", "1")
            .env("ANSIBLE_NOCOLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("start ansible-runner")?;
        let mut stdout = String::new();
        child.stdout.take().expect("piped").read_to_string(&mut stdout).await?;
        let status = child.wait().await?;
        let wall = now() - start;
        let ok = status.success()
            && stdout.contains("\"playbook_on_stats\"")
            && !stdout.contains("\"runner_on_failed\"");
        if !ok {
            let tail: Vec<&str> = stdout.lines().rev().take(5).collect();
            bail!("ansible-runner run {i} of {} failed ({status}): {tail:?}", self.playbook.display());
        }
        let mut phases = phases::read(dir, Some(&ident));
        if let Some(p) = phases.as_mut() {
            p.input_written = start;
        }
        if i > 0 {
            self.walls.push(wall);
        }
        self.records.push(json!({
            "run": i, "warmup": i == 0, "wall": wall,
            "phases": phases.map(|p| p.json()), "exited": start + wall,
        }));
        Ok(())
    }

    async fn finish(self, ctx: &Ctx, playbook: &str) -> Value {
        cluster::delete_namespace(&ctx.client, &self.namespace, Duration::from_secs(60)).await;
        if let Some(error) = self.error {
            return json!({"playbook": playbook, "error": error});
        }
        let summary = Summary::of(&self.walls);
        eprintln!("bench: floor {playbook}: median {:.3} s, p95 {:.3} s", summary.median, summary.p95);
        json!({"playbook": playbook, "wall": summary.json(), "runs": self.records})
    }
}

/// One operator (`--max-concurrent-reconciles=1`) and the CRs created for it one at a time.
struct Single {
    label: String,
    namespace: String,
    api: kube::Api<kube::api::DynamicObject>,
    tracker: Option<Tracker>,
    operator: Option<Operator>,
    latencies: Vec<f64>,
    records: Vec<Value>,
    /// The operator's tree memory after the runs.
    at_rest: Option<TreeMemory>,
    /// Set when something failed; no more runs then.
    error: Option<String>,
}

impl Single {
    /// Creates the namespace and starts the operator; failures end up in `error`.
    async fn new(ctx: &Ctx, flavor: &Flavor, playbook: &str) -> Self {
        let label = format!("single-{playbook}-{}", flavor.label);
        let namespace = cluster::create_namespace(&ctx.client, &format!("bench-single-{playbook}")).await;
        let mut single = Self {
            label,
            api: cluster::crs(&ctx.client, namespace.as_deref().unwrap_or("default")),
            namespace: namespace.as_ref().map_or_else(|_| String::new(), Clone::clone),
            tracker: None,
            operator: None,
            latencies: Vec::new(),
            records: Vec::new(),
            at_rest: None,
            error: None,
        };
        let started = match namespace {
            Ok(_) => single.start(ctx, flavor, playbook).await,
            Err(error) => Err(error),
        };
        if let Err(error) = started {
            single.error = Some(format!("{error:#}"));
        }
        single
    }

    async fn start(&mut self, ctx: &Ctx, flavor: &Flavor, playbook: &str) -> anyhow::Result<()> {
        let single = self;
        single.tracker = Some(Tracker::start(single.api.clone()).await?);
        let dir = ctx.scratch(&single.label);
        let launch = Launch {
            namespace: &single.namespace,
            playbook: &ctx.playbook(playbook),
            concurrency: 1,
            reconcile_period: None,
            dir: &dir,
            path_prefix: None,
            args: Vec::new(),
            env: Vec::new(),
            watch_extra: None,
        };
        single.operator = Some(Operator::start(flavor, &launch, &ctx.kubeconfig, &ctx.repo)?);
        Ok(())
    }

    /// CR `i` (0 is the warm-up): create, wait for `Successful`, read its run's milestones.
    async fn run(&mut self, i: usize) -> anyhow::Result<()> {
        let (Some(tracker), Some(operator)) = (self.tracker.as_ref(), self.operator.as_mut()) else {
            bail!("not started");
        };
        let name = if i == 0 { "warmup".to_string() } else { format!("single-{i:04}") };
        let created = now();
        cluster::create_cr(&self.api, &name, i).await?;
        let stall = Duration::from_secs(if i == 0 { 120 } else { 60 });
        await_all(tracker, std::slice::from_ref(&name), created, std::slice::from_mut(operator), stall)
            .await?;
        let track = tracker.get(&name);
        let successful = track.successful_since(created).unwrap_or(f64::NAN);
        let phases = phases::read(&cr_runner_dir(&operator.runner_dir, &self.namespace, &name), None);
        if i > 0 {
            self.latencies.push(successful - created);
        }
        self.records.push(json!({
            "name": name, "warmup": i == 0, "created": created, "seen": track.seen,
            "running": track.running_since(created), "successful": successful,
            "latency": successful - created, "phases": phases.map(|p| p.json()),
        }));
        Ok(())
    }

    async fn finish(mut self, ctx: &Ctx) -> Value {
        // Runs the watch saw beyond one per CR: follow-up reconciles (a changed dependent, for
        // example) that overlapped later measurements.
        let follow_ups: usize = self.tracker.as_ref().map_or(0, |tracker| {
            let names = self.records.iter().filter_map(|r| r["name"].as_str());
            names.map(|name| tracker.get(name).running.len().saturating_sub(1)).sum()
        });
        if let Some(mut operator) = self.operator.take() {
            operator.stop(Duration::from_secs(30));
            ctx.keep_log(&operator, &self.label);
        }
        self.tracker = None;
        if !self.namespace.is_empty() {
            cluster::delete_namespace(&ctx.client, &self.namespace, Duration::from_secs(60)).await;
        }
        if let Some(error) = self.error {
            return json!({"error": error, "runs": self.records, "follow_up_runs": follow_ups});
        }
        let summary = Summary::of(&self.latencies);
        eprintln!("bench: {} : median {:.3} s, p95 {:.3} s", self.label, summary.median, summary.p95);
        let at_rest = self.at_rest.map(|m| {
            let mut value = m.json();
            value["after_seconds"] = json!(AT_REST_AFTER.as_secs_f64());
            value
        });
        if follow_ups > 0 {
            eprintln!("bench: {}: {follow_ups} follow-up runs overlapped the measurements", self.label);
        }
        json!({"latency": summary.json(), "runs": self.records, "at_rest": at_rest, "follow_up_runs": follow_ups})
    }
}

/// Medians of the phases of single-CR runs (ms), and of the floor's.
pub fn breakdown(single: &Value, floor: &Value) -> Value {
    let runs = |v: &Value| v["runs"].as_array().cloned().unwrap_or_default();
    let measured = |v: &Value| runs(v).into_iter().filter(|r| r["warmup"] != true).collect::<Vec<_>>();
    let phase = |r: &Value, key: &str| r["phases"][key].as_f64().unwrap_or(f64::NAN);
    let med = |values: Vec<f64>| {
        let summary = Summary::of(&values);
        if summary.n == 0 { f64::NAN } else { summary.median * 1000.0 }
    };
    let single_runs = measured(single);
    let col = |f: &dyn Fn(&Value) -> f64| med(single_runs.iter().map(f).collect());
    let created = |r: &Value| r["created"].as_f64().unwrap_or(f64::NAN);
    let floor_runs = measured(floor);
    let fcol = |f: &dyn Fn(&Value) -> f64| med(floor_runs.iter().map(f).collect());
    json!({
        "operator": {
            "create_to_watch_event": col(&|r| r["seen"].as_f64().unwrap_or(f64::NAN) - created(r)),
            "create_to_running_status_seen": col(&|r| r["running"].as_f64().unwrap_or(f64::NAN) - created(r)),
            "create_to_runner_spawn": col(&|r| phase(r, "input_written") - created(r)),
            "spawn_to_runner_started": col(&|r| phase(r, "runner_started") - phase(r, "input_written")),
            "runner_started_to_first_event": col(&|r| phase(r, "first_event") - phase(r, "runner_started")),
            "first_event_to_stats": col(&|r| phase(r, "stats") - phase(r, "first_event")),
            "stats_to_runner_done": col(&|r| phase(r, "runner_done") - phase(r, "stats")),
            "runner_done_to_successful_seen": col(&|r| r["successful"].as_f64().unwrap_or(f64::NAN) - phase(r, "runner_done")),
            "runtime_overhead": col(&|r| (phase(r, "input_written") - created(r))
                + (r["successful"].as_f64().unwrap_or(f64::NAN) - phase(r, "runner_done"))),
            "ansible": col(&|r| phase(r, "runner_done") - phase(r, "input_written")),
            "total": col(&|r| r["latency"].as_f64().unwrap_or(f64::NAN)),
        },
        "floor": {
            "spawn_to_runner_started": fcol(&|r| phase(r, "runner_started") - phase(r, "input_written")),
            "runner_started_to_first_event": fcol(&|r| phase(r, "first_event") - phase(r, "runner_started")),
            "first_event_to_stats": fcol(&|r| phase(r, "stats") - phase(r, "first_event")),
            "stats_to_runner_done": fcol(&|r| phase(r, "runner_done") - phase(r, "stats")),
            "runner_done_to_exit_seen": fcol(&|r| r["exited"].as_f64().unwrap_or(f64::NAN) - phase(r, "runner_done")),
            "total": fcol(&|r| r["wall"].as_f64().unwrap_or(f64::NAN)),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// 3. Burst

/// `n` CRs created at once (50 requests in flight) against a warmed-up operator.
pub async fn burst(ctx: &Ctx, flavor: &Flavor, playbook: &str, n: usize, concurrency: usize) -> Value {
    let label = format!("burst-c{concurrency}-{}", flavor.label);
    let mut value = in_namespace(ctx, &format!("bench-burst-c{concurrency}"), async |namespace| {
        burst_in(ctx, flavor, playbook, n, concurrency, namespace, &label).await
    })
    .await;
    value["binary"] = json!(flavor.label);
    value["playbook"] = json!(playbook);
    value["n"] = json!(n);
    value["concurrency"] = json!(concurrency);
    value
}

async fn burst_in(
    ctx: &Ctx,
    flavor: &Flavor,
    playbook: &str,
    n: usize,
    concurrency: usize,
    namespace: &str,
    label: &str,
) -> anyhow::Result<Value> {
    let api = cluster::crs(&ctx.client, namespace);
    let tracker = Tracker::start(api.clone()).await?;
    let dir = ctx.scratch(label);
    let launch = Launch {
        namespace,
        playbook: &ctx.playbook(playbook),
        concurrency,
        reconcile_period: None,
        dir: &dir,
        path_prefix: None,
        args: Vec::new(),
        env: Vec::new(),
        watch_extra: None,
    };
    let mut operator = Operator::start(flavor, &launch, &ctx.kubeconfig, &ctx.repo)?;
    let result = async {
        let warmup = ["warmup".to_string()];
        let created = now();
        cluster::create_cr(&api, "warmup", 0).await?;
        await_all(&tracker, &warmup, created, std::slice::from_mut(&mut operator), Duration::from_secs(120)).await?;

        let sampler = Sampler::start(operator.pid(), Duration::from_millis(100), true);
        let cpu_before = TreeCpu::read(operator.pid());
        let crs = names("burst", n);
        let start = now();
        let create_secs = cluster::create_many(&api, &crs, 50).await?;
        let waited = await_all(&tracker, &crs, start, std::slice::from_mut(&mut operator), Duration::from_secs(120)).await;
        let cpu = TreeCpu::read(operator.pid()).since(cpu_before);
        let peaks = sampler.finish();
        waited?;
        let latencies: Vec<f64> =
            tracker.get_all(&crs).iter().map(|t| t.successful_since(start).unwrap_or(f64::NAN) - start).collect();
        let wall = latencies.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "bench: burst n={n} c={concurrency} ({}): {wall:.1} s, {:.2} runs/s, operator RSS peak {:.1} MiB, tree {:.1} MiB",
            flavor.label,
            n as f64 / wall,
            peaks.operator_rss as f64 / MIB,
            peaks.tree_rss as f64 / MIB
        );
        Ok(json!({
            "create_seconds": create_secs,
            "wall_seconds": wall,
            "runs_per_second": n as f64 / wall,
            "completion_latency": Summary::of(&latencies).json(),
            "operator_cpu_seconds": cpu.root,
            "descendants_cpu_seconds": cpu.descendants,
            "memory": peaks.json(),
        }))
    }
    .await;
    operator.stop(Duration::from_secs(30));
    ctx.keep_log(&operator, label);
    result
}

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------
// 4. Scale at rest

/// How the scale scenario's runs are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScaleRunner {
    /// A stub ansible-runner that prints a successful run's events (the runtime alone).
    Stub,
    /// The real ansible-runner with `--scale-playbook`.
    Real,
}

impl ScaleRunner {
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleRunner::Stub => "stub",
            ScaleRunner::Real => "real",
        }
    }
}

/// The scale and restart scenarios' playbook (with the real runner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScalePlaybook {
    /// `playbooks/debug.yml`: one `debug` task.
    Debug,
    /// `playbooks/dependents.yml`: three ConfigMaps per CR, owned by it.
    Dependents,
}

impl ScalePlaybook {
    pub fn as_str(self) -> &'static str {
        match self {
            ScalePlaybook::Debug => "debug",
            ScalePlaybook::Dependents => "dependents",
        }
    }
}

/// The watch's `reconcilePeriod` in the scale and restart scenarios: long, so that no periodic
/// resync falls inside a measurement.
pub const SCALE_RECONCILE_PERIOD: &str = "1h";

/// One run of the scale scenario.
#[derive(Debug, Clone)]
pub struct Scale {
    /// CRs.
    pub n: usize,
    /// `--max-concurrent-reconciles`.
    pub concurrency: usize,
    /// How long the converged operator is left alone.
    pub idle: Duration,
    /// Without a restart plan: restart the operator and time until all are `Successful` again.
    pub restart: bool,
    pub runner: ScaleRunner,
    pub playbook: ScalePlaybook,
    /// Flags for our operator only (`--resync-jitter`, `--max-resyncs-per-second`).
    pub ours_args: Vec<String>,
}

/// Why a flavor (our `executor`, or `None` for the baseline) cannot run the scale scenario with
/// `runner`, if it cannot.
pub fn scale_skip(executor: Option<Executor>, runner: ScaleRunner) -> Option<&'static str> {
    match (runner, executor) {
        (ScaleRunner::Real, _) | (ScaleRunner::Stub, Some(Executor::Cold)) => None,
        (ScaleRunner::Stub, Some(Executor::Warm)) => Some(
            "a warm run is forked from the worker and never execs ansible-runner, so the stub cannot \
             stand in; use --scale-runner real",
        ),
        (ScaleRunner::Stub, None) => Some(
            "the stub runner prints events on stdout, which only our operator reads; use --scale-runner real",
        ),
    }
}

/// `spec.n` CRs created while no operator runs; start the operator and time until all are
/// `Successful`; then idle for `spec.idle` and measure the operator's RSS and CPU, and the tree's
/// memory at rest. Then, without `restart`, restart it and time until all are `Successful` again;
/// with `restart`, the restart scenario runs on this converged namespace instead (its rows are the
/// second value).
pub async fn scale(
    ctx: &Ctx,
    flavor: &Flavor,
    spec: &Scale,
    restart: Option<&restart::Plan>,
) -> (Value, Value) {
    let label = format!("scale{}-{}", spec.n, flavor.label);
    let mut value = in_namespace(ctx, "bench-scale", async |namespace| {
        scale_in(ctx, flavor, spec, restart, namespace, &label).await
    })
    .await;
    let restart_rows = value.as_object_mut().and_then(|v| v.remove("restart_rows")).unwrap_or_default();
    value["binary"] = json!(flavor.label);
    value["n"] = json!(spec.n);
    value["concurrency"] = json!(spec.concurrency);
    value["runner"] = json!(spec.runner.as_str());
    value["playbook"] = json!(spec.playbook.as_str());
    value["idle_seconds"] = json!(spec.idle.as_secs_f64());
    (value, restart_rows)
}

async fn scale_in(
    ctx: &Ctx,
    flavor: &Flavor,
    spec: &Scale,
    restart: Option<&restart::Plan>,
    namespace: &str,
    label: &str,
) -> anyhow::Result<Value> {
    let n = spec.n;
    let api = cluster::crs(&ctx.client, namespace);
    let tracker = Tracker::start(api.clone()).await?;
    let dir = ctx.scratch(label);
    let stub = ctx.bench.join("stub");
    let playbook = ctx.playbook(spec.playbook.as_str());
    let launch = Launch {
        namespace,
        playbook: &playbook,
        concurrency: spec.concurrency,
        reconcile_period: Some(SCALE_RECONCILE_PERIOD),
        dir: &dir,
        path_prefix: (spec.runner == ScaleRunner::Stub).then_some(stub.as_path()),
        args: if flavor.executor.is_some() { spec.ours_args.clone() } else { Vec::new() },
        env: Vec::new(),
        watch_extra: None,
    };

    // The operator watching an empty namespace, for comparison.
    let mut operator = Operator::start(flavor, &launch, &ctx.kubeconfig, &ctx.repo)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    operator.check_alive()?;
    let empty = settled_memory(&mut operator).await?;
    operator.stop(Duration::from_secs(30));
    drop(operator);

    let crs = names("scale", n);
    let create_secs = cluster::create_many(&api, &crs, 50).await?;
    eprintln!("bench: scale: created {n} CRs in {create_secs:.1} s");
    let stall = Duration::from_secs(120);

    // First start: nothing reconciled yet.
    let mut operator = Operator::start(flavor, &launch, &ctx.kubeconfig, &ctx.repo)?;
    let sampler = Sampler::start(operator.pid(), Duration::from_millis(250), false);
    let waited =
        await_all(&tracker, &crs, operator.started, std::slice::from_mut(&mut operator), stall).await;
    let converge_peaks = sampler.finish();
    if let Err(error) = waited {
        operator.stop(Duration::from_secs(30));
        ctx.keep_log(&operator, &format!("{label}-first"));
        return Err(error);
    }
    let first = last_successful(&tracker, &crs, operator.started) - operator.started;
    eprintln!("bench: scale ({}): first start to {n} Successful in {first:.1} s", flavor.label);

    // At rest.
    let rss_start = procfs::rss(operator.pid()).unwrap_or_default();
    let cpu_before = TreeCpu::read(operator.pid());
    let sampler = Sampler::start(operator.pid(), Duration::from_secs(1), false);
    tokio::time::sleep(spec.idle).await;
    let idle_cpu = TreeCpu::read(operator.pid()).since(cpu_before);
    let idle_peaks = sampler.finish();
    let at_rest = TreeMemory::read(operator.pid(), true).unwrap_or_default();
    let percent = |seconds: f64| seconds / spec.idle.as_secs_f64().max(f64::MIN_POSITIVE) * 100.0;
    let reruns_at_rest = tracker.count_successful(&crs, operator.started + first + 0.5);
    eprintln!(
        "bench: scale ({}): at rest after {:.0} s: operator RSS {:.1} MiB, tree PSS {:.1} MiB, CPU {:.2} %",
        flavor.label,
        spec.idle.as_secs_f64(),
        at_rest.root_rss as f64 / MIB,
        at_rest.tree_pss as f64 / MIB,
        percent(idle_cpu.root)
    );
    let mut value = json!({
        "create_seconds": create_secs,
        "operator_rss_no_crs_bytes": empty.root_rss,
        "no_crs": empty.json(),
        "first_start_to_all_successful_seconds": first,
        "runs_per_second": n as f64 / first,
        "first_start_memory": converge_peaks.json(),
        "at_rest": at_rest.json(),
        "idle": {
            "operator_rss_start_bytes": rss_start,
            "operator_rss_end_bytes": idle_peaks.last_operator_rss,
            "operator_rss_peak_bytes": idle_peaks.operator_rss,
            "operator_cpu_seconds": idle_cpu.root,
            "operator_cpu_percent": percent(idle_cpu.root),
            "descendants_cpu_seconds": idle_cpu.descendants,
            "descendants_cpu_percent": percent(idle_cpu.descendants),
            "reconciles_during_idle": reruns_at_rest,
        },
    });

    if let Some(plan) = restart {
        let converged = restart::Converged { api: &api, tracker: &tracker, crs, launch: &launch, label };
        value["restart_rows"] = restart::restarts(ctx, flavor, plan, converged, operator).await;
        value["restart"] = json!("restart scenario");
        return Ok(value);
    }
    let stop_secs = operator.stop(Duration::from_secs(30));
    ctx.keep_log(&operator, &format!("{label}-first"));
    drop(operator);
    value["stop_seconds"] = json!(stop_secs);
    if !spec.restart {
        value["restart"] = json!("skipped (--scale-restart false)");
        return Ok(value);
    }

    // Restart.
    let mut operator = Operator::start(flavor, &launch, &ctx.kubeconfig, &ctx.repo)?;
    let sampler = Sampler::start(operator.pid(), Duration::from_millis(250), false);
    let waited =
        await_all(&tracker, &crs, operator.started, std::slice::from_mut(&mut operator), stall).await;
    let restart_peaks = sampler.finish();
    let restart_cpu = procfs::cpu_seconds(operator.pid()).unwrap_or_default();
    operator.stop(Duration::from_secs(30));
    ctx.keep_log(&operator, &format!("{label}-restart"));
    waited?;
    let tracks = tracker.get_all(&crs);
    let restarted = operator.started;
    let restart_first =
        tracks.iter().filter_map(|t| t.successful_since(restarted)).fold(f64::INFINITY, f64::min) - restarted;
    let restart = last_successful(&tracker, &crs, restarted) - restarted;
    eprintln!("bench: scale ({}): restart to {n} Successful in {restart:.1} s", flavor.label);
    value["restart_to_first_successful_seconds"] = json!(restart_first);
    value["restart_to_all_successful_seconds"] = json!(restart);
    value["restart_operator_cpu_seconds"] = json!(restart_cpu.0);
    value["restart_memory"] = restart_peaks.json();
    Ok(value)
}

/// The operator tree's memory once it has stopped changing (for `warm`, once the worker is up):
/// two readings 1 s apart with the same processes and a tree PSS within 2 %, or the last reading
/// after 15 s.
async fn settled_memory(operator: &mut Operator) -> anyhow::Result<TreeMemory> {
    let mut last = TreeMemory::read(operator.pid(), true).unwrap_or_default();
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        operator.check_alive()?;
        let now = TreeMemory::read(operator.pid(), true).unwrap_or_default();
        let steady = now.processes == last.processes
            && (now.tree_pss as f64 - last.tree_pss as f64).abs() <= 0.02 * last.tree_pss as f64;
        last = now;
        if steady {
            break;
        }
    }
    Ok(last)
}

/// How time and memory grow with the number of CRs, per flavor, between the smallest and the
/// largest size of the scale rows that succeeded (fewer than two sizes: no growth, only the
/// empty namespace).
pub fn growth(rows: &[Value]) -> Vec<Value> {
    let mut flavors: Vec<&str> = Vec::new();
    for row in rows {
        if let Some(label) = row["binary"].as_str().filter(|l| !flavors.contains(l)) {
            flavors.push(label);
        }
    }
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    flavors
        .into_iter()
        .map(|label| {
            let mut ok: Vec<&Value> = rows
                .iter()
                .filter(|r| r["binary"] == label && r["error"].is_null() && r["skipped"].is_null())
                .collect();
            ok.sort_by_key(|r| r["n"].as_u64().unwrap_or_default());
            let mut value = json!({"binary": label});
            if let Some(first) = ok.first() {
                value["no_crs"] = first["no_crs"].clone();
            }
            if let (Some(small), Some(large)) = (ok.first(), ok.last())
                && large["n"].as_u64() > small["n"].as_u64()
            {
                let extra = num(&large["n"]) - num(&small["n"]);
                let per = |key: &dyn Fn(&Value) -> f64| (key(large) - key(small)) / extra;
                value["from_n"] = small["n"].clone();
                value["to_n"] = large["n"].clone();
                value["seconds_per_extra_cr"] =
                    json!(per(&|r| num(&r["first_start_to_all_successful_seconds"])));
                value["operator_rss_kib_per_extra_cr"] =
                    json!(per(&|r| num(&r["at_rest"]["operator_rss_bytes"])) / 1024.0);
                value["tree_pss_kib_per_extra_cr"] =
                    json!(per(&|r| num(&r["at_rest"]["tree_pss_bytes"])) / 1024.0);
            }
            value
        })
        .collect()
}

pub fn last_successful(tracker: &Tracker, names: &[String], since: f64) -> f64 {
    tracker.get_all(names).iter().filter_map(|t| t.successful_since(since)).fold(f64::NAN, f64::max)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ScaleRunner, growth, scale_skip};
    use crate::operator::Executor;

    fn row(binary: &str, n: u64, seconds: f64, rss_mib: u64, pss_mib: u64) -> serde_json::Value {
        json!({
            "binary": binary, "n": n, "first_start_to_all_successful_seconds": seconds,
            "no_crs": {"operator_rss_bytes": 1},
            "at_rest": {"operator_rss_bytes": rss_mib << 20, "tree_pss_bytes": pss_mib << 20},
        })
    }

    #[test]
    fn growth_is_per_extra_cr_between_the_smallest_and_largest_size_of_each_flavor() {
        let rows = [
            row("warm", 2000, 300.0, 50, 130),
            row("warm", 500, 75.0, 35, 115),
            row("baseline", 500, 600.0, 80, 90),
            json!({"binary": "baseline", "n": 2000, "error": "stalled"}),
        ];
        let growth = growth(&rows);
        assert_eq!(growth.len(), 2);
        let warm = &growth[0];
        assert_eq!(
            (warm["binary"].as_str(), warm["from_n"].as_u64(), warm["to_n"].as_u64()),
            (Some("warm"), Some(500), Some(2000))
        );
        assert_eq!(warm["seconds_per_extra_cr"], 0.15);
        assert_eq!(warm["operator_rss_kib_per_extra_cr"], 15.0 * 1024.0 / 1500.0);
        assert_eq!(warm["tree_pss_kib_per_extra_cr"], 15.0 * 1024.0 / 1500.0);
        assert_eq!(warm["no_crs"]["operator_rss_bytes"], 1);
        // One size that succeeded: the empty namespace, no growth.
        assert_eq!(growth[1]["binary"], "baseline");
        assert!(growth[1]["seconds_per_extra_cr"].is_null());
        assert_eq!(growth[1]["no_crs"]["operator_rss_bytes"], 1);
    }

    #[test]
    fn the_stub_runner_serves_only_the_cold_executor() {
        assert_eq!(scale_skip(Some(Executor::Cold), ScaleRunner::Stub), None);
        assert!(
            scale_skip(Some(Executor::Warm), ScaleRunner::Stub).is_some_and(|r| r.contains("never execs"))
        );
        assert!(scale_skip(None, ScaleRunner::Stub).is_some_and(|r| r.contains("stdout")));
        for executor in [Some(Executor::Warm), Some(Executor::Cold), None] {
            assert_eq!(scale_skip(executor, ScaleRunner::Real), None);
        }
    }
}
