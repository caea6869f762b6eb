//! The warm worker's supervisor: it keeps the Python process (`python -m ansible_operator_worker`)
//! that forks runs running, and hands runs to its current [`Connection`]. It starts with the
//! operator; when it dies, the runs it was serving fail with a clear error (their process trees are
//! ended by the runner as they are dropped) and it is started again with backoff, new runs going
//! cold meanwhile; it stops with the operator. After a while with no run ([`Config::idle`]) it is
//! stopped to give its memory back, and the next run starts it again and waits for it.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

pub use super::connection::Error;
use super::connection::{Connection, WarmRun};
use super::launch::Launch;
use super::protocol::{Message, Versions};
use super::seqpacket::SeqPacket;
use crate::metrics::Metrics;

/// How long the worker may take to import everything and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait between restarts of a worker that keeps failing.
const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
/// A worker that ran this long before it died is restarted at once.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How often the worker's memory is read for the metrics.
const RSS_INTERVAL: Duration = Duration::from_secs(10);
/// The shortest time between checks of whether the worker has been idle long enough.
const IDLE_CHECK_MIN: Duration = Duration::from_millis(100);

/// How to start the worker.
#[derive(Debug, Clone)]
pub struct Config {
    /// The interpreter ansible-runner runs on (the worker must import the same Ansible).
    pub python: PathBuf,
    /// Variables added to the operator's environment: those every run gets, so what Ansible reads
    /// at import in the worker is what it would read in a run.
    pub env: Vec<(String, String)>,
    /// The worker's working directory (where Ansible looks for an ansible.cfg at import): the
    /// runner directory, like the runs' own.
    pub cwd: PathBuf,
    /// How long the worker may go without a run before it is stopped (None: never).
    pub idle: Option<Duration>,
}

#[derive(Debug, Clone)]
enum State {
    Starting,
    Ready(Arc<Connection>),
    Down(String),
    /// Stopped after `Config::idle` without a run: the next run wakes it and waits.
    Asleep,
}

/// The supervised worker.
#[derive(Debug)]
pub struct Worker {
    state: watch::Receiver<State>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Worker {
    /// Starts the worker and its supervisor, which runs until [`Worker::stop`].
    pub fn spawn(config: Config, metrics: Arc<Metrics>) -> Arc<Worker> {
        let (state_tx, state) = watch::channel(State::Starting);
        let shutdown = CancellationToken::new();
        let wake = Arc::new(Notify::new());
        let supervisor = tokio::spawn(supervise(config, state_tx, metrics, wake.clone(), shutdown.clone()));
        Arc::new(Worker { state, wake, shutdown, supervisor: Mutex::new(Some(supervisor)) })
    }

    /// Stops the worker (it ends any run it still serves) and waits for it to exit.
    pub async fn stop(&self) {
        self.shutdown.cancel();
        let supervisor = self.supervisor.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(supervisor) = supervisor {
            let _ = supervisor.await;
        }
    }

    /// Starts a run in the worker. While the worker starts for the first time, or after it slept,
    /// the run waits for it; while it restarts, or when it cannot start, [`Error::Unavailable`]
    /// sends the run cold.
    pub async fn start(&self, launch: &Launch<'_>) -> Result<WarmRun, Error> {
        let mut state = self.state.clone();
        loop {
            let current = state.borrow_and_update().clone();
            match current {
                State::Ready(connection) => match connection.start(launch).await {
                    // It is going to sleep: wait for that, then wake it.
                    Err(Error::Sleeping) => {}
                    started => return started,
                },
                State::Down(reason) => return Err(Error::Unavailable { reason }),
                State::Asleep => self.wake.notify_one(),
                State::Starting => {}
            }
            match tokio::time::timeout(READY_TIMEOUT, state.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Unavailable { reason: "the operator is stopping".into() }),
                Err(_) => return Err(Error::Unavailable { reason: "still starting".into() }),
            }
        }
    }
}

/// Keeps a worker running until `shutdown`.
async fn supervise(
    config: Config,
    state: watch::Sender<State>,
    metrics: Arc<Metrics>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut failures = 0u32;
    loop {
        let launched = tokio::select! {
            launched = launch(&config, &metrics) => launched,
            _ = shutdown.cancelled() => return,
        };
        match launched {
            Ok((child, connection)) => {
                state.send_replace(State::Ready(connection.clone()));
                let up_since = tokio::time::Instant::now();
                let how = match watch_until_exit(child, &connection, &metrics, config.idle, &shutdown).await {
                    Ended::Exited(how) => how,
                    Ended::Stopped => return,
                    Ended::Idle(idle) => {
                        state.send_replace(State::Asleep);
                        metrics.executor_worker_rss(0);
                        tracing::info!(
                            worker_pid = connection.pid,
                            idle = %crate::go_duration::format(idle),
                            "the warm Ansible worker stopped after a while without runs; the next run starts it again"
                        );
                        tokio::select! {
                            _ = wake.notified() => {}
                            _ = shutdown.cancelled() => return,
                        }
                        state.send_replace(State::Starting);
                        failures = 0;
                        continue;
                    }
                };
                tracing::warn!(
                    worker_pid = connection.pid,
                    how,
                    "the warm Ansible worker ended: its runs fail, new runs go cold until it is back"
                );
                state.send_replace(State::Down(format!("it ended ({how}) and is restarting")));
                connection.lose(how);
                metrics.executor_worker_restarted();
                metrics.executor_worker_rss(0);
                failures = if up_since.elapsed() >= STABLE_AFTER { 0 } else { failures + 1 };
            }
            Err(error) => {
                failures += 1;
                tracing::warn!(
                    error,
                    attempt = failures,
                    "the warm Ansible worker did not start: runs go cold until it does"
                );
                state.send_replace(State::Down(error));
            }
        }
        let delay = restart_delay(failures);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// 0 s after a worker that ran for a while, then 1 s, 2 s, 4 s ... up to 30 s.
fn restart_delay(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 1).min(5)).min(MAX_RESTART_DELAY),
    }
}

