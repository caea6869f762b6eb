//! The fault suite: what a user sees when a run goes wrong in ways Ansible does not report itself.
//! A run that hangs past its timeout (`runTimeout`, `--ansible-run-timeout`) is ended with its
//! whole process tree, the CR gets `Failure` with reason `RunTimedOut` naming the timeout and the
//! task, the run history says `TimedOut`, and the CR is retried; a timed-out finalizer stays. An
//! operator SIGKILLed mid-run leaves its run behind only until it is restarted.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "faults.test.example.com";
const KIND: &str = "Hung";
const FINALIZER: &str = "faults.test.example.com/cleanup";
const WAIT: Duration = Duration::from_secs(180);

/// A watch of `hang.yml` whose runs record their sleep's pid in `markers`, with `extra` lines.
fn watch(markers: &Path, extra: &str) -> String {
    format!(
        "{}  vars:\n    marker_dir: {}\n{extra}",
        support::playbook_watch(GROUP, KIND, "hang.yml"),
        markers.display()
    )
}

/// The pids of the hung sleeps so far, one per run that reached the hanging task.
fn sleeps(markers: &Path, name: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(markers.join(format!("{name}.pids"))).unwrap_or_default();
    text.lines().filter_map(|line| line.trim().parse().ok()).collect()
}

/// Waits until `count` runs have reached the hanging task; returns their sleeps' pids.
async fn wait_for_sleeps(markers: &Path, name: &str, count: usize) -> Vec<u32> {
    support::wait_for(&format!("{count} runs of {name} to hang"), WAIT, || async {
        let pids = sleeps(markers, name);
        Ok(if pids.len() >= count { Ok(pids) } else { Err(format!("pids {pids:?}")) })
    })
    .await
}

/// Waits for a `Failure` condition with reason `RunTimedOut`; returns the CR.
async fn wait_for_timeout(api: &Api<DynamicObject>, name: &str) -> DynamicObject {
    support::wait_for(&format!("{name} to fail with RunTimedOut"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let timed_out = support::condition(&object, "Failure")
            .is_some_and(|c| c["status"] == "True" && c["reason"] == "RunTimedOut");
        Ok(if timed_out { Ok(object) } else { Err(format!("status {}", object.data["status"])) })
    })
    .await
}

/// The run timeout these tests set, in seconds: a cold run starts its own Python and Ansible, which
/// beside the other test lanes on two cores can take more than 10 s to reach its first task.
fn run_timeout() -> u64 {
    match std::env::var("ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR").as_deref() {
        Ok("cold") => 30,
        _ => 10,
    }
}

/// The `Failure` message of a run timed out in the hanging task.
fn timed_out_in_hang() -> String {
    format!("run timed out after {}s while running task \"hang forever\"", run_timeout())
}

fn failure_message(object: &DynamicObject) -> String {
    let failure = support::condition(object, "Failure").cloned().unwrap_or_default();
    failure["message"].as_str().unwrap_or_default().to_string()
}

fn markers(namespace: &str) -> PathBuf {
    scratch_dir(&format!("{namespace}-markers"))
}

/// `/proc/<pid>/stat` fields after the command name: state is `[0]`, the parent `[1]`.
fn stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().map(str::to_string).collect())
}

/// Alive and not a zombie waiting for its reaper.
fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|fields| fields[0] != "Z")
}

/// The run's processes as seen from its hung sleep: the sleep and each ancestor up to the run's
/// root, the topmost of the chain named `ansible-runner` or `ansible-playbook` (cut to 15 bytes): a
/// cold run's ansible-runner, or a warm run's fork of the worker, which names itself so
/// (`ansible-playbook` while the play runs in it). Panics when the chain has no such process.
fn run_processes(sleep: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut root = None;
    let mut pid = sleep;
    while let Some(fields) = stat(pid).filter(|_| pid > 1) {
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if ["ansible-runner", "ansible-playboo"].contains(&name.trim_end()) {
            root = Some(found.len());
        } else if root.is_some() {
            break;
        }
        found.push(pid);
        pid = fields[1].parse().unwrap_or(1);
    }
    let Some(root) = root else { panic!("no ansible-runner above the hung sleep {sleep}: {found:?}") };
    found.truncate(root + 1);
    found
}

/// Waits until none of `processes` runs any more.
async fn wait_until_ended(what: &str, processes: &[u32], timeout: Duration) {
    support::wait_for(what, timeout, || async {
        let left: Vec<u32> = processes.iter().copied().filter(|pid| running(*pid)).collect();
        Ok(if left.is_empty() { Ok(()) } else { Err(format!("still running: {left:?} of {processes:?}")) })
    })
    .await
}

