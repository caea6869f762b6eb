//! What an operator exposes to the cluster around it: metrics, user metrics, probes, leadership.

use crate::support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "endpoints.test.example.com";
const WAIT: Duration = Duration::from_secs(180);

/// The value of the first sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|line| line.starts_with(prefix))?.rsplit(' ').next()?.parse().ok()
}

#[tokio::test]
async fn metrics_expose_upstream_names_that_move_after_a_reconcile_plus_user_metrics() {
    let Test { client: _, ns, api } = Test::setup("endpoints-metrics").kind(GROUP, "Metered").build().await;
    let (metrics_port, user_port) = (support::free_port(), support::free_port());
    let _operator =
        OperatorConfig::new(&support::playbook_watch(GROUP, "Metered", "user_metric.yml"), &ns.name)
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .arg(format!("--user-metrics-bind-address=127.0.0.1:{user_port}"))
            .start();
    support::create_cr(&api, GROUP, "Metered", "m", json!({"metricsPort": user_port})).await;
    support::wait_for_condition(&api, "m", "Successful", "True", WAIT).await;

    let gvk = format!("GVK=\"{GROUP}/v1alpha1, Kind=Metered\"");
    let text = support::wait_for("the reconcile to show in /metrics", WAIT, || async {
        let Some((200, text)) = support::http_get(metrics_port, "/metrics", None) else {
            return Ok(Err("no answer".into()));
        };
        let done = sample(&text, &format!("ansible_operator_reconcile_result{{{gvk},result=\"succeeded\"}}"))
            .or_else(|| {
                sample(&text, &format!("ansible_operator_reconcile_result{{result=\"succeeded\",{gvk}}}"))
            });
        Ok(if done.is_some_and(|v| v >= 1.0) { Ok(text) } else { Err(text) })
    })
    .await;
    assert!(text.contains("ansible_operator_build_info{"), "{text}");
    assert!(
        sample(&text, &format!("ansible_operator_reconciles_count{{{gvk}}}")).is_some_and(|v| v >= 1.0),
        "{text}"
    );
    let controller = "controller=\"metered-v1alpha1-controller\"";
    let successes = text
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{") && l.contains(controller))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    assert!(successes >= 1.0, "{text}");
    assert!(text.contains(&format!("controller_runtime_active_workers{{{controller}}}")), "{text}");
    assert!(text.contains("controller_runtime_reconcile_time_seconds_count{"), "{text}");
    assert!(text.contains("ansible_operator_runs_in_flight"), "{text}");
    // The suite runs once per executor (the harness sets ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR).
    let executor = std::env::var("ANSIBLE_OPERATOR_ANSIBLE_EXECUTOR").unwrap_or_else(|_| "warm".into());
    assert!(
        sample(&text, &format!("ansible_operator_executor_runs_total{{executor=\"{executor}\"}}"))
            .is_some_and(|v| v >= 1.0),
        "the run is counted for the {executor} executor: {text}"
    );
    if executor == "warm" {
        assert!(
            sample(&text, "ansible_operator_executor_worker_resident_memory_bytes").is_some_and(|v| v > 1e6),
            "the worker's memory is reported: {text}"
        );
    }
    assert!(
        sample(&text, "sample_runs_total").is_some_and(|v| v >= 1.0),
        "the playbook's osdk_metric: {text}"
    );
}

#[tokio::test]
async fn metrics_registered_without_a_value_show_at_zero_as_upstream_s_scaffold_test_checks() {
    let Test { client: _, ns, api } = Test::setup("endpoints-sanity").kind(GROUP, "Sane").build().await;
    let (metrics_port, user_port) = (support::free_port(), support::free_port());
    // This tree's collection, whichever tree the venv links.
    let collections = support::repo().join("collections");
    let watch = support::playbook_watch(GROUP, "Sane", "user_metrics_registered.yml");
    let _operator = OperatorConfig::new(&watch, &ns.name)
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
        .arg(format!("--user-metrics-bind-address=127.0.0.1:{user_port}"))
        .arg(format!("--ansible-collections-path={}", collections.display()))
        .start();
    support::create_cr(&api, GROUP, "Sane", "s", json!({"metricsPort": user_port})).await;
    support::wait_for_condition(&api, "s", "Successful", "True", WAIT).await;

    let Some((200, text)) = support::http_get(metrics_port, "/metrics", None) else {
        panic!("no /metrics answer");
    };
    // Upstream's test looks for `sanity_counter 0` and the like in the scrape.
    for series in [
        "sanity_counter",
        "sanity_gauge",
        "sanity_histogram_sum",
        "sanity_histogram_count",
        "sanity_summary_sum",
        "sanity_summary_count",
    ] {
        let value = text.lines().find_map(|l| l.strip_prefix(&format!("{series} ")));
        assert_eq!(value.and_then(|v| v.parse::<f64>().ok()), Some(0.0), "{series} at zero in:\n{text}");
        assert!(text.contains(&format!("\n{series} 0")), "{series} 0 as upstream's test reads it:\n{text}");
    }
}

/// Cluster-wide RBAC a test made, deleted when dropped.
struct ClusterRbac(Vec<(&'static str, String)>);

impl Drop for ClusterRbac {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = support::kubectl(["delete", kind, name.as_str(), "--ignore-not-found"]);
        }
    }
}

#[tokio::test]
async fn secure_metrics_answer_only_tokens_allowed_to_get_metrics() {
    let Test { client: _, ns, api: _ } = Test::setup("endpoints-secure").kind(GROUP, "Metered").build().await;
    let port = support::free_port();
    let cert_dir = support::operator::scratch_dir("metrics-cert");
    let cacert = support::api::certificate(&cert_dir);
    let _operator =
        OperatorConfig::new(&support::playbook_watch(GROUP, "Metered", "user_metric.yml"), &ns.name)
            .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
            .arg("--metrics-secure")
            .arg("--metrics-require-rbac")
            .arg(format!("--metrics-cert-dir={}", cert_dir.display()))
            .start();
    let metrics = support::api::ApiServer::localhost(port, Some(cacert));
    metrics.wait_until_up(WAIT);

    let role = format!("{}-metrics-reader", ns.name);
    let _rbac = ClusterRbac(vec![("clusterrolebinding", role.clone()), ("clusterrole", role.clone())]);
    support::kubectl_ok(["create", "clusterrole", &role, "--verb=get", "--non-resource-url=/metrics"]);
    support::kubectl_ok(["-n", &ns.name, "create", "serviceaccount", "scraper"]);
    let account = format!("--serviceaccount={}:scraper", ns.name);
    support::kubectl_ok(["create", "clusterrolebinding", &role, &format!("--clusterrole={role}"), &account]);
    let scraper = support::kubectl_ok(["-n", &ns.name, "create", "token", "scraper"]);
    let stranger = support::kubectl_ok(["-n", &ns.name, "create", "token", "default"]);

    // The certificate from --metrics-cert-dir verifies; no token is 401, one without the role 403.
    assert_eq!(metrics.request("GET", "/metrics", None).status, 401);
    let forbidden = metrics.request("GET", "/metrics", Some(stranger.trim()));
    assert_eq!(forbidden.status, 403, "{}", forbidden.body);
    let scraped = metrics.request("GET", "/metrics", Some(scraper.trim()));
    assert_eq!(scraped.status, 200, "{}", scraped.body);
    assert!(
        scraped.body.as_str().unwrap_or_default().contains("ansible_operator_build_info{"),
        "{}",
        scraped.body
    );
}

#[tokio::test]
async fn readyz_is_503_until_every_watch_has_listed_its_crs() {
    let Test { client, ns, api: _ } = Test::setup("endpoints-ready").kind(GROUP, "Gated").build().await;
    // A service account that may use discovery but not list the kind yet.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns.name);
    accounts
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "op"}})).unwrap())
        .await
        .unwrap();
    let kubeconfig = restricted_kubeconfig(&ns.name, "op");
    let health = support::free_port();
    let _operator = OperatorConfig::new(&support::playbook_watch(GROUP, "Gated", "counts.yml"), &ns.name)
        .arg(format!("--health-probe-bind-address=127.0.0.1:{health}"))
        .env("KUBECONFIG", kubeconfig.display().to_string())
        .start();

    let (code, body) = support::wait_for("/healthz to answer", WAIT, || async {
        Ok(match support::http_get(health, "/healthz", None) {
            Some((200, _)) => {
                support::http_get(health, "/readyz", None).ok_or_else(|| "no /readyz answer".to_string())
            }
            other => Err(format!("{other:?}")),
        })
    })
    .await;
    assert_eq!(code, 503, "not ready while the watch cannot list: {body}");

    grant_watch(&client, &ns.name, "op").await;
    let started = Instant::now();
    support::wait_for("/readyz to turn 200 once the list succeeds", Duration::from_secs(90), || async {
        Ok(match support::http_get(health, "/readyz", None) {
            Some((200, body)) => Ok(body),
            other => Err(format!("{other:?}")),
        })
    })
    .await;
    eprintln!("ready {:?} after the grant", started.elapsed());
}

