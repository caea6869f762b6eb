//! OpenTelemetry traces against a real collector: the pinned Jaeger v2 backend (`hack/install-jaeger.sh`,
//! built from its Go module) receives the operator's OTLP/HTTP export, and its query API shows the
//! trace a CR's `ansible-operator.dev/traceparent` annotation names: the reconcile continuing the
//! annotation's span, the run under it, the playbook's task, and the run's API requests through the
//! proxy, each with what identifies it.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const GROUP: &str = "traces.test.example.com";
const KIND: &str = "Traced";
const WAIT: Duration = Duration::from_secs(120);

/// The Jaeger backend, stopped when dropped.
struct Jaeger {
    child: Child,
    query_port: u16,
    otlp_port: u16,
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Jaeger {
    /// Starts Jaeger with in-memory storage, OTLP/HTTP and its query API on free ports of 127.0.0.1.
    fn start(dir: &std::path::Path) -> Jaeger {
        let (query_port, grpc_port, otlp_port) =
            (support::free_port(), support::free_port(), support::free_port());
        let config = format!(
            "service:\n  extensions: [jaeger_storage, jaeger_query]\n  pipelines:\n    traces:\n      receivers: [otlp]\n      processors: [batch]\n      exporters: [jaeger_storage_exporter]\n  telemetry:\n    metrics:\n      level: none\n\
             extensions:\n  jaeger_query:\n    storage:\n      traces: memstore\n    http:\n      endpoint: 127.0.0.1:{query_port}\n    grpc:\n      endpoint: 127.0.0.1:{grpc_port}\n  jaeger_storage:\n    backends:\n      memstore:\n        memory:\n          max_traces: 1000\n\
             receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{otlp_port}\n\
             processors:\n  batch:\n    timeout: 200ms\n\
             exporters:\n  jaeger_storage_exporter:\n    trace_storage: memstore\n"
        );
        let file = dir.join("jaeger.yaml");
        std::fs::write(&file, config).expect("write Jaeger's config");
        let log = std::fs::File::create(dir.join("jaeger.log")).expect("Jaeger's log");
        let child = Command::new(support::repo().join(".local/bin/jaeger"))
            .arg(format!("--config=file:{}", file.display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start .local/bin/jaeger (make install-jaeger)");
        let jaeger = Jaeger { child, query_port, otlp_port };
        let deadline = std::time::Instant::now() + WAIT;
        while support::http_get(query_port, "/api/services", None).is_none() {
            assert!(std::time::Instant::now() < deadline, "Jaeger did not start: {}", dir.display());
            std::thread::sleep(Duration::from_millis(100));
        }
        jaeger
    }

    /// Trace `id` as Jaeger's query API answers it (curl: the answer may come in chunks).
    fn trace(&self, id: &str) -> Value {
        let url = format!("http://127.0.0.1:{}/api/traces/{id}", self.query_port);
        let output =
            Command::new("curl").args(["--silent", "--max-time", "10", &url]).output().expect("curl");
        serde_json::from_slice(&output.stdout).unwrap_or_default()
    }

    /// The spans of trace `id` Jaeger holds.
    fn spans(&self, id: &str) -> Vec<Value> {
        self.trace(id)["data"][0]["spans"].as_array().cloned().unwrap_or_default()
    }
}

/// A span's tag, as a string.
fn tag(span: &Value, key: &str) -> String {
    let tags = span["tags"].as_array().cloned().unwrap_or_default();
    let value = tags.iter().find(|t| t["key"] == key).map(|t| t["value"].clone()).unwrap_or_default();
    value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string())
}

/// The span a span names as its parent.
fn parent(span: &Value) -> String {
    span["references"][0]["spanID"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_crs_traceparent_is_continued_by_its_reconcile_run_tasks_and_requests() {
    let Test { client: _, ns, api } = Test::setup("traces").kind(GROUP, KIND).build().await;
    let dir = scratch_dir(&format!("{}-jaeger", ns.name));
    let jaeger = Jaeger::start(&dir);
    let operator = OperatorConfig::new(&support::playbook_watch(GROUP, KIND, "marker.yml"), &ns.name)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://127.0.0.1:{}", jaeger.otlp_port))
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .start();

    let (trace_id, parent_id) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let cr: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": KIND,
        "metadata": {"name": "traced", "namespace": ns.name,
                     "annotations": {"ansible-operator.dev/traceparent": format!("00-{trace_id}-{parent_id}-01")}},
        "spec": {"size": 1},
    }))
    .expect("a CR");
    api.create(&PostParams::default(), &cr).await.expect("create the CR");
    support::wait_for_condition(&api, "traced", "Successful", "True", WAIT).await;

    let spans = support::wait_for("the trace in Jaeger", WAIT, || async {
        let spans = jaeger.spans(trace_id);
        let names: Vec<&str> = spans.iter().filter_map(|s| s["operationName"].as_str()).collect();
        let complete = ["reconcile", "ansible run", "write the marker"].iter().all(|n| names.contains(n))
            && names.iter().any(|n| n.starts_with("POST /api/v1/namespaces/"));
        Ok(if complete { Ok(spans) } else { Err(format!("spans {names:?}")) })
    })
    .await;
    let named = |name: &str| {
        spans
            .iter()
            .find(|s| s["operationName"] == name)
            .unwrap_or_else(|| panic!("{name}: {spans:?}"))
            .clone()
    };
    let reconcile = named("reconcile");
    assert_eq!(
        parent(&reconcile),
        parent_id,
        "the reconcile continues the annotation's span; log:\n{}",
        operator.log()
    );
    assert_eq!(tag(&reconcile, "name"), "traced");
    assert_eq!(tag(&reconcile, "namespace"), ns.name);
    assert_eq!(tag(&reconcile, "gvk"), format!("{GROUP}/v1alpha1, Kind={KIND}"));
    let run = named("ansible run");
    assert_eq!(parent(&run), reconcile["spanID"].as_str().unwrap_or_default());
    assert_eq!(tag(&run, "lane"), "reconcile");
    let task = named("write the marker");
    assert_eq!(parent(&task), run["spanID"].as_str().unwrap_or_default());
    assert_eq!(tag(&task, "ansible.task.action"), "kubernetes.core.k8s");
    assert_eq!(tag(&task, "ansible.task.status"), "ok");
    let create = spans
        .iter()
        .find(|s| s["operationName"] == format!("POST /api/v1/namespaces/{}/configmaps", ns.name))
        .unwrap_or_else(|| panic!("the ConfigMap's create: {spans:?}"));
    assert_eq!(parent(create), run["spanID"].as_str().unwrap_or_default());
    assert_eq!(tag(create, "http.response.status_code"), "201");
    let trace = jaeger.trace(trace_id);
    let service = spans[0]["processID"].as_str().unwrap_or_default().to_string();
    assert_eq!(trace["data"][0]["processes"][&service]["serviceName"], "ansible-operator");
    let body = trace.to_string();
    assert!(!body.contains("\"size\""), "a span carries the CR's identity, never its spec");
}
