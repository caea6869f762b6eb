//! The one door every run goes through: reconciles, plans and validations (the API's actions reach
//! a reconcile or a plan) start Ansible here and nowhere else. The door hands out permits by lane,
//! and a lane fixes what its runs may do: a plan's or a validation's permit issues a dry-run proxy
//! credential whatever its caller asks, and its run gets no in-cluster environment, so the proxy is
//! its only way to the API server. Every run of a kind, in any lane, carries the kind's rights (its
//! declared `permissions`, its identity at the API server) in its credential. Then the kubeconfig,
//! then the runner.

pub mod budget;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::history::live::Registration;
use crate::history::{Read, Touched};
use crate::proxy::Proxy;
use crate::proxy::credentials::Grant;
use crate::proxy::owner::Owner;
use crate::proxy::rights::Rights;
use crate::runner::{self, Report, RunSpec};
use crate::watches::Gvk;
pub use budget::{Budget, Priority};

/// The lane a run's permit was taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A reconcile: the run budget (`--max-concurrent-runs`), new work before resyncs.
    Reconcile,
    /// A plan: its own lane (`--max-concurrent-plans`), waited for.
    Plan,
    /// A validation: its own lane (`--max-concurrent-validations`), with as many places to wait
    /// for a slot as there are slots, for a while; beyond them a review is refused at once, since
    /// the API server waits for the answer and anyone who reaches the port may ask.
    Validation,
}

impl Lane {
    /// Its name in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Reconcile => "reconcile",
            Lane::Plan => "plan",
            Lane::Validation => "validation",
        }
    }

    /// Whether this lane's runs must write nothing.
    pub fn dry_run(self) -> bool {
        self != Lane::Reconcile
    }
}

/// A slot in a lane, given back when dropped; only the door makes one.
#[derive(Debug)]
pub struct Permit {
    lane: Lane,
    _budget: Option<budget::Permit>,
    _lane: Option<OwnedSemaphorePermit>,
}

impl Permit {
    /// The lane it was taken in.
    pub fn lane(&self) -> Lane {
        self.lane
    }
}

/// A lane that answers at once is full.
#[derive(Debug, thiserror::Error)]
#[error("{limit} validations are running and {limit} more waiting (--max-concurrent-validations): try again")]
pub struct Busy {
    /// The lane's size.
    pub limit: usize,
}

/// How many runs each lane lets run at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `--max-concurrent-runs` (0: no limit).
    pub runs: usize,
    /// `--max-concurrent-plans`.
    pub plans: usize,
    /// `--max-concurrent-validations`.
    pub validations: usize,
}

/// What a reconcile's run may do besides acting: which of its children are watched.
#[derive(Debug, Clone, Default)]
pub struct Acting {
    /// The watch's `watchDependentResources`.
    pub watch_dependents: bool,
    /// The watch's `watchClusterScopedResources`.
    pub watch_cluster_scoped: bool,
    /// The watch's `blacklist`.
    pub blacklist: Vec<Gvk>,
}

/// One run to start.
#[derive(Debug)]
pub struct Launch<'a> {
    /// What Ansible is given.
    pub spec: RunSpec,
    /// The CR the run is for.
    pub owner: Owner,
    /// What a reconcile's run may do; a plan's or a validation's ignores it.
    pub acting: Acting,
    /// The CR's run in flight, for the API's live log (a reconcile's main run only).
    pub live: Option<&'a Registration>,
}

/// A run that ended, or could not start.
#[derive(Debug)]
pub struct Ran {
    /// What the run tells.
    pub report: Result<Report, runner::Error>,
    /// The objects it wrote through the proxy.
    pub writes: Vec<Touched>,
    /// The objects it read through the proxy.
    pub reads: Vec<Read>,
}

/// The lanes: a permit of one is taken before a run is composed, and held until it ends.
#[derive(Debug)]
pub struct Lanes {
    budget: Arc<Budget>,
    plans: Arc<Semaphore>,
    validations: Arc<Semaphore>,
    validation_limit: usize,
    /// Reviews waiting for a slot of the validation lane.
    validations_waiting: Arc<std::sync::atomic::AtomicUsize>,
}

