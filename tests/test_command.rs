//! `ansible-operator test`: scenario files run by the command itself against the test cluster, the
//! operator in its own process on the project's watches file (tests/fixtures/scenario-project, and
//! the repository's own memcached scenario), each scenario in a namespace of its own.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
use quick_junit::Report;
use support::operator::{command, fixtures, scratch_dir};

fn project() -> PathBuf {
    fixtures().join("scenario-project")
}

/// Runs `ansible-operator test` in `dir` with `args`; its log and runner directory in `work`.
fn run_test(dir: &Path, work: &Path, args: &[&str]) -> (Output, String) {
    shown(
        command(dir)
            .arg("test")
            .arg(format!("--work-dir={}", work.display()))
            .args(args)
            .output()
            .expect("run ansible-operator test"),
    )
}

/// The command's output, and its exit status, stdout and stderr as a failure shows them.
fn shown(output: Output) -> (Output, String) {
    let shown = format!(
        "exit {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, shown)
}

/// The namespace each scenario's verdict line names: `PASS note (4.7 s, namespace test-note-…) …`.
fn namespaces(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|line| line.starts_with("PASS ") || line.starts_with("FAIL "))
        .filter_map(|line| line.split("namespace ").nth(1)?.split(')').next().map(str::to_string))
        .collect()
}

/// The line after the first that contains `text`.
fn after<'a>(stdout: &'a str, text: &str) -> &'a str {
    let mut lines = stdout.lines().skip_while(|line| !line.contains(text));
    lines.next();
    lines.next().unwrap_or_default()
}

fn junit(file: &Path) -> Report {
    Report::deserialize_from_str(&std::fs::read_to_string(file).expect("the JUnit file")).expect("JUnit XML")
}

#[tokio::test]
async fn passing_scenarios_run_side_by_side_each_in_a_namespace_deleted_after() {
    let client = support::client().await;
    let work = scratch_dir("scenarios-pass");
    let report = work.join("junit.xml");
    let (output, shown) =
        run_test(&project(), &work, &["--parallel=2", &format!("--junit={}", report.display())]);
    assert!(output.status.success(), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);

    // Both scenarios of tests/scenarios/, every step of each: apply, assert, idempotent, verify,
    // plan, patch, runs, delete, absent.
    assert!(stdout.contains("2 scenario(s): 2 passed, 0 failed"), "{shown}");
    assert_eq!(stdout.lines().filter(|line| line.starts_with("  ok ")).count(), 22, "{shown}");
    for step in [
        "idempotent files/note-cr.yaml",
        "verify files/verify-note.yml",
        "a new text would change the ConfigMap",
        "runs Note/hello",
        "the finalizer deleted the ConfigMap",
    ] {
        assert!(
            stdout.lines().any(|line| line.starts_with("  ok ") && line.contains(step)),
            "{step}: {shown}"
        );
    }
    let namespaces = namespaces(&stdout);
    assert_eq!(namespaces.len(), 2, "{shown}");
    assert_ne!(namespaces[0], namespaces[1]);
    let api: Api<Namespace> = Api::all(client);
    // Deleted, and the CRs in it finalized before the operator stopped: the namespace is gone or
    // terminating (what is left of it needs no operator).
    for namespace in &namespaces {
        let left = api.get_opt(namespace).await.unwrap();
        assert!(
            left.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
            "{namespace} was not deleted"
        );
    }

    let report = junit(&report);
    assert_eq!((report.tests, report.failures, report.skipped), (22, 0, 0));
    let mut suites: Vec<&str> = report.test_suites.iter().map(|suite| suite.name.as_str()).collect();
    suites.sort();
    assert_eq!(suites, ["note", "note-again"]);
    // Passed: the operator's log and runner directory are removed only when not given.
    assert!(work.join("operator.log").exists());
}

