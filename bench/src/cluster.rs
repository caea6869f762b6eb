//! The local control plane: client, the benchmark CRD, namespaces and CRs.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

/// Group of the benchmark's kind.
pub const GROUP: &str = "bench.example.com";
/// Version of the benchmark's kind.
pub const VERSION: &str = "v1alpha1";
/// The benchmark's kind.
pub const KIND: &str = "Bench";
const PLURAL: &str = "benches";

/// A client for the cluster of `kubeconfig`, with a QPS high enough for bursts of creates.
pub async fn client(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).context("read kubeconfig")?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// The benchmark kind's API resource.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The CRs of one namespace.
pub fn crs(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &resource())
}

/// Installs (server-side apply) the `Bench` CRD with a status subresource and waits until served.
pub async fn install_crd(client: &Client) -> anyhow::Result<()> {
    let name = format!("{PLURAL}.{GROUP}");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "plural": PLURAL, "singular": "bench", "listKind": "BenchList"},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    });
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.patch(&name, &PatchParams::apply("ansible-operator-bench").force(), &Patch::Apply(&crd))
        .await
        .with_context(|| format!("apply CRD {name}"))?;
    let served: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if served.list(&ListParams::default().limit(1)).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("CRD {name} not served after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a namespace `<prefix>-<random>` and returns its name.
pub async fn create_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos();
    let name = format!("{prefix}-{:06x}", (nanos as u64 ^ u64::from(std::process::id())) & 0xff_ffff);
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await?;
    Ok(name)
}

/// Deletes a namespace and waits (up to `wait`) until it is gone.
pub async fn delete_namespace(client: &Client, name: &str, wait: Duration) {
    let api = Api::<Namespace>::all(client.clone());
    if let Err(error) = api.delete(name, &DeleteParams::background()).await {
        eprintln!("bench: delete namespace {name}: {error}");
        return;
    }
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        match api.get_opt(name).await {
            Ok(None) => return,
            Ok(Some(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    eprintln!("bench: namespace {name} still terminating after {wait:?}; moving on");
}

/// A `Bench` CR.
pub fn cr(name: &str, index: usize) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"index": index, "payload": "benchmark"}
    }))
    .expect("a valid CR")
}

/// Creates one CR.
pub async fn create_cr(api: &Api<DynamicObject>, name: &str, index: usize) -> anyhow::Result<()> {
    api.create(&PostParams::default(), &cr(name, index))
        .await
        .with_context(|| format!("create CR {name}"))?;
    Ok(())
}

/// Creates `names` with up to `parallel` requests in flight; returns the seconds it took.
pub async fn create_many(api: &Api<DynamicObject>, names: &[String], parallel: usize) -> anyhow::Result<f64> {
    let start = Instant::now();
    futures::stream::iter(names.iter().enumerate())
        .map(|(index, name)| create_cr(api, name, index))
        .buffer_unordered(parallel)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(start.elapsed().as_secs_f64())
}

/// The kube-apiserver's `apiserver_request_total`, one value per label set: the requests it has
/// served since it started (every client's, not only the operator's).
pub async fn api_requests(client: &Client) -> anyhow::Result<BTreeMap<String, f64>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await.context("GET the kube-apiserver's /metrics")?;
    let counts = counter(&text, "apiserver_request_total");
    if counts.is_empty() {
        bail!("no apiserver_request_total in the kube-apiserver's /metrics");
    }
    Ok(counts)
}

/// The samples of counter `name` in Prometheus text exposition format, by label set (`{…}`, or
/// "" without labels).
pub fn counter(text: &str, name: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        // `name{labels} value` or `name value`, not `name_suffix …`.
        let (labels, value) = match rest.chars().next() {
            Some('{') => match rest.rsplit_once('}') {
                Some((labels, value)) => (format!("{labels}}}"), value),
                None => continue,
            },
            Some(' ') => (String::new(), rest),
            _ => continue,
        };
        if let Some(value) = value.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) {
            *samples.entry(labels).or_default() += value;
        }
    }
    samples
}

/// The growth of each label set from `before` to `after`, largest first (the `top` largest).
pub fn counter_deltas(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    top: usize,
) -> Vec<(String, f64)> {
    let mut deltas: Vec<(String, f64)> = after
        .iter()
        .map(|(labels, value)| (labels.clone(), value - before.get(labels).copied().unwrap_or_default()))
        .filter(|(_, delta)| *delta > 0.0)
        .collect();
    deltas.sort_by(|a, b| b.1.total_cmp(&a.1));
    deltas.truncate(top);
    deltas
}

#[cfg(test)]
mod tests {
    use super::{counter, counter_deltas};

    #[test]
    fn counter_reads_every_label_set_of_that_counter_only() {
        let text = "# HELP apiserver_request_total Counter of apiserver requests\n\
                    # TYPE apiserver_request_total counter\n\
                    apiserver_request_total{code=\"200\",verb=\"GET\"} 10\n\
                    apiserver_request_total{code=\"201\",verb=\"POST\"} 2.5e+01\n\
                    apiserver_request_total_other{code=\"200\"} 1000\n\
                    apiserver_request_duration_seconds_count{verb=\"GET\"} 99\n";
        let counts = counter(text, "apiserver_request_total");
        assert_eq!(counts.values().sum::<f64>(), 35.0);
        assert_eq!(counts.get("{code=\"201\",verb=\"POST\"}"), Some(&25.0));
        assert!(counter(text, "missing_total").is_empty());
    }

    #[test]
    fn counter_deltas_rank_what_grew_and_count_new_label_sets_from_zero() {
        let before = counter("c{a=\"1\"} 5\nc{a=\"2\"} 7\n", "c");
        let after = counter("c{a=\"1\"} 6\nc{a=\"2\"} 7\nc{a=\"3\"} 4\n", "c");
        assert_eq!(
            counter_deltas(&before, &after, 5),
            vec![("{a=\"3\"}".to_string(), 4.0), ("{a=\"1\"}".to_string(), 1.0)]
        );
        assert_eq!(counter_deltas(&before, &after, 1).len(), 1);
    }
}