/// Starts the worker process and waits for it to say it is ready.
async fn launch(config: &Config, metrics: &Arc<Metrics>) -> Result<(Child, Arc<Connection>), String> {
    std::fs::create_dir_all(&config.cwd).map_err(|e| format!("create {}: {e}", config.cwd.display()))?;
    let (socket, theirs) = SeqPacket::pair().map_err(|e| format!("create the worker's socket: {e}"))?;
    let mut child = Command::new(&config.python)
        .args(["-m", "ansible_operator_worker"])
        .envs(config.env.iter().cloned())
        .current_dir(&config.cwd)
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start {} -m ansible_operator_worker: {e}", config.python.display()))?;
    let pid = child.id().unwrap_or_default();
    let stderr_tail = Arc::new(Mutex::new(Vec::new()));
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(log_lines(stdout, pid, None));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(log_lines(stderr, pid, Some(stderr_tail.clone())));
    }
    let ready = tokio::select! {
        ready = tokio::time::timeout(READY_TIMEOUT, socket.recv()) => ready,
        status = child.wait() => {
            let tail = stderr_tail.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
            return Err(format!("it exited ({}) before it was ready: {tail}", describe(status.ok())));
        }
    };
    let bytes = match ready {
        Ok(Ok(Some(bytes))) => bytes,
        Ok(Ok(None)) => return Err("it closed its connection before it was ready".into()),
        Ok(Err(error)) => return Err(format!("read its first message: {error}")),
        Err(_) => return Err(format!("not ready after {READY_TIMEOUT:?}")),
    };
    let Ok(Message::Ready { pid, versions, preload_seconds, not_preloaded }) = serde_json::from_slice(&bytes)
    else {
        return Err(format!("its first message was not `ready`: {}", String::from_utf8_lossy(&bytes)));
    };
    log_ready(pid, &versions, preload_seconds, &not_preloaded);
    let connection = Connection::new(socket, pid, metrics.clone());
    tokio::spawn(connection.clone().dispatch());
    Ok((child, connection))
}

fn log_ready(pid: u32, versions: &Versions, preload_seconds: f64, not_preloaded: &[String]) {
    tracing::info!(
        worker_pid = pid,
        ansible_core = versions.ansible_core,
        ansible_runner = versions.ansible_runner,
        python = versions.python,
        preload_seconds,
        not_preloaded = ?not_preloaded,
        "warm Ansible worker ready"
    );
}

/// How a worker's watch ended.
enum Ended {
    /// It exited by itself (how).
    Exited(String),
    /// The operator stops: it was stopped.
    Stopped,
    /// It went this long without a run: it was stopped.
    Idle(Duration),
}

/// Watches the worker until it exits, the operator stops or it goes `idle` without a run (then
/// stopping it), keeping its memory metric current.
async fn watch_until_exit(
    mut child: Child,
    connection: &Connection,
    metrics: &Metrics,
    idle: Option<Duration>,
    shutdown: &CancellationToken,
) -> Ended {
    let mut rss = tokio::time::interval(RSS_INTERVAL);
    let mut idle_check = idle.map(|idle| tokio::time::interval((idle / 4).max(IDLE_CHECK_MIN)));
    loop {
        tokio::select! {
            status = child.wait() => return Ended::Exited(describe(status.ok())),
            _ = rss.tick() => metrics.executor_worker_rss(resident_bytes(connection.pid).unwrap_or(0)),
            () = tick(idle_check.as_mut()) => {
                if let Some(idle) = idle.filter(|idle| connection.close_if_idle(*idle)) {
                    stop(&mut child, connection.pid).await;
                    return Ended::Idle(idle);
                }
            }
            _ = shutdown.cancelled() => {
                // The operator has ended the runs already.
                stop(&mut child, connection.pid).await;
                return Ended::Stopped;
            }
        }
    }
}

/// The next tick of `interval`; never without one.
async fn tick(interval: Option<&mut tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Stops the worker: it ends its runs and exits on SIGTERM, or is killed after 5 s.
async fn stop(child: &mut Child, pid: u32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
    if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// `exit status 3`, `killed by signal 9`.
fn describe(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            _ => "ended".into(),
        },
        None => "its status could not be read".into(),
    }
}

/// VmRSS of a process, in bytes.
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Logs what the worker prints (it prints only when something is wrong); keeps the last lines of
/// stderr to explain a worker that does not start.
async fn log_lines(stream: impl AsyncRead + Unpin, pid: u32, tail: Option<Arc<Mutex<Vec<String>>>>) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::warn!(worker_pid = pid, line, "warm worker output");
        if let Some(tail) = &tail {
            let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
            if tail.len() == 20 {
                tail.remove(0);
            }
            tail.push(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_up_to_thirty_seconds() {
        let delays: Vec<u64> = (0..9).map(|n| restart_delay(n).as_secs()).collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn worker_exits_are_described() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(describe(Some(std::process::ExitStatus::from_raw(9))), "killed by signal 9");
        assert_eq!(describe(Some(std::process::ExitStatus::from_raw(3 << 8))), "exit status 3");
    }
}
