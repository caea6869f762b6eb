//! Running ansible-runner: write the private data dir, start the process tree, follow its JSON
//! event stream, fold it into an [`Outcome`], and leave nothing running behind.

pub mod active;
pub mod artifacts;
pub mod event;
mod follow;
pub mod fs;
pub mod input_dir;
pub mod leftovers;
mod log_events;
pub mod masked;
pub mod process;
pub mod ssh;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

pub use input_dir::{Inventory, RunSpec};
pub use log_events::LogEvents;

use crate::executor::{self, Launch, Launcher};
use crate::go_duration;
use crate::history::live::Registration;
use crate::mask::{Masker, Secrets};
use crate::outcome::Outcome;
use active::ActiveRuns;
use process::ProcessTree;

/// Lines of non-event output kept to explain a run that produced no stats.
const OUTPUT_TAIL: usize = 40;

/// Longest line of the runner's output read into memory; the rest of a longer line is dropped and
/// a marker says how much. An event line holds a task's whole result, so this is generous; it bounds
/// what one task printing without a newline can cost the operator.
const MAX_LINE: usize = 8 << 20;

/// Process-wide settings of the runner.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `ansible-runner` executable (looked up on `PATH` when relative).
    pub program: PathBuf,
    /// Which events reach the log (`--ansible-log-events`).
    pub log_events: LogEvents,
    /// Raw event stdout instead of summaries (`ANSIBLE_VERBOSITY` > 0, as upstream).
    pub log_raw_stdout: bool,
    /// Print each run's full stdout afterwards (`ANSIBLE_DEBUG_LOGS`).
    pub debug_logs: bool,
    /// The runs in flight, for shutdown.
    pub active: Arc<ActiveRuns>,
    /// Starts each run on the executor its watch asks for.
    pub launcher: Arc<Launcher>,
}

/// Variables every run's ansible-runner gets on top of the operator's environment (the warm
/// worker is started with them too, so Ansible reads the same settings at import): the constant
/// ones, and the mark of this operator instance that lets its successor end leftover runs.
pub fn run_environment() -> Vec<(String, String)> {
    let constant = [
        ("PYTHONUNBUFFERED", "1"),
        // Colour codes would end up in status messages and log fields.
        ("ANSIBLE_NOCOLOR", "1"),
    ];
    let constant = constant.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    constant.chain([(leftovers::MARKER.to_string(), leftovers::instance())]).collect()
}

/// The environment a run's process gets from its spec: its `env/envvars`, SSH's options when it
/// reaches hosts (`inherited`: the operator's own `ANSIBLE_SSH_ARGS`), and a rendered inventory's
/// strict parsing. `ansible-operator replay` writes the same into its `env/envvars`.
pub fn spec_environment(spec: &RunSpec, inherited: Option<&str>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env_vars
        .iter()
        .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_string())))
        .collect();
    if let Some(ssh) = &spec.ssh {
        env.extend(ssh.env(&spec.dir, &spec.ident, inherited));
    }
    if matches!(spec.inventory, Inventory::Rendered(_)) {
        // Without this, an inventory Ansible cannot read is a warning and the play runs on no host.
        env.push(("ANSIBLE_INVENTORY_UNPARSED_FAILED".into(), "True".into()));
    }
    env
}

/// What a finished run tells.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The fold of the run's events.
    pub outcome: Outcome,
    /// The last lines ansible-runner printed outside events (errors, tracebacks).
    pub output: Vec<String>,
    /// How ansible-runner ended.
    pub exit: executor::Exit,
    /// The executor that ran it.
    pub executor: crate::executor_mode::Executor,
    /// Set when the run was stopped for taking longer than its timeout.
    pub timed_out: Option<TimedOut>,
    /// Set when a signal ended `ansible-playbook` (and the operator did not send it).
    pub killed: Option<Killed>,
}

/// A run that was stopped because it took longer than its timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// The timeout it ran into.
    pub after: Duration,
    /// The task that was running (the last one that started), when one had.
    pub task: Option<String>,
}