/// Waits for a run record of `cr` with `result` (`Failure`, `TimedOut`, ...); returns it.
async fn wait_for_record(
    client: &kube::Client,
    namespace: &str,
    cr: &DynamicObject,
    result: &str,
) -> DynamicObject {
    let gvk = GroupVersionKind::gvk("ansible-operator.dev", "v1alpha1", "AnsibleRun");
    let runs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "ansibleruns"),
    );
    let uid = cr.uid().unwrap();
    support::wait_for(&format!("a {result} run record"), WAIT, || async {
        let params = ListParams::default().labels(&format!("ansible-operator.dev/owner-uid={uid}"));
        let records = runs.list(&params).await.map_err(|e| e.to_string())?.items;
        let results: Vec<Value> = records.iter().map(|r| r.data["spec"]["result"].clone()).collect();
        Ok(records.into_iter().find(|r| r.data["spec"]["result"] == result).ok_or(format!("{results:?}")))
    })
    .await
}

#[tokio::test]
async fn a_hung_run_times_out_with_its_task_named_leaves_nothing_running_and_is_retried() {
    let Test { client, ns, api } = Test::setup("fault-hung").kind(GROUP, KIND).run_records().build().await;
    let markers = markers(&ns.name);
    let watches = watch(&markers, &format!("  runTimeout: {}s\n", run_timeout()));
    let operator = OperatorConfig::new(&watches, &ns.name).start();

    let cr = support::create_cr(&api, GROUP, KIND, "stuck", json!({})).await;
    let first = wait_for_sleeps(&markers, "stuck", 1).await[0];
    let processes = run_processes(first);
    assert!(processes.len() >= 3, "the sleep, Ansible and ansible-runner: {processes:?}");
    assert!(!processes.contains(&operator.pid()));

    let failed = wait_for_timeout(&api, "stuck").await;
    assert_eq!(failure_message(&failed), timed_out_in_hang());
    wait_until_ended("the timed-out run's processes to end", &processes, Duration::from_secs(10)).await;

    let retried = wait_for_sleeps(&markers, "stuck", 2).await;
    assert_ne!(retried[1], first, "a new run reached the task again");

    let record = wait_for_record(&client, &ns.name, &cr, "TimedOut").await;
    assert_eq!(record.data["spec"]["message"], timed_out_in_hang().as_str());
    assert_eq!(record.labels().get("ansible-operator.dev/result").map(String::as_str), Some("TimedOut"));
}

