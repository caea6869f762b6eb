//! The warm executor against the real API server and real Ansible: warm and cold runs of the same
//! playbooks give the same job events, artifacts, status and extra vars; runs share nothing; a
//! worker that dies fails its runs clearly and comes back; cancelled runs leave nothing behind.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};
use support::operator::{Operator, OperatorConfig, WORKER_READY};
use support::setup::Test;

const GROUP: &str = "equivalence.test.example.com";
const WAIT: Duration = Duration::from_secs(180);

/// The kinds of the equivalence test: each runs one fixture, and ends `Successful` or `Failure`.
const CASES: [(&str, &str, &str); 5] = [
    ("Equivalence", "playbook: {fixtures}/equivalence/features.yml", "Successful"),
    ("EquivFailing", "playbook: {fixtures}/equivalence/failing.yml", "Failure"),
    ("EquivSyntaxError", "playbook: {fixtures}/equivalence/syntax_error.yml", "Failure"),
    ("EquivMissing", "playbook: {fixtures}/equivalence/missing_module.yml", "Failure"),
    ("EquivRole", "role: {fixtures}/equivalence/roles/equivalence", "Successful"),
];

const SECRET: &str = "s3cr3t-equivalence-value";

fn watches(cases: &[(&str, &str, &str)]) -> String {
    cases
        .iter()
        .map(|(kind, target, _)| {
            format!("- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  {target}\n")
        })
        .collect()
}

/// Keys whose values differ between any two runs (ids, times, pids, object versions).
const VOLATILE: [&str; 17] = [
    "uuid",
    "parent_uuid",
    "playbook_uuid",
    "play_uuid",
    "task_uuid",
    "created",
    "pid",
    "start",
    "end",
    "delta",
    "duration",
    "runner_ident",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "lastTransitionTime",
];

/// A value with volatile keys removed, the given strings replaced, and gathered facts left out
/// (they are the machine's state at that moment: even interface names come and go).
fn normalize(value: &Value, replacements: &[(String, &str)]) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                if VOLATILE.contains(&key.as_str()) || key == "completion" {
                    continue;
                }
                let value = if key == "ansible_facts" && value.as_object().is_some_and(|m| m.len() > 10) {
                    json!("GATHERED FACTS")
                } else {
                    normalize(value, replacements)
                };
                out.insert(key.clone(), value);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| normalize(v, replacements)).collect()),
        Value::String(text) => {
            let mut text = text.clone();
            for (from, to) in replacements {
                text = text.replace(from.as_str(), to);
            }
            Value::String(mask_generated_playbook(&text))
        }
        other => other.clone(),
    }
}

/// ansible-runner writes a role run's playbook to `project/<random hex>`: the name is masked.
fn mask_generated_playbook(text: &str) -> String {
    let Some(at) = text.find("/project/") else { return text.to_string() };
    let start = at + "/project/".len();
    let name: String = text[start..].chars().take_while(char::is_ascii_hexdigit).collect();
    if name.len() != 32 {
        return text.to_string();
    }
    format!("{}GENERATED{}", &text[..start], &text[start + 32..])
}

/// The first run of a CR: its artifacts directory (the one whose first event is earliest).
fn first_run(runner_dir: &Path) -> PathBuf {
    let artifacts = runner_dir.join("artifacts");
    let mut runs: Vec<(String, PathBuf)> = std::fs::read_dir(&artifacts)
        .unwrap_or_else(|e| panic!("read {}: {e}", artifacts.display()))
        .flatten()
        .map(|e| e.path())
        // Finished runs only: ansible-runner writes `status` last.
        .filter(|p| p.is_dir() && !p.is_symlink() && p.join("status").exists())
        .map(|p| {
            (
                events(&p)
                    .first()
                    .map(|e| e["created"].as_str().unwrap_or("").to_string())
                    .unwrap_or_default(),
                p,
            )
        })
        .collect();
    runs.sort();
    runs.into_iter().next().map(|(_, p)| p).expect("at least one run")
}

