//! Scale-out with `--sharding`, against the real API server with several operator processes: every
//! replica reconciles its share (each CR once, shares within ±20%, each cache holding only its
//! share), a SIGKILLed replica's CRs move to the others within the lease duration + 10 s, a new
//! replica takes its share through the drain handover, a replica stopped with SIGTERM hands its
//! CRs on at once, scaling 3 → 5 moves little more than the new shards' share, and across scaling
//! 3 → 5 → 2 and a rolling restart no two runs of one CR ever overlap. Children created through the proxy carry
//! their owner's shard, and the run history names it. Without `--sharding` nothing is labelled.
//!
//! The replicas run a stand-in `ansible-runner` (like bench/stub) that appends `start`/`end` lines
//! with its replica's name to a shared log and sleeps between them: what is measured is the
//! operator's assignment and handover, on two cores, not Ansible.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;
use support::operator::{Operator, OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "sharding.test.example.com";
const KIND: &str = "Sharded";
/// The leader-election ID, and so the ring's name.
const RING: &str = "sharding-test";
const SHARD_LABEL: &str = "ansible-operator.dev/shard-sharding-test";
const DRAIN_LABEL: &str = "ansible-operator.dev/drain-sharding-test";
/// Short leases so that a killed replica is noticed quickly, long enough that a replica on two busy
/// cores renews in time.
const LEASE_SECONDS: u64 = 8;
const WAIT: Duration = Duration::from_secs(150);

/// The tests that run three to five replicas take turns: at once, with the other lanes of
/// `make test`, they starve two cores so far that Leases miss their renewals and the timings they
/// measure (recovery within the lease duration + 10 s) say more about the machine than the operator.
static REPLICA_SETS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The stand-in runner: records each run's start and end with the replica's name, then prints the
/// two events of a successful run (as bench/stub/ansible-runner).
const STUB: &str = r#"#!/bin/sh
if [ "$1" != run ]; then echo "2.4.0"; exit 0; fi
cr=$(basename "$2")
echo "start $(date +%s%N) $SHARD_TEST_REPLICA $cr" >> "$SHARD_TEST_LOG"
sleep "${SHARD_TEST_SLEEP:-0}"
echo "end $(date +%s%N) $SHARD_TEST_REPLICA $cr" >> "$SHARD_TEST_LOG"
now=$(date -u +%Y-%m-%dT%H:%M:%S.%6N+00:00)
printf '{"uuid":"stub-1","counter":1,"event":"playbook_on_start","created":"%s","stdout":"","event_data":{}}\n' "$now"
printf '{"uuid":"stub-2","counter":2,"event":"playbook_on_stats","created":"%s","stdout":"","event_data":{"changed":{},"dark":{},"failures":{},"ignored":{},"ok":{"localhost":1},"processed":{"localhost":1},"rescued":{},"skipped":{}}}\n' "$now"
"#;

/// A directory holding the stand-in `ansible-runner`, and the run log its runs append to.
struct Stub {
    bin: PathBuf,
    log: PathBuf,
}

impl Stub {
    fn new(label: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch_dir(label);
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let runner = bin.join("ansible-runner");
        std::fs::write(&runner, STUB).unwrap();
        std::fs::set_permissions(&runner, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { bin, log: dir.join("runs.log") }
    }

    /// Every run so far, per CR name.
    fn runs(&self) -> HashMap<String, Vec<Run>> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut open: HashMap<(String, String), Vec<u128>> = HashMap::new();
        let mut runs: HashMap<String, Vec<Run>> = HashMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [what, at, replica, cr] = fields[..] else { continue };
            let at: u128 = at.parse().unwrap_or_default();
            let key = (replica.to_string(), cr.to_string());
            match what {
                "start" => open.entry(key).or_default().push(at),
                "end" => {
                    let start =
                        open.get_mut(&key).and_then(|starts| (!starts.is_empty()).then(|| starts.remove(0)));
                    let start = start.unwrap_or_else(|| panic!("end without start: {line}"));
                    runs.entry(cr.to_string()).or_default().push(Run {
                        replica: replica.to_string(),
                        start,
                        end: Some(at),
                    });
                }
                _ => {}
            }
        }
        for ((replica, cr), starts) in open {
            for start in starts {
                runs.entry(cr.clone()).or_default().push(Run { replica: replica.clone(), start, end: None });
            }
        }
        for list in runs.values_mut() {
            list.sort_by_key(|run| run.start);
        }
        runs
    }
}

