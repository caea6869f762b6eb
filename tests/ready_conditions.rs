//! The standard readiness signal and the per-CR metrics: with `readyConditions: true` a CR carries
//! kstatus `Ready`/`Reconciling`/`Stalled` that `kubectl wait --for=condition=Ready` understands,
//! and `/metrics` has its condition, last-success and consecutive-failure series until it is
//! deleted; by default the status is upstream's alone, and `--cr-metrics=false` exposes no per-CR
//! series. With `statusProgress: true`, the `Running` condition says which task a run is at.

use crate::support;

use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::operator::{Operator, OperatorConfig};
use support::setup::Test;

const GROUP: &str = "ready.test.example.com";
const KIND: &str = "Readied";
const WAIT: Duration = Duration::from_secs(120);

/// `validate.yml` fails while `spec.size` is negative, with the message below.
fn watches(extra: &str) -> String {
    format!("{}{extra}", support::playbook_watch(GROUP, KIND, "validate.yml"))
}

fn start(watches: &str, namespace: &str, port: u16, args: &[&str]) -> Operator {
    let mut config =
        OperatorConfig::new(watches, namespace).arg(format!("--metrics-bind-address=127.0.0.1:{port}"));
    for arg in args {
        config = config.arg(*arg);
    }
    config.start()
}

