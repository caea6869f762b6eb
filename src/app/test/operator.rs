//! The operator `ansible-operator test` runs in its own process: `run`'s wiring and serving, on
//! the project's watches file, watching only the scenarios' namespaces, stopped as SIGTERM would.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::history::History;
use crate::watches::Gvk;

/// The running operator.
pub(super) struct InProcess {
    /// Its run records.
    pub history: Arc<History>,
    /// The kinds it watches.
    pub kinds: Vec<Gvk>,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

/// Wires an operator from `args` as `run` does, watching `namespaces`, and starts serving it.
pub(super) async fn start(args: RunArgs, namespaces: &[String]) -> anyhow::Result<InProcess> {
    let overrides = [("WATCH_NAMESPACE", namespaces.join(","))];
    let (wired, watches) = super::super::wiring::wire_with(&args, &overrides).await?;
    let kinds = watches.iter().map(|watch| watch.gvk.clone()).collect();
    let (history, stop) = (wired.history.clone(), wired.stop.clone());
    let task = tokio::spawn(async move {
        let result = super::super::serve(&args, &wired, watches).await;
        wired.launcher.stop().await;
        result
    });
    Ok(InProcess { history, kinds, stop, task })
}

impl InProcess {
    /// Stops it as SIGTERM does (runs in flight get `--graceful-shutdown-timeout`) and returns how
    /// it ended.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.task.await.context("the operator's task")?
    }

    /// Whether it stopped by itself (a port in use, a lost connection), and why.
    pub fn ended(&self) -> bool {
        self.task.is_finished()
    }
}