/// The job events of a run, in order.
fn events(artifact: &Path) -> Vec<Value> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(artifact.join("job_events"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    // ansible-runner writes `<counter>-<uuid>.json.tmp`, then renames it.
                    let counter = name.strip_suffix(".json")?.split('-').next()?.parse().ok()?;
                    Some((counter, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .map(|(_, path)| serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
        .collect()
}

/// What is compared of a run: each event's type, counter, verbose text and data; the artifact
/// files; the runner's status and return code.
fn run_record(artifact: &Path, replacements: &[(String, &str)]) -> Value {
    let events: Vec<Value> = events(artifact)
        .into_iter()
        .map(|e| {
            let stdout =
                if e["event"] == "verbose" { normalize(&e["stdout"], replacements) } else { Value::Null };
            json!({"event": e["event"], "counter": e["counter"], "stdout": stdout,
                   "event_data": normalize(&e["event_data"], replacements)})
        })
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(artifact)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    let read = |name: &str| std::fs::read_to_string(artifact.join(name)).unwrap_or_default();
    json!({"events": events, "files": files, "status": read("status"), "rc": read("rc")})
}

/// The CR's condition of type `end` without its times (the others change as failed runs retry).
fn terminal_condition(object: &DynamicObject, end: &str) -> Value {
    normalize(support::condition(object, end).unwrap_or(&Value::Null), &[])
}

async fn wait_terminal(api: &Api<DynamicObject>, name: &str, condition: &str) -> DynamicObject {
    support::wait_for_condition(api, name, condition, "True", WAIT).await
}

/// The first difference between two JSON values, as a path and both sides.
fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let (va, vb) = (x.get(key).unwrap_or(&Value::Null), y.get(key).unwrap_or(&Value::Null));
                if let Some(found) = first_difference(&format!("{path}.{key}"), va, vb) {
                    return Some(found);
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let (va, vb) = (x.get(i).unwrap_or(&Value::Null), y.get(i).unwrap_or(&Value::Null));
                if let Some(found) = first_difference(&format!("{path}[{i}]"), va, vb) {
                    return Some(found);
                }
            }
            None
        }
        _ if a == b => None,
        _ => Some(format!("{path}:\n  cold: {a}\n  warm: {b}")),
    }
}

/// The worker got ready and no run fell back to cold (a run waits for the worker's first start).
fn assert_ran_warm(operator: &Operator) {
    let log = operator.log();
    assert!(log.contains(WORKER_READY), "the worker started:\n{log}");
    assert!(!log.contains("the playbook runs cold"), "no run fell back to cold:\n{log}");
}

#[tokio::test]
async fn warm_and_cold_runs_give_the_same_events_artifacts_status_and_extra_vars() {
    let cold =
        CASES.iter().fold(Test::setup("equivalence-cold"), |test, (kind, _, _)| test.kind(GROUP, kind));
    let Test { client, ns: cold_ns, api: _ } = cold.build().await;
    let warm_ns = support::TestNamespace::new(&client, "equivalence-warm").await;
    let watches = watches(&CASES);
    // In the C locale: Python's start-up sets LC_CTYPE there (PEP 538), and a warm run must get it
    // as a cold one does (else every run went cold).
    let cold = OperatorConfig::new(&watches, &cold_ns.name).arg("--ansible-executor=cold").c_locale().start();
    let warm = OperatorConfig::new(&watches, &warm_ns.name).arg("--ansible-executor=warm").c_locale().start();
    let spec = json!({"size": 3, "itemsToLoop": ["a", "b"], "secret": SECRET});

    let mut records = Vec::new();
    for (operator, ns) in [(&cold, &cold_ns.name), (&warm, &warm_ns.name)] {
        let mut per_kind = BTreeMap::new();
        for (kind, _, _) in CASES {
            let api = support::cr_api(&client, GROUP, kind, ns);
            support::create_cr(&api, GROUP, kind, "same", spec.clone()).await;
        }
        for (kind, _, end) in CASES {
            let api = support::cr_api(&client, GROUP, kind, ns);
            let done = wait_terminal(&api, "same", end).await;
            let runner_dir = operator.runner_dir(GROUP, kind, ns, "same");
            let replacements =
                vec![(operator.dir.join("runner").display().to_string(), "RUNNER"), (ns.clone(), "NS")];
            let artifact = first_run(&runner_dir);
            per_kind.insert(
                kind,
                json!({"run": run_record(&artifact, &replacements), "condition": terminal_condition(&done, end)}),
            );
        }
        let vars =
            support::configmaps::data(&client, ns, "same-equivalence").await.expect("features.yml wrote it");
        per_kind.insert("configmap", normalize(&json!(vars), &[(ns.clone(), "NS")]));
        records.push(Value::Object(per_kind.into_iter().map(|(k, v)| (k.to_string(), v)).collect()));
    }
    assert_ran_warm(&warm);
    assert!(!cold.log().contains(WORKER_READY), "the cold operator started no worker");
    let (cold_record, warm_record) = (&records[0], &records[1]);
    if let Some(difference) = first_difference("", cold_record, warm_record) {
        panic!("warm and cold runs differ at {difference}");
    }
    // The comparison covered what it claims: events of every kind, with data.
    let features = &cold_record["Equivalence"]["run"]["events"];
    let event_types: Vec<&str> =
        features.as_array().unwrap().iter().filter_map(|e| e["event"].as_str()).collect();
    for expected in [
        "verbose",
        "playbook_on_task_start",
        "runner_on_ok",
        "runner_on_failed",
        "runner_item_on_ok",
        "playbook_on_stats",
    ] {
        assert!(event_types.contains(&expected), "{expected} in {event_types:?}");
    }
    let secret_task: Vec<&Value> =
        features.as_array().unwrap().iter().filter(|e| e["event_data"]["task"] == "a secret task").collect();
    assert!(!secret_task.is_empty());
    for event in secret_task {
        assert!(!event.to_string().contains(SECRET), "no_log kept the secret out of {event}");
    }
    assert_eq!(cold_record["EquivFailing"]["run"]["rc"], "2", "a failed task is rc 2");
    assert_ne!(cold_record["EquivSyntaxError"]["run"]["rc"], "0");
    for (kind, _, end) in CASES {
        assert_eq!(cold_record[kind]["condition"]["status"], "True", "{kind} ended {end}");
    }
    // The command module's own message: ansible-core 2.21 reworded it.
    let message = &cold_record["EquivFailing"]["condition"]["message"];
    assert!(
        [
            "rescued failure\nnon-zero return code",
            "rescued failure\nThe command exited with a non-zero return code."
        ]
        .iter()
        .any(|expected| message == expected),
        "{message}"
    );
}

#[tokio::test]
async fn runs_of_different_crs_share_no_environment_facts_or_credentials() {
    let kind = "Isolation";
    let Test { client, ns, api } = Test::setup("executor-isolation").kind(GROUP, kind).build().await;
    let watches = format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  playbook: {{fixtures}}/equivalence/isolation.yml\n"
    );
    let operator = OperatorConfig::new(&watches, &ns.name).arg("--ansible-executor=warm").start();
    // Two CRs at once, each holding for 3 s, each leaving its secret in its environment and facts.
    support::create_cr(&api, GROUP, kind, "alpha", json!({"secret": "alpha-secret", "hold": 3})).await;
    support::create_cr(&api, GROUP, kind, "beta", json!({"secret": "beta-secret", "hold": 3})).await;
    let alpha = support::configmaps::wait_for(&client, &ns.name, "alpha-isolation-1", WAIT).await;
    let beta = support::configmaps::wait_for(&client, &ns.name, "beta-isolation-1", WAIT).await;
    // Then alpha again, after both left things behind.
    api.patch("alpha", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"run": 2, "hold": 0}})))
        .await
        .unwrap();
    let again = support::configmaps::wait_for(&client, &ns.name, "alpha-isolation-2", WAIT).await;

    for (seen, own) in [(&alpha, "ALPHA"), (&beta, "BETA"), (&again, "ALPHA")] {
        assert_eq!(seen["env"], format!("[\"ISOLATION_LEAK_{own}\"]"), "only its own variable: {seen:?}");
        assert_eq!(seen["fact"], "", "no fact of another run: {seen:?}");
    }
    let tokens = [&alpha["token"], &beta["token"], &again["token"]];
    assert!(
        tokens[0] != tokens[1] && tokens[0] != tokens[2] && tokens[1] != tokens[2],
        "a credential per run"
    );
    assert_ran_warm(&operator);
}

