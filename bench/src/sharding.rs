//! Scenario 5, sharding: the same CRs on one and on `replicas` operator processes with
//! `--sharding`, for two workloads: the stub runner (the runtime alone, `cold`) and a playbook that
//! waits 2 s (`warm`, I/O-bound, so runs in parallel over replicas show even on 2 cores). For each:
//! CRs per replica, time from the first create to all `Successful`, each replica's RSS, and, with
//! several replicas, the time until a SIGKILLed replica's CRs have run on the others (default 15 s
//! leases).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::cluster;
use crate::now;
use crate::operator::{Flavor, Launch, Operator};
use crate::procfs::TreeMemory;
use crate::scenarios::{Ctx, await_all, in_namespace, last_successful, names};
use crate::watch::Tracker;

/// The ring (`--leader-election-id`) the replicas share.
const RING: &str = "bench-shard";
/// The label the sharder puts on each CR.
const SHARD_LABEL: &str = "ansible-operator.dev/shard-bench-shard";
/// How long nothing may progress before a run is given up.
const STALL: Duration = Duration::from_secs(120);

/// What each CR's run does.
#[derive(Debug, Clone, Copy)]
pub enum Workload {
    /// `stub/ansible-runner`: two events and exit (the operator's own cost).
    Stub,
    /// `playbooks/sleep.yml`: one task waiting 2 s.
    Sleep,
}

impl Workload {
    fn as_str(self) -> &'static str {
        match self {
            Workload::Stub => "stub",
            Workload::Sleep => "sleep",
        }
    }
}

/// One row: `n` CRs of `workload` on `replicas` replicas of `flavor`.
pub async fn sharding(
    ctx: &Ctx,
    flavor: &Flavor,
    workload: Workload,
    n: usize,
    replicas: usize,
    concurrency: usize,
) -> Value {
    let mut value = in_namespace(ctx, "bench-shard", async |namespace| {
        sharding_in(ctx, flavor, workload, n, replicas, concurrency, namespace).await
    })
    .await;
    value["binary"] = json!(flavor.label);
    value["workload"] = json!(workload.as_str());
    value["crs"] = json!(n);
    value["replicas"] = json!(replicas);
    value["concurrency"] = json!(concurrency);
    value
}

async fn sharding_in(
    ctx: &Ctx,
    flavor: &Flavor,
    workload: Workload,
    n: usize,
    replicas: usize,
    concurrency: usize,
    namespace: &str,
) -> anyhow::Result<Value> {
    let api = cluster::crs(&ctx.client, namespace);
    let tracker = Tracker::start(api.clone()).await?;
    let label = format!("sharding-{}-{replicas}", workload.as_str());
    let stub = ctx.bench.join("stub");
    let playbook = ctx.playbook("sleep");
    let shards: Vec<String> = (0..replicas).map(|i| format!("replica-{i}")).collect();
    let mut operators = Vec::new();
    for shard in &shards {
        let dir = ctx.scratch(&format!("{label}-{shard}"));
        let launch = Launch {
            namespace,
            playbook: &playbook,
            concurrency,
            reconcile_period: None,
            dir: &dir,
            path_prefix: matches!(workload, Workload::Stub).then_some(stub.as_path()),
            args: vec![
                "--sharding".to_string(),
                format!("--leader-election-id={RING}"),
                format!("--leader-election-namespace={namespace}"),
            ],
            env: vec![("POD_NAME".to_string(), shard.clone())],
            watch_extra: None,
        };
        operators.push(Operator::start(flavor, &launch, &ctx.kubeconfig, &ctx.repo)?);
    }
    let result = measure(ctx, &api, &tracker, &shards, &mut operators, n, namespace).await;
    for (shard, operator) in shards.iter().zip(&mut operators) {
        operator.stop(Duration::from_secs(30));
        ctx.keep_log(operator, &format!("{label}-{shard}"));
    }
    result
}

async fn measure(
    ctx: &Ctx,
    api: &Api<kube::api::DynamicObject>,
    tracker: &Tracker,
    shards: &[String],
    operators: &mut [Operator],
    n: usize,
    namespace: &str,
) -> anyhow::Result<Value> {
    wait_for_shards(ctx, namespace, shards, operators).await?;
    let crs = names("shard", n);
    let started = now();
    let create_seconds = cluster::create_many(api, &crs, 50).await?;
    await_all(tracker, &crs, started, operators, STALL).await?;
    let all_successful = last_successful(tracker, &crs, started) - started;
    eprintln!("bench: sharding: {n} CRs Successful on {} replicas in {all_successful:.1} s", shards.len());

    let placed = placement(api).await?;
    let mut operator_rss = serde_json::Map::new();
    let mut tree_rss = serde_json::Map::new();
    for (shard, operator) in shards.iter().zip(operators.iter()) {
        let memory = TreeMemory::read(operator.pid(), false);
        operator_rss.insert(shard.clone(), json!(memory.as_ref().map(|m| m.root_rss)));
        tree_rss.insert(shard.clone(), json!(memory.as_ref().map(|m| m.tree_rss)));
    }
    let per_replica: BTreeMap<&String, usize> =
        placed.iter().map(|(shard, crs)| (shard, crs.len())).collect();
    let mut value = json!({
        "create_seconds": create_seconds,
        "all_successful_seconds": all_successful,
        "runs_per_second": n as f64 / all_successful,
        "crs_per_replica": per_replica,
        "operator_rss_bytes": operator_rss,
        "tree_rss_bytes": tree_rss,
    });
    if shards.len() > 1 {
        value["recovery"] = recovery(tracker, shards, operators, &placed).await?;
    }
    Ok(value)
}

/// SIGKILLs the last replica; the seconds until each of its CRs has become `Successful` again (on
/// another replica: it is gone).
async fn recovery(
    tracker: &Tracker,
    shards: &[String],
    operators: &mut [Operator],
    placed: &BTreeMap<String, Vec<String>>,
) -> anyhow::Result<Value> {
    let (victim, survivors) = operators.split_last_mut().expect("several replicas");
    let shard = shards.last().expect("several replicas");
    let crs = placed.get(shard).cloned().unwrap_or_default();
    let killed = now();
    victim.kill();
    await_all(tracker, &crs, killed, survivors, STALL).await?;
    let seconds = last_successful(tracker, &crs, killed) - killed;
    eprintln!("bench: sharding: {shard}'s {} CRs ran elsewhere {seconds:.1} s after SIGKILL", crs.len());
    Ok(json!({"replica": shard, "crs": crs.len(), "seconds": seconds}))
}

/// Waits until every replica holds its shard Lease.
async fn wait_for_shards(
    ctx: &Ctx,
    namespace: &str,
    shards: &[String],
    operators: &mut [Operator],
) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("ansible-operator.dev/ring={RING}");
    let deadline = tokio::time::Instant::now() + STALL;
    loop {
        let list = leases.list(&ListParams::default().labels(&selector)).await?;
        let holders: Vec<String> =
            list.items.iter().filter_map(|l| l.spec.as_ref()?.holder_identity.clone()).collect();
        if shards.iter().all(|shard| holders.contains(shard)) {
            return Ok(());
        }
        for operator in operators.iter_mut() {
            operator.check_alive()?;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("shard Leases held: {holders:?}, expected {shards:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// CR names per shard label.
async fn placement(api: &Api<kube::api::DynamicObject>) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut placed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cr in api.list(&ListParams::default()).await?.items {
        let shard = cr.labels().get(SHARD_LABEL).cloned().unwrap_or_else(|| "<none>".to_string());
        placed.entry(shard).or_default().push(cr.name_any());
    }
    Ok(placed)
}
