//! One started warm worker and the runs multiplexed over its socket: a run is sent with its
//! stdout and stderr, and the worker's messages about it are delivered to whoever waits for them
//! (what each message means is decided by [`Follower`]).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::follow::{Follower, Step};
use super::launch::{Exit, Launch};
use super::protocol::{Message, RunRequest};
use super::seqpacket::SeqPacket;
use crate::metrics::Metrics;

/// The zap logger of these lines: `executor.worker`, as before they moved into this file.
const TARGET: &str = "ansible_operator::executor::worker";

/// Why a warm run did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The worker is starting again, or cannot start: the run goes cold.
    #[error("the warm worker is not available: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The worker ended while the run was in flight.
    #[error("the warm Ansible worker (pid {pid}) ended during the run ({how}); it is being restarted")]
    Lost {
        /// The worker's pid.
        pid: u32,
        /// How it ended.
        how: String,
    },
    /// The worker could not fork the run.
    #[error("the warm worker could not start the run: {0}")]
    SpawnFailed(String),
    /// The worker is going to sleep (it had no run for a while): the run waits for it to start again.
    #[error("the warm worker is going to sleep")]
    Sleeping,
    /// Talking to the worker failed.
    #[error("send the run to the warm worker")]
    Io(#[source] io::Error),
}

/// A run the worker forked: its pid, output and handle.
pub struct WarmRun {
    /// The root of the run's process tree.
    pub pid: u32,
    /// ansible-runner's stdout.
    pub stdout: pipe::Receiver,
    /// ansible-runner's stderr.
    pub stderr: pipe::Receiver,
    /// Waits for its end.
    pub handle: RunHandle,
}

/// A run of the worker, until its process ends.
pub struct RunHandle {
    id: String,
    exited: oneshot::Receiver<Result<Exit, Error>>,
    connection: Arc<Connection>,
}

impl RunHandle {
    /// Waits until the worker reports the run's process ended (or the worker itself did).
    pub async fn exited(&mut self) -> Result<Exit, Error> {
        match (&mut self.exited).await {
            Ok(result) => result,
            Err(_) => Err(self.connection.lost_error()),
        }
    }
}

impl Drop for RunHandle {
    fn drop(&mut self) {
        let mut table = self.connection.table();
        table.follower.forget(&self.id);
        table.waiters.remove(&self.id);
        table.last_active = Instant::now();
    }
}

/// Who waits for what of one run.
#[derive(Debug)]
struct Waiters {
    started: Option<oneshot::Sender<Result<u32, Error>>>,
    exited: Option<oneshot::Sender<Result<Exit, Error>>>,
}

/// The runs in flight: what they said so far, and who waits for them; when the last one started
/// or ended, and whether the worker takes no more.
#[derive(Debug)]
struct Table {
    follower: Follower,
    waiters: HashMap<String, Waiters>,
    last_active: Instant,
    closing: bool,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            follower: Follower::default(),
            waiters: HashMap::new(),
            last_active: Instant::now(),
            closing: false,
        }
    }
}

/// One started worker process.
#[derive(Debug)]
pub struct Connection {
    socket: SeqPacket,
    /// The worker's pid.
    pub pid: u32,
    table: Mutex<Table>,
    /// How the worker ended, once it has.
    ended: Mutex<Option<String>>,
    metrics: Arc<Metrics>,
}

impl Connection {
    /// The connection to the worker `pid` over `socket`, once it said it is ready.
    pub fn new(socket: SeqPacket, pid: u32, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Connection { socket, pid, table: Mutex::default(), ended: Mutex::default(), metrics })
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lost_error(&self) -> Error {
        let how = self.ended.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Error::Lost { pid: self.pid, how: how.unwrap_or_else(|| "its connection closed".into()) }
    }