/// The per-CR samples (`ansible_operator_cr_...`) of the CR `name` in `namespace`: (series, value).
fn cr_series(text: &str, namespace: &str, name: &str) -> Vec<(String, f64)> {
    let (namespace, name) = (format!("namespace=\"{namespace}\""), format!("name=\"{name}\""));
    text.lines()
        .filter(|line| {
            line.starts_with("ansible_operator_cr_") && line.contains(&namespace) && line.contains(&name)
        })
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The value of the per-CR `family` sample (with `type` when given) among `series`.
fn value_of(series: &[(String, f64)], family: &str, kind: Option<&str>) -> Option<f64> {
    let kind = kind.map(|kind| format!("type=\"{kind}\""));
    series
        .iter()
        .find(|(s, _)| {
            s.starts_with(&format!("{family}{{"))
                && kind.as_ref().is_none_or(|kind| s.contains(kind.as_str()))
        })
        .map(|(_, v)| *v)
}

/// Waits until the per-CR series of `name` in the operator's `/metrics` satisfy `done`.
async fn wait_for_series(
    port: u16,
    namespace: &str,
    name: &str,
    what: &str,
    done: impl Fn(&[(String, f64)]) -> bool,
) -> Vec<(String, f64)> {
    support::wait_for(what, WAIT, || async {
        let Some((200, text)) = support::http_get(port, "/metrics", None) else {
            return Ok(Err("no answer".into()));
        };
        let series = cr_series(&text, namespace, name);
        Ok(if done(&series) { Ok(series) } else { Err(format!("{series:?}")) })
    })
    .await
}

/// `kubectl wait --for=condition=Ready` on the CR, with `timeout`.
fn kubectl_wait_ready(namespace: &str, name: &str, timeout: &str) -> std::process::Output {
    support::kubectl([
        "wait",
        "-n",
        namespace,
        "--for=condition=Ready",
        &format!("{}s.{GROUP}/{name}", KIND.to_lowercase()),
        &format!("--timeout={timeout}"),
    ])
}

#[tokio::test]
async fn ready_conditions_satisfy_kubectl_wait_stall_on_failure_and_the_per_cr_series_follow_until_deletion()
{
    let Test { client: _, ns, api } = Test::setup("ready-conditions").kind(GROUP, KIND).build().await;
    let port = support::free_port();
    let _operator = start(&watches("  readyConditions: true\n"), &ns.name, port, &[]);
    support::create_cr(&api, GROUP, KIND, "app", json!({"size": 1})).await;

    let output = kubectl_wait_ready(&ns.name, "app", "120s");
    assert!(output.status.success(), "kubectl wait: {}", support::describe_output(&output));
    let cr = support::wait_for_condition(&api, "app", "Reconciling", "False", WAIT).await;
    let ready = support::condition(&cr, "Ready").expect("a Ready condition");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "Successful");
    assert_eq!(ready["observedGeneration"], 1);
    assert_eq!(support::condition(&cr, "Stalled").expect("a Stalled condition")["status"], "False");
    assert_eq!(support::condition(&cr, "Successful").expect("upstream's condition")["status"], "True");

    let after_success = wait_for_series(port, &ns.name, "app", "the success in the CR's series", |series| {
        value_of(series, "ansible_operator_cr_condition", Some("Ready")) == Some(1.0)
            && value_of(series, "ansible_operator_cr_last_success_timestamp_seconds", None).is_some()
    })
    .await;
    assert_eq!(value_of(&after_success, "ansible_operator_cr_condition", Some("Stalled")), Some(0.0));
    assert_eq!(value_of(&after_success, "ansible_operator_cr_condition", Some("Successful")), Some(1.0));
    assert_eq!(value_of(&after_success, "ansible_operator_cr_consecutive_failures", None), Some(0.0));
    let succeeded_at = value_of(&after_success, "ansible_operator_cr_last_success_timestamp_seconds", None);
    let now = jiff::Timestamp::now().as_second() as f64;
    assert!(succeeded_at.is_some_and(|at| at > now - 300.0 && at <= now + 1.0), "{after_success:?}");

    let patch = json!({"spec": {"size": -1}});
    api.patch("app", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("break the spec");
    let cr = support::wait_for_condition(&api, "app", "Stalled", "True", WAIT).await;
    let stalled = support::condition(&cr, "Stalled").expect("a Stalled condition");
    assert_eq!(stalled["message"], "size must not be negative, got -1");
    assert_eq!(stalled["reason"], "Failed");
    assert_eq!(stalled["observedGeneration"], 2, "observedGeneration follows the generation");
    let ready = support::condition(&cr, "Ready").expect("a Ready condition");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["observedGeneration"], 2);

    let output = kubectl_wait_ready(&ns.name, "app", "5s");
    assert!(!output.status.success(), "a stalled CR is not Ready: {}", support::describe_output(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("timed out"),
        "{}",
        support::describe_output(&output)
    );

    let after_failure = wait_for_series(port, &ns.name, "app", "the failure in the CR's series", |series| {
        value_of(series, "ansible_operator_cr_condition", Some("Stalled")) == Some(1.0)
            && value_of(series, "ansible_operator_cr_consecutive_failures", None).is_some_and(|n| n >= 1.0)
    })
    .await;
    assert_eq!(value_of(&after_failure, "ansible_operator_cr_condition", Some("Ready")), Some(0.0));
    assert_eq!(
        value_of(&after_failure, "ansible_operator_cr_last_success_timestamp_seconds", None),
        succeeded_at,
        "the last success stays"
    );

    api.delete("app", &DeleteParams::default()).await.expect("delete the CR");
    support::wait_for_absent(&api, "app", WAIT).await;
    wait_for_series(port, &ns.name, "app", "the deleted CR's series to go", <[_]>::is_empty).await;
}

#[tokio::test]
async fn by_default_the_status_is_upstreams_alone_and_cr_metrics_off_exposes_no_per_cr_series() {
    let Test { client: _, ns, api } = Test::setup("ready-default").kind(GROUP, KIND).build().await;
    let port = support::free_port();
    let _operator = start(&watches(""), &ns.name, port, &["--cr-metrics=false"]);
    support::create_cr(&api, GROUP, KIND, "plain", json!({"size": 1})).await;
    let cr = support::wait_for_generation(&api, "plain", 1, WAIT).await;
    for kind in ["Ready", "Reconciling", "Stalled"] {
        assert!(support::condition(&cr, kind).is_none(), "no {kind}: {}", cr.data["status"]);
    }
    let types: Vec<&str> = cr.data["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["Running", "Successful", "Failure"]);

    // The reconcile's own counter shows the run reached /metrics; no per-CR family does.
    let text = support::wait_for("the reconcile in /metrics", WAIT, || async {
        let counted = support::reconciles_counted(port, "readied-v1alpha1-controller", None);
        let Some((200, text)) = support::http_get(port, "/metrics", None) else {
            return Ok(Err("no answer".into()));
        };
        Ok(if counted.is_some_and(|n| n >= 1.0) { Ok(text) } else { Err(text) })
    })
    .await;
    assert!(!text.contains("ansible_operator_cr_"), "{text}");
}

#[tokio::test]
async fn the_flag_turns_ready_conditions_on_for_every_watch_and_a_watch_key_of_false_wins() {
    let Test { client, ns, api } =
        Test::setup("ready-flag").kind(GROUP, KIND).kind(GROUP, "Unreadied").build().await;
    let port = support::free_port();
    let watches = format!(
        "{}{}  readyConditions: false\n",
        watches(""),
        support::playbook_watch(GROUP, "Unreadied", "validate.yml")
    );
    let _operator = start(&watches, &ns.name, port, &["--ready-conditions"]);
    support::create_cr(&api, GROUP, KIND, "flagged", json!({"size": 1})).await;
    let opted_out = support::cr_api(&client, GROUP, "Unreadied", &ns.name);
    support::create_cr(&opted_out, GROUP, "Unreadied", "opted-out", json!({"size": 1})).await;

    let output = kubectl_wait_ready(&ns.name, "flagged", "120s");
    assert!(output.status.success(), "kubectl wait: {}", support::describe_output(&output));
    let cr = support::wait_for_generation(&opted_out, "opted-out", 1, WAIT).await;
    assert!(support::condition(&cr, "Ready").is_none(), "the watch key wins: {}", cr.data["status"]);
}

/// `statusProgress: true`: mid-run, `Running` (and `Reconciling`) name the task the run is at; the
/// second run also says how many tasks the first had; the run's end writes upstream's message.
#[tokio::test]
async fn status_progress_names_the_task_a_run_is_at() {
    let Test { client: _, ns, api } = Test::setup("ready-progress").kind(GROUP, KIND).build().await;
    let watches = format!(
        "{}  statusProgress: true\n  readyConditions: true\n",
        support::playbook_watch(GROUP, KIND, "progress.yml")
    );
    let _operator = OperatorConfig::new(&watches, &ns.name).start();
    let message = |kind: &'static str| {
        let api = api.clone();
        async move {
            let object = api.get("slow").await.map_err(|e| e.to_string())?;
            Ok::<_, String>(
                support::condition(&object, kind).map(|c| c["message"].clone()).unwrap_or_default(),
            )
        }
    };
    let wait_for_message = |expected: &'static str| async move {
        support::wait_for(&format!("Running: {expected}"), WAIT, || async {
            let running = message("Running").await?;
            Ok((running == expected).then_some(()).ok_or(format!("Running says {running}")))
        })
        .await
    };

    support::create_cr(&api, GROUP, KIND, "slow", json!({"waitSeconds": 12})).await;
    wait_for_message("Running reconciliation: task 2 (\"wait for the database\")").await;
    assert_eq!(
        message("Reconciling").await.unwrap(),
        "Running reconciliation: task 2 (\"wait for the database\")"
    );
    support::wait_for_condition(&api, "slow", "Successful", "True", WAIT).await;
    assert_eq!(message("Running").await.unwrap(), "Awaiting next reconciliation");

    let patch = json!({"spec": {"waitSeconds": 11}});
    api.patch("slow", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    wait_for_message("Running reconciliation: task 2 of 2 (\"wait for the database\")").await;
    support::wait_for_generation(&api, "slow", 2, WAIT).await;
}