impl TimedOut {
    /// What the CR's `Failure` condition says: the timeout, and the task that was running.
    pub fn message(&self) -> String {
        let after = go_duration::format(self.after);
        match &self.task {
            Some(task) => format!("run timed out after {after} while running task {task:?}"),
            None => format!("run timed out after {after} before any task started"),
        }
    }
}

impl Report {
    /// The runner's own words for a run that ended without stats.
    pub fn error_text(&self) -> String {
        let text = self.output.join("\n");
        let text = text.trim();
        match (self.exit.code, self.exit.signal) {
            _ if !text.is_empty() => text.to_string(),
            (Some(code), _) => format!("ansible-runner exited with code {code} and printed nothing"),
            (None, Some(signal)) => format!("ansible-runner was killed by signal {signal}"),
            (None, None) => "ansible-runner ended and printed nothing".to_string(),
        }
    }
}

/// Why a run could not happen at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The private data dir could not be written.
    #[error("write the runner input in {dir}")]
    WriteInput {
        /// The CR's runner directory.
        dir: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// ansible-runner could not be started, or followed to its end.
    #[error(transparent)]
    Execute(#[from] executor::Error),
}

/// A run whose `ansible-playbook` a signal ended, as when the kernel's OOM killer or a person ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Killed {
    /// The signal, when the executor saw it (ansible-runner's `rc` artifact only says `None`).
    pub signal: Option<i32>,
    /// The task that was running (the last one that started), when one had.
    pub task: Option<String>,
}

impl Killed {
    /// Whether ansible-playbook was ended by a signal: the executor saw one, or ansible-runner
    /// wrote `None` as the playbook's exit status (what it does for a process a signal ended).
    fn detect(exit: &executor::Exit, artifact_dir: &Path, task: Option<&String>) -> Option<Self> {
        let killed = |signal| Some(Killed { signal, task: task.cloned() });
        if exit.playbook_signal.is_some() {
            return killed(exit.playbook_signal);
        }
        let rc = std::fs::read_to_string(artifact_dir.join("rc")).ok()?;
        if rc.trim() == "None" { killed(None) } else { None }
    }

    /// What the CR's `Failure` condition says: the signal, and the task that was running.
    pub fn message(&self) -> String {
        let by = match self.signal {
            Some(number) => match nix::sys::signal::Signal::try_from(number) {
                Ok(signal) => format!("signal {number} ({})", signal.as_str()),
                Err(_) => format!("signal {number}"),
            },
            None => "a signal".to_string(),
        };
        match &self.task {
            Some(task) => format!("ansible-playbook was killed by {by} while running task {task:?}"),
            None => format!("ansible-playbook was killed by {by} before any task started"),
        }
    }
}

