//! Operating the operator: graceful shutdown, the global run budget, bounded disk use.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::DeleteParams;
use serde_json::json;
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "ops.test.example.com";
const WAIT: Duration = Duration::from_secs(180);

/// The `sleep` commands of the runs in flight: descendants of the operator `root` (cold runs are its
/// children's children; warm runs are forks of its worker), whatever the executor.
fn sleeping_tasks(root: u32) -> usize {
    let parents: Vec<(u32, u32, String)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            Some((pid, ppid, String::from_utf8_lossy(&cmdline).replace('\0', " ")))
        })
        .collect();
    let mut tree = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, ppid, _) in &parents {
            if tree.contains(ppid) && !tree.contains(pid) {
                tree.push(*pid);
                grew = true;
            }
        }
    }
    parents.iter().filter(|(pid, _, cmdline)| tree.contains(pid) && cmdline.starts_with("sleep ")).count()
}

/// Every process still running whose command line mentions `dir` (ansible-runner, ansible-playbook,
/// the modules they start).
/// Processes that name `dir` on their command line or work in it (a warm run's forks have the
/// worker's command line but the run's working directory), as `pid (name): command line`.
fn processes_mentioning(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let state = stat.rsplit_once(')')?.1.split_whitespace().next()?.to_string();
            let cmdline = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).ok()?)
                .replace('\0', " ");
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let ours = cmdline.contains(&needle) || cwd.starts_with(dir);
            (state != "Z" && ours).then(|| format!("{pid} ({}): {cmdline}", name.trim()))
        })
        .collect()
}

#[tokio::test]
async fn sigterm_during_a_long_run_exits_within_the_timeout_and_leaves_no_ansible_process() {
    let Test { client: _, ns, api } = Test::setup("ops-shutdown").kind(GROUP, "Sleeper").build().await;
    let mut operator = OperatorConfig::new(&support::playbook_watch(GROUP, "Sleeper", "sleep.yml"), &ns.name)
        .arg("--graceful-shutdown-timeout=2s")
        .start();
    support::create_cr(&api, GROUP, "Sleeper", "long", json!({"seconds": 300})).await;
    support::wait_for_condition(&api, "long", "Running", "True", WAIT).await;
    let runner_dir = operator.dir.join("runner");
    support::wait_for("the playbook to be running", WAIT, || async {
        let running = processes_mentioning(&runner_dir);
        Ok(if running.iter().any(|p| p.contains("ansible-playbo")) {
            Ok(())
        } else {
            Err(format!("{running:?}"))
        })
    })
    .await;

    let started = Instant::now();
    let status = operator.stop().expect("the operator exits after SIGTERM");
    let took = started.elapsed();
    assert!(status.success(), "exit code 0 after SIGTERM, got {status}");
    assert!(
        took < Duration::from_secs(15),
        "exited after {took:?}: timeout 2s plus at most the 5s kill grace"
    );
    // Give the kernel a moment to reap, then nothing of the run may be left.
    let left = support::wait_for("no ansible process left", Duration::from_secs(5), || async {
        let left = processes_mentioning(&runner_dir);
        Ok(if left.is_empty() { Ok(left) } else { Err(format!("{left:#?}")) })
    })
    .await;
    assert!(left.is_empty());
}