/// One run of one CR, in nanoseconds since the epoch.
#[derive(Debug, Clone)]
struct Run {
    replica: String,
    start: u128,
    end: Option<u128>,
}

fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// The time from one `now_nanos` to a later one.
fn between(from: u128, to: u128) -> Duration {
    Duration::from_nanos(u64::try_from(to - from).unwrap())
}

/// A sharded replica named `name` on the stub, with a metrics port.
fn replica(namespace: &str, stub: &Stub, name: &str, sleep: &str, extra: &[&str]) -> (Operator, u16) {
    let port = support::free_port();
    let path = format!(
        "{}:{}:{}",
        stub.bin.display(),
        support::repo().join(".local/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let watches = watches();
    let mut config = OperatorConfig::new(&watches, namespace)
        .arg("--sharding")
        .arg(format!("--leader-election-id={RING}"))
        .arg(format!("--leader-election-namespace={namespace}"))
        .arg(format!("--leader-elect-lease-duration={LEASE_SECONDS}s"))
        .arg("--leader-elect-renew-deadline=6s")
        .arg("--ansible-executor=cold")
        .arg("--max-concurrent-reconciles=4")
        .arg("--run-history-limit=0")
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .env("PATH", path)
        .env("POD_NAME", name)
        .env("SHARD_TEST_REPLICA", name)
        .env("SHARD_TEST_LOG", stub.log.display().to_string())
        .env("SHARD_TEST_SLEEP", sleep);
    for arg in extra {
        config = config.arg(*arg);
    }
    (config.start(), port)
}

fn watches() -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/marker.yml\n"
    )
}