/// Runs ansible-runner for one reconcile and follows it to the end, its output going to `live` as it
/// comes. The values in `secrets` (those the run reads through the proxy, and its SSH key) are masked
/// in everything the run's output becomes: the live log, the operator's log, the report and the
/// artifacts. Dropping the future kills the whole process tree.
pub async fn run(
    settings: &Settings,
    spec: &RunSpec,
    live: Option<&Registration>,
    secrets: &Arc<Secrets>,
) -> Result<Report, Error> {
    let write_error = |source| Error::WriteInput { dir: spec.dir.clone(), source };
    input_dir::write(spec).map_err(write_error)?;
    let _forget_key = scopeguard(|| ssh::forget(&spec.dir, &spec.ident));
    if let Some(ssh) = &spec.ssh {
        ssh.learn_secrets(secrets);
        ssh.write(&spec.dir, &spec.ident).map_err(write_error)?;
    }
    let inherited = std::env::var("ANSIBLE_SSH_ARGS").ok();
    let mut env = spec_environment(spec, inherited.as_deref());
    env.extend(run_environment());
    env.push((leftovers::RUN_MARKER.into(), spec.ident.clone()));
    let launch = Launch {
        id: &spec.ident,
        program: &settings.program,
        argv: spec.argv(),
        env,
        env_removed: &spec.env_removed,
    };
    let mut started = settings.launcher.start(spec.executor, launch).await?;
    let pid = started.pid;
    let mut tree = ProcessTree::new(pid);
    settings.active.add(pid);
    let _forget = scopeguard(|| settings.active.remove(pid));
    let stdout = std::mem::replace(&mut started.stdout, Box::new(tokio::io::empty()));
    let stderr = std::mem::replace(&mut started.stderr, Box::new(tokio::io::empty()));

    let mut follower = follow::Follower::new(settings.debug_logs, Masker::new(secrets.clone()));
    if crate::telemetry::enabled() {
        follower.trace = tracing_opentelemetry::OpenTelemetrySpanExt::context(&tracing::Span::current());
    }
    let mut stderr_masker = Masker::new(secrets.clone());
    let mut logger = log_events::Logger::new(settings);
    let mut stderr_lines = VecDeque::new();
    let mut timed_out = false;
    let (_, _, status) = tokio::join!(
        read_lines(stdout, MAX_LINE, |line| {
            let tasks_before = follower.outcome.tasks_started;
            let step = follower.handle(&line);
            if let Some(live) = live {
                if let Some(text) = step.live {
                    live.write(&text);
                }
                let outcome = &follower.outcome;
                if outcome.tasks_started != tasks_before {
                    live.task_started(
                        outcome.tasks_started,
                        outcome.last_task_started.as_deref().unwrap_or_default(),
                    );
                }
            }
            if let Some(event) = step.event {
                logger.log(&event);
            }
        }),
        read_lines(stderr, MAX_LINE, |line| {
            let line = stderr_masker.mask(line.trim_end()).into_owned();
            push_bounded(&mut stderr_lines, strip_ansi(&line))
        }),
        async {
            let exit = match spec.timeout {
                None => started.wait().await,
                Some(limit) => {
                    let within = tokio::time::timeout(limit, started.wait()).await;
                    match within {
                        Ok(exit) => exit,
                        Err(_) => {
                            timed_out = true;
                            let timeout = go_duration::format(limit);
                            tracing::warn!(%timeout, "run timed out: ending its process tree");
                            tree.terminate(process::TERMINATION_GRACE).await;
                            started.wait().await
                        }
                    }
                }
            };
            if exit.is_err() {
                // Nobody will report this run's end (its worker is gone): end it, so its output ends.
                tree.kill();
            }
            exit
        },
    );
    let exit = status?;
    let follow::Follower { outcome, mut output, transcript, .. } = follower;
    tree.root_exited();
    // Ending what the run left behind reads every process's parent link in /proc (a millisecond
    // or more): done beside the run's report, not before it.
    tokio::task::spawn_blocking(move || drop(tree));
    logger.finish(&outcome);
    if spec.ssh.is_some() {
        ssh::finish(&spec.dir, &spec.ident).await;
    }

    if !secrets.is_empty()
        && let Err(error) = masked::mask_artifacts(&spec.artifact_dir(), &mut stderr_masker)
    {
        tracing::warn!(%error, "could not mask secret values in the run's artifacts");
    }
    if let Err(error) = input_dir::link_latest(spec) {
        tracing::warn!(%error, "could not point artifacts/latest at this run");
    }
    if let Some(transcript) = transcript {
        println!("----- Ansible Debug Result ({}) -----\n{transcript}----------", spec.dir.display());
    }
    output.extend(stderr_lines);
    let output: Vec<String> = output.into_iter().filter(|line| !line.is_empty()).collect();
    let skip = output.len().saturating_sub(OUTPUT_TAIL);
    let executor = started.executor;
    let timed_out = timed_out.then(|| TimedOut {
        after: spec.timeout.unwrap_or_default(),
        task: outcome.last_task_started.clone(),
    });
    let killed = match (&timed_out, &outcome.stats) {
        (None, None) => Killed::detect(&exit, &spec.artifact_dir(), outcome.last_task_started.as_ref()),
        _ => None,
    };
    if killed.is_some() {
        let left = leftovers::end_run(&spec.ident);
        if !left.is_empty() {
            tracing::warn!(pids = ?left, "ended what the killed ansible-playbook left running");
        }
    }
    let output = output.into_iter().skip(skip).collect();
    Ok(Report { outcome, output, exit, executor, timed_out, killed })
}

/// Runs `f` when dropped (whether the run ends or is cancelled).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

fn push_bounded(lines: &mut VecDeque<String>, line: String) {
    if lines.len() == OUTPUT_TAIL {
        lines.pop_front();
    }
    lines.push_back(line);
}

