//! The operator `ansible-operator test` runs in its own process: `run`'s wiring and serving, on
//! the project's watches file, watching only the scenarios' namespaces, stopped as SIGTERM would.

use std::sync::Arc;

use anyhow::Context as _;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::Kind;
use crate::cli::RunArgs;
use crate::history::History;

/// The running operator.
pub(super) struct InProcess {
    /// Its run records.
    pub history: Arc<History>,
    /// The kinds it watches, with their planners.
    pub kinds: Vec<Kind>,
    /// What each watched kind runs.
    pub targets: Vec<Target>,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

/// A watched kind and the playbooks and roles its runs use (its finalizer's too).
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The kind's API group and kind.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// The playbooks and roles.
    pub runs: Vec<crate::watches::Target>,
}

/// Wires an operator from `args` as `run` does, watching `namespaces`, its runs with the
/// environment variables `settings` too, and starts serving it.
pub(super) async fn start(
    args: RunArgs,
    namespaces: &[String],
    settings: &[(String, String)],
) -> anyhow::Result<InProcess> {
    let overrides = [("WATCH_NAMESPACE", namespaces.join(","))];
    let (wired, watches) = super::super::wiring::wire_with(&args, &overrides, settings).await?;
    let targets = watches
        .iter()
        .map(|watch| {
            let finalizer = watch.finalizer.as_ref().and_then(|finalizer| finalizer.target.as_ref());
            let runs = [Some(&watch.target), finalizer].into_iter().flatten().cloned().collect();
            Target { group: watch.gvk.group.clone(), kind: watch.gvk.kind.clone(), runs }
        })
        .collect();
    let (history, stop) = (wired.history.clone(), wired.stop.clone());
    let (built, kinds) = tokio::sync::oneshot::channel();
    let mut task = tokio::spawn(async move {
        let result = super::super::serve(&args, &wired, watches, |kinds| drop(built.send(kinds))).await;
        wired.launcher.stop().await;
        result
    });
    // Its controllers are built, or it stopped before (a port in use): then why.
    match kinds.await {
        Ok(kinds) => Ok(InProcess { history, kinds, targets, stop, task }),
        Err(_) => {
            (&mut task).await.context("the operator's task")??;
            anyhow::bail!("the operator stopped before its controllers were built")
        }
    }
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
