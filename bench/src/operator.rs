//! An `ansible-operator` binary run as a subprocess, scoped to one namespace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::cluster::{GROUP, KIND, VERSION};
use crate::now;

/// Our operator's `--ansible-executor`: each is a flavor of its own in the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Executor {
    /// Runs forked from the operator's long-lived Python worker.
    Warm,
    /// An `ansible-runner` child process per run.
    Cold,
}

impl Executor {
    /// The flag value, also the flavor's label.
    pub fn as_str(self) -> &'static str {
        match self {
            Executor::Warm => "warm",
            Executor::Cold => "cold",
        }
    }
}

/// Which operator binary, and how it is run.
#[derive(Debug, Clone)]
pub struct Flavor {
    /// `warm`, `cold` (ours with that executor) or `baseline`.
    pub label: String,
    /// Our executor; `None` for the baseline.
    pub executor: Option<Executor>,
    /// The binary.
    pub binary: PathBuf,
    /// The Python venv whose `bin/` goes first on `PATH` (ansible-runner, ansible-playbook).
    pub venv: PathBuf,
    /// Proxy port: 0 for ours (OS-chosen); upstream writes its flag value into the playbooks'
    /// kubeconfig, so it needs a fixed free port.
    pub proxy_port: u16,
    /// Whether the binary takes `--runner-dir` (ours); without it, `/tmp/ansible-operator/runner`
    /// (upstream's fixed location).
    pub runner_dir_flag: bool,
    /// The flags `run --help` lists.
    pub flags: Vec<String>,
    /// Further flags for every start (`--ansible-executor`, then `--operator-arg` / `--baseline-arg`).
    pub extra_args: Vec<String>,
}

impl Flavor {
    /// Whether `run --help` lists `flag` (`--startup-resync`, for example).
    pub fn knows(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

impl Flavor {
    /// Our binary with `executor`; fails when it needs `--ansible-executor` and the binary lacks it
    /// (an older build: only `cold` exists there, and runs without the flag).
    pub fn ours(
        executor: Executor,
        binary: &Path,
        venv: &Path,
        extra_args: Vec<String>,
    ) -> anyhow::Result<Self> {
        let mut flavor = Self::new(executor.as_str(), binary, venv, 0, Vec::new());
        flavor.executor = Some(executor);
        if flavor.flags.iter().any(|f| f == "--ansible-executor") {
            flavor.extra_args.push(format!("--ansible-executor={}", executor.as_str()));
        } else if executor == Executor::Warm {
            anyhow::bail!(
                "{} has no --ansible-executor flag (no warm executor); use --executors cold",
                binary.display()
            );
        }
        flavor.extra_args.extend(extra_args);
        Ok(flavor)
    }

    /// Another binary (upstream's) with its venv and fixed proxy port.
    pub fn baseline(binary: &Path, venv: &Path, proxy_port: u16, extra_args: Vec<String>) -> Self {
        Self::new("baseline", binary, venv, proxy_port, extra_args)
    }

    /// A binary with its venv; the flags it knows come from `run --help`.
    fn new(label: &str, binary: &Path, venv: &Path, proxy_port: u16, extra_args: Vec<String>) -> Self {
        let flags = known_flags(binary);
        Self {
            label: label.to_string(),
            executor: None,
            binary: binary.to_path_buf(),
            venv: venv.to_path_buf(),
            proxy_port,
            runner_dir_flag: flags.iter().any(|f| f == "--runner-dir"),
            flags,
            extra_args,
        }
    }
}

/// The flags `<binary> run --help` lists.
pub fn known_flags(binary: &Path) -> Vec<String> {
    let Ok(output) = Command::new(binary).args(["run", "--help"]).output() else {
        return Vec::new();
    };
    let text =
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    let mut flags: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c == '=' || c == ',' || c == '[')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()).to_string())
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