impl Lanes {
    /// Lanes of these sizes.
    pub fn new(limits: Limits) -> Lanes {
        Lanes {
            budget: Budget::new(limits.runs),
            plans: Arc::new(Semaphore::new(limits.plans.max(1))),
            validations: Arc::new(Semaphore::new(limits.validations.max(1))),
            validation_limit: limits.validations.max(1),
            validations_waiting: Arc::default(),
        }
    }

    /// Waits for a slot of the run budget.
    pub async fn reconcile_permit(&self, priority: Priority) -> Permit {
        Permit { lane: Lane::Reconcile, _budget: Some(self.budget.acquire(priority).await), _lane: None }
    }

    /// Waits for a slot of the plan lane.
    pub async fn plan_permit(&self) -> Permit {
        let held = self.plans.clone().acquire_owned().await.expect("the plan lane is never closed");
        Permit { lane: Lane::Plan, _budget: None, _lane: Some(held) }
    }

    /// A slot of the validation lane: at once when one is free; else, when fewer reviews wait than
    /// the lane has slots, one freed within `patience`; else [`Busy`] at once. A burst of creates
    /// (a GitOps sync) is served in turn, while a flood waits in a bounded line.
    pub async fn validation_permit(&self, patience: std::time::Duration) -> Result<Permit, Busy> {
        let busy = || Busy { limit: self.validation_limit };
        let permit = |held| Permit { lane: Lane::Validation, _budget: None, _lane: Some(held) };
        if let Ok(held) = self.validations.clone().try_acquire_owned() {
            return Ok(permit(held));
        }
        let waiting = Waiting::join(&self.validations_waiting);
        if waiting.ahead >= self.validation_limit {
            return Err(busy());
        }
        match tokio::time::timeout(patience, self.validations.clone().acquire_owned()).await {
            Ok(Ok(held)) => Ok(permit(held)),
            _ => Err(busy()),
        }
    }

    /// Run budget slots in use now.
    pub fn runs_in_use(&self) -> usize {
        self.budget.in_use()
    }
}

/// A place in a lane's line, left when dropped.
struct Waiting {
    line: Arc<std::sync::atomic::AtomicUsize>,
    /// How many waited when it joined.
    ahead: usize,
}