    /// Sends the run to the worker and waits until its process exists.
    pub async fn start(self: &Arc<Self>, launch: &Launch<'_>) -> Result<WarmRun, Error> {
        let request = request(launch)?;
        let (stdout, stdout_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::Io(e.into()))?;
        let (stderr, stderr_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::Io(e.into()))?;
        let (started_tx, started) = oneshot::channel();
        let (exited_tx, exited) = oneshot::channel();
        {
            let mut table = self.table();
            if table.closing {
                return Err(Error::Sleeping);
            }
            table.last_active = Instant::now();
            table.follower.admit(launch.id);
            let waiters = Waiters { started: Some(started_tx), exited: Some(exited_tx) };
            table.waiters.insert(launch.id.to_string(), waiters);
        }
        // From here the handle takes the run out of the table however this ends.
        let handle = RunHandle { id: launch.id.to_string(), exited, connection: self.clone() };
        if self.ended.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Err(Error::Unavailable { reason: "the worker has just ended".into() });
        }
        let message = serde_json::to_vec(&request).map_err(|e| Error::Io(io::Error::other(e)))?;
        self.socket.send(&message, &[stdout_w.as_fd(), stderr_w.as_fd()]).await.map_err(Error::Io)?;
        drop((stdout_w, stderr_w));
        let pid = match started.await {
            Ok(result) => result?,
            Err(_) => return Err(self.lost_error()),
        };
        let stdout = pipe::Receiver::from_owned_fd(stdout).map_err(Error::Io)?;
        let stderr = pipe::Receiver::from_owned_fd(stderr).map_err(Error::Io)?;
        Ok(WarmRun { pid, stdout, stderr, handle })
    }

    /// Takes no more runs when none is in flight and none started or ended for `idle`; true then.
    pub fn close_if_idle(&self, idle: Duration) -> bool {
        let mut table = self.table();
        if table.waiters.is_empty() && table.last_active.elapsed() >= idle {
            table.closing = true;
        }
        table.closing
    }

    /// Delivers what the worker says, until it stops talking.
    pub async fn dispatch(self: Arc<Self>) {
        loop {
            let bytes = match self.socket.recv().await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(
                        target: TARGET,
                        worker_pid = self.pid, %error, "reading from the warm worker failed"
                    );
                    return;
                }
            };
            match serde_json::from_slice::<Message>(&bytes) {
                Ok(message) => {
                    let step = self.table().follower.handle(message);
                    self.act(step);
                }
                Err(error) => {
                    tracing::warn!(
                        target: TARGET,
                        worker_pid = self.pid, %error, "unexpected message from the warm worker"
                    )
                }
            }
        }
    }

    /// Does what the follower decided.
    fn act(&self, step: Step) {
        match step {
            Step::Started { id, result } => {
                if let Some(sender) = self.table().waiters.get_mut(&id).and_then(|w| w.started.take()) {
                    let _ = sender.send(result.map_err(Error::SpawnFailed));
                }
            }
            Step::Mode { id, executor, fallback } => {
                self.metrics.executor_run(executor);
                if let Some((fallback, reason)) = fallback {
                    tracing::debug!(target: TARGET, job = id, reason, "the playbook runs cold");
                    self.metrics.executor_fallback(fallback.as_str());
                }
            }
            Step::Exited { id, exit } => {
                // The first of the two messages a run's exit comes in (the run's own, the
                // worker's after reaping): the waiter is gone after it.
                if let Some(sender) = self.table().waiters.get_mut(&id).and_then(|w| w.exited.take()) {
                    let _ = sender.send(Ok(exit));
                }
            }
            Step::Nothing => {}
        }
    }

    /// The worker ended (`how`): every run it served fails.
    pub fn lose(&self, how: String) {
        *self.ended.lock().unwrap_or_else(|p| p.into_inner()) = Some(how);
        let waiters: Vec<Waiters> = {
            let mut table = self.table();
            table.follower.drain();
            table.waiters.drain().map(|(_, waiters)| waiters).collect()
        };
        for mut waiters in waiters {
            if let Some(sender) = waiters.started.take() {
                let _ = sender.send(Err(self.lost_error()));
            }
            if let Some(sender) = waiters.exited.take() {
                let _ = sender.send(Err(self.lost_error()));
            }
        }
    }
}

/// The run request for `launch`: the operator's environment plus the run's, as a cold run gets.
fn request<'a>(launch: &'a Launch<'_>) -> Result<RunRequest<'a>, Error> {
    let not_text = |what: &str| Error::Unavailable { reason: format!("{what} is not UTF-8") };
    let argv = launch
        .argv
        .iter()
        .map(|arg| arg.to_str().map(str::to_string).ok_or_else(|| not_text("an argument")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut env = BTreeMap::new();
    for (name, value) in std::env::vars_os() {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            return Err(not_text("the environment"));
        };
        env.insert(name.to_string(), value.to_string());
    }
    env.extend(launch.env.iter().cloned());
    for name in launch.env_removed {
        env.remove(name);
    }
    let cwd = std::env::current_dir().map_err(Error::Io)?;
    let cwd = cwd.to_str().ok_or_else(|| not_text("the working directory"))?.to_string();
    Ok(RunRequest { id: launch.id, argv, env, cwd })
}
