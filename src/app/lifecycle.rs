//! A wired replica's lifecycle: waiting for its shard Lease or for leadership, running the
//! controllers while it holds it, and the shutdown sequence (graceful on a signal, at once when
//! the Lease is lost).

use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::wiring::{Campaign, Wiring};
use crate::cli::RunArgs;
use crate::controller::WatchController;
use crate::leader;
use crate::runner;
use crate::sharding::sharder::Sharder;

/// The zap logger of these lines: `app`, as before they moved into this file.
const TARGET: &str = "ansible_operator::app";

/// The Lease this replica holds while its controllers run.
pub(super) struct Held {
    /// Turns false when the Lease is lost; `None`: the replica runs under no Lease.
    lease: Option<watch::Receiver<bool>>,
    /// With sharding: what stops the shard Lease campaign, and its task, given up only once no run
    /// is left.
    membership: Option<(CancellationToken, JoinHandle<()>)>,
}

/// Why the replica stops.
enum Stop {
    /// SIGTERM or SIGINT.
    Signal,
    /// The Lease it runs under was lost.
    LeaseLost,
}

/// Waits for the Lease this replica runs under: its shard Lease with sharding (then starts the
/// sharder's campaign for the leader Lease), the leader Lease with `--leader-elect`, else none.
/// `None` when a signal came first; everything started is stopped then.
pub(super) async fn take_lease(
    wired: &Wiring,
    controllers: &[WatchController],
) -> anyhow::Result<Option<Held>> {
    let (client, readiness, shutdown) = (&wired.client, &wired.readiness, &wired.shutdown);
    match &wired.campaign {
        Campaign::Shard(sharding) => {
            // A member first: the controllers start only while this replica holds its shard Lease.
            let membership = &sharding.membership;
            readiness.joining(
                format!("shard {} of ring {}", membership.shard, membership.ring),
                format!("{}/{}", sharding.lease.namespace, sharding.lease.name),
            );
            let membership_stop = CancellationToken::new();
            let (mut member, task) =
                leader::spawn(client.clone(), sharding.lease.clone(), membership_stop.clone());
            tokio::select! {
                // The borrow `wait_for` returns is dropped at once: the future stays `Send`.
                held = async { member.wait_for(|held| *held).await.map(drop) } =>
                    held.context("shard lease campaign stopped")?,
                _ = stop_asked(&wired.stop) => {
                    shutdown.cancel();
                    membership_stop.cancel();
                    let _ = task.await;
                    return Ok(None);
                }
            };
            tracing::info!(
                target: TARGET,
                ring = %membership.ring, shard = %membership.shard, "joined the sharding ring"
            );
            readiness.joined();
            wired.metrics.set_shard(&membership.ring, &membership.shard);
            // The leader Lease only picks the sharder: every replica reconciles its share.
            let (leading, _task) = leader::spawn(client.clone(), sharding.leader.clone(), shutdown.clone());
            let kinds =
                controllers.iter().map(|controller| controller.sharded_kind(&wired.namespaces)).collect();
            let sharder =
                Sharder::new(client.clone(), membership.clone(), sharding.lease.namespace.clone(), kinds);
            tokio::spawn(sharder.run(leading, shutdown.clone()));
            Ok(Some(Held { lease: Some(member), membership: Some((membership_stop, task)) }))
        }
        Campaign::Leader(config) => {
            // A standby is ready: it serves the proxy and waits to take over.
            readiness.mark_started();
            let (mut leading, _task) = leader::spawn(client.clone(), config.clone(), shutdown.clone());
            tokio::select! {
                led = async { leading.wait_for(|leading| *leading).await.map(drop) } =>
                    led.context("leader election stopped")?,
                _ = stop_asked(&wired.stop) => {
                    shutdown.cancel();
                    return Ok(None);
                }
            };
            tokio::spawn(leader::record_leadership(client.clone(), config.clone(), wired.instance.clone()));
            Ok(Some(Held { lease: Some(leading), membership: None }))
        }
        Campaign::None => Ok(Some(Held { lease: None, membership: None })),
    }
}