#[tokio::test]
async fn a_failing_scenario_names_the_step_the_object_the_field_the_plan_and_the_failed_task() {
    let client = support::client().await;
    let work = scratch_dir("scenarios-fail");
    let report = work.join("junit.xml");
    let (output, shown) = run_test(
        &project(),
        &work,
        &["broken", "--parallel=4", "--keep", &format!("--junit={}", report.display())],
    );
    assert_eq!(output.status.code(), Some(1), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("4 scenario(s): 0 passed, 4 failed"), "{shown}");

    // An assert that never holds: the object and its differing field, and the steps after skipped.
    assert!(stdout.contains("  FAILED  the text is bye"), "{shown}");
    assert_eq!(after(&stdout, "FAILED  the text is bye").trim(), "ConfigMap/wrong-note differs:");
    assert!(stdout.contains("data.text: wanted \"bye\", got \"hello\"\n"), "{shown}");
    assert!(stdout.contains("`self.data.text.size() == 3` is false (after 8s)"), "{shown}");
    assert!(stdout.lines().any(|line| line.starts_with("  skipped delete Note/wrong")), "{shown}");

    // A role that changes something on every run is not idempotent: the task that changed.
    assert!(stdout.contains("Clock/tick is not idempotent: its next run changed 1 task(s):"), "{shown}");
    assert_eq!(after(&stdout, "is not idempotent").trim(), "the time of this run (localhost)");

    // A failed run: the CR's Failure condition, the failed task and the run's output.
    assert!(stdout.contains("Failure=True (Failed) the note asked to fail: boom"), "{shown}");
    assert!(
        stdout.contains("task \"a Note that asks to fail fails\" on localhost: the note asked to fail: boom"),
        "{shown}"
    );
    assert!(
        stdout.contains(
            "fatal: [localhost]: FAILED! => {\"changed\": false, \"msg\": \"the note asked to fail: boom\"}"
        ),
        "{shown}"
    );

    // A plan that does not hold: the field, and the plan with its diff.
    assert_eq!(
        after(&stdout, "FAILED  a new text changes nothing").trim(),
        "the plan of Note/planned differs:"
    );
    assert!(stdout.contains("tasks[1].verdict: wanted \"ok\", got \"changed\""), "{shown}");
    assert!(stdout.contains("data.text: \"hello\" -> \"bye\""), "{shown}");

    // --keep: each failed scenario's namespace is still there, with what it made.
    let api: Api<Namespace> = Api::all(client);
    let namespaces = namespaces(&stdout);
    assert_eq!(namespaces.len(), 4, "{shown}");
    for namespace in &namespaces {
        assert!(stdout.contains(&format!("namespace {namespace} kept (--keep)")), "{shown}");
        assert!(api.get_opt(namespace).await.unwrap().is_some(), "{namespace} was not kept");
        let _ = api.delete(namespace, &DeleteParams::default()).await;
    }

    let report = junit(&report);
    assert_eq!((report.tests, report.failures, report.skipped), (11, 4, 1), "{shown}");
}

#[tokio::test]
async fn a_broken_scenario_file_stops_the_command_before_anything_runs() {
    let work = scratch_dir("scenarios-broken");
    let file = work.join("typo.yaml");
    std::fs::write(&file, "steps:\n  - aply: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n")
        .unwrap();
    let (output, shown) = run_test(&project(), &work, &[file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim(),
        format!(
            "error: {}: steps[0]: unknown field `aply` (known: name, timeout, cel, apply, assert, absent, patch, delete, idempotent, runs, plan, verify)",
            file.display()
        )
    );
    assert!(output.stdout.is_empty(), "{shown}");
}

/// The repository's own scenarios for its samples (tests/scenarios/), run as README shows:
/// `ansible-operator test` in the repository. The Memcached role's Pods run on the node; the
/// EtcdCluster is installed over SSH on the test hosts, grown, backed up by an EtcdBackup and
/// uninstalled, its key Secret made from the environment's variables.
#[tokio::test]
async fn the_samples_scenarios_pass_through_the_command() {
    support::node::require_ready_node(&support::client().await).await;
    let hosts = support::hosts::hosts();
    let work = scratch_dir("scenarios-samples");
    let backups = work.join("backups");
    let mut command = command(support::repo());
    command
        .arg("test")
        .arg(format!("--work-dir={}", work.display()))
        .env("ETCD_SSH_KEY", support::hosts::client_key())
        .env("ETCD_KNOWN_HOSTS", support::hosts::known_hosts())
        .env("ETCD_RELEASES_DIR", support::repo().join(".local/etcd-releases"))
        .env("ETCD_BACKUP_DIR", &backups);
    let (output, shown) = shown(command.output().expect("run ansible-operator test"));
    assert!(output.status.success(), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("2 scenario(s): 2 passed, 0 failed"), "{shown}");
    assert!(stdout.lines().any(|line| line.starts_with("  ok      idempotent Memcached/sample")), "{shown}");
    assert!(stdout.lines().any(|line| line.starts_with("  ok      three healthy members")), "{shown}");
    // The finalizers ran: the hosts keep nothing of the cluster, the backup directory no snapshot.
    for host in &hosts[4..7] {
        let left: Vec<_> = std::fs::read_dir(&host.home)
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with("etcd-test-etcd-"))
            .collect();
        assert!(left.is_empty(), "{} keeps {left:?}", host.name);
    }
    let snapshots = std::fs::read_dir(&backups).map(|dir| dir.count()).unwrap_or(0);
    assert_eq!(snapshots, 0, "the EtcdBackup's finalizer deletes its snapshots");
}