/// The worker's pid, from its `ready` log line (`worker_pid=123`), the `nth` time it got ready.
fn worker_pid(log: &str, nth: usize) -> Option<u32> {
    let log = ansible_operator::runner::strip_ansi(log);
    log.lines()
        .filter(|l| l.contains(WORKER_READY))
        .nth(nth)?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("worker_pid="))
        .and_then(|p| p.parse().ok())
}

/// Running (not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z")
    })
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle))
        })
        .collect()
}

#[tokio::test]
async fn a_killed_worker_fails_its_run_clearly_comes_back_and_the_retry_converges() {
    let kind = "WorkerKilled";
    let Test { client: _, ns, api } = Test::setup("executor-worker-loss").kind(GROUP, kind).build().await;
    let hold = "3601";
    let watches = format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  playbook: {{fixtures}}/equivalence/worker_loss.yml\n  vars:\n    hold_seconds: {hold}\n"
    );
    let operator = OperatorConfig::new(&watches, &ns.name).arg("--ansible-executor=warm").start();
    support::create_cr(&api, GROUP, kind, "victim", json!({})).await;
    let sleeper = format!("sleep {hold}");
    support::wait_for("the first attempt to hold", WAIT, || async {
        Ok(if processes_with(&sleeper).is_empty() { Err("not yet".to_string()) } else { Ok(()) })
    })
    .await;
    let pid = worker_pid(&operator.log(), 0).expect("the worker's pid is logged");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();

    let failed = support::wait_for("the run to fail because the worker died", WAIT, || async {
        let object = api.get("victim").await.map_err(|e| e.to_string())?;
        let failure = support::condition(&object, "Failure").cloned().unwrap_or_default();
        let message = failure["message"].as_str().unwrap_or_default().to_string();
        Ok(if message.contains("warm Ansible worker") { Ok(message) } else { Err(format!("{failure}")) })
    })
    .await;
    assert!(failed.contains("ended during the run (killed by signal 9)"), "{failed}");
    support::wait_for_condition(&api, "victim", "Successful", "True", WAIT).await;
    assert!(processes_with(&sleeper).is_empty(), "nothing of the killed run is left running");
    support::wait_for("the worker to be back", WAIT, || async {
        Ok(worker_pid(&operator.log(), 1).map(|_| ()).ok_or_else(|| "not yet".to_string()))
    })
    .await;
    assert_ne!(worker_pid(&operator.log(), 1), Some(pid), "a new worker process");
}