/// What to run.
#[derive(Clone)]
pub struct Launch<'a> {
    /// Namespace to watch.
    pub namespace: &'a str,
    /// Playbook for the `Bench` kind.
    pub playbook: &'a Path,
    /// `--max-concurrent-reconciles`.
    pub concurrency: usize,
    /// The watch's `reconcilePeriod` (a Go duration such as `1h`); the binary's default when `None`.
    pub reconcile_period: Option<&'a str>,
    /// Directory for watches.yaml, the runner dir and the log.
    pub dir: &'a Path,
    /// Directory put first on `PATH` (the stub ansible-runner), if any.
    pub path_prefix: Option<&'a Path>,
    /// Extra flags.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// More keys of the watch entry (YAML lines indented by two), if any.
    pub watch_extra: Option<String>,
}

/// A running operator. Stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Operator {
    child: Child,
    /// Unix time just before the spawn.
    pub started: f64,
    /// The combined stdout/stderr log.
    pub log: PathBuf,
    /// Where the per-CR runner directories go.
    pub runner_dir: PathBuf,
}

impl Operator {
    /// Writes watches.yaml and starts the operator.
    pub fn start(flavor: &Flavor, launch: &Launch, kubeconfig: &Path, repo: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(launch.dir)?;
        let watches = launch.dir.join("watches.yaml");
        let mut entry = format!(
            "- version: {VERSION}\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {}\n",
            launch.playbook.display()
        );
        if let Some(period) = launch.reconcile_period {
            entry.push_str(&format!("  reconcilePeriod: {period}\n"));
        }
        entry.push_str(launch.watch_extra.as_deref().unwrap_or_default());
        std::fs::write(&watches, entry)?;
        let runner_dir = if flavor.runner_dir_flag {
            launch.dir.join("runner")
        } else {
            PathBuf::from("/tmp/ansible-operator/runner")
        };
        let log = launch.dir.join("operator.log");
        let log_file = std::fs::File::create(&log)?;
        let mut path = Vec::new();
        if let Some(prefix) = launch.path_prefix {
            path.push(prefix.to_path_buf());
        }
        path.push(flavor.venv.join("bin"));
        path.push(repo.join(".local/bin"));
        path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
        let mut command = Command::new(&flavor.binary);
        command
            .current_dir(launch.dir)
            .arg("run")
            .arg(format!("--watches-file={}", watches.display()))
            .arg(format!("--max-concurrent-reconciles={}", launch.concurrency))
            .arg(format!("--proxy-port={}", flavor.proxy_port))
            .args(&launch.args)
            .args(&flavor.extra_args)
            .env("PATH", std::env::join_paths(path)?)
            .env("VIRTUAL_ENV", &flavor.venv)
            .env("KUBECONFIG", kubeconfig)
            .env("WATCH_NAMESPACE", launch.namespace)
            .env_remove("ANSIBLE_INVENTORY")
            .envs(launch.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        // Endpoints on fixed ports would collide with other operators on the machine: disable the
        // ones this binary knows, unless the scenario gave them an address.
        for flag in [
            "--health-probe-bind-address",
            "--metrics-bind-address",
            "--user-metrics-bind-address",
            "--api-bind-address",
        ] {
            let given = launch.args.iter().any(|arg| arg.starts_with(&format!("{flag}=")));
            if flavor.flags.iter().any(|f| f == flag) && !given {
                command.arg(format!("{flag}=0"));
            }
        }
        if flavor.runner_dir_flag {
            command.arg(format!("--runner-dir={}", runner_dir.display()));
        }
        if !launch.args.iter().chain(&flavor.extra_args).any(|a| a.starts_with("--zap")) {
            command.arg("--zap-log-level=info");
        }
        let started = now();
        let child = command.spawn().with_context(|| format!("start {}", flavor.binary.display()))?;
        Ok(Self { child, started, log, runner_dir })
    }

    /// The operator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the operator has already exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
            anyhow::bail!("the operator exited ({status}); log tail:\n{}", tail.join("\n"));
        }
        Ok(())
    }

    /// SIGKILL, as a node or a pod dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Returns the seconds until it exited.
    pub fn stop(&mut self, grace: Duration) -> f64 {
        let start = Instant::now();
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        while start.elapsed() < grace {
            if let Ok(Some(_)) = self.child.try_wait() {
                return start.elapsed().as_secs_f64();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        start.elapsed().as_secs_f64()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop(Duration::from_secs(10));
        }
    }
}