/// Upstream's own scaffold test project (ansible-operator-plugins' memcached-molecule-operator,
/// tests/fixtures/memcached-molecule-operator) runs its molecule scenario as it is, against the
/// operator in the command's process: every task runs but those that read the manager's own Pod.
#[tokio::test]
async fn upstreams_memcached_role_molecule_scenario_passes_against_the_operator_in_process() {
    let client = support::client().await;
    support::node::require_ready_node(&client).await;
    let project = fixtures().join("memcached-molecule-operator");
    let work = scratch_dir("molecule-upstream");
    let report = work.join("junit.xml");
    let (output, shown) =
        run_test(&project, &work, &["--molecule=molecule/default", &format!("--junit={}", report.display())]);
    assert!(output.status.success(), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("1 scenario(s): 1 passed, 0 failed"), "{shown}");
    assert!(stdout.lines().any(|line| line.starts_with("  ok      verify.yml")), "{shown}");
    let skipped: Vec<&str> = stdout.lines().filter(|line| line.starts_with("  skipped ")).collect();
    assert_eq!(skipped.len(), 9, "{shown}");
    assert_eq!(
        after(&stdout, "Curl the metrics from the manager (tasks/memcached_test.yml)").trim(),
        "it uses `output`, which comes from the manager's Pod",
        "{shown}"
    );
    let report = junit(&report);
    assert_eq!((report.tests, report.failures, report.skipped), (10, 0, 9), "{shown}");
    let api: Api<Namespace> = Api::all(client);
    for namespace in namespaces(&stdout) {
        assert!(
            api.get_opt(&namespace).await.unwrap().is_none_or(|n| n.metadata.deletion_timestamp.is_some())
        );
    }
}

/// The same scenario with `--image`: the scaffold project's image (FROM our base image, as its
/// Dockerfile builds it) deployed as its manager in the scenario's namespace from `config/testing`,
/// so every task runs, the curl of the manager's metrics in its Pod too; what the deploy made
/// outside the namespace is removed after.
#[tokio::test]
async fn upstreams_molecule_scenario_passes_against_its_manager_deployed_from_an_image() {
    let client = support::client().await;
    support::node::require_ready_node(&client).await;
    let project = fixtures().join("memcached-molecule-operator");
    let image = "localhost/memcached-molecule-operator:test";
    // The project's Dockerfile, FROM our base image; its collections are the base image's (no
    // Galaxy here to install its requirements.yml from).
    let build = scratch_dir("molecule-image-build");
    let dockerfile = std::fs::read_to_string(project.join("Dockerfile")).unwrap();
    let dockerfile: String = dockerfile
        .lines()
        .filter(|line| !line.starts_with("RUN ansible-galaxy") && !line.starts_with(" && chmod"))
        .map(|line| match line.starts_with("FROM ") {
            true => format!("FROM {}\n", support::node::base_image()),
            false => format!("{line}\n"),
        })
        .collect();
    assert!(!dockerfile.contains("galaxy") && dockerfile.contains("COPY roles/"), "{dockerfile}");
    std::fs::write(build.join("Dockerfile"), dockerfile).unwrap();
    for part in ["watches.yaml", "roles", "playbooks", "requirements.yml"] {
        let copied = std::process::Command::new("cp").arg("-a").arg(project.join(part)).arg(&build).status();
        assert!(copied.unwrap().success(), "copy {part}");
    }
    support::node::build_and_load(&build, image);

    let work = scratch_dir("molecule-image");
    let (output, shown) =
        run_test(&project, &work, &["--molecule=molecule/default", &format!("--image={image}")]);
    assert!(output.status.success(), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("1 scenario(s): 1 passed, 0 failed"), "{shown}");
    assert!(!stdout.contains("skipped"), "every task runs: {shown}");
    // The manager did the work: the operator in the command's process watched an empty namespace.
    let log = std::fs::read_to_string(work.join("operator.log")).unwrap();
    assert!(
        !log.contains("Memcached.v1alpha1.cache.example.com/"),
        "the operator here reconciled a Memcached"
    );
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    assert!(
        roles.get_opt("osdk-manager-role").await.unwrap().is_none(),
        "the manager's ClusterRole is removed"
    );
    let api: Api<Namespace> = Api::all(client);
    for namespace in namespaces(&stdout) {
        assert!(
            api.get_opt(&namespace).await.unwrap().is_none_or(|n| n.metadata.deletion_timestamp.is_some())
        );
    }
}