#[tokio::test]
async fn a_run_cancelled_by_shutdown_leaves_nothing_running_and_the_next_operator_runs_warm() {
    let kind = "Cancelled";
    let Test { client: _, ns, api } = Test::setup("executor-cancel").kind(GROUP, kind).build().await;
    let hold = "3602";
    let watches = format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  playbook: {{fixtures}}/equivalence/worker_loss.yml\n  vars:\n    hold_seconds: {hold}\n"
    );
    let mut operator = OperatorConfig::new(&watches, &ns.name)
        .arg("--ansible-executor=warm")
        .arg("--graceful-shutdown-timeout=1s")
        .start();
    support::create_cr(&api, GROUP, kind, "held", json!({})).await;
    let sleeper = format!("sleep {hold}");
    support::wait_for("the run to hold", WAIT, || async {
        Ok(if processes_with(&sleeper).is_empty() { Err("not yet".to_string()) } else { Ok(()) })
    })
    .await;
    let worker = worker_pid(&operator.log(), 0).expect("worker pid");
    let status = operator.stop().expect("the operator stops");
    assert!(status.success(), "{status}");
    assert!(processes_with(&sleeper).is_empty(), "the held run was ended");
    support::wait_for("the worker to stop with the operator", Duration::from_secs(10), || async {
        Ok(if alive(worker) { Err("still running".to_string()) } else { Ok(()) })
    })
    .await;

    let next = OperatorConfig::new(&watches, &ns.name).arg("--ansible-executor=warm").start();
    support::wait_for_condition(&api, "held", "Successful", "True", WAIT).await;
    assert_ran_warm(&next);
}