/// Starts every controller, each of its scopes registered with the readiness probe.
pub(super) fn start_controllers(wired: &Wiring, controllers: Vec<WatchController>) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for controller in controllers {
        let scopes = controller
            .scopes(&wired.namespaces)
            .into_iter()
            .map(|scope| (scope, wired.readiness.register()))
            .collect();
        tasks.spawn(controller.run(scopes, wired.shutdown.clone()));
    }
    wired.readiness.mark_started();
    tasks
}

/// Runs until a signal or the loss of the Lease, then stops as each asks.
pub(super) async fn run_until_stopped(
    args: &RunArgs,
    wired: &Wiring,
    held: Held,
    tasks: JoinSet<()>,
) -> anyhow::Result<()> {
    let Held { mut lease, membership } = held;
    let lost = async {
        match &mut lease {
            Some(leading) => {
                let _ = leading.wait_for(|leading| !*leading).await;
            }
            None => std::future::pending().await,
        }
    };
    let stop = tokio::select! {
        _ = stop_asked(&wired.stop) => Stop::Signal,
        _ = lost => Stop::LeaseLost,
    };
    match stop {
        Stop::Signal => {
            shut_down(args, wired, tasks, membership).await;
            Ok(())
        }
        Stop::LeaseLost => {
            stop_at_once(wired, tasks).await;
            anyhow::bail!("leader election lost")
        }
    }
}

/// As controller-runtime: a replica that lost its lease stops at once (and exits 1). A shard that
/// could not renew its Lease in time may be given away any moment: the same holds, so that a CR is
/// never run here after the sharder moved it.
async fn stop_at_once(wired: &Wiring, mut tasks: JoinSet<()>) {
    let lease = match wired.campaign {
        Campaign::Shard(_) => "shard lease",
        Campaign::Leader(_) | Campaign::None => "leadership",
    };
    tracing::error!(target: TARGET, lease, "lost the lease: stopping at once");
    wired.shutdown.cancel();
    wired.settings.door.runner().active.terminate_all(Duration::ZERO).await;
    tasks.shutdown().await;
}

/// The graceful shutdown: runs in flight get `--graceful-shutdown-timeout` to finish (a second
/// signal cuts it short), then the rest is ended; only then is the shard Lease given up.
async fn shut_down(
    args: &RunArgs,
    wired: &Wiring,
    mut tasks: JoinSet<()>,
    membership: Option<(CancellationToken, JoinHandle<()>)>,
) {
    tracing::info!(
        target: TARGET,
        timeout = ?args.graceful_shutdown_timeout, "shutting down: letting runs in flight finish"
    );
    wired.shutdown.cancel();
    let drained = async { while tasks.join_next().await.is_some() {} };
    tokio::select! {
        _ = drained => {}
        _ = tokio::time::sleep(args.graceful_shutdown_timeout) => {
            tracing::warn!(target: TARGET, "graceful shutdown timed out");
            wired.settings.door.runner().active.terminate_all(runner::process::TERMINATION_GRACE).await;
        }
        _ = shutdown_signal() => tracing::warn!(target: TARGET, "second signal: stopping at once"),
    }
    // Dropping the tasks cancels the reconciles; each run's process tree is killed as it drops.
    tasks.shutdown().await;
    // Only now, with no run left, give the shard up: the sharder hands its CRs on at once.
    if let Some((membership_stop, task)) = membership {
        membership_stop.cancel();
        let _ = tokio::time::timeout(args.leader_elect_renew_deadline, task).await;
    }
}

/// Resolves on SIGTERM, SIGINT or when `stop` is cancelled.
async fn stop_asked(stop: &CancellationToken) {
    tokio::select! {
        _ = shutdown_signal() => {}
        _ = stop.cancelled() => {}
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
