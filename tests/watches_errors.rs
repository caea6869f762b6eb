//! A bad watches file stops the operator before it does anything: exit code 1 and one error line
//! naming the file, the entry and the field or value. Loading happens before the operator connects
//! to the cluster, so these runs get a kubeconfig that does not exist. An unknown key only warns.

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::operator::{command, scratch_dir};

const GROUP: &str = "core.test.example.com";
const KIND: &str = "WatchesErr";
const EXIT_WAIT: Duration = Duration::from_secs(30);

/// One watch entry on an existing playbook, with `extra` lines appended.
fn entry(kind: &str, extra: &str) -> String {
    format!(
        "- version: v1alpha1\n  group: {GROUP}\n  kind: {kind}\n  playbook: {{fixtures}}/playbooks/marker.yml\n{extra}"
    )
}

/// An operator process on `watches` (with `{fixtures}` filled in), its stderr going to a file.
struct Run {
    child: Child,
    stderr: PathBuf,
}

impl Run {
    fn start(label: &str, watches: &str, cluster: bool) -> Self {
        let dir = scratch_dir(&format!("watches-{label}"));
        let fixtures = support::operator::fixtures().display().to_string();
        std::fs::write(dir.join("watches.yaml"), watches.replace("{fixtures}", &fixtures)).unwrap();
        let stderr = dir.join("stderr.log");
        let mut command = command(&dir);
        command
            .args(["run", "--watches-file=watches.yaml", "--proxy-port=0", "--metrics-bind-address=0"])
            .args(["--health-probe-bind-address=0", "--user-metrics-bind-address=0"])
            .arg(format!("--runner-dir={}", dir.join("runner").display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        if !cluster {
            command.env("KUBECONFIG", dir.join("no-such-kubeconfig"));
        }
        let child = command.spawn().expect("start ansible-operator");
        Self { child, stderr }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for the exit and returns the exit code and the one `error:` line.
    fn failure(mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + EXIT_WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "still running after {EXIT_WAIT:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = self.stderr();
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "one error line expected; stderr:\n{stderr}");
        (status.code(), errors[0].to_string())
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the operator on `watches` without a cluster and returns its error line, after checking
/// that it exited with code 1 and that the line names the watches file.
fn load_error(label: &str, watches: &str) -> String {
    let (code, error) = Run::start(label, watches, false).failure();
    assert_eq!(code, Some(1), "{error}");
    assert!(error.starts_with("error: watches.yaml: "), "{error}");
    error
}

fn assert_names(error: &str, parts: &[&str]) {
    for part in parts {
        assert!(error.contains(part), "{part:?} missing from: {error}");
    }
}

#[test]
fn duplicate_gvk_names_both_entries() {
    let watches = entry(KIND, "") + &entry(KIND, "");
    let error = load_error("duplicate", &watches);
    assert_names(
        &error,
        &["entry 2 (core.test.example.com/v1alpha1, Kind=WatchesErr)", "duplicate gvk", "entry 1"],
    );
}

#[test]
fn missing_version_is_rejected() {
    let watches =
        format!("- group: {GROUP}\n  kind: {KIND}\n  playbook: {{fixtures}}/playbooks/marker.yml\n");
    let error = load_error("no-version", &watches);
    assert_names(&error, &["entry 1", KIND, "\"version\" must not be empty"]);
}

#[test]
fn missing_kind_is_rejected() {
    let watches = entry(KIND, "") + &format!("- group: {GROUP}\n  version: v1\n  playbook: x.yml\n");
    let error = load_error("no-kind", &watches);
    assert_names(&error, &["entry 2", "\"kind\" must not be empty"]);
}

#[test]
fn playbook_that_does_not_exist_is_rejected() {
    let watches =
        format!("- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  playbook: /no/such/site.yml\n");
    let error = load_error("no-playbook", &watches);
    assert_names(&error, &["entry 1", KIND, "field \"playbook\"", "/no/such/site.yml was not found"]);
}

#[test]
fn role_that_does_not_exist_is_rejected() {
    let watches = format!("- version: v1alpha1\n  group: {GROUP}\n  kind: {KIND}\n  role: no_such_role\n");
    let error = load_error("no-role", &watches);
    assert_names(&error, &["entry 1", KIND, "field \"role\"", "\"no_such_role\" was not found"]);
}

#[test]
fn invalid_reconcile_period_is_rejected() {
    let error = load_error("bad-period", &entry(KIND, "  reconcilePeriod: soon\n"));
    assert_names(&error, &["entry 1", KIND, "field \"reconcilePeriod\"", "\"soon\""]);
}

#[test]
fn invalid_run_timeout_is_rejected() {
    let error = load_error("bad-run-timeout", &entry(KIND, "  runTimeout: forever\n"));
    assert_names(&error, &["entry 1", KIND, "field \"runTimeout\"", "\"forever\""]);
}

#[test]
fn invalid_selector_operator_is_rejected() {
    let selector = "  selector:\n    matchExpressions:\n      - key: tier\n        operator: Near\n        values: [a]\n";
    let error = load_error("bad-selector", &entry(KIND, selector));
    assert_names(&error, &["entry 1", KIND, "selector.matchExpressions[0].operator", "Near"]);
}

#[test]
fn top_level_mapping_is_rejected() {
    let watches = format!("version: v1alpha1\ngroup: {GROUP}\nkind: {KIND}\n");
    let error = load_error("mapping", &watches);
    assert_names(&error, &["top level must be a list", "a mapping"]);
}

#[test]
fn invalid_yaml_is_rejected_with_its_position() {
    let watches = format!("- version: v1alpha1\n  group: {GROUP}\n  kind: [{KIND}\n");
    let error = load_error("bad-yaml", &watches);
    assert_names(&error, &["invalid yaml", "line "]);
}

#[tokio::test]
async fn unknown_key_is_named_in_a_warning_and_the_operator_keeps_running() {
    let client = support::client().await;
    support::install_crd(&client, &support::crd(GROUP, KIND, true)).await;
    let mut run = Run::start("unknown-key", &entry(KIND, "  colour: blue\n"), true);

    let warning = support::wait_for("the operator to start watching", EXIT_WAIT, || {
        let stderr = run.stderr();
        async move {
            let lines: Vec<Value> =
                stderr.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
            let watching = lines.iter().any(|l| l["msg"] == "watching");
            let warning = lines
                .iter()
                .find(|l| l["level"] == "warn" && l["msg"].as_str().is_some_and(|m| m.contains("colour")));
            Ok(match (warning, watching) {
                (Some(warning), true) => Ok(warning["msg"].as_str().unwrap_or_default().to_string()),
                _ => Err(stderr),
            })
        }
    })
    .await;
    assert_names(&warning, &["watches.yaml", "entry 1", KIND, "unknown key \"colour\""]);
    assert!(run.child.try_wait().unwrap().is_none(), "still running");
}

#[tokio::test]
async fn watched_kind_the_api_server_does_not_serve_fails_startup() {
    let (code, error) = Run::start("not-served", &entry("NotServedHere", ""), true).failure();
    assert_eq!(code, Some(1), "{error}");
    assert_names(&error, &["core.test.example.com/v1alpha1, Kind=NotServedHere", "does not serve"]);
}