/// A molecule scenario whose check fails: the report names the task and its message, and the CR.
#[tokio::test]
async fn a_failing_molecule_check_names_the_task_and_its_message() {
    let work = scratch_dir("molecule-failing");
    let (output, shown) = run_test(&project(), &work, &["--molecule=molecule/wrong-text"]);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("1 scenario(s): 0 passed, 1 failed"), "{shown}");
    assert!(stdout.contains("  FAILED  verify.yml"), "{shown}");
    assert!(stdout.contains("molecule/wrong-text/verify.yml failed (exit status: 2):"), "{shown}");
    assert!(stdout.contains("TASK [The Note's ConfigMap says goodbye]"), "{shown}");
    assert!(stdout.contains(r#""msg": "the ConfigMap says hello""#), "{shown}");
    assert!(stdout.contains("Successful=True (Successful)"), "{shown}");
}

/// `--record` writes what a scenario produced beside it; appended to the scenario as its last step,
/// the recorded objects hold on the next run.
#[tokio::test]
async fn recorded_objects_hold_when_the_scenario_runs_again() {
    let work = scratch_dir("scenarios-record");
    let scenarios = work.join("scenarios");
    std::fs::create_dir_all(scenarios.join("files")).unwrap();
    let source = project().join("tests/scenarios");
    for file in ["note-cr.yaml", "verify-note.yml"] {
        std::fs::copy(source.join("files").join(file), scenarios.join("files").join(file)).unwrap();
    }
    // The Note scenario up to its delete: what it leaves is its Note and the Note's ConfigMap.
    let note = std::fs::read_to_string(source.join("note.yaml")).unwrap();
    let kept = &note[..note.find("  - delete:").unwrap()];
    std::fs::write(scenarios.join("kept.yaml"), kept).unwrap();

    let (output, shown) =
        run_test(&project(), &work.join("first"), &[scenarios.to_str().unwrap(), "--record"]);
    assert!(output.status.success(), "{shown}");
    let recorded_file = scenarios.join("kept.recorded.yaml");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(&format!("recorded 2 object(s) in {}", recorded_file.display())), "{shown}");
    let recorded = std::fs::read_to_string(&recorded_file).unwrap();
    let read: serde_json::Value = serde_saphyr::from_str(&recorded).unwrap();
    let objects = &read["steps"][0]["assert"];
    assert_eq!(objects[0]["kind"], "Note", "{recorded}");
    assert_eq!(objects[0]["spec"]["text"], "bye", "{recorded}");
    assert_eq!(objects[1]["kind"], "ConfigMap", "{recorded}");
    assert_eq!(objects[1]["data"]["text"], "bye", "{recorded}");
    assert!(!recorded.contains("uid:") && !recorded.contains("resourceVersion:"), "{recorded}");

    // The next run: the scenario with the recorded step at its end (the recorded file itself is
    // not run as a scenario of its own).
    let steps: String =
        recorded.split_once("steps:\n").unwrap().1.lines().map(|line| format!("  {line}\n")).collect();
    std::fs::write(scenarios.join("kept.yaml"), format!("{kept}{steps}")).unwrap();
    let (output, shown) = run_test(&project(), &work.join("second"), &[scenarios.to_str().unwrap()]);
    assert!(output.status.success(), "{shown}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("1 scenario(s): 1 passed, 0 failed"), "{shown}");
    assert!(stdout.lines().any(|line| line.starts_with("  ok      as recorded")), "{shown}");
}

/// `--watch`: after the first run, a change to a scenario file runs that scenario again, with the
/// change, and only it.
#[tokio::test]
async fn watch_runs_a_changed_scenario_again() {
    use std::io::BufRead as _;
    let work = scratch_dir("scenarios-watch");
    let scenarios = work.join("scenarios");
    std::fs::create_dir_all(&scenarios).unwrap();
    let note = |text: &str| {
        format!(
            "steps:\n  - apply: {{apiVersion: scenario.test.example.com/v1alpha1, kind: Note, metadata: {{name: w}}, spec: {{text: {text}}}}}\n  - assert: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: w-note}}, data: {{text: {text}}}}}\n"
        )
    };
    std::fs::write(scenarios.join("note.yaml"), note("first")).unwrap();
    std::fs::write(scenarios.join("other.yaml"), note("other")).unwrap();
    let mut child = command(&project())
        .args(["test", "--watch", &format!("--work-dir={}", work.join("run").display())])
        .arg(&scenarios)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start ansible-operator test --watch");
    let (lines, read) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |text: &str| loop {
        match read.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(line) => {
                seen.push(line.clone());
                if line.contains(text) {
                    break;
                }
            }
            Err(_) => panic!("no line with {text:?} in:\n{}", seen.join("\n")),
        }
    };
    wait_for("2 scenario(s): 2 passed, 0 failed");
    wait_for("watching ");
    std::fs::write(scenarios.join("note.yaml"), note("second")).unwrap();
    wait_for("note.yaml changed: running note again");
    wait_for("1 scenario(s): 1 passed, 0 failed");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {}", seen.join("\n"));
    let rerun: Vec<&String> = seen.iter().skip_while(|line| !line.contains("running note again")).collect();
    assert!(rerun.iter().any(|line| line.starts_with("PASS note ")), "{}", seen.join("\n"));
    assert!(!rerun.iter().any(|line| line.starts_with("PASS other ")), "{}", seen.join("\n"));
}
