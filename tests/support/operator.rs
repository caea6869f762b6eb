//! The real `ansible-operator` binary, run as a subprocess against the test cluster with the
//! project's Ansible venv, scoped to one namespace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{kubeconfig, repo};

/// What the operator logs when its warm Ansible worker is ready.
pub const WORKER_READY: &str = "warm Ansible worker ready";

/// A running operator; stopped (SIGTERM, then SIGKILL) when dropped. Its log is kept in `log_path`.
pub struct Operator {
    child: Child,
    /// Working directory holding watches.yaml, the runner directory and the log.
    pub dir: PathBuf,
}

/// How to start an operator.
pub struct OperatorConfig<'a> {
    /// Text of watches.yaml (may use `{fixtures}` for the fixtures directory).
    pub watches: &'a str,
    /// Namespaces to watch (`WATCH_NAMESPACE`).
    pub namespace: &'a str,
    /// Further flags.
    pub args: Vec<String>,
    /// Further environment.
    pub env: Vec<(String, String)>,
    /// Run in this directory with its own `watches.yaml` instead of writing `watches`.
    pub project: Option<PathBuf>,
    /// Start without locale variables (LANG, LANGUAGE, LC_*).
    pub c_locale: bool,
    /// Start in this cgroup (its directory).
    pub cgroup: Option<PathBuf>,
}

impl<'a> OperatorConfig<'a> {
    /// An operator on `watches` watching `namespace`.
    pub fn new(watches: &'a str, namespace: &'a str) -> Self {
        Self {
            watches,
            namespace,
            args: Vec::new(),
            env: Vec::new(),
            project: None,
            c_locale: false,
            cgroup: None,
        }
    }

    /// An operator on an existing project directory (its `watches.yaml`, roles and playbooks).
    pub fn project(project: PathBuf, namespace: &'a str) -> Self {
        Self { project: Some(project), ..Self::new("", namespace) }
    }

    /// Adds a flag.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Starts it without locale variables, in the C locale, as `env -i` or a systemd service
    /// without `Environment=LANG=...` would.
    pub fn c_locale(mut self) -> Self {
        self.c_locale = true;
        self
    }

    /// Starts it in the cgroup `dir` (see `support::cgroup`): its processes and their memory are
    /// that cgroup's from the start.
    pub fn in_cgroup(mut self, dir: &Path) -> Self {
        self.cgroup = Some(dir.to_path_buf());
        self
    }

    /// Starts the operator.
    pub fn start(self) -> Operator {
        let dir = scratch_dir(self.namespace);
        let cwd = match &self.project {
            Some(project) => project.clone(),
            None => {
                let watches = self.watches.replace("{fixtures}", &fixtures().display().to_string());
                std::fs::write(dir.join("watches.yaml"), watches).expect("write watches.yaml");
                dir.clone()
            }
        };
        let log = std::fs::File::create(dir.join("operator.log")).expect("create operator log");
        let mut command = command(&cwd);
        if self.c_locale {
            for (name, _) in std::env::vars() {
                if name == "LANG" || name == "LANGUAGE" || name.starts_with("LC_") {
                    command.env_remove(name);
                }
            }
        }
        command
            .args(["run", "--watches-file=watches.yaml", "--zap-devel"])
            .arg(format!("--runner-dir={}", dir.join("runner").display()))
            .args(default_ports(&self.args))
            .args(&self.args)
            .env("WATCH_NAMESPACE", self.namespace)
            .envs(self.env);
        if let Some(cgroup) = &self.cgroup {
            command = joining_cgroup(&command, cgroup);
        }
        let child = command
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .expect("start ansible-operator");
        Operator { child, dir }
    }
}

impl Operator {
    /// The operator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Path of the operator's combined stdout and stderr.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("operator.log")
    }

    /// The operator's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The CR's runner data directory.
    pub fn runner_dir(&self, group: &str, kind: &str, namespace: &str, name: &str) -> PathBuf {
        self.dir.join("runner").join(group).join("v1alpha1").join(kind).join(namespace).join(name)
    }

    /// Runs of the CR so far: ansible-runner's artifact directories (20 kept by default).
    pub fn runs(&self, group: &str, kind: &str, namespace: &str, name: &str) -> usize {
        let artifacts = self.runner_dir(group, kind, namespace, name).join("artifacts");
        std::fs::read_dir(artifacts)
            .map(|entries| {
                entries.filter_map(Result::ok).filter(|entry| entry.file_name() != "latest").count()
            })
            .unwrap_or(0)
    }

    /// SIGKILL: the process dies without cleaning up, as on a node failure.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits as long as the operator's stop can take: runs in flight get its
    /// graceful shutdown (30 s), then their kill its grace (5 s). A CR that failed is retried with
    /// backoff, so a run may be in flight at any stop.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.terminate(Duration::from_secs(50))
    }

    /// Sends SIGTERM and waits (up to `timeout`) for the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if self.terminate(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- operator log ({}) ----\n{}", self.log_path().display(), self.log());
        }
    }
}

/// Flags that let operators run side by side: an OS-chosen proxy port and no metrics, user-metrics
/// or probe listeners, unless the test sets them.
fn default_ports(args: &[String]) -> Vec<String> {
    let defaults = [
        ("--proxy-port", "0"),
        ("--metrics-bind-address", "0"),
        ("--health-probe-bind-address", "0"),
        ("--user-metrics-bind-address", "0"),
        ("--api-bind-address", "0"),
    ];
    defaults
        .iter()
        .filter(|(flag, _)| !args.iter().any(|a| a.starts_with(flag)))
        .map(|(flag, value)| format!("{flag}={value}"))
        .collect()
}

/// `command` run by a shell that first moves itself into `cgroup`, then execs it.
fn joining_cgroup(command: &Command, cgroup: &Path) -> Command {
    let mut shell = Command::new("sh");
    shell
        .args(["-c", r#"echo $$ > "$0/cgroup.procs" && exec "$@""#])
        .arg(cgroup)
        .arg(command.get_program())
        .args(command.get_args())
        .stdin(Stdio::null());
    if let Some(dir) = command.get_current_dir() {
        shell.current_dir(dir);
    }
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => shell.env(name, value),
            None => shell.env_remove(name),
        };
    }
    shell
}

/// The operator binary with the test cluster and the project's venv in its environment.
pub fn command(dir: &Path) -> Command {
    let venv = venv();
    let path = format!(
        "{}:{}:{}",
        venv.join("bin").display(),
        repo().join(".local/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_ansible-operator"));
    command
        .current_dir(dir)
        .env("KUBECONFIG", kubeconfig())
        .env("PATH", path)
        .env("VIRTUAL_ENV", &venv)
        .env_remove("WATCH_NAMESPACE")
        .env_remove("ANSIBLE_INVENTORY")
        .stdin(Stdio::null());
    command
}

/// The Ansible venv the operator runs playbooks with: `ANSIBLE_OPERATOR_TEST_VENV` (the newer
/// toolchain's slice in `make test`), else `<repo>/.venv`.
pub fn venv() -> PathBuf {
    std::env::var_os("ANSIBLE_OPERATOR_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| repo().join(".venv"))
}

/// `tests/fixtures`.
pub fn fixtures() -> PathBuf {
    repo().join("tests/fixtures")
}

/// A fresh directory under the target dir for one operator run.
pub fn scratch_dir(label: &str) -> PathBuf {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let count = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = repo().join("target/test-operators").join(format!("{label}-{}-{count}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}