#[tokio::test]
async fn a_timed_out_finalizer_keeps_the_finalizer_and_is_retried() {
    let Test { client: _, ns, api } = Test::setup("fault-finalizer").kind(GROUP, KIND).build().await;
    let markers = markers(&ns.name);
    let finalizer = format!(
        "    hang: false\n  runTimeout: {}s\n  finalizer:\n    name: {FINALIZER}\n    vars:\n      hang: true\n",
        run_timeout()
    );
    let watches = watch(&markers, &finalizer);
    let operator = OperatorConfig::new(&watches, &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "undying", json!({})).await;
    let done = support::wait_for_condition(&api, "undying", "Successful", "True", WAIT).await;
    assert_eq!(done.finalizers(), [FINALIZER], "added on the first reconcile");
    assert!(sleeps(&markers, "undying").is_empty(), "the main run does not hang");

    api.delete("undying", &DeleteParams::default()).await.unwrap();
    let failed = wait_for_timeout(&api, "undying").await;
    assert_eq!(failure_message(&failed), timed_out_in_hang());
    assert!(failed.metadata.deletion_timestamp.is_some());
    assert_eq!(failed.finalizers(), [FINALIZER], "kept after a timed-out finalizer run");

    wait_for_sleeps(&markers, "undying", 2).await;
    let still = api.get("undying").await.expect("still terminating while the finalizer is retried");
    assert_eq!(still.finalizers(), [FINALIZER]);

    drop(operator);
    let release = json!({"metadata": {"finalizers": null}});
    api.patch("undying", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    support::wait_for_absent(&api, "undying", WAIT).await;
}

#[tokio::test]
async fn the_run_timeout_flag_applies_to_watches_without_their_own() {
    let Test { client: _, ns, api } = Test::setup("fault-flag").kind(GROUP, KIND).build().await;
    let markers = markers(&ns.name);
    let watches = watch(&markers, "");
    let flag = format!("--ansible-run-timeout={}s", run_timeout());
    let _operator = OperatorConfig::new(&watches, &ns.name).arg(flag).start();

    support::create_cr(&api, GROUP, KIND, "flagged", json!({})).await;
    let failed = wait_for_timeout(&api, "flagged").await;
    assert_eq!(failure_message(&failed), timed_out_in_hang());
    assert_eq!(sleeps(&markers, "flagged").len(), 1, "one run reached the task before the timeout");
}

#[tokio::test]
async fn an_operator_killed_mid_run_leaves_nothing_running_once_restarted_and_every_cr_converges() {
    let Test { client: _, ns, api } = Test::setup("fault-killed").kind(GROUP, KIND).build().await;
    let markers = markers(&ns.name);
    let watches =
        watch(&markers, &format!("  finalizer:\n    name: {FINALIZER}\n    vars:\n      hang: false\n"));
    let mut first = OperatorConfig::new(&watches, &ns.name).start();

    support::create_cr(&api, GROUP, KIND, "doomed", json!({"hang": false})).await;
    support::wait_for_condition(&api, "doomed", "Successful", "True", WAIT).await;
    support::create_cr(&api, GROUP, KIND, "stuck", json!({})).await;
    let sleep = wait_for_sleeps(&markers, "stuck", 1).await[0];
    let processes = run_processes(sleep);

    first.kill();
    // While no operator runs: one CR is deleted (its finalizer must still run), the other is fixed.
    api.delete("doomed", &DeleteParams::default()).await.unwrap();
    let fixed = json!({"spec": {"hang": false}});
    api.patch("stuck", &PatchParams::default(), &Patch::Merge(&fixed)).await.unwrap();

    let _second = OperatorConfig::new(&watches, &ns.name).start();
    wait_until_ended("the killed operator's run to be ended", &processes, Duration::from_secs(30)).await;
    support::wait_for_condition(&api, "stuck", "Successful", "True", WAIT).await;
    support::wait_for_absent(&api, "doomed", WAIT).await;
    assert_eq!(sleeps(&markers, "stuck"), [sleep], "no run hung again after the fix");
}

#[tokio::test]
async fn a_killed_ansible_playbook_is_a_failure_naming_the_signal_and_the_cr_converges_on_retry() {
    let Test { client, ns, api } = Test::setup("fault-sigkill").kind(GROUP, KIND).run_records().build().await;
    let markers = markers(&ns.name);
    let _operator = OperatorConfig::new(&watch(&markers, ""), &ns.name).start();

    let cr = support::create_cr(&api, GROUP, KIND, "shot", json!({})).await;
    let sleep = wait_for_sleeps(&markers, "shot", 1).await[0];
    let processes = run_processes(sleep);
    // The kernel names a process after its first 15 bytes. Ansible's task workers are forks of
    // ansible-playbook, named alike: the playbook process is the one nearest the run's root (the
    // root itself when the play runs in it).
    let playbook = *processes
        .iter()
        .rev()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim_end()
                == "ansible-playboo"
        })
        .unwrap_or_else(|| panic!("no ansible-playbook among the run's processes {processes:?}"));
    // The retry will not hang: only the killed run's playbook process is in the way.
    let fixed = json!({"spec": {"hang": false}});
    api.patch("shot", &PatchParams::default(), &Patch::Merge(&fixed)).await.unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(playbook as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();

    let record = wait_for_record(&client, &ns.name, &cr, "Failure").await;
    // The warm worker sees the signal; a cold run's ansible-runner records only that there was one.
    let by = match std::env::var("ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR").as_deref() {
        Ok("cold") => "a signal",
        _ => "signal 9 (SIGKILL)",
    };
    let expected = format!("ansible-playbook was killed by {by} while running task \"hang forever\"");
    assert_eq!(record.data["spec"]["message"], expected.as_str());

    let converged = support::wait_for_condition(&api, "shot", "Successful", "True", WAIT).await;
    assert_eq!(support::condition(&converged, "Successful").unwrap()["observedGeneration"], 2);
    wait_until_ended("the killed run's processes to end", &processes, Duration::from_secs(30)).await;
    assert_eq!(sleeps(&markers, "shot"), [sleep], "the retry ran with the fixed spec");
}