impl Waiting {
    fn join(line: &Arc<std::sync::atomic::AtomicUsize>) -> Waiting {
        let ahead = line.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Waiting { line: line.clone(), ahead }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.line.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What each watched kind's runs act with.
pub type Kinds = HashMap<Gvk, Arc<Rights>>;

/// Lanes, credentials and the runner, shared by every run of the process.
#[derive(Debug)]
pub struct Door {
    runner: runner::Settings,
    lanes: Lanes,
    /// Each kind's rights, given to every run of it in any lane.
    kinds: Kinds,
}

impl Door {
    /// A door with these lanes, starting runs with `runner`, each kind's runs with its `kinds`
    /// rights.
    pub fn new(runner: runner::Settings, limits: Limits, kinds: Kinds) -> Door {
        Door { runner, lanes: Lanes::new(limits), kinds }
    }

    /// The runner's settings (its runs in flight, to end them at shutdown).
    pub fn runner(&self) -> &runner::Settings {
        &self.runner
    }

    /// The lanes runs take their permits in.
    pub fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    /// Starts one run under `permit` with a proxy credential of its own, revoked when the run ends.
    pub async fn launch(&self, proxy: &Proxy, permit: &Permit, launch: Launch<'_>) -> Ran {
        let Launch { mut spec, owner, acting, live } = launch;
        let lane = permit.lane();
        // A kind the door was not told of (none is) acts with no declared rules, as upstream's.
        let rights = self.kinds.get(&owner.gvk).cloned().unwrap_or_default();
        let grant = match lane {
            Lane::Reconcile => Grant {
                watch_dependents: acting.watch_dependents,
                watch_cluster_scoped: acting.watch_cluster_scoped,
                blacklist: acting.blacklist,
                plan_only: false,
                ..Grant::plan(owner, rights)
            },
            Lane::Plan | Lane::Validation => Grant::plan(owner, rights),
        };
        let span = crate::telemetry::run_span(lane.as_str(), &spec.ident);
        let grant = Grant { trace: span.context(), ..grant };
        if lane.dry_run() {
            spec.env_removed =
                cluster_environment(std::env::vars_os().filter_map(|(name, _)| name.into_string().ok()));
        }
        let namespace = grant.owner.namespace.clone();
        let unwritten = |dir: std::path::PathBuf, source| Ran {
            report: Err(runner::Error::WriteInput { dir, source }),
            writes: Vec::new(),
            reads: Vec::new(),
        };
        // A reconcile's writes to its children do not run its CR again; a plan writes nothing.
        let own_run = grant.watch_dependents.then(|| proxy.own_run(grant.owner.cr_key())).flatten();
        let issued = match proxy.credentials().issue(grant) {
            Ok(issued) => issued,
            Err(source) => return unwritten(spec.dir, source),
        };
        let port = proxy.port();
        let kubeconfig =
            match crate::proxy::kubeconfig::install(&mut spec, port, &issued.token, namespace.as_deref()) {
                Ok(path) => path,
                Err(source) => return unwritten(spec.dir, source),
            };
        let report = runner::run(&self.runner, &spec, live, &issued.grant.secrets).instrument(span).await;
        let ran = Ran { report, writes: issued.grant.writes(), reads: issued.grant.read_set() };
        drop(issued);
        drop(own_run);
        let _ = std::fs::remove_file(kubeconfig);
        ran
    }
}

/// The variables of the operator's environment that lead to the API server around the proxy:
/// the in-cluster service address Kubernetes puts in every container (`KUBERNETES_SERVICE_*`,
/// `KUBERNETES_PORT*`), which clients fall back to without a kubeconfig.
fn cluster_environment(names: impl Iterator<Item = String>) -> Vec<String> {
    names
        .filter(|name| name.starts_with("KUBERNETES_SERVICE_") || name.starts_with("KUBERNETES_PORT"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn lanes(validations: usize) -> Lanes {
        Lanes::new(Limits { runs: 1, plans: 1, validations })
    }

    #[test]
    fn only_a_reconcile_may_write() {
        assert!(!Lane::Reconcile.dry_run());
        assert!(Lane::Plan.dry_run() && Lane::Validation.dry_run());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_validation_lane_lets_as_many_wait_for_a_while_and_answers_the_rest_at_once() {
        let lanes = Arc::new(lanes(2));
        let patience = Duration::from_secs(5);
        let first = lanes.validation_permit(patience).await.expect("a slot");
        let _second = lanes.validation_permit(patience).await.expect("a slot");
        // Two wait; the fifth is answered at once.
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let lanes = lanes.clone();
                tokio::spawn(async move { lanes.validation_permit(patience).await })
            })
            .collect();
        tokio::task::yield_now().await;
        let busy = lanes.validation_permit(patience).await.expect_err("the line is full");
        assert_eq!(
            busy.to_string(),
            "2 validations are running and 2 more waiting (--max-concurrent-validations): try again"
        );
        // A slot freed in time serves the first waiter; the second gives up after its patience.
        drop(first);
        let mut served = Vec::new();
        for waiter in waiters {
            served.push(waiter.await.unwrap());
        }
        assert_eq!(served.iter().map(Result::is_ok).collect::<Vec<_>>(), [true, false]);
        assert!(lanes.validation_permit(Duration::ZERO).await.is_err(), "both slots are taken again");
    }

    #[tokio::test]
    async fn plans_and_validations_do_not_take_the_run_budget() {
        let door = lanes(1);
        let plan = door.plan_permit().await;
        let validation = door.validation_permit(Duration::ZERO).await.expect("a slot");
        assert_eq!(door.runs_in_use(), 0);
        let run = door.reconcile_permit(Priority::Resync).await;
        assert_eq!(
            (plan.lane(), validation.lane(), run.lane()),
            (Lane::Plan, Lane::Validation, Lane::Reconcile)
        );
        assert_eq!(door.runs_in_use(), 1);
    }

    #[test]
    fn the_in_cluster_service_variables_are_the_ones_scrubbed() {
        let names = [
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_PORT_HTTPS",
            "KUBERNETES_PORT_443_TCP_ADDR",
            "KUBERNETES_PORT",
            "KUBECONFIG",
            "HOME",
            "MY_KUBERNETES_SERVICE_HOST",
        ];
        assert_eq!(
            cluster_environment(names.iter().map(|n| n.to_string())),
            [
                "KUBERNETES_SERVICE_HOST",
                "KUBERNETES_SERVICE_PORT_HTTPS",
                "KUBERNETES_PORT_443_TCP_ADDR",
                "KUBERNETES_PORT"
            ]
        );
    }
}