/// After `--warm-worker-idle` without a run the worker stops, giving its memory back; the next CR's
/// run starts it again, waits for it and runs warm.
#[tokio::test]
async fn an_idle_worker_stops_and_the_next_run_starts_it_again_and_runs_warm() {
    let kind = "IdleWorker";
    let Test { client: _, ns, api } = Test::setup("executor-idle").kind(GROUP, kind).build().await;
    let watches = format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  playbook: {{fixtures}}/equivalence/worker_loss.yml\n  vars:\n    hold_seconds: 0\n"
    );
    let operator = OperatorConfig::new(&watches, &ns.name)
        .arg("--ansible-executor=warm")
        .arg("--warm-worker-idle=2s")
        .start();
    support::create_cr(&api, GROUP, kind, "first", json!({})).await;
    support::wait_for_condition(&api, "first", "Successful", "True", WAIT).await;
    let first = worker_pid(&operator.log(), 0).expect("the worker's pid is logged");
    // Gone, and said so: the operator logs it once it has seen the process end.
    support::wait_for("the idle worker to stop", Duration::from_secs(60), || async {
        Ok(match (alive(first), operator.log().contains("stopped after a while without runs")) {
            (true, _) => Err("still running".to_string()),
            (false, false) => Err("ended, not logged yet".to_string()),
            (false, true) => Ok(()),
        })
    })
    .await;
    assert!(processes_with("ansible_operator_worker").iter().all(|pid| *pid != first));

    support::create_cr(&api, GROUP, kind, "second", json!({})).await;
    support::wait_for_condition(&api, "second", "Successful", "True", WAIT).await;
    let again = worker_pid(&operator.log(), 1).expect("the worker started again");
    assert_ne!(again, first, "a new worker process");
    assert_ran_warm(&operator);
}

/// A run of one kind that rewrites every file where workers kept compiled code (templates, module
/// bytecode, module payloads) under the runner directory, adds its own there, and sends the worker
/// forged reports, leaves a later run of another kind in another namespace as it was: it converges,
/// and the marker the poisoned code would write does not appear.
#[tokio::test]
async fn a_run_that_poisons_the_workers_caches_does_not_change_what_another_cr_runs() {
    let (poisoner, victim) = ("Poisoner", "PoisonVictim");
    let Test { client, ns, api } =
        Test::setup("executor-poisoner").kind(GROUP, poisoner).kind(GROUP, victim).build().await;
    let victim_ns = support::TestNamespace::new(&client, "executor-victim").await;
    let marker = support::operator::scratch_dir("poison-marker").join("poisoned");
    let watches = format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {poisoner}\n  playbook: {{fixtures}}/poisoning/poisoner.yml\n  vars:\n    marker: {marker}\n\
         - version: v1alpha1\n  group: {GROUP}\n  kind: {victim}\n  playbook: {{fixtures}}/poisoning/victim.yml\n",
        marker = marker.display()
    );
    let namespaces = format!("{},{}", ns.name, victim_ns.name);
    let operator = OperatorConfig::new(&watches, &namespaces).arg("--ansible-executor=warm").start();
    let victims = support::cr_api(&client, GROUP, victim, &victim_ns.name);

    // The victim kind runs once before any poison, so that whatever is kept for it is kept.
    support::create_cr(&victims, GROUP, victim, "before", json!({})).await;
    wait_terminal(&victims, "before", "Successful").await;
    // The poisoner twice: the second time after the worker has had what the first run reported.
    support::create_cr(&api, GROUP, poisoner, "poison", json!({"round": 1})).await;
    wait_terminal(&api, "poison", "Successful").await;
    let runner = operator.dir.join("runner");
    assert!(runner.join(".templates/added-by-a-run").exists(), "the poison ran");
    api.patch("poison", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"round": 2}})))
        .await
        .unwrap();
    let second = ended_at(&api, "poison", 2).await;
    assert_no_marker(&marker);
    assert!(
        support::successful_at(&second, 2),
        "the second poisoning run succeeded: {:?}",
        second.data["status"]
    );

    for name in ["after", "after-again"] {
        support::create_cr(&victims, GROUP, victim, name, json!({})).await;
        wait_terminal(&victims, name, "Successful").await;
    }
    assert_no_marker(&marker);
    assert_ran_warm(&operator);
}

/// Waits until generation `generation` of the CR ended, `Successful` or `Failure`, and returns it.
async fn ended_at(api: &Api<DynamicObject>, name: &str, generation: i64) -> DynamicObject {
    support::wait_for(&format!("{name} generation {generation} to end"), WAIT, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let ended = ["Successful", "Failure"].iter().any(|kind| {
            support::condition(&object, kind)
                .is_some_and(|c| c["status"] == "True" && c["observedGeneration"] == generation)
        });
        Ok(if ended { Ok(object) } else { Err(format!("status {}", object.data["status"])) })
    })
    .await
}

/// Fails the test when the marker poisoned code writes is there, saying how often it was written.
fn assert_no_marker(marker: &Path) {
    let written = std::fs::read_to_string(marker).unwrap_or_default();
    assert!(!marker.exists(), "poisoned code ran in a later run ({} times)", written.lines().count());
}