/// A tmpfs of `size` mounted on `path` for the test's life (the test runs as root, as CI does).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(path: PathBuf, size: &str) -> Self {
        std::fs::create_dir_all(&path).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs on {}", path.display());
        Tmpfs(path)
    }

    /// Writes a file until the filesystem is full.
    fn fill(&self) {
        use std::io::Write;
        let mut ballast = std::fs::File::create(self.0.join("ballast")).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while ballast.write_all(&chunk).is_ok() {}
        let _ = ballast.sync_all();
    }

    fn empty(&self) {
        std::fs::remove_file(self.0.join("ballast")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_full_runner_filesystem_is_a_failure_naming_the_path_and_runs_recover_when_space_returns() {
    let Test { client: _, ns, api } = Test::setup("fault-full").kind(GROUP, KIND).build().await;
    let runner = scratch_dir(&format!("{}-runner", ns.name));
    let disk = Tmpfs::mount(runner.clone(), "4m");
    let operator = OperatorConfig::new(&watch(&markers(&ns.name), ""), &ns.name)
        .arg(format!("--runner-dir={}", runner.display()))
        .start();

    support::create_cr(&api, GROUP, KIND, "first", json!({"hang": false})).await;
    support::wait_for_condition(&api, "first", "Successful", "True", WAIT).await;

    disk.fill();
    support::create_cr(&api, GROUP, KIND, "second", json!({"hang": false})).await;
    let failed = support::wait_for_condition(&api, "second", "Failure", "True", WAIT).await;
    let message = failure_message(&failed);
    assert!(message.contains("No space left on device"), "{message}");
    assert!(message.contains(&runner.display().to_string()), "the message names the path: {message}");
    let edit = json!({"spec": {"hang": false, "touched": true}});
    api.patch("first", &PatchParams::default(), &Patch::Merge(&edit)).await.unwrap();
    support::wait_for_condition(&api, "first", "Failure", "True", WAIT).await;
    assert!(operator.log().contains("No space left on device"));

    disk.empty();
    for name in ["first", "second"] {
        support::wait_for_condition(&api, name, "Successful", "True", WAIT).await;
    }
    let first = api.get("first").await.unwrap();
    assert_eq!(support::condition(&first, "Successful").unwrap()["observedGeneration"], 2);
}

/// A TCP relay between the operator and kube-apiserver that the test can cut: while cut, every
/// connection through it is dropped and new ones are closed at once, as when the API server is down.
struct Relay {
    address: std::net::SocketAddr,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::<tokio::task::AbortHandle>::new()));
        let (is_down, open) = (down.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if is_down.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let upstream = upstream.clone();
                let relay = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                open.lock().unwrap().push(relay.abort_handle());
            }
        });
        Relay { address, down, connections, accept }
    }

    fn cut(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn restore(&self) {
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// A copy of the test kubeconfig whose server is this relay.
    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let original = std::fs::read_to_string(support::kubeconfig()).unwrap();
        let server = kubeconfig_server(&original);
        let text = original.replace(&server, &format!("https://{}", self.address));
        let path = dir.join("relayed-kubeconfig");
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// The `server:` URL of the (single-cluster) test kubeconfig.
fn kubeconfig_server(kubeconfig: &str) -> String {
    kubeconfig
        .lines()
        .find_map(|line| line.trim().strip_prefix("server:"))
        .map(|server| server.trim().to_string())
        .expect("the kubeconfig names a server")
}

#[tokio::test]
async fn an_api_server_outage_mid_run_is_survived_without_overlapping_runs() {
    let Test { client, ns, api } = Test::setup("fault-outage").kind(GROUP, "Outage").build().await;
    let server = kubeconfig_server(&std::fs::read_to_string(support::kubeconfig()).unwrap());
    let relay = Relay::start(server.trim_start_matches("https://").to_string()).await;
    let markers = markers(&ns.name);
    let watches = format!(
        "{}  vars:\n    marker_dir: {}\n",
        support::playbook_watch(GROUP, "Outage", "outage.yml"),
        markers.display()
    );
    let _operator = OperatorConfig::new(&watches, &ns.name)
        .env("KUBECONFIG", relay.kubeconfig(&markers).display().to_string())
        .start();
    let runs = || std::fs::read_to_string(markers.join("through.runs")).unwrap_or_default();

    support::create_cr(&api, GROUP, "Outage", "through", json!({})).await;
    support::wait_for("the run to start", WAIT, || async {
        Ok(if runs().contains("start") { Ok(()) } else { Err("no run yet".to_string()) })
    })
    .await;
    // The outage lasts at least 15 s, and until the first run has ended cut off: on loaded cores a
    // run can take longer than that to reach its API call.
    relay.cut();
    tokio::time::sleep(Duration::from_secs(15)).await;
    support::wait_for("the first run to end, cut off", WAIT, || async {
        Ok(if runs().contains("end") { Ok(()) } else { Err("the first run still runs".to_string()) })
    })
    .await;
    relay.restore();

    support::wait_for_condition(&api, "through", "Successful", "True", WAIT).await;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    assert!(configmaps.get_opt("through-result").await.unwrap().is_some(), "the run's work is done");
    let runs = runs();
    let lines: Vec<&str> = runs.lines().collect();
    let alternating = lines.chunks(2).all(|pair| pair == ["start", "end"]);
    assert!(alternating && lines.len() >= 4, "runs one after another, the first cut off: {lines:?}");
}