#[tokio::test]
async fn the_global_run_budget_holds_under_a_burst() {
    let Test { client: _, ns, api } = Test::setup("ops-budget").kind(GROUP, "Burst").build().await;
    let operator = OperatorConfig::new(&support::playbook_watch(GROUP, "Burst", "sleep.yml"), &ns.name)
        .arg("--max-concurrent-reconciles=4")
        .arg("--max-concurrent-runs=2")
        .start();
    for i in 0..6 {
        support::create_cr(&api, GROUP, "Burst", &format!("b{i}"), json!({"seconds": 2})).await;
    }
    let mut peak = 0;
    let deadline = Instant::now() + WAIT;
    loop {
        peak = peak.max(sleeping_tasks(operator.pid()));
        let list = api.list(&Default::default()).await.unwrap();
        let done = list
            .items
            .iter()
            .filter(|cr| support::condition(cr, "Successful").is_some_and(|c| c["status"] == "True"))
            .count();
        if done == 6 {
            break;
        }
        assert!(Instant::now() < deadline, "only {done} of 6 CRs succeeded in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(peak <= 2, "at most 2 runs at once (their `sleep` tasks), saw {peak}");
    assert!(peak >= 1, "the sampling saw the runs");
}

#[tokio::test]
async fn a_deleted_crs_runner_directory_is_removed() {
    let Test { client: _, ns, api } = Test::setup("ops-disk").kind(GROUP, "Disk").build().await;
    let operator =
        OperatorConfig::new(&support::playbook_watch(GROUP, "Disk", "sleep.yml"), &ns.name).start();
    support::create_cr(&api, GROUP, "Disk", "d", json!({"seconds": 0})).await;
    support::wait_for_condition(&api, "d", "Successful", "True", WAIT).await;
    let dir = operator.runner_dir(GROUP, "Disk", &ns.name, "d");
    assert!(
        dir.join("artifacts/latest/job_events").is_dir(),
        "the run left its artifacts in {}",
        dir.display()
    );

    api.delete("d", &DeleteParams::default()).await.unwrap();
    support::wait_for("the runner directory to be removed", WAIT, || async {
        Ok(if dir.exists() { Err(format!("{} still exists", dir.display())) } else { Ok(()) })
    })
    .await;
}

/// The memory guard (`--memory-high-water`) in a cgroup with a memory limit: while a run holds
/// memory, the next run would take the operator past the mark, so it waits (no status yet, one log
/// line); once the first lets its memory go, it runs. (It may start while the first run is still
/// writing its recap: the guard follows memory, not runs.)
#[tokio::test]
async fn a_run_waits_for_memory_while_another_holds_it_then_runs() {
    const KIND: &str = "Hoarder";
    const MIB: u64 = 1 << 20;
    const HOLD_SECONDS: i64 = 15;
    let Test { client: _, ns, api } = Test::setup("ops-memory").kind(GROUP, KIND).build().await;
    let cgroup = support::cgroup::TestCgroup::create(&ns.name, 4096 * MIB);
    let operator = OperatorConfig::new(&support::playbook_watch(GROUP, KIND, "hold_memory.yml"), &ns.name)
        .arg("--memory-high-water=0.5")
        .arg("--run-memory-estimate=150Mi")
        .arg("--max-concurrent-reconciles=4")
        .in_cgroup(cgroup.dir())
        .start();
    let hold = |mib: u64, seconds: i64| json!({"holdMib": mib, "holdSeconds": seconds});
    support::create_cr(&api, GROUP, KIND, "warmup", hold(0, 0)).await;
    support::wait_for_condition(&api, "warmup", "Successful", "True", WAIT).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The mark 250 MiB above the idle operator: the estimate fits, the estimate beside a run
    // holding 250 MiB does not.
    let idle = cgroup.working_set();
    cgroup.set_limit(2 * (idle + 250 * MIB));

    support::create_cr(&api, GROUP, KIND, "hog", hold(250, HOLD_SECONDS)).await;
    support::wait_for("the hog's memory in the cgroup", WAIT, || async {
        let grown = cgroup.working_set().saturating_sub(idle) / MIB;
        Ok((grown >= 200).then_some(()).ok_or(format!("{grown} MiB above idle")))
    })
    .await;
    support::create_cr(&api, GROUP, KIND, "after", hold(0, 0)).await;
    support::wait_for("the guard to hold the run", WAIT, || async {
        let held = operator.log().contains("a run waits for memory");
        Ok(held.then_some(()).ok_or_else(|| "not held yet".to_string()))
    })
    .await;
    let hog = api.get("hog").await.unwrap();
    let hog_running = support::condition(&hog, "Running").unwrap();
    assert_eq!(hog_running["reason"], "Running");
    let after = api.get("after").await.unwrap();
    assert_eq!(after.data["status"], serde_json::Value::Null, "held before it was admitted");

    let after = support::wait_for_condition(&api, "after", "Successful", "True", WAIT).await;
    let started = |condition: &serde_json::Value| {
        let at = condition["lastTransitionTime"].as_str().unwrap_or_default();
        at.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("lastTransitionTime {at:?}: {e}"))
    };
    let hog_started = started(hog_running);
    let after_started = started(support::condition(&after, "Running").unwrap());
    // Both times are whole seconds, so each may read up to 1 s early: the hold began after the hog's
    // Running was written and lasted 15 s, so "after" read at least 14 s later.
    let waited = after_started.duration_since(hog_started).as_secs();
    assert!(
        waited >= HOLD_SECONDS - 1,
        "after started {waited} s after the hog (at {after_started}, the hog at {hog_started}): \
         it did not wait for the hog's {HOLD_SECONDS} s hold"
    );
    drop(operator);
}