/// Calls `each` with every line (lossily decoded) until the stream ends. A line longer than `cap`
/// bytes is cut there and ends with a marker naming its length: it is never held whole.
async fn read_lines(stream: impl AsyncRead + Unpin, cap: usize, mut each: impl FnMut(String)) {
    let mut reader = BufReader::new(stream);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match read_capped_line(&mut reader, &mut buffer, cap).await {
            Ok(0) | Err(_) => return,
            Ok(length) if length > buffer.len() => {
                let mut line = String::from_utf8_lossy(&buffer).into_owned();
                line.push_str(&format!(" [line truncated: {length} bytes, only the first {cap} are kept]\n"));
                tracing::warn!(length, cap, "a line of the runner's output was truncated");
                each(line)
            }
            Ok(_) => each(String::from_utf8_lossy(&buffer).into_owned()),
        }
    }
}

/// Reads one line (with its newline) into `buffer`, at most `cap` bytes of it; the line's whole
/// length (0 at the end of the stream).
async fn read_capped_line(
    reader: &mut (impl tokio::io::AsyncBufRead + Unpin),
    buffer: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<usize> {
    let mut length = 0;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(length);
        }
        let (chunk, ended) = match available.iter().position(|byte| *byte == b'\n') {
            Some(at) => (&available[..=at], true),
            None => (available, false),
        };
        let room = cap.saturating_sub(buffer.len());
        buffer.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        length += used;
        reader.consume(used);
        if ended {
            return Ok(length);
        }
    }
}

/// Removes terminal escape sequences (`ESC [ ... letter`), which Ansible adds when it thinks it
/// writes to a terminal.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else if c != '\r' {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_message_names_the_timeout_and_the_running_task() {
        let during = TimedOut { after: Duration::from_secs(90), task: Some("wait for db".into()) };
        assert_eq!(during.message(), "run timed out after 1m30s while running task \"wait for db\"");
        let before = TimedOut { after: Duration::from_secs(3), task: None };
        assert_eq!(before.message(), "run timed out after 3s before any task started");
    }

    #[test]
    fn a_killed_playbook_is_told_by_its_signal_or_by_ansible_runners_none() {
        let dir = std::env::temp_dir().join(format!("killed-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let task = Some("wait for db".to_string());
        let warm = executor::Exit { code: Some(1), signal: None, playbook_signal: Some(9) };
        let killed = Killed::detect(&warm, &dir, task.as_ref()).unwrap();
        assert_eq!(
            killed.message(),
            "ansible-playbook was killed by signal 9 (SIGKILL) while running task \"wait for db\""
        );

        let cold = executor::Exit { code: Some(1), signal: None, playbook_signal: None };
        assert_eq!(Killed::detect(&cold, &dir, None), None, "no rc file: not told");
        std::fs::write(dir.join("rc"), "2").unwrap();
        assert_eq!(Killed::detect(&cold, &dir, None), None, "an exit status is no signal");
        std::fs::write(dir.join("rc"), "None").unwrap();
        let killed = Killed::detect(&cold, &dir, None).unwrap();
        assert_eq!(killed.message(), "ansible-playbook was killed by a signal before any task started");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_line_longer_than_the_cap_is_cut_with_a_marker_and_the_next_line_is_whole() {
        let long = "x".repeat(100_000);
        let input = format!("short\n{long}\nafter\nno newline at the end");
        let mut lines = Vec::new();
        read_lines(input.as_bytes(), 16, |line| lines.push(line)).await;
        assert_eq!(
            lines,
            [
                "short\n".to_string(),
                format!("{} [line truncated: 100001 bytes, only the first 16 are kept]\n", "x".repeat(16)),
                "after\n".to_string(),
                "no newline at th [line truncated: 21 bytes, only the first 16 are kept]\n".to_string(),
            ]
        );
    }

    #[test]
    fn escape_sequences_and_carriage_returns_are_removed() {
        assert_eq!(strip_ansi("\u{1b}[0;31m[ERROR]: boom\u{1b}[0m\r"), "[ERROR]: boom");
        assert_eq!(strip_ansi("plain"), "plain");
    }
}