/// Creates `count` CRs `cr-<i>`, 32 at a time.
async fn create_crs(api: &Api<DynamicObject>, count: usize) {
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move { support::create_cr(&api, GROUP, KIND, &format!("cr-{i:04}"), json!({"i": i})).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Waits until the shard Leases of `names` are held.
async fn wait_for_members(client: &kube::Client, namespace: &str, names: &[&str]) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    support::wait_for(&format!("shard leases of {names:?}"), WAIT, || async {
        let list = leases
            .list(&ListParams::default().labels(&format!("ansible-operator.dev/ring={RING}")))
            .await
            .map_err(|e| e.to_string())?;
        let holders: Vec<String> =
            list.items.iter().filter_map(|l| l.spec.as_ref()?.holder_identity.clone()).collect();
        let all = names.iter().all(|name| holders.iter().any(|h| h == name));
        Ok(if all { Ok(()) } else { Err(format!("holders {holders:?}")) })
    })
    .await;
}

/// Waits until every CR is `Successful`; returns them.
async fn wait_all_successful(api: &Api<DynamicObject>, count: usize) -> Vec<DynamicObject> {
    support::wait_for(&format!("{count} CRs to be Successful"), WAIT, || async {
        let list = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let done = list
            .items
            .iter()
            .filter(|cr| support::condition(cr, "Successful").is_some_and(|c| c["status"] == "True"))
            .count();
        Ok(if done == count && list.items.len() == count {
            Ok(list.items)
        } else {
            Err(format!("{done} of {count}"))
        })
    })
    .await
}

/// Waits until each of `count` CRs is labelled for a shard and has finished a run there (with
/// periodic runs some CR is always `Running`, so the status cannot tell); returns the CRs.
async fn wait_all_ran(api: &Api<DynamicObject>, stub: &Stub, count: usize) -> Vec<DynamicObject> {
    support::wait_for(&format!("{count} CRs to have run on their shard"), WAIT, || async {
        let crs = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let runs = stub.runs();
        let ran = crs
            .iter()
            .filter(|cr| {
                let shard = cr.labels().get(SHARD_LABEL);
                runs.get(&cr.name_any()).is_some_and(|list| {
                    list.iter().any(|run| Some(&run.replica) == shard && run.end.is_some())
                })
            })
            .count();
        Ok(if ran == count && crs.len() == count { Ok(crs) } else { Err(format!("{ran} of {count}")) })
    })
    .await
}

/// CR names per shard label.
fn by_shard(crs: &[DynamicObject]) -> BTreeMap<String, Vec<String>> {
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cr in crs {
        let shard = cr.labels().get(SHARD_LABEL).cloned().unwrap_or_else(|| "<none>".to_string());
        shards.entry(shard).or_default().push(cr.name_any());
    }
    shards
}

/// The value of `ansible_operator_shard_crs` on a replica's metrics endpoint.
fn cached_crs(port: u16) -> Option<i64> {
    let (_, body) = support::http_get(port, "/metrics", None)?;
    body.lines()
        .find(|line| line.starts_with("ansible_operator_shard_crs{"))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

/// Fails when two runs of one CR overlap in time.
fn assert_no_overlap(runs: &HashMap<String, Vec<Run>>) {
    for (cr, list) in runs {
        for pair in list.windows(2) {
            let end = pair[0].end.unwrap_or_else(|| panic!("{cr}: run without end before another: {pair:?}"));
            assert!(end <= pair[1].start, "{cr}: runs overlap: {pair:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_split_six_hundred_crs_and_run_each_once() {
    const COUNT: usize = 600;
    let _turn = REPLICA_SETS.lock().await;
    let Test { client, ns, api } = Test::setup("sharding-split").kind(GROUP, KIND).build().await;
    let stub = Stub::new("sharding-split");
    let names = ["replica-a", "replica-b", "replica-c"];
    let replicas: Vec<(Operator, u16)> =
        names.iter().map(|name| replica(&ns.name, &stub, name, "0", &[])).collect();
    wait_for_members(&client, &ns.name, &names).await;

    let started = std::time::Instant::now();
    create_crs(&api, COUNT).await;
    let crs = wait_all_successful(&api, COUNT).await;
    eprintln!("{COUNT} CRs Successful on 3 replicas in {:?}", started.elapsed());

    let shards = by_shard(&crs);
    let counts: BTreeMap<&String, usize> = shards.iter().map(|(shard, crs)| (shard, crs.len())).collect();
    assert_eq!(shards.keys().collect::<Vec<_>>(), names, "every CR on a replica: {counts:?}");
    for (shard, count) in &counts {
        assert!((160..=240).contains(count), "{shard} owns {count} of {COUNT}: {counts:?}");
    }
    assert!(crs.iter().all(|cr| !cr.labels().contains_key(DRAIN_LABEL)), "no CR left draining");

    // Each CR ran once, on the replica its label names.
    let runs = stub.runs();
    for cr in &crs {
        let list = runs.get(&cr.name_any()).cloned().unwrap_or_default();
        assert_eq!(list.len(), 1, "{} ran {} times: {list:?}", cr.name_any(), list.len());
        assert_eq!(Some(&list[0].replica), cr.labels().get(SHARD_LABEL), "{} ran elsewhere", cr.name_any());
    }

    // Each replica's watch cache holds its share and no more.
    for ((name, (_, port)), (shard, count)) in names.iter().zip(&replicas).zip(&counts) {
        assert_eq!(name, shard);
        let expected = i64::try_from(*count).unwrap();
        support::wait_for(&format!("{name}'s cache size"), Duration::from_secs(10), || async {
            let cached = cached_crs(*port);
            Ok(if cached == Some(expected) {
                Ok(())
            } else {
                Err(format!("{cached:?}, expected {expected}"))
            })
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_stopped_and_new_replicas_hand_crs_on_without_overlapping_runs() {
    const COUNT: usize = 30;
    let _turn = REPLICA_SETS.lock().await;
    let Test { client, ns, api } = Test::setup("sharding-moves").kind(GROUP, KIND).build().await;
    let stub = Stub::new("sharding-moves");
    // Runs take 0.5 s and come back every 8 s, so handovers happen while CRs run, and two replicas
    // on two busy cores keep up with all 30 (an overloaded replica's queue delays new CRs).
    let periodic = ["--reconcile-period=8s"];
    let mut a = replica(&ns.name, &stub, "replica-a", "0.5", &periodic);
    let mut b = replica(&ns.name, &stub, "replica-b", "0.5", &periodic);
    let mut c = replica(&ns.name, &stub, "replica-c", "0.5", &periodic);
    wait_for_members(&client, &ns.name, &["replica-a", "replica-b", "replica-c"]).await;
    create_crs(&api, COUNT).await;
    let crs = wait_all_ran(&api, &stub, COUNT).await;
    let before = by_shard(&crs);
    let on_b = before.get("replica-b").cloned().unwrap_or_default();
    assert!(!on_b.is_empty(), "replica-b owns CRs: {before:?}");

    // SIGKILL: b's CRs must run elsewhere within the lease duration + 10 s.
    b.0.kill();
    let killed_at = now_nanos();
    let deadline = Duration::from_secs(LEASE_SECONDS + 10);
    let recovered = support::wait_for(
        "replica-b's CRs to run on another replica",
        deadline + Duration::from_secs(20),
        || async {
            let runs = stub.runs();
            let waiting: Vec<&String> = on_b
                .iter()
                .filter(|cr| {
                    !runs.get(*cr).is_some_and(|list| {
                        list.iter().any(|run| run.replica != "replica-b" && run.start > killed_at)
                    })
                })
                .collect();
            Ok(if waiting.is_empty() {
                Ok(now_nanos())
            } else {
                Err(format!("{} still waiting", waiting.len()))
            })
        },
    )
    .await;
    let took = between(killed_at, recovered);
    eprintln!("replica-b's {} CRs ran elsewhere {took:?} after the kill", on_b.len());
    assert!(took <= deadline, "recovery took {took:?}, more than {deadline:?}");
    let after_kill = by_shard(&api.list(&ListParams::default()).await.unwrap().items);
    assert!(!after_kill.contains_key("replica-b"), "nothing left on the killed replica: {after_kill:?}");

    // A new replica takes its share through drain handovers, while the others keep running.
    let d = replica(&ns.name, &stub, "replica-d", "0.5", &periodic);
    let joined_at = now_nanos();
    support::wait_for("replica-d to run its share", WAIT, || async {
        let crs = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let shards = by_shard(&crs);
        let mine = shards.get("replica-d").cloned().unwrap_or_default();
        let runs = stub.runs();
        let ran = mine
            .iter()
            .filter(|cr| {
                runs.get(*cr)
                    .is_some_and(|l| l.iter().any(|r| r.replica == "replica-d" && r.start > joined_at))
            })
            .count();
        let counts: BTreeMap<&String, usize> = shards.iter().map(|(s, l)| (s, l.len())).collect();
        let draining = crs.iter().filter(|cr| cr.labels().contains_key(DRAIN_LABEL)).count();
        let balanced = mine.len() >= 8 && draining == 0 && !shards.contains_key("<none>");
        Ok(if balanced && ran == mine.len() {
            Ok(())
        } else {
            Err(format!("{counts:?}, {ran} ran on d, {draining} draining"))
        })
    })
    .await;

    // A replica stopped gracefully lets its runs finish, then releases its Lease: its CRs run
    // elsewhere sooner than a Lease could expire.
    let crs = api.list(&ListParams::default()).await.unwrap().items;
    let on_a = by_shard(&crs).get("replica-a").cloned().unwrap_or_default();
    assert!(!on_a.is_empty(), "replica-a owns CRs");
    a.0.terminate(Duration::from_secs(15)).expect("replica-a stops on SIGTERM");
    let stopped_at = now_nanos();
    let handed_on =
        support::wait_for("replica-a's CRs to run elsewhere", Duration::from_secs(30), || async {
            let runs = stub.runs();
            let waiting = on_a
                .iter()
                .filter(|cr| {
                    !runs
                        .get(*cr)
                        .is_some_and(|l| l.iter().any(|r| r.replica != "replica-a" && r.start > stopped_at))
                })
                .count();
            Ok(if waiting == 0 { Ok(now_nanos()) } else { Err(format!("{waiting} still waiting")) })
        })
        .await;
    let took = between(stopped_at, handed_on);
    eprintln!("replica-a's {} CRs ran elsewhere {took:?} after it stopped", on_a.len());
    assert!(
        took < Duration::from_secs(LEASE_SECONDS),
        "a released shard is handed on at once, took {took:?}"
    );

    // Stop everyone (b's leftover runs end within their 0.5 s sleep), then check every run's interval.
    drop(d);
    c.0.terminate(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = stub.runs();
    let total: usize = runs.values().map(Vec::len).sum();
    eprintln!("{total} runs of {COUNT} CRs checked for overlap");
    assert_no_overlap(&runs);
}

/// Waits until every CR is labelled for one of `shards`, none is draining, each shard owns at
/// least `min`, and every CR has run on its shard since `since`; returns the CRs per shard.
async fn wait_settled(
    api: &Api<DynamicObject>,
    stub: &Stub,
    shards: &[&str],
    min: usize,
    since: u128,
) -> BTreeMap<String, Vec<String>> {
    support::wait_for(&format!("the CRs to settle on {shards:?}"), WAIT, || async {
        let crs = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
        let owned = by_shard(&crs);
        let counts: BTreeMap<&String, usize> = owned.iter().map(|(s, l)| (s, l.len())).collect();
        let runs = stub.runs();
        let waiting = crs
            .iter()
            .filter(|cr| {
                let shard = cr.labels().get(SHARD_LABEL);
                !runs.get(&cr.name_any()).is_some_and(|list| {
                    list.iter().any(|r| Some(&r.replica) == shard && r.start > since && r.end.is_some())
                })
            })
            .count();
        let draining = crs.iter().filter(|cr| cr.labels().contains_key(DRAIN_LABEL)).count();
        let placed = owned.keys().all(|s| shards.contains(&s.as_str()))
            && shards.iter().all(|s| owned.get(*s).is_some_and(|l| l.len() >= min));
        Ok(if placed && draining == 0 && waiting == 0 {
            Ok(owned)
        } else {
            Err(format!("{counts:?}, {draining} draining, {waiting} not yet run on their shard"))
        })
    })
    .await
}

/// CRs whose shard changed between two placements, among those whose old shard still exists.
fn moved(before: &BTreeMap<String, Vec<String>>, after: &BTreeMap<String, Vec<String>>) -> usize {
    before
        .iter()
        .filter(|(shard, _)| after.contains_key(*shard))
        .map(|(shard, crs)| crs.iter().filter(|cr| !after[shard].contains(cr)).count())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn scaling_three_to_five_to_two_and_a_rolling_restart_never_overlap_runs() {
    const COUNT: usize = 30;
    let _turn = REPLICA_SETS.lock().await;
    let Test { client, ns, api } = Test::setup("sharding-scale").kind(GROUP, KIND).build().await;
    let stub = Stub::new("sharding-scale");
    let periodic = ["--reconcile-period=8s"];
    let start = |name: &str| replica(&ns.name, &stub, name, "0.5", &periodic).0;
    let mut replicas: BTreeMap<String, Operator> =
        ["r1", "r2", "r3"].into_iter().map(|name| (name.to_string(), start(name))).collect();
    wait_for_members(&client, &ns.name, &["r1", "r2", "r3"]).await;
    create_crs(&api, COUNT).await;
    let three = wait_settled(&api, &stub, &["r1", "r2", "r3"], 6, 0).await;

    // 3 → 5: the new shards take their share; the old ones give up no more than that.
    for name in ["r4", "r5"] {
        replicas.insert(name.to_string(), start(name));
    }
    let since = now_nanos();
    let five = wait_settled(&api, &stub, &["r1", "r2", "r3", "r4", "r5"], 3, since).await;
    // The least that can move is what the new shards now own; bounded loads may move a few more.
    let moves = moved(&three, &five);
    let needed = five["r4"].len() + five["r5"].len();
    eprintln!("3 → 5 replicas: {moves} CRs moved ({needed} needed), took {:?}", elapsed_since(since));
    assert!(moves <= needed + 3, "3 → 5 moved {moves} CRs for {needed}: {three:?} → {five:?}");

    // 5 → 2, as a Deployment scales down: SIGTERM to three replicas at once, the sharder among them.
    let mut leaving: Vec<Operator> =
        ["r1", "r3", "r5"].iter().map(|name| replicas.remove(*name).unwrap()).collect();
    let since = now_nanos();
    std::thread::scope(|scope| {
        for operator in &mut leaving {
            scope.spawn(|| operator.terminate(Duration::from_secs(20)).expect("a replica stops on SIGTERM"));
        }
    });
    wait_settled(&api, &stub, &["r2", "r4"], 10, since).await;
    eprintln!("5 → 2 replicas settled in {:?}", elapsed_since(since));

    // A rolling restart: each replica replaced by a new Pod, started before the old one stops.
    let since = now_nanos();
    for (old, new) in [("r2", "r2-new"), ("r4", "r4-new")] {
        replicas.insert(new.to_string(), start(new));
        wait_for_members(&client, &ns.name, &[new]).await;
        replicas.remove(old).unwrap().terminate(Duration::from_secs(20)).expect("the old replica stops");
    }
    wait_settled(&api, &stub, &["r2-new", "r4-new"], 10, since).await;
    eprintln!("rolling restart settled in {:?}", elapsed_since(since));

    replicas.clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = stub.runs();
    let total: usize = runs.values().map(Vec::len).sum();
    eprintln!("{total} runs of {COUNT} CRs checked for overlap");
    assert_no_overlap(&runs);
}

fn elapsed_since(nanos: u128) -> Duration {
    between(nanos, now_nanos())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_sharding_nothing_is_labelled_and_no_shard_lease_exists() {
    let Test { client, ns, api } = Test::setup("sharding-off").kind(GROUP, KIND).build().await;
    let stub = Stub::new("sharding-off");
    let path = format!("{}:{}", stub.bin.display(), std::env::var("PATH").unwrap_or_default());
    let _operator = OperatorConfig::new(&watches(), &ns.name)
        .arg("--ansible-executor=cold")
        .arg("--run-history-limit=0")
        .env("PATH", path)
        .env("SHARD_TEST_REPLICA", "single")
        .env("SHARD_TEST_LOG", stub.log.display().to_string())
        .start();
    create_crs(&api, 5).await;
    let crs = wait_all_successful(&api, 5).await;
    for cr in &crs {
        let sharding: Vec<&String> =
            cr.labels().keys().filter(|key| key.starts_with("ansible-operator.dev/")).collect();
        assert!(sharding.is_empty(), "{} has labels {sharding:?}", cr.name_any());
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    assert!(leases.list(&ListParams::default()).await.unwrap().items.is_empty(), "no Lease without sharding");
    assert_eq!(stub.runs().values().map(Vec::len).sum::<usize>(), 5, "one run per CR");
}

#[tokio::test(flavor = "multi_thread")]
async fn children_created_through_the_proxy_carry_the_owner_s_shard_and_are_watched() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let Test { client, ns, api } =
        Test::setup("sharding-children").kind(GROUP, KIND).run_records().build().await;
    // A real playbook (marker.yml writes ConfigMap <name>-marker through the proxy).
    let (health, metrics) = (support::free_port(), support::free_port());
    let operator = OperatorConfig::new(&watches(), &ns.name)
        .arg("--sharding")
        .arg(format!("--leader-election-id={RING}"))
        .arg(format!("--leader-election-namespace={}", ns.name))
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
        .env("POD_NAME", "replica-a")
        .start();
    // Readiness and metrics name the shard.
    let body = support::wait_for("/readyz to answer 200", WAIT, || async {
        let reply = support::http_get(health, "/readyz", None);
        Ok(match reply {
            Some((200, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        })
    })
    .await;
    assert_eq!(body, format!("ok: shard replica-a of ring {RING}"));
    let (_, text) = support::http_get(metrics, "/metrics", None).unwrap();
    let info = format!("ansible_operator_shard_info{{ring=\"{RING}\",shard=\"replica-a\"}} 1");
    assert!(text.contains(&info), "{info} in\n{text}");
    // A CR too deep to decode beside it stops neither the sharder nor the shard: it is named and
    // given to no shard.
    let dir = scratch_dir(&format!("{}-crs", ns.name));
    support::create_deep_cr(&dir, GROUP, KIND, &ns.name, "deep", 200);
    support::create_cr(&api, GROUP, KIND, "owner", json!({})).await;
    let cr = support::wait_for_condition(&api, "owner", "Successful", "True", WAIT).await;
    assert_eq!(cr.labels().get(SHARD_LABEL).map(String::as_str), Some("replica-a"));
    let log = operator.log();
    assert!(
        log.lines().any(|l| l.contains("it is given to no shard") && l.contains("\"deep\"")),
        "the sharder names the deep CR:\n{log}"
    );

    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let child = config_maps.get("owner-marker").await.expect("the playbook's ConfigMap");
    assert_eq!(child.labels().get(SHARD_LABEL).map(String::as_str), Some("replica-a"), "child labelled");

    // The run history names the shard that ran it.
    let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "ansible-operator.dev",
        "v1alpha1",
        "AnsibleRun",
    ));
    let records: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &resource);
    let shards: Vec<String> = support::wait_for("a run record", WAIT, || async {
        let list = records.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let shards: Vec<String> = list
            .items
            .iter()
            .map(|r| r.data["spec"]["shard"].as_str().unwrap_or("<none>").to_string())
            .collect();
        Ok(if shards.is_empty() { Err("no record yet".to_string()) } else { Ok(shards) })
    })
    .await;
    assert!(shards.iter().all(|shard| shard == "replica-a"), "{shards:?}");

    // The shard-filtered dependent watch sees the child: deleting it brings a run that recreates it.
    let uid = child.uid();
    support::delete_ignoring_missing(&config_maps, "owner-marker").await;
    support::wait_for("the child to be recreated", WAIT, || async {
        let found = config_maps.get_opt("owner-marker").await.map_err(|e| e.to_string())?;
        Ok(match found {
            Some(cm) if cm.uid() != uid => Ok(()),
            other => Err(format!("{:?}", other.map(|cm| cm.uid()))),
        })
    })
    .await;

    // A child labelled for another shard (as after its CR moved) is relabelled when the owner's
    // next run reads it.
    let relabel = json!({"metadata": {"labels": {SHARD_LABEL: "replica-old"}}});
    config_maps
        .patch("owner-marker", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&relabel))
        .await
        .expect("relabel the child");
    let bump = json!({"spec": {"bump": 1}});
    api.patch("owner", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&bump))
        .await
        .expect("change the CR");
    support::wait_for("the child to be back on the owner's shard", WAIT, || async {
        let child = config_maps.get("owner-marker").await.map_err(|e| e.to_string())?;
        let shard = child.labels().get(SHARD_LABEL).cloned();
        Ok(if shard.as_deref() == Some("replica-a") { Ok(()) } else { Err(format!("{shard:?}")) })
    })
    .await;
}