/// A kubeconfig for `account` in `namespace`, with a token from the TokenRequest API.
fn restricted_kubeconfig(namespace: &str, account: &str) -> std::path::PathBuf {
    let kubectl = support::repo().join(".local/bin/kubectl");
    let run = |args: &[&str]| {
        let output = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(support::kubeconfig())
            .args(args)
            .output()
            .expect("run kubectl");
        assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap().trim().to_string()
    };
    let token = run(&["create", "token", account, "-n", namespace, "--duration=1h"]);
    let server = run(&["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let ca =
        run(&["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}"]);
    let path = support::operator::scratch_dir(&format!("{namespace}-kubeconfig")).join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u, namespace: {namespace}}}\ncurrent-context: x\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

async fn grant_watch(client: &kube::Client, namespace: &str, account: &str) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "op"},
        "rules": [{"apiGroups": [GROUP], "resources": ["gateds", "gateds/status"], "verbs": ["get", "list", "watch", "update", "patch"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), namespace).create(&PostParams::default(), &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "op"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "op"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test]
async fn only_the_leader_reconciles_and_a_standby_takes_over_when_it_dies() {
    let Test { client: _, ns, api } = Test::setup("endpoints-leader").kind(GROUP, "Led").build().await;
    let start = |label: &str| {
        OperatorConfig::new(&support::playbook_watch(GROUP, "Led", "validate.yml"), &ns.name)
            .arg("--leader-elect")
            .arg(format!("--leader-election-id={}-lock", ns.name))
            .arg(format!("--leader-election-namespace={}", ns.name))
            .arg("--leader-elect-lease-duration=8s")
            .arg("--leader-elect-renew-deadline=6s")
            .env("HOSTNAME", label)
            .start()
    };
    let mut first = start("first");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = start("second");
    support::create_cr(&api, GROUP, "Led", "one", json!({"size": 1})).await;
    support::wait_for_condition(&api, "one", "Successful", "True", WAIT).await;

    let ran = |operator: &support::operator::Operator, name: &str| {
        operator.runner_dir(GROUP, "Led", &ns.name, name).exists()
    };
    assert!(ran(&first, "one") ^ ran(&second, "one"), "exactly one replica ran the CR");
    let (mut leader, standby) = if ran(&first, "one") { (first, second) } else { (second, first) };
    first = standby;

    leader.kill();
    let killed = Instant::now();
    support::create_cr(&api, GROUP, "Led", "two", json!({"size": 2})).await;
    support::wait_for_condition(&api, "two", "Successful", "True", WAIT).await;
    let took = killed.elapsed();
    assert!(ran(&first, "two"), "the standby ran the new CR");
    // Lease 8s, then the standby's retry period and one run of the playbook.
    assert!(took < Duration::from_secs(40), "took over and reconciled after {took:?}");
}
