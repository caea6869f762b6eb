//! Running a CR once admitted: its hosts (inventory, SSH key), the watch's precheck, then the main
//! target or the finalizer, each run with a proxy credential of its own. A plan takes the same
//! steps in check mode (see [`Mode`]).

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use super::context::Context;
use super::journal::Journal;
use super::judge::{self, Failure};
use super::spec::{new_ident, plan_args, plan_dir, run_spec};
use crate::history::record::RunInput;
use crate::proxy::owner::Owner;
use crate::remote;
use crate::run::{Acting, Lane, Launch, Permit};
use crate::runner::{self, RunSpec};

/// A main run that ended: its report, and the inventory's hosts when the watch renders one.
#[derive(Debug)]
pub struct Finished {
    /// What the run tells.
    pub report: runner::Report,
    /// The hosts of the rendered inventory.
    pub inventory_hosts: Option<Vec<String>>,
}

/// Prepares the hosts, runs the precheck (unless finalizing) and then the main target or the
/// finalizer, under `permit`. A permit of the plan lane makes it a plan: check mode with `--diff`, a
/// dry-run proxy credential, a data directory of its own, and no live log as the CR's run in
/// flight. A failure before the main run ends, or a main run that could not start, is returned for
/// the status.
pub async fn run(
    ctx: &Context,
    current: &DynamicObject,
    finalizing: bool,
    ident: String,
    key: &str,
    journal: &mut Journal,
    permit: &Permit,
) -> Result<Finished, Failure> {
    let plan = permit.lane() == Lane::Plan;
    let object_json = serde_json::to_value(current).unwrap_or(Value::Null);
    let namespace = current.namespace();
    let remote = remote::prepare(&ctx.client, &ctx.watch.extensions, &object_json, namespace.as_deref())
        .await
        .map_err(|source| Failure::remote(key, source))?;
    let inputs = ctx.settings.inputs();
    let inventory_hosts =
        remote.as_ref().and_then(|r| r.inventory.as_ref()).map(|(_, hosts)| hosts.as_slice());
    let main_ident = ident.clone();
    let spec_of = |ident| {
        let mut spec =
            run_spec(&ctx.watch, &inputs, current, &object_json, finalizing, ident, remote.as_ref());
        if plan {
            spec.dir = plan_dir(&ctx.settings, &main_ident);
            spec.ansible_args = plan_args(&spec.ansible_args);
        }
        spec
    };
    if let (false, Some(precheck)) = (finalizing, &ctx.watch.extensions.precheck) {
        let mut spec = spec_of(new_ident());
        spec.target = precheck.clone();
        let report = run_ansible(ctx, current, spec, journal, permit)
            .await
            .map_err(|source| Failure::unable_to_run(key, source))?;
        if let Some(failure) = judge::precheck(&report, inventory_hosts, key) {
            journal.report = Some(report);
            return Err(failure);
        }
    }
    let spec = spec_of(ident);
    if !plan {
        if ctx.settings.record_run_inputs {
            journal.input = Some(RunInput { object: object_json.clone(), finalizing });
        }
        journal.log = Some(spec.artifact_dir().join("stdout").display().to_string());
    }
    let report = run_ansible(ctx, current, spec, journal, permit)
        .await
        .map_err(|source| Failure::unable_to_run(key, source))?;
    Ok(Finished { report, inventory_hosts: inventory_hosts.map(<[String]>::to_vec) })
}

/// Runs ansible-runner once through the door, under `permit`. The objects it wrote and read and
/// its executor go to the journal.
async fn run_ansible(
    ctx: &Context,
    object: &DynamicObject,
    spec: RunSpec,
    journal: &mut Journal,
    permit: &Permit,
) -> Result<runner::Report, runner::Error> {
    let watch = &ctx.watch;
    let owner = Owner {
        gvk: watch.gvk.clone(),
        plural: ctx.resource.plural.clone(),
        name: object.name_any(),
        uid: object.uid().unwrap_or_default(),
        namespace: object.namespace().filter(|_| ctx.namespaced),
        shard_label: ctx.settings.sharding.as_ref().and_then(|membership| {
            let key = membership.shard_label();
            object.labels().get(&key).map(|shard| (key, shard.clone()))
        }),
    };
    let acting = Acting {
        watch_dependents: watch.watch_dependent_resources,
        watch_cluster_scoped: watch.watch_cluster_scoped_resources,
        blacklist: watch.blacklist.clone(),
    };
    let in_flight = ctx.metrics.run_started();
    let trigger = serde_json::to_value(&journal.trigger).unwrap_or_default();
    // A plan is not the CR's run in flight.
    let live = (permit.lane() == Lane::Reconcile)
        .then(|| ctx.settings.live.start(&object.uid().unwrap_or_default(), &spec.ident, trigger));
    let launch = Launch { spec, owner, acting, live: live.as_ref() };
    let ran = ctx.settings.door.launch(&ctx.proxy, permit, launch).await;
    drop(live);
    drop(in_flight);
    journal.writes.extend(ran.writes);
    journal.reads.extend(ran.reads);
    if let Ok(report) = &ran.report {
        journal.executor = Some(report.executor);
    }
    ran.report
}
