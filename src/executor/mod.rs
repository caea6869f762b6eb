//! Where a run's ansible-runner executes. `cold` starts the program as a child process, as upstream
//! does. `warm` has the supervised Python worker (`worker/ansible_operator_worker`) fork a process
//! that runs the same ansible-runner code with Ansible, ansible-runner and the kubernetes client
//! already imported. Both give a [`Started`] run: the pid at the root of the run's process tree, its
//! stdout and stderr, and its exit, so nothing downstream (events, status, metrics) can tell which
//! executor ran.

mod connection;
mod follow;
mod launch;
pub mod protocol;
mod seqpacket;
pub mod worker;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::AsyncRead;
use tokio::process::{Child, Command};

use crate::executor_mode::Executor;
use crate::metrics::Metrics;
pub use launch::{Exit, Launch};
pub use worker::Worker;

/// Why a run could not start or be followed to its end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program could not be started (not installed, not executable).
    #[error("start {program}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the process failed.
    #[error("wait for ansible-runner")]
    Wait(#[source] std::io::Error),
    /// The warm worker could not start the run, or ended while it ran.
    #[error(transparent)]
    Worker(#[from] worker::Error),
}

/// A stream of a run's output.
pub type Output = Box<dyn AsyncRead + Send + Unpin>;

/// A run whose process exists.
pub struct Started {
    /// The root of the run's process tree.
    pub pid: u32,
    /// ansible-runner's stdout (the JSON event stream).
    pub stdout: Output,
    /// ansible-runner's stderr.
    pub stderr: Output,
    /// The executor that started it.
    pub executor: Executor,
    waiter: Waiter,
}

enum Waiter {
    Child(Child),
    Worker(connection::RunHandle),
}

impl Started {
    /// Waits for the run's process to end.
    pub async fn wait(&mut self) -> Result<Exit, Error> {
        match &mut self.waiter {
            Waiter::Child(child) => child.wait().await.map(Exit::from).map_err(Error::Wait),
            Waiter::Worker(handle) => Ok(handle.exited().await?),
        }
    }
}

/// Starts runs on the executor each watch asks for.
#[derive(Debug)]
pub struct Launcher {
    default: Executor,
    worker: Option<Arc<Worker>>,
    metrics: Arc<Metrics>,
}

impl Launcher {
    /// Runs on `default` unless a watch says otherwise; `worker` serves the warm runs (`None`
    /// when no watch runs warm, or the worker cannot be used at all: those run cold).
    pub fn new(default: Executor, worker: Option<Arc<Worker>>, metrics: Arc<Metrics>) -> Self {
        Launcher { default, worker, metrics }
    }

    /// Stops the warm worker, if there is one. Call it once no run is in flight any more.
    pub async fn stop(&self) {
        if let Some(worker) = &self.worker {
            worker.stop().await;
        }
    }

    /// Starts a run on `chosen` (the watch's `executor`), or the default.
    pub async fn start(&self, chosen: Option<Executor>, launch: Launch<'_>) -> Result<Started, Error> {
        if chosen.unwrap_or(self.default) == Executor::Warm {
            match &self.worker {
                Some(worker) => match worker.start(&launch).await {
                    Ok(run) => return Ok(warm(run)),
                    Err(worker::Error::Unavailable { reason }) => {
                        tracing::debug!(reason, "the warm worker is not available: running cold");
                        self.metrics.executor_fallback("worker_unavailable");
                    }
                    Err(error) => return Err(error.into()),
                },
                None => self.metrics.executor_fallback("worker_unavailable"),
            }
        }
        self.metrics.executor_run(Executor::Cold);
        start_cold(launch)
    }
}

/// A run the worker forked.
fn warm(run: connection::WarmRun) -> Started {
    Started {
        pid: run.pid,
        stdout: Box::new(run.stdout),
        stderr: Box::new(run.stderr),
        executor: Executor::Warm,
        waiter: Waiter::Worker(run.handle),
    }
}

/// ansible-runner as a child process in its own process group.
fn start_cold(launch: Launch<'_>) -> Result<Started, Error> {
    let mut command = Command::new(launch.program);
    for name in launch.env_removed {
        command.env_remove(name);
    }
    let mut child = command
        .args(&launch.argv)
        .envs(launch.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| Error::Spawn { program: launch.program.to_path_buf(), source })?;
    let pid = child.id().unwrap_or_default();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    Ok(Started {
        pid,
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
        executor: Executor::Cold,
        waiter: Waiter::Child(child),
    })
}
